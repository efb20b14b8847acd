"""The experimenter side: login, CSRF, the dashboard pages and their JSON, the user CLI."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from server import auth, login_throttle
from server.paradigms.paired import live_scales
from server.cli import cli
from server.models import Study, User
from server.services import app_services

from .admin_support import PASSWORD, csrf_of, log_in
from .conftest import WorkerClient


def _status(app, slug: str) -> str:
    with app_services(app).sessions() as session:
        return session.scalar(select(Study.status).where(Study.slug == slug))


def test_every_admin_page_requires_login(app, study, user):
    client = app.test_client()
    for path in ("/admin/", f"/admin/studies/{study}", f"/admin/studies/{study}/votes.csv",
                 f"/admin/studies/{study}/scales.csv", f"/admin/studies/{study}/workers.csv"):
        response = client.get(path)
        assert response.status_code == 302, path
        assert response.location == f"/admin/login?next={path}"
    for path in ("/admin/api/studies", f"/admin/api/studies/{study}/summary"):
        response = client.get(path)
        assert response.status_code == 401 and response.json["error"] == "login_required", path
    # A POST with a valid CSRF token but no login is still refused, and changes nothing.
    token = csrf_of(client)
    response = client.post(f"/admin/studies/{study}/pause", data={"csrf_token": token})
    assert response.status_code == 302 and response.location.startswith("/admin/login")
    assert client.post(f"/admin/api/studies/{study}/refresh", headers={"X-CSRF-Token": token}).status_code == 401
    assert _status(app, study) == "active"


def test_login_wrong_password_logout(app, study, user):
    client = app.test_client()
    response = log_in(client, password="wrong password")
    assert response.status_code == 401 and "Wrong username or password" in response.get_data(as_text=True)
    assert log_in(client, username="mallory").status_code == 401
    assert client.get("/admin/").status_code == 302
    response = log_in(client, next_="https://evil.example/phish")  # never redirected off the site
    assert response.status_code == 303 and response.location == "/admin/"
    token = csrf_of(client, "/admin/")
    assert client.post("/admin/logout", data={"csrf_token": token}).status_code == 303
    response = log_in(client, next_=f"/admin/studies/{study}")
    assert response.status_code == 303 and response.location == f"/admin/studies/{study}"
    page = client.get(f"/admin/studies/{study}")
    assert page.status_code == 200 and "Test study" in page.get_data(as_text=True)
    assert page.headers["Cache-Control"] == "no-store"
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    # The login page of a logged-in user goes straight on.
    assert client.get("/admin/login?next=/admin/").location == "/admin/"
    token = csrf_of(client, "/admin/")
    assert client.post("/admin/logout", data={"csrf_token": token}).status_code == 303
    assert client.get("/admin/").status_code == 302


def test_accounts(app, user):
    """Usernames ignore case, passwords are scrypt hashes, a new password ends the other sessions."""
    client = app.test_client()
    assert log_in(client, username="ALICE").status_code == 303
    with app_services(app).sessions() as session:
        stored = session.scalar(select(User.password_hash))
        assert stored.startswith("scrypt:") and PASSWORD not in stored
        with pytest.raises(auth.AccountError, match="exists already"):
            auth.create_user(session, "Alice", "another password")
        with pytest.raises(auth.AccountError, match="at least 8"):
            auth.create_user(session, "bob", "short")
        with pytest.raises(auth.AccountError, match="username"):
            auth.create_user(session, "bob smith", "long enough")
    assert client.get("/admin/").status_code == 200
    with app_services(app).sessions() as session:
        auth.set_password(auth.find_user(session, "alice"), "a brand new password")
        session.commit()
    assert client.get("/admin/").status_code == 302


@pytest.mark.parametrize("target, expected", [
    ("/admin/studies/demo", "/admin/studies/demo"),
    ("https://evil.example/", "/admin/"),
    ("//evil.example/x", "/admin/"),
    ("/\\evil.example", "/admin/"),
    ("javascript:alert(1)", "/admin/"),
    ("/admin/\r\nLocation: x", "/admin/"),
    ("", "/admin/"),
])
def test_next_must_be_a_local_path(target, expected):
    assert auth.safe_next(target) == expected


def test_csrf_is_enforced(app, study, admin):
    for data in ({}, {"csrf_token": "forged"}):
        response = admin.post(f"/admin/studies/{study}/pause", data=data)
        assert response.status_code == 400 and "security token" in response.get_data(as_text=True)
    assert _status(app, study) == "active"
    response = admin.post(f"/admin/api/studies/{study}/refresh", headers={"X-CSRF-Token": "forged"})
    assert response.status_code == 400 and response.json["error"] == "invalid_request"
    assert admin.post("/admin/logout").status_code == 400  # logout too: no forced logouts
    # A login form posted without the session's token (e.g. from another site) is refused.
    fresh = app.test_client()
    assert fresh.post("/admin/login", data={"username": "alice", "password": PASSWORD}).status_code == 400


def test_failed_logins_are_rate_limited(app, user, clock):
    """Growing delays, not a lockout (the details: tests/server/test_accounts.py)."""
    client = app.test_client()
    for _ in range(login_throttle.ACCOUNT.free):
        assert log_in(client, password="not the password").status_code == 401
    response = log_in(client)  # even the right password, while the delay holds
    assert response.status_code == 429 and "Too many failed logins" in response.get_data(as_text=True)
    assert response.headers["Retry-After"] == "1"
    clock.advance(seconds=1)
    assert log_in(client).status_code == 303


def test_pause_and_resume(app, study, admin):
    token = csrf_of(admin, "/admin/")
    response = admin.post(f"/admin/studies/{study}/pause", data={"csrf_token": token, "next": "/admin/"})
    assert response.status_code == 303 and response.location == "/admin/"
    assert _status(app, study) == "paused"
    blocked = app.test_client().post(f"/api/v1/studies/{study}/assignments",
                                     json={"platform": "link", "worker_id": "P1"})
    assert blocked.status_code == 409 and blocked.json["error"] == "study_paused"
    assert "Resume" in admin.get("/admin/").get_data(as_text=True)
    response = admin.post(f"/admin/studies/{study}/resume", data={"csrf_token": token})
    assert response.status_code == 303 and response.location == f"/admin/studies/{study}"
    assert _status(app, study) == "active"
    assert admin.post("/admin/studies/nope/pause", data={"csrf_token": token}).status_code == 404


def _work(app, study, worker_id: str) -> WorkerClient:
    """A worker who passes the quiz and answers one page (5 real pairs + 1 hidden gold)."""
    worker = WorkerClient(app.test_client(), study, worker_id=worker_id)
    worker.start()
    worker.answer_page(worker.correct_side)
    worker.answer_page(worker.correct_side)
    return worker


def test_summary_json_after_votes(app, study, admin):
    empty = admin.get(f"/admin/api/studies/{study}/summary").json
    assert empty["study"]["n_responses"] == 0 and empty["scales"]["available"] is False
    assert empty["workers"] == [] and len(empty["sets"]) == 4
    for name in ("WORKERONE", "WORKERTWO"):
        _work(app, study, name)
    WorkerClient(app.test_client(), study, worker_id="WORKERNEW").start()  # still at the quiz

    response = admin.get(f"/admin/api/studies/{study}/summary")
    body = response.json
    headline = body["study"]
    # Votes of design pairs: each worker's 3 quiz votes, 5 real ones and a hidden gold (the demo's gold pairs are
    # design pairs, whose gold trials are votes of them).
    assert headline["n_responses"] == 2 * 9 and headline["n_workers"] == 3 and headline["status"] == "active"
    assert headline["target_responses"] == 132 * 20 and headline["n_units"] == 132
    assert (headline["groups"], headline["units"], headline["unit"]) == ("sets", "pairs", "votes")
    assert headline["active_assignments"] == 3 and headline["last_vote_at"]
    assert sum(s["n_votes"] for s in body["sets"]) == 2 * 9
    for s in body["sets"]:
        assert s["n_pairs"] == 33 and sum(b["pairs"] for b in s["histogram"]) == 33
        assert s["per_pair"]["min"] == 0 and s["per_pair"]["max"] <= 2 and s["per_pair"]["target"] == 20
    workers = {w["stage"]: w for w in body["workers"]}
    done = [w for w in body["workers"] if w["n_votes"]]
    assert len(done) == 2 and all(w["quiz"] == "passed" and w["quiz_correct"] == 3 and w["pages"] == 1
                                  and w["gold_total"] == 1 and w["gold_accuracy"] == 1.0 for w in done)
    assert all(w["n_votes"] == 9 for w in done)  # votes of design pairs: quiz, real and hidden gold trials
    assert workers["quiz"]["quiz"] == "not taken"
    assert all(re.fullmatch(r"w_[0-9a-f]{12}", w["worker_id"]) and "raw_id" not in w for w in body["workers"])
    assert "WORKERONE" not in response.get_data(as_text=True)

    # The summary started the first running estimate in the background.
    live_scales.wait_for_refreshes(app)
    scales = admin.get(f"/admin/api/studies/{study}/summary").json["scales"]
    assert scales["available"] and not scales["stale"] and scales["n_scaling_votes"] == 2 * 9  # all scaled
    assert scales["snapshot_votes"] == 2 * (5 + 3 + 1)  # real + quiz + hidden gold votes
    assert {s["set_id"] for s in scales["sets"]} == {s["set_id"] for s in body["sets"]}
    assert all(len(s["items"]) == 11 for s in scales["sets"])
    assert "workers" not in scales
    tpr = [w["tpr"] for w in admin.get(f"/admin/api/studies/{study}/summary").json["workers"] if w["n_votes"]]
    assert all(t is not None and 0 <= t <= 1 for t in tpr)

    # The raw-ID toggle: raw IDs beside the pseudonyms, only when asked for.
    shown = admin.get(f"/admin/api/studies/{study}/summary?raw_ids=1").json["workers"]
    assert {w["raw_id"] for w in shown} == {"WORKERONE", "WORKERTWO", "WORKERNEW"}
    assert [w["worker_id"] for w in shown] == [w["worker_id"] for w in body["workers"]]


def test_pages_recompute_and_scales_download(app, study, admin):
    index = admin.get("/admin/").get_data(as_text=True)
    assert "Test study" in index and f'href="/admin/studies/{study}"' in index and 'name="csrf_token"' in index
    page = admin.get(f"/admin/studies/{study}").get_data(as_text=True)
    assert 'id="n-votes">0<' in page and "dashboard.js" in page and "Show raw worker IDs" in page
    assert admin.get("/admin/studies/unknown").status_code == 404
    assert admin.get("/admin").status_code == 308  # the trailing-slash redirect is not turned into an error
    assert admin.get("/admin/api/studies/unknown/summary").json["error"] == "not_found"
    studies = admin.get("/admin/api/studies").json["studies"]
    assert [s["slug"] for s in studies] == [study]

    # "Recompute now", then the running estimate as scales.csv.
    _work(app, study, "WSCALES")
    token = csrf_of(admin, "/admin/")
    response = admin.post(f"/admin/api/studies/{study}/refresh", headers={"X-CSRF-Token": token})
    assert response.status_code == 200 and response.json["computed"] is True
    assert response.json["scales"]["available"]
    csv_text = admin.get(f"/admin/studies/{study}/scales.csv").get_data(as_text=True)
    header, *rows = csv_text.strip().splitlines()
    assert header == "set_id,item_id,scale,ci_low,ci_high,rank,n_votes"
    scaled = [i for s in response.json["scales"]["sets"] for i in s["items"] if i["scale"] is not None]
    assert len(rows) == len(scaled) > 0


# ---------------------------------------------------------------- CLI

def test_user_cli(app):
    runner, url = CliRunner(), app.config["DATABASE_URL"]
    result = runner.invoke(cli, ["user", "add", "carol", "--password-stdin", "--database-url", url],
                           input="a long password\n")
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["user", "add", "carol", "--password-stdin", "--database-url", url],
                           input="a long password\n")
    assert result.exit_code == 2 and "exists already" in result.output
    result = runner.invoke(cli, ["user", "add", "dave", "--password-stdin", "--database-url", url], input="short\n")
    assert result.exit_code == 2 and "at least 8" in result.output
    result = runner.invoke(cli, ["user", "add", "erin", "--database-url", url],
                           input="typed twice\ntyped twice\n")  # the hidden prompt and its confirmation
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["user", "list", "--database-url", url])
    assert result.exit_code == 0 and "carol" in result.output and "erin" in result.output
    assert "dave" not in result.output
    result = runner.invoke(cli, ["user", "passwd", "carol", "--password-stdin", "--database-url", url],
                           input="another long one\n")
    assert result.exit_code == 0, result.output
    assert runner.invoke(cli, ["user", "passwd", "nobody", "--password-stdin", "--database-url", url],
                         input="whatever123\n").exit_code == 2
    client = app.test_client()
    assert log_in(client, "carol", "a long password").status_code == 401
    assert log_in(client, "carol", "another long one").status_code == 303
