"""CITATION.cff: valid YAML with the fields of Citation File Format 1.2.0, and the package's own version."""
from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_citation_file_parses_and_matches_the_package():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert citation["cff-version"] == "1.2.0"
    assert citation["version"] == project["version"] and citation["license"] == project["license"] == "MIT"
    assert citation["title"].startswith("perceptlab") and "cite" in citation["message"]
    assert citation["authors"] == [{"name": "perceptlab developers"}]
    for reference in citation["references"]:
        assert reference["type"] and reference["title"] and reference["authors"]
    assert any("HuPerFlow" in r["title"] for r in citation["references"])
