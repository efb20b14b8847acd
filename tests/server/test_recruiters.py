"""Recruiters beyond MTurk: the study file's [entry] recruiter (Prolific, a redirect URL), the completion code
shown only after real completion, the participants page and workers.csv, and the check of submitted codes
(``perceptlab codes check`` and the dashboard's upload)."""
from __future__ import annotations

import csv
import io
import re
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from server import codes
from server.cli import cli
from server.models import Assignment, Study, Worker
from server.paradigms import StudyDefinitionError, read_study_file
from server.paradigms.studyfile import redirect_url_problem
from server.services import app_services

from .admin_support import csrf_of
from .conftest import SMALL_STUDY, WorkerClient, create_test_study, write_study_file

PID = "5f3a9c0e1d2b3a4c5d6e7f80"
PROLIFIC = {"recruiter": "prolific", "completion_code": "C1PL4ABC"}
PROLIFIC_QUERY = f"PROLIFIC_PID={PID}&STUDY_ID=64aa00bb11cc&SESSION_ID=5e5f6a7b8c9d0e1f2a3b4c5d"


def _session(app):
    return app_services(app).sessions()


def _prolific_study(app, demo_stimuli, tmp_path, slug="prolific", **entry) -> str:
    return create_test_study(app, demo_stimuli, tmp_path, slug=slug, entry={**PROLIFIC, **entry}, **SMALL_STUDY)


def _location(response) -> str:
    assert response.status_code == 302, (response.status_code, response.get_data(as_text=True)[:300])
    return urlsplit(response.headers["Location"]).path


def _complete(app, slug: str, participant: str, *, query: str = "") -> WorkerClient:
    """A participant who enters by the API, then by the study link (``query``, e.g. Prolific's parameters),
    and completes the quiz and one page of trials."""
    worker = WorkerClient(app.test_client(), slug, worker_id=participant, platform="link")
    if query:
        _location(app.test_client().get(f"/s/{slug}?{query}"))
    worker.start()
    worker.answer_page(worker.correct_side)
    worker.answer_page(worker.correct_side)
    assert worker.action("finish").json["stage"] == "completed"
    return worker


# ---------------------------------------------------------------- the study file

@pytest.mark.parametrize("entry, message", [
    ({"recruiter": "mturkk"}, "entry.recruiter must be 'link', 'prolific' or 'redirect', got 'mturkk'"),
    ({"recruiter": "prolific"}, "needs entry.completion_code"),
    ({**PROLIFIC, "signed_links": True}, "contradicts entry.signed_links"),
    ({**PROLIFIC, "allow_anonymous": True}, "contradicts entry.signed_links and entry.allow_anonymous"),
    ({"recruiter": "prolific", "completion_code": "a b"}, "entry.completion_code must be 4-64"),
    ({"recruiter": "redirect"}, "needs entry.redirect_url"),
    ({"redirect_url": "https://example.org/?c={code}"}, 'only with entry.recruiter = "redirect"'),
    ({"recruiter": "redirect", "redirect_url": "http://example.org/?c={code}"}, "must start with https://"),
    ({"recruiter": "redirect", "redirect_url": "https://example.org/?c={cod}"}, "unknown placeholder {cod}"),
    ({"recruiter": "redirect", "redirect_url": "https://example.org/?c={code"}, "unbalanced braces"),
    ({"recruiter": "redirect", "redirect_url": "javascript:alert({code})"}, "must start with https://"),
])
def test_the_study_file_refuses_bad_recruiter_settings(demo_stimuli, tmp_path, entry, message):
    path = write_study_file(tmp_path, demo_stimuli, "bad", entry=entry)
    with pytest.raises(StudyDefinitionError, match=re.escape(message)):
        read_study_file(path)


