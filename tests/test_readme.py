"""The README points at files that exist: every repository path its Layout section names, and every path
under a top-level folder of the repository anywhere in it (a renamed module must not leave a dead pointer)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TOP_LEVEL = ("analysis", "benchmarks", "deploy", "experiment_ui", "server", "stimuli", "tests", ".ci")
_CODE = re.compile(r"`([^`\n]+)`")
_FILE = re.compile(r"[\w.-]+\.(?:py|md|toml|yaml|yml|html|js|css|json|txt|cfg|ini)")


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section of a Markdown text (up to the next ``## `` heading)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def repo_paths(text: str) -> list[str]:
    """Code spans of ``text`` that name a repository path: under a top-level folder, or a bare file name."""
    found = []
    for span in _CODE.findall(text):
        span = span.strip()
        if span.split("/")[0] in TOP_LEVEL and " " not in span:
            found.append(span)
        elif _FILE.fullmatch(span):
            found.append(span)
    return found


def missing_paths(text: str) -> list[str]:
    """Paths of ``text`` that do not exist: a path with a folder from the repository root, a bare file name
    in one of the folders the same text names (``core.py`` after `server/paradigms/`) or at the root."""
    paths = repo_paths(text)
    folders = [ROOT] + [ROOT / p for p in paths if p.endswith("/")]
    missing = []
    for path in paths:
        if "/" in path:
            ok = (ROOT / path).exists()
        else:
            ok = any((folder / path).exists() for folder in folders)
        if not ok:
            missing.append(path)
    return missing


def test_layout_section_names_only_existing_paths():
    layout = section(README.read_text(encoding="utf-8"), "Layout")
    paths = repo_paths(layout)
    # The section names the top-level folders and the paradigm modules; the check must see them.
    assert {"analysis/", "server/", "server/paradigms/", "core.py"} <= set(paths)
    assert missing_paths(layout) == []


def test_every_repository_path_in_the_readme_exists():
    text = README.read_text(encoding="utf-8")
    missing = [p for p in missing_paths(text) if "/" in p]
    assert missing == []


def test_the_checker_sees_a_dead_pointer():
    assert missing_paths("See `server/nowhere.py` and `DESIGN.md`; `server/paradigms/` holds `core.py`.") == [
        "server/nowhere.py", "DESIGN.md"]
