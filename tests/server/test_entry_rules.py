"""Every entry path obeys the study's [entry] rules: the HTML entry /s/<slug> and its JSON twin, plain links
and MTurk HITs alike (server/paradigms/entry.py). An MTurk-style URL used to enter any study that had no HITs,
whatever its signed links or access key."""
from __future__ import annotations

import uuid
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from server.cli import cli
from server.models import Assignment, Study, Worker
from server.paradigms import spec_from_config
from server.paradigms.entry import mturk_question_url, mturk_signature
from server.mturk import MTurkService
from server.services import app_services

from .conftest import SMALL_STUDY, add_hit, create_test_study, write_study_file

SANDBOX = "https://workersandbox.mturk.com"
KEY = "k3y-for-all"
STRICT = {"external_hits": False}  # the default of a real study file (test studies opt in: conftest.py)


def _session(app):
    return app_services(app).sessions()


def _rows(app) -> tuple[int, int]:
    with _session(app) as session:
        return (int(session.scalar(select(func.count()).select_from(Worker))),
                int(session.scalar(select(func.count()).select_from(Assignment))))


def _mturk_query(hit: str = "NOHIT", worker: str | None = None, assignment: str | None = None, **extra) -> str:
    worker = worker or f"W{uuid.uuid4().hex[:10].upper()}"
    assignment = assignment or f"A{uuid.uuid4().hex[:12].upper()}"
    query = f"assignmentId={assignment}&hitId={hit}&workerId={worker}&turkSubmitTo={SANDBOX}"
    return query + "".join(f"&{k}={v}" for k, v in extra.items())


def _mturk_json(hit: str = "NOHIT", **extra) -> dict:
    return {"platform": "mturk", "worker_id": f"W{uuid.uuid4().hex[:10].upper()}",
            "assignment_id": f"A{uuid.uuid4().hex[:12].upper()}", "hit_id": hit, "turk_submit_to": SANDBOX, **extra}




@pytest.mark.parametrize("entry", [{}, {"signed_links": True}, {"access_key": KEY},
                                   {"recruiter": "prolific", "completion_code": "C1PL4ABC"}])
def test_a_study_without_hits_refuses_mturk_entries_on_both_paths(app, demo_stimuli, tmp_path, entry):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="nohits", entry={**STRICT, **entry}, **SMALL_STUDY)
    client = app.test_client()
    sig = mturk_signature(_secret(app, slug), slug)  # a valid key and signature: only the missing HITs refuse
    page = client.get(f"/s/{slug}?{_mturk_query(key=KEY, sig=sig)}")
    assert page.status_code == 403 and "takes no Mechanical Turk HITs" in page.get_data(as_text=True)
    api = client.post(f"/api/v1/studies/{slug}/assignments", json=_mturk_json(access_key=KEY, signature=sig))
    assert api.status_code == 403 and api.json["error"] == "unknown_hit"
    assert _rows(app) == (0, 0)
    # The preview still shows (nothing is created).
    assert client.get(f"/s/{slug}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=NOHIT").status_code == 200
    # Once the study has a HIT posted with perceptlab mturk launch, entries naming it enter (with the key).
    add_hit(app, slug, "HITREAL")
    assert client.get(f"/s/{slug}?{_mturk_query('HITREAL', key=KEY, sig=sig)}").status_code == 302
    assert client.get(f"/s/{slug}?{_mturk_query('HITFORGED', key=KEY, sig=sig)}").status_code == 403


def _secret(app, slug: str) -> str:
    with _session(app) as session:
        return session.scalar(select(Study.entry_secret).where(Study.slug == slug))


def test_external_hits_opts_in_and_the_key_and_signature_still_apply(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="ext",
                             entry={"external_hits": True, "signed_links": True, "access_key": KEY}, **SMALL_STUDY)
    client = app.test_client()
    sig = mturk_signature(_secret(app, slug), slug)
    refused = [client.get(f"/s/{slug}?{_mturk_query()}"),                       # neither
               client.get(f"/s/{slug}?{_mturk_query(key=KEY)}"),                # no signature
               client.get(f"/s/{slug}?{_mturk_query(sig=sig)}"),                # no key
               client.get(f"/s/{slug}?{_mturk_query(key=KEY, sig='0' * 32)}")]  # a forged signature
    assert [r.status_code for r in refused] == [403] * 4
    assert all("not valid" in r.get_data(as_text=True) or "access key" in r.get_data(as_text=True) for r in refused)
    for body in (_mturk_json(), _mturk_json(access_key=KEY), _mturk_json(signature=sig),
                 _mturk_json(access_key=KEY, signature="0" * 32)):
        answer = client.post(f"/api/v1/studies/{slug}/assignments", json=body)
        assert answer.status_code == 403 and answer.json["error"] == "bad_link", answer.json
    # A plain link's signature is not the MTurk one (and the reverse).
    from server.paradigms.entry import link_signature

    assert link_signature(_secret(app, slug), slug, "") != sig
    assert _rows(app) == (0, 0)
    assert client.get(f"/s/{slug}?{_mturk_query(key=KEY, sig=sig)}").status_code == 302
    entered = client.post(f"/api/v1/studies/{slug}/assignments", json=_mturk_json(access_key=KEY, signature=sig))
    assert entered.status_code == 201 and entered.json["stage"] == "consent"
    assert _rows(app) == (2, 2)