def test_redirect_url_templates():
    assert redirect_url_problem("https://survey.example.org/end?code={code}&pid={participant}") is None
    assert redirect_url_problem("http://localhost:8080/done?c={code}") is None
    assert redirect_url_problem("http://127.0.0.1/done/{code}") is None
    assert redirect_url_problem("https://example.org/{{literal}}?c={code}") is None
    for bad in ("https://example.org/?c={0}", "https://example.org/?c={}", "https://example.org/?c={code!r}",
                "https://example.org/?c={code:>9}", "https://example.org/?c={code.upper}", "ftp://example.org/{code}",
                "https:///nohost?c={code}", "https://user@example.org/?c={code}", "https://exa mple.org/",
                "https://example.org/\n", "https://[::1/?c={code}", "https://example.org:port/", "x" * 2001):
        assert redirect_url_problem(bad), bad


def test_good_recruiter_settings_are_stored(demo_stimuli, tmp_path):
    spec = read_study_file(write_study_file(tmp_path, demo_stimuli, "ok", entry={
        "recruiter": "redirect", "redirect_url": "https://example.org/done?c={code}", "completion_code": "DONE-2026"}))
    assert (spec.recruiter, spec.redirect_url, spec.completion_code) == \
        ("redirect", "https://example.org/done?c={code}", "DONE-2026")
    assert read_study_file(write_study_file(tmp_path, demo_stimuli, "plain")).recruiter == "link"


def test_the_template_documents_the_recruiter(demo_stimuli, tmp_path):
    result = CliRunner().invoke(cli, ["study", "template"])
    assert result.exit_code == 0
    assert 'recruiter = "link"' in result.output and "PROLIFIC_PID" in result.output
    result = CliRunner().invoke(cli, ["study", "template", "--kind", "motion"])
    assert 'recruiter = "link"' in result.output and "redirect_url" in result.output


def test_study_create_prints_prolifics_study_url(demo_stimuli, tmp_path):
    path = write_study_file(tmp_path, demo_stimuli, "pl", entry={**PROLIFIC, "access_key": "k3y-for-all"},
                            texts={"researcher": "Dr A. Lee", "contact": "a.lee@x.example"})
    result = CliRunner().invoke(cli, ["study", "create", str(path), "--database-url", f"sqlite:///{tmp_path / 'c.db'}"])
    assert result.exit_code == 0, result.output
    assert ("Prolific study URL: https://HOST/s/pl?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}"
            "&SESSION_ID={{%SESSION_ID%}}&key=k3y-for-all  (completion code C1PL4ABC") in result.output


# ---------------------------------------------------------------- entry

def test_prolific_entry_needs_the_pid_and_stores_its_parameters(app, demo_stimuli, tmp_path):
    slug = _prolific_study(app, demo_stimuli, tmp_path)
    client = app.test_client()
    refused = client.get(f"/s/{slug}?STUDY_ID=64aa00bb11cc")
    assert refused.status_code == 403 and "Prolific ID" in refused.get_data(as_text=True)
    bad = client.get(f"/s/{slug}?PROLIFIC_PID={PID}&SESSION_ID=a%20b")
    assert bad.status_code == 400 and "SESSION_ID is malformed" in bad.get_data(as_text=True)
    with _session(app) as session:
        assert session.scalar(select(func.count()).select_from(Worker)) == 0  # nothing stored for refused links
    first = _location(client.get(f"/s/{slug}?{PROLIFIC_QUERY}"))
    # A reload (or a second session id) lands in the same assignment; the first parameters stay.
    assert _location(client.get(f"/s/{slug}?PROLIFIC_PID={PID}&STUDY_ID=other&SESSION_ID=s2")) == first
    with _session(app) as session:
        assignment = session.scalar(select(Assignment))
        assert assignment.platform == "link" and assignment.worker.external_id == PID
        assert assignment.entry_params == {"STUDY_ID": "64aa00bb11cc", "SESSION_ID": "5e5f6a7b8c9d0e1f2a3b4c5d"}


def test_a_plain_link_study_ignores_prolific_parameters(app, study):
    _location(app.test_client().get(f"/s/{study}?{PROLIFIC_QUERY}"))
    with _session(app) as session:
        assignment = session.scalar(select(Assignment))
        assert assignment.worker.external_id == PID and assignment.entry_params is None


