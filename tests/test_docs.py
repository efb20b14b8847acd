"""The documentation site (mkdocs.yml, docs/): `mkdocs build --strict` passes, and its reference pages, written
from the code by server/docs_reference.py, hold every study-file key and every command and option."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from server.docs_reference import cli_markdown, on_page_markdown, study_file_markdown

ROOT = Path(__file__).resolve().parents[1]


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return [page for item in nav for page in _nav_pages(item)]


def test_strict_build_passes_and_a_page_not_in_the_nav_does_not_fail_it(tmp_path):
    """One strict build of a copy of the site with one page more that the nav does not list (as a page that
    lands before its nav entry): it passes, and the unlisted page is built too."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "docs" / "not-in-nav.md").write_text("# Not yet in the nav\n\nA page.\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config["hooks"] = [str(ROOT / hook) for hook in config["hooks"]]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    site = tmp_path / "site"
    assert (site / "not-in-nav" / "index.html").is_file()
    assert "not-in-nav.md" in build.stderr  # reported (INFO), not failed
    # Every page of docs/ but the unlisted one is in the nav, and the generated pages were filled in.
    listed = set(_nav_pages(config["nav"]))
    unlisted = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name not in listed)
    assert unlisted == [], f"add {unlisted} to mkdocs.yml's nav (the build passes without; readers never find them)"
    for page in ("study-file", "cli"):
        html = (site / page / "index.html").read_text(encoding="utf-8")
        assert "generated:" not in html and html.count("<tr>") > 100


def test_strict_build_fails_on_a_broken_link(tmp_path):
    """--strict catches what it must: a link to a page that does not exist (so the passing build means something)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [nowhere](nowhere.md).\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nnav:\n  - Home: index.md\n")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert build.returncode != 0 and "nowhere.md" in build.stderr


def test_study_file_reference_has_every_key_of_every_paradigm():
    from server.paradigms import all_paradigms
    from server.paradigms.params import allowed_values, declarations, sections

    text = study_file_markdown()
    headers = set(re.findall(r"^### `\[(\w+)\]`", text, re.M))
    rows = set(re.findall(r"^\| `(\w+)` \|", text, re.M))
    for paradigm in all_paradigms():
        assert f'kind = "{paradigm.kind}"' in text
        assert set(sections(paradigm.spec_class)) <= headers
        for d in declarations(paradigm.spec_class):
            keys = declarations(d.param.table) if d.param.table is not None else [d]
            assert {k.name for k in keys} <= rows, d.key
    # A key's row carries its type, default, bounds and documentation.
    assert re.search(r"^\| `scale_points` \| int \| `\d` \| one of 5, 7 or 9 \|", text, re.M) or \
        re.search(r"^\| `votes_per_pair` \| int \| `\d+` \| at least \d+ \| .+ \|$", text, re.M)
    rating = next(p for p in all_paradigms() if p.kind == "rating")
    method = next(d for d in declarations(rating.spec_class) if d.name == "method")
    assert f"| {allowed_values(method.param)} | {method.param.doc}" in text


def test_cli_reference_has_every_command_and_option():
    from server.cli import cli

    text = cli_markdown()

    def walk(group: click.Group, words: list[str]):
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            path = [*words, name]
            assert f"`perceptlab {' '.join(path)}`" in text, path
            for option in [p for p in command.params if isinstance(p, click.Option) and not p.hidden]:
                assert any(f"`{flag}" in text for flag in option.opts), (path, option.opts)
            if isinstance(command, click.Group):
                walk(command, path)

    walk(cli, [])
    assert "--noise-rmse RMSE" in text and "Drive the running server at --url" in text


def test_hook_fills_markers_and_refuses_an_unknown_one():
    assert "`[entry]`" in on_page_markdown("x\n<!-- generated: study-file -->\ny")
    assert on_page_markdown("no marker") == "no marker"
    with pytest.raises(KeyError):
        on_page_markdown("<!-- generated: nothing -->")
