"""The default consent's placeholders ({researcher}, {contact}, {pay}, {time}): `perceptlab study create`
refuses empty ones, the demo fills them, and the consent page shows them filled in."""
from __future__ import annotations

import re
from decimal import Decimal

import pytest
from click.testing import CliRunner

from server.cli import cli
from server.paradigms import StudyDefinitionError, read_study_file
from server.paradigms.consent import NOT_GIVEN, check_consent_filled, pay_phrase, unfilled_fields
from server.paradigms.core import PayUnit
from server.paradigms.motion.study import DEFAULT_MOTION_CONSENT
from server.paradigms.paired.study import DEFAULT_CONSENT

from .conftest import create_test_study

# The consent text and its page: the same on any database.
pytestmark = pytest.mark.one_database
RESEARCHER = "Dr A. Lee, University of X"
CONTACT = "a.lee@x.example"


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _template(kind: str, manifest: str, tmp_path, **replace) -> str:
    text = _cli("study", "template", "--kind", kind).output
    default = "prepared/manifest.json" if kind == "pc" else "clips/manifest.json"
    text = text.replace(default, manifest)
    for key, value in replace.items():
        text = text.replace(f'{key} = ""', f'{key} = "{value}"', 1)
    path = tmp_path / f"{kind}.toml"
    path.write_text(text)
    return str(path)


def test_default_consents_name_researcher_contact_pay_and_time():
    for text in (DEFAULT_CONSENT, DEFAULT_MOTION_CONSENT):
        assert {"{researcher}", "{contact}", "{pay}", "{time}"} <= set(re.findall(r"\{\w+\}", text))


def test_pay_phrase_follows_the_pay_rules():
    pages = PayUnit("page", Decimal("0.50"), Decimal("0.40"), 2, 10)
    assert pay_phrase(pages) == "$1.00 for 2 pages, and a bonus of $0.40 for each further page up to 10 pages in all"
    assert pay_phrase(PayUnit("session", Decimal("2.5"), Decimal("0"), 1, 1)) == "$2.50 for 1 session"


def test_study_create_refuses_the_template_until_researcher_and_contact_are_filled(demo_stimuli, motion_clips,
                                                                                  tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    manifest = (demo_stimuli / "prepared" / "manifest.json").as_posix()
    for kind, where in (("pc", manifest), ("motion", motion_clips.as_posix())):
        bare = _template(kind, where, tmp_path)
        result = _cli("study", "create", bare, "--database-url", url)
        assert result.exit_code == 2, result.output
        assert "missing: researcher, contact" in result.output and bare in result.output
        assert '[texts] researcher = "...", contact = "..."' in result.output
        half = _template(kind, where, tmp_path, researcher=RESEARCHER)
        result = _cli("study", "create", half, "--database-url", url)
        assert result.exit_code == 2 and "missing: contact" in result.output and "researcher," not in result.output
    assert not (tmp_path / "cli.db").exists()  # refused before any database was made

    full = _template("pc", manifest, tmp_path, researcher=RESEARCHER, contact=CONTACT)
    result = _cli("study", "create", full, "--database-url", url)
    assert result.exit_code == 0, result.output
    assert f"researcher = {RESEARCHER!r}" in _cli("study", "show", "interp-2026", "--database-url", url).output


def test_own_consent_text_needs_only_the_placeholders_it_uses(demo_stimuli, tmp_path):
    manifest = (demo_stimuli / "prepared" / "manifest.json").as_posix()
    plain = tmp_path / "plain.toml"
    plain.write_text(f'[study]\nslug = "own"\nmanifests = ["{manifest}"]\n[texts]\nconsent = "Agree? It pays {{pay}}."\n')
    spec = read_study_file(plain)
    assert unfilled_fields(spec) == []
    check_consent_filled(spec)  # no {researcher} or {contact}: nothing to fill
    typo = tmp_path / "typo.toml"
    typo.write_text(f'[study]\nslug = "typo"\nmanifests = ["{manifest}"]\n[texts]\nconsent = "By {{reseacher}}."\n')
    try:
        check_consent_filled(read_study_file(typo), str(typo))
    except StudyDefinitionError as exc:
        assert "{reseacher}" in str(exc) and "{researcher}" in str(exc) and str(typo) in str(exc)
    else:
        raise AssertionError("an unknown placeholder passed")


def test_consent_page_shows_the_values(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, "filled", texts={"researcher": RESEARCHER, "contact": CONTACT},
                             pages={"min_pages": 1, "max_pages": 3, "reward_per_page": "0.50", "bonus_per_page": "0.40"})
    page = app.test_client().get(f"/s/{slug}?participant=P1", follow_redirects=True)
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and 'id="consent"' in html
    assert RESEARCHER in html and CONTACT in html
    assert "$0.50 for 1 page, and a bonus of $0.40 for each further page up to 3 pages in all" in html
    assert "It takes about" in html and not re.search(r"\{\w+\}", html)
    # A study made in code without the values (tests) says so instead of showing braces.
    bare = create_test_study(app, demo_stimuli, tmp_path, "bare")
    html = app.test_client().get(f"/s/{bare}?participant=P2", follow_redirects=True).get_data(as_text=True)
    assert NOT_GIVEN in html and not re.search(r"\{\w+\}", html)


def test_demo_studies_fill_the_consent(demo_stimuli, motion_clips, tmp_path):
    from server.cli.cmd_server import _prepare_demo_database
    from server.db import session_scope
    from server.models import Study
    from server.paradigms import spec_from_config

    out = tmp_path / "demo"
    out.mkdir()
    (out / "stimuli").symlink_to(demo_stimuli)
    (out / "motion_clips").symlink_to(motion_clips.parent)
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    _prepare_demo_database(out, url, demo_stimuli, seed=0)
    with session_scope(url) as session:
        specs = [spec_from_config(study.config) for study in session.query(Study).all()]
    assert sorted(spec.slug for spec in specs) == ["demo", "demo-active", "demo-dcr", "demo-motion"]
    for spec in specs:
        check_consent_filled(spec)
        assert "demo" in spec.researcher and spec.contact