# ---------------------------------------------------------------- completion

def test_the_code_and_the_redirect_come_only_after_completion(app, demo_stimuli, tmp_path):
    slug = _prolific_study(app, demo_stimuli, tmp_path)
    client = app.test_client()
    worker = WorkerClient(client, slug, worker_id=PID, platform="link")
    page_url = _location(client.get(f"/s/{slug}?{PROLIFIC_QUERY}"))

    def seen() -> str:
        return client.get(page_url).get_data(as_text=True) + str(worker.state())

    assert "C1PL4ABC" not in seen() and "prolific.com" not in seen()
    worker.start()
    worker.answer_page(worker.correct_side)
    assert "C1PL4ABC" not in seen()
    worker.answer_page(worker.correct_side)
    assert "C1PL4ABC" not in seen() and "redirect" not in seen()  # page_done: not finished yet
    completion = worker.action("finish").json["completion"]
    target = "https://app.prolific.com/submissions/complete?cc=C1PL4ABC"
    assert completion == {"mode": "code", "code": "C1PL4ABC", "redirect_url": target, "redirect_to": "Prolific",
                          "redirect_seconds": 5}
    html = client.get(page_url).get_data(as_text=True)
    assert 'id="completion-code">C1PL4ABC<' in html and f'href="{target}"' in html
    assert 'data-auto-redirect="true"' in html and "js/done.js" in html
    with _session(app) as session:
        assignment = session.scalar(select(Assignment))
        # The random code stays stored as a receipt; the participant was shown the study's code.
        assert assignment.stage == "completed" and re.fullmatch(r"[0-9A-F]{10}", assignment.completion_code)


def test_a_disqualified_prolific_participant_gets_no_code(app, demo_stimuli, tmp_path):
    slug = _prolific_study(app, demo_stimuli, tmp_path)
    client = app.test_client()
    worker = WorkerClient(client, slug, worker_id=PID, platform="link")
    page_url = _location(client.get(f"/s/{slug}?{PROLIFIC_QUERY}"))
    worker.start()
    assert worker.answer_page(worker.wrong_side)["stage"] == "disqualified"
    html = client.get(page_url).get_data(as_text=True)
    assert 'id="stopped"' in html and "C1PL4ABC" not in html and "prolific.com" not in html
    assert "return your submission on Prolific" in " ".join(html.split())
    assert worker.state()["completion"] is None


def test_the_redirect_recruiter_fills_in_code_and_participant(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="redir", entry={
        "recruiter": "redirect", "redirect_url": "https://survey.example.org/end?c={code}&p={participant}"},
        **SMALL_STUDY)
    worker = _complete(app, slug, "p@lab:7")
    completion = worker.state()["completion"]
    code = completion["code"]
    assert re.fullmatch(r"[0-9A-F]{10}", code)  # no study-wide code: each participant's own
    assert completion["redirect_url"] == f"https://survey.example.org/end?c={code}&p=p%40lab%3A7"
    assert completion["redirect_to"] == "survey.example.org"


# ---------------------------------------------------------------- workers.csv and the participants page

def test_workers_csv_and_the_participants_page_list_platform_status_and_code(app, demo_stimuli, tmp_path,
                                                                             admin):
    slug = _prolific_study(app, demo_stimuli, tmp_path)
    _complete(app, slug, PID, query=PROLIFIC_QUERY)
    _location(app.test_client().get(f"/s/{slug}?PROLIFIC_PID=started1&STUDY_ID=64aa00bb11cc"))
    rows = {r["completion_status"]: r for r in
            csv.DictReader(io.StringIO(admin.get(f"/admin/studies/{slug}/workers.csv").get_data(as_text=True)))}
    assert set(rows) == {"completed", "started"}
    assert rows["completed"]["platform"] == "prolific" and rows["completed"]["completion_code"] == "C1PL4ABC"
    assert rows["started"]["completion_code"] == "" and PID not in str(rows)  # pseudonyms unless asked

    html = admin.get(f"/admin/studies/{slug}").get_data(as_text=True)
    assert f'href="/admin/studies/{slug}/participants"' in html and "Recruiter Prolific" in html
    page = admin.get(f"/admin/studies/{slug}/participants").get_data(as_text=True)
    assert 'data-status="completed"' in page and 'data-status="started"' in page and "C1PL4ABC" in page
    assert PID not in page and "5e5f6a7b8c9d0e1f2a3b4c5d" not in page
    raw = admin.get(f"/admin/studies/{slug}/participants?raw_ids=1").get_data(as_text=True)
    assert PID in raw and "5e5f6a7b8c9d0e1f2a3b4c5d" in raw and "64aa00bb11cc" in raw