@pytest.mark.parametrize("field, value", [
    ("workerId", "w1"), ("workerId", "A" * 65), ("workerId", "A1-2"), ("workerId", "=HYPERLINK(1)"),
    ("assignmentId", "a1"), ("assignmentId", "A" * 65), ("assignmentId", "A 1"),
    ("hitId", "-H1"), ("hitId", "H" * 65),
    ("turkSubmitTo", "https://evil.example"), ("turkSubmitTo", "https://www.mturk.com.evil.example"),
    ("turkSubmitTo", "http://www.mturk.com"),
])
def test_mturk_parameters_must_have_mturks_formats(app, study, field, value):
    query = {"assignmentId": "A1B2C3", "hitId": "H1", "workerId": "WORKER1", "turkSubmitTo": SANDBOX, field: value}
    page = app.test_client().get(f"/s/{study}", query_string=query)
    assert page.status_code == 400 and field in page.get_data(as_text=True)
    body = {"platform": "mturk", "worker_id": query["workerId"], "assignment_id": query["assignmentId"],
            "hit_id": query["hitId"], "turk_submit_to": query["turkSubmitTo"]}
    answer = app.test_client().post(f"/api/v1/studies/{study}/assignments", json=body)
    assert answer.status_code == 400 and answer.json["error"] == "invalid_request"
    assert _rows(app) == (0, 0)


@pytest.mark.parametrize("pid", ["{{%PROLIFIC_PID%}}", "-abc", "5f3a 9c", "a" * 65, "=HYPERLINK(1)"])
def test_prolific_ids_must_have_prolifics_format_on_both_paths(app, demo_stimuli, tmp_path, pid):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="pl",
                             entry={"recruiter": "prolific", "completion_code": "C1PL4ABC"}, **SMALL_STUDY)
    client = app.test_client()
    page = client.get(f"/s/{slug}", query_string={"PROLIFIC_PID": pid})
    assert page.status_code == 400 and "Prolific ID is malformed" in page.get_data(as_text=True)
    answer = client.post(f"/api/v1/studies/{slug}/assignments", json={"platform": "link", "worker_id": pid})
    assert answer.status_code == 400 and answer.json["error"] == "invalid_request"
    assert client.get(f"/s/{slug}", query_string={"PROLIFIC_PID": "5f3a9c0e1d2b3a4c5d6e7f80",
                                                  "STUDY_ID": "64aa00bb11cc", "SESSION_ID": "x-1"}).status_code == 400
    assert _rows(app) == (0, 0)


def test_the_hits_url_carries_the_key_and_signature(app, demo_stimuli, tmp_path, client):
    """``MTurkService.launch`` posts the HIT with the study's key and MTurk signature in its URL, and that
    URL (with MTurk's parameters appended) enters the study."""
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="launched",
                             entry={**STRICT, "signed_links": True, "access_key": KEY}, **SMALL_STUDY)
    with _session(app) as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        url = mturk_question_url(study, spec_from_config(study.config), "https://lab.example.org/")
        assert url == (f"https://lab.example.org/s/{slug}?key={KEY}"
                       f"&sig={mturk_signature(study.entry_secret, slug)}")
        assert mturk_question_url(study, spec_from_config(study.config), f"https://h/s/{slug}").startswith(
            f"https://h/s/{slug}?key=")
        question = MTurkService.external_question_xml(url)
        assert "key=k3y-for-all&amp;sig=" in question  # XML-escaped in the ExternalQuestion
    query = parse_qs(urlsplit(url).query)
    add_hit(app, slug, "HITLAUNCHED")
    entered = app.test_client().get(f"/s/{slug}?{urlsplit(url).query}&{_mturk_query('HITLAUNCHED')}")
    assert entered.status_code == 302 and query["key"] == [KEY]


def test_study_create_prints_the_hit_url_of_a_study_that_takes_external_hits(app, demo_stimuli, tmp_path):
    path = write_study_file(tmp_path, demo_stimuli, slug="printed", entry={"access_key": KEY},
                            texts={"researcher": "R", "contact": "r@example.org"})
    result = CliRunner().invoke(cli, ["study", "create", str(path), "--database-url", app.config["DATABASE_URL"]])
    assert result.exit_code == 0, result.output
    assert f"HIT URL (ExternalQuestion): https://HOST/s/printed?key={KEY}" in result.output
    strict = write_study_file(tmp_path, demo_stimuli, slug="strict", entry=STRICT,
                              texts={"researcher": "R", "contact": "r@example.org"})
    result = CliRunner().invoke(cli, ["study", "create", str(strict), "--database-url", app.config["DATABASE_URL"]])
    assert "MTurk entries need a HIT posted with perceptlab mturk launch" in result.output


def test_the_template_documents_external_hits():
    result = CliRunner().invoke(cli, ["study", "template"])
    assert "external_hits = false" in result.output
    motion = CliRunner().invoke(cli, ["study", "template", "--kind", "motion"])
    assert "external_hits = false" in motion.output
