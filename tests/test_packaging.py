"""pyproject.toml in the form current setuptools builds without deprecation warnings (`make install` prints
none): the license as an SPDX expression string, no license classifiers, a setuptools that reads it."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def test_license_is_an_spdx_string_without_classifiers():
    data = _pyproject()
    project = data["project"]
    # A table ({text = ...} or {file = ...}) is deprecated since setuptools 77 and warns on every build.
    assert isinstance(project["license"], str) and re.fullmatch(r"[A-Za-z0-9.+-]+( (AND|OR|WITH) [A-Za-z0-9.+-]+)*",
                                                                 project["license"])
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]
    for pattern in project.get("license-files", []):
        assert list(ROOT.glob(pattern)), f"license-files pattern {pattern!r} matches nothing"
    requires = " ".join(data["build-system"]["requires"])
    minimum = re.search(r"setuptools>=(\d+)", requires)
    assert minimum and int(minimum.group(1)) >= 77, "SPDX license strings need setuptools >= 77"