def test_an_abandoned_participant(app, study, clock):
    WorkerClient(app.test_client(), study, worker_id="P-slow", platform="link").start()
    with _session(app) as session:
        the_study = session.scalar(select(Study))
        assert [p.status for p in codes.participants(session, the_study)] == ["started"]
    clock.advance(minutes=61)  # the study's assignment_timeout_minutes is 60
    with _session(app) as session:
        assert [p.status for p in codes.participants(session, session.scalar(select(Study)))] == ["abandoned"]


# ---------------------------------------------------------------- checking submitted codes

def _codes_study(app, demo_stimuli, tmp_path) -> tuple[str, dict[str, str]]:
    """A plain-link study (a random code per participant): A and B completed, C started."""
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="codes", **SMALL_STUDY)
    given = {}
    for participant in ("A", "B"):
        given[participant] = _complete(app, slug, participant).state()["completion"]["code"]
    WorkerClient(app.test_client(), slug, worker_id="C", platform="link").start()
    return slug, given


def _submitted(given: dict[str, str]) -> str:
    # Prolific's export has more columns than these, in its own order.
    return ("Submission id,Participant id,Status,Started at,Completion code\n"
            f"s1,A,AWAITING REVIEW,2026-11-23,{given['A'].lower()}\n"
            f"s2,B,AWAITING REVIEW,2026-11-23,{given['A']}\n"
            "s3,C,AWAITING REVIEW,2026-11-23,XXXX\n"
            "s4,Z,RETURNED,2026-11-23,\n"
            f"s5,A,AWAITING REVIEW,2026-11-23,{given['A']}\n"
            "s6,only-two\n"
            "\n")


EXPECTED = [(2, "A", "valid"), (3, "B", "wrong code"), (4, "C", "not completed"), (5, "Z", "unknown participant"),
            (6, "A", "duplicate"), (7, "", "malformed")]


def test_cli_codes_check(app, demo_stimuli, tmp_path):
    slug, given = _codes_study(app, demo_stimuli, tmp_path)
    path = tmp_path / "submitted.csv"
    path.write_bytes(b"\xef\xbb\xbf" + _submitted(given).encode())  # Excel's byte-order mark
    url, out = app.config["DATABASE_URL"], tmp_path / "checked.csv"
    result = CliRunner().invoke(cli, ["codes", "check", slug, str(path), "--database-url", url, "--out", str(out)])
    assert result.exit_code == 1, result.output  # some rows are not valid
    lines = result.output.splitlines()
    assert lines[0].split() == ["line", "participant", "code", "result", "detail"]
    assert "another participant's code" in result.output and "already on line 2" in result.output
    assert "6 rows: 1 valid, 1 wrong code, 1 unknown participant, 1 not completed, 1 duplicate, 1 malformed\n" \
        in result.output
    written = list(csv.DictReader(out.open()))
    assert [(int(r["line"]), r["participant"], r["result"]) for r in written] == EXPECTED
    assert written[0]["recruiter_status"] == "AWAITING REVIEW"

    good = tmp_path / "good.csv"
    good.write_text(f"WorkerId;Answer.completionCode\nB;{given['B']}\n")  # MTurk-like, semicolons
    result = CliRunner().invoke(cli, ["codes", "check", slug, str(good), "--database-url", url])
    assert result.exit_code == 0, result.output
    assert "1 rows: 1 valid; 1 participant(s) with a code here are in no row" in result.output

    nul = tmp_path / "nul.csv"
    nul.write_bytes(b"Participant id,Completion code\nA,\0B\n")
    result = CliRunner().invoke(cli, ["codes", "check", slug, str(nul), "--database-url", url])
    assert result.exit_code == 2 and "line 2: NUL byte" in result.output
    result = CliRunner().invoke(cli, ["codes", "check", "nope", str(good), "--database-url", url])
    assert result.exit_code == 2 and "no study 'nope'" in result.output
    result = CliRunner().invoke(cli, ["codes", "check", slug, str(tmp_path / "missing.csv"), "--database-url", url])
    assert result.exit_code == 2 and "missing.csv" in result.output


@pytest.mark.parametrize("data, message", [
    (b"", "the file is empty"),
    (b"\xff\xfeP\x00", "UTF-16"),
    (b"Participant id,Completion code\nA,\xe9t\xe9\n", "line 2: not UTF-8"),
    (b"Participant id,Completion code\nA,B\0\n", "line 2: NUL byte"),
    (b"Name,Age\nA,3\n", "line 1: no participant and completion code column"),
    (b"Participant id,Status\nA,3\n", "line 1: no completion code column"),
    (b'Participant id,Completion code\n"A,B\n', "line 2: unexpected end of data"),
    (b'Participant id,Completion code\n"A"x,B\n', "line 2: ',' expected after '\"'"),
    (b"x" * 101, "the file has 101 bytes; at most 100"),
])
def test_unreadable_code_files(data, message):
    with pytest.raises(codes.CodeFileError, match=re.escape(message)):
        codes.read_submitted(data, max_bytes=100)


def test_too_many_rows():
    with pytest.raises(codes.CodeFileError, match="more than 3 rows"):
        codes.read_submitted(b"pid,code\n" + b"a,b\n" * 4, max_rows=3)


def test_the_dashboard_checks_an_uploaded_file(app, demo_stimuli, tmp_path, admin):
    slug, given = _codes_study(app, demo_stimuli, tmp_path)
    url = f"/admin/studies/{slug}/participants/check"
    anonymous = app.test_client()
    assert anonymous.get(f"/admin/studies/{slug}/participants").status_code == 302
    token = csrf_of(admin, f"/admin/studies/{slug}/participants")

    def upload(data: bytes, csrf: str | None = token, name: str = "export.csv"):
        form = {"codes": (io.BytesIO(data), name)}
        if csrf is not None:
            form["csrf_token"] = csrf
        return admin.post(url, data=form, content_type="multipart/form-data")

    response = upload(_submitted(given).encode())
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    found = re.findall(r'<tr data-result="([^"]+)"><td class="num">(\d+)</td><td><code>([^<]*)</code>', html)
    assert [(int(line), who, result) for result, line, who in found] == EXPECTED
    assert "6 rows: 1 valid" in html

    assert upload(_submitted(given).encode(), csrf=None).status_code == 400  # no CSRF token
    assert upload(_submitted(given).encode(), csrf="forged").status_code == 400
    bad = upload(b"Participant id,Completion code\nA,\0\n", name="odd.csv")
    assert bad.status_code == 400 and "odd.csv: line 2: NUL byte" in bad.get_data(as_text=True)
    empty = upload(b"")
    assert empty.status_code == 400 and "Choose a CSV file" in empty.get_data(as_text=True)
    big = upload(b"Participant id,Completion code\n" + b"A,B\n" * (3 << 20))  # 12 MB: over the 8 MB limit
    assert big.status_code == 413 and "larger than 8 MB" in big.get_data(as_text=True)
    # Nothing was stored by any of it.
    with _session(app) as session:
        assert session.scalar(select(func.count()).select_from(Worker)) == 3
    assert anonymous.post(url, data={"codes": (io.BytesIO(b"x"), "x.csv")},
                          content_type="multipart/form-data").status_code in (302, 400)
