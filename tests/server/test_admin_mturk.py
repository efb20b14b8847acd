"""The experimenter's MTurk page (server/views/admin_mturk.py) against a Stubber-backed boto3 client:
balance, the two-step launch, notifying workers, readable errors and CSRF."""
from __future__ import annotations

import re

import pytest
from sqlalchemy import func, select

from server import auth
from server.models import MTurkAssignment, MTurkHit, Study
from server.services import app_services

from .admin_support import PASSWORD, csrf_of, log_in
from .mturk_support import _create_params, _expect_hit_type, _hit

HTTPS = {"wsgi.url_scheme": "https"}
# Pages, forms and what MTurk is asked: the HITs a launch records are checked on both databases by test_mturk.py.
pytestmark = pytest.mark.one_database




@pytest.fixture
def http(app, study, client):
    """A logged-in experimenter's test client; MTurk is the stubbed client (the mode it was asked for is kept)."""
    app.config["MTURK_CLIENT_FACTORY"] = lambda live: (app.config.setdefault("ASKED_LIVE", []).append(live), client)[1]
    with app_services(app).sessions() as db:
        auth.create_user(db, "alice", PASSWORD)
        db.commit()
    http = app.test_client()
    assert log_in(http).status_code == 303
    return http


def _balance(client, amount="10000.00"):
    client.stubber.add_response("get_account_balance", {"AvailableBalance": amount}, {})


def _hits(app):
    with app_services(app).sessions() as db:
        return [(h.hit_id, h.max_assignments) for h in db.scalars(select(MTurkHit).order_by(MTurkHit.id))]


def test_balance_and_sandbox_banner(http, client, app, study):
    _balance(client)
    html = http.get(f"/admin/mturk/studies/{study}").get_data(as_text=True)
    assert 'id="balance">$10000.00<' in html
    assert "Sandbox" in html and "LIVE: real money" not in html
    assert 'id="launch-form"' in html and 'id="notify-form"' in html
    assert app.config["ASKED_LIVE"] == [False]


def test_live_mode_banner(http, client, app, study):
    app.config["MTURK_LIVE"] = True
    _balance(client, "12.34")
    html = http.get(f"/admin/mturk/studies/{study}").get_data(as_text=True)
    assert "LIVE: real money" in html and 'id="balance">$12.34<' in html
    assert app.config["ASKED_LIVE"] == [True]


def test_default_url_is_the_request_host_only_over_https(http, client, study):
    path = f"/admin/mturk/studies/{study}"
    _balance(client)
    _balance(client)
    assert 'name="url" required pattern="https://.*" placeholder="https://lab.example.org" value=""' in \
        http.get(path).get_data(as_text=True)
    assert 'value="https://localhost"' in http.get(path, environ_overrides=HTTPS).get_data(as_text=True)


def test_launch_shows_the_cost_first_then_posts_on_confirm(http, client, app, study):
    path = f"/admin/mturk/studies/{study}"
    _balance(client)
    token = csrf_of(http, path)
    form = {"csrf_token": token, "assignments": "20", "per_hit": "9", "days": "7", "url": "https://lab.example.org"}

    # Step 1: the cost and the marketplace, no MTurk call at all (nothing is queued on the Stubber).
    response = http.post(f"{path}/launch", data=form)
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert 'id="launch-confirm"' in html and 'id="launch-form"' not in html
    assert "20 in 3 HIT(s) of at most 9" in html
    assert 'id="launch-total">$12.00<' in html  # $0.50 x 20 x 1.2
    assert "sandbox (no money)" in html and f"https://lab.example.org/s/{study}" in html
    assert _hits(app) == [] and app.config["ASKED_LIVE"] == [False]  # only the balance of the GET above
    launch_id = re.search(r'name="launch_id" value="([0-9a-f]{12})"', html).group(1)

    # Step 2: confirmed, the HITs are created in batches of 9 with the launch's tokens.
    _expect_hit_type(client.stubber)
    for i, n in enumerate([9, 9, 2]):
        hit_token = f"{study}-{i}-{launch_id}"
        client.stubber.add_response("create_hit_with_hit_type", {"HIT": _hit(f"HIT{i}", hit_token, n)},
                                    _create_params(hit_token, n))
    response = http.post(f"{path}/launch", data={**form, "confirm": "1", "mode": "sandbox", "launch_id": launch_id})
    assert response.status_code == 302
    assert _hits(app) == [("HIT0", 9), ("HIT1", 9), ("HIT2", 2)]
    _balance(client)
    html = http.get(response.location).get_data(as_text=True)
    assert "3 HIT(s) posted on the sandbox marketplace for 20 assignment(s)" in html
    assert all(f"HIT{i}" in html for i in range(3))


def test_launch_cost_uses_the_40_percent_fee_for_large_hits(http, client, study):
    path = f"/admin/mturk/studies/{study}"
    _balance(client)
    form = {"csrf_token": csrf_of(http, path), "assignments": "20", "per_hit": "10", "days": "3",
            "url": f"https://lab.example.org/s/{study}"}
    html = http.post(f"{path}/launch", data=form).get_data(as_text=True)
    assert 'id="launch-total">$14.00<' in html and "40% commission" in html


def test_launch_refuses_bad_forms_and_a_changed_mode_without_calling_mturk(http, client, app, study):
    path = f"/admin/mturk/studies/{study}"
    _balance(client)
    token = csrf_of(http, path)
    base = {"csrf_token": token, "assignments": "5", "per_hit": "9", "days": "7"}
    for data, expected in (({**base, "url": "http://lab.example.org"}, "must start with https://"),
                           ({**base, "url": ""}, "URL of this server is required"),
                           ({**base, "assignments": "0", "url": "https://h"}, "at least 1"),
                           ({**base, "assignments": "x", "url": "https://h"}, "whole numbers")):
        response = http.post(f"{path}/launch", data=data)
        assert response.status_code == 302, expected
        _balance(client)
        assert expected in http.get(response.location).get_data(as_text=True)
    app.config["MTURK_LIVE"] = True  # confirmed as sandbox, but the server is now live
    response = http.post(f"{path}/launch", data={**base, "url": "https://h", "confirm": "1", "mode": "sandbox",
                                                 "launch_id": "abc"})
    _balance(client)
    assert "not the one you confirmed" in http.get(response.location).get_data(as_text=True)
    assert _hits(app) == []


def test_notify_sends_chunks_of_100_and_reports_failures(http, client, app, study):
    path = f"/admin/mturk/studies/{study}"
    with app_services(app).sessions() as db:
        study_id = db.scalar(select(Study.id).where(Study.slug == study))
        for i in range(250):
            db.add(MTurkAssignment(study_id=study_id, assignment_id=f"A{i:04d}", hit_id="H", worker_id=f"W{i:04d}",
                                   status="Approved"))
        db.commit()
    workers = [f"W{i:04d}" for i in range(250)]
    _balance(client)
    token = csrf_of(http, path)
    for start in (0, 100, 200):
        failures = [{"WorkerId": "W0007", "NotifyWorkersFailureCode": "HardFailure",
                     "NotifyWorkersFailureMessage": "never paid"}] if start == 0 else []
        client.stubber.add_response("notify_workers", {"NotifyWorkersFailureStatuses": failures},
                                    {"Subject": "New HITs", "MessageText": "More images to compare.",
                                     "WorkerIds": workers[start:start + 100]})
    response = http.post(f"{path}/notify", data={"csrf_token": token, "subject": "New HITs",
                                                 "message": "More images to compare."})
    assert response.status_code == 302
    _balance(client)
    html = http.get(response.location).get_data(as_text=True)
    assert "249 of 250 worker(s) notified (1 failed: W0007: never paid)" in html

    response = http.post(f"{path}/notify", data={"csrf_token": token, "subject": "", "message": "x"})
    _balance(client)
    assert "needs a subject and a message" in http.get(response.location).get_data(as_text=True)


def test_missing_credentials_give_a_readable_page(http, app, study, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delitem(app.config, "MTURK_CLIENT_FACTORY")
    path = f"/admin/mturk/studies/{study}"
    response = http.get(path)
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "Balance unavailable" in html and "no AWS credentials found" in html
    token = csrf_of(http, path)
    form = {"csrf_token": token, "assignments": "5", "url": "https://h", "confirm": "1", "mode": "sandbox",
            "launch_id": "abc123"}
    for action, data in (("launch", form), ("notify", {"csrf_token": token, "subject": "s", "message": "m"}),
                         ("reconcile", {"csrf_token": token})):
        response = http.post(f"{path}/{action}", data=data)
        assert response.status_code == 302, action
        assert "MTurk: no AWS credentials found" in http.get(response.location).get_data(as_text=True)
    with app_services(app).sessions() as db:
        assert db.scalar(select(func.count()).select_from(MTurkHit)) == 0


def test_posts_without_the_csrf_token_are_refused(http, client, app, study):
    path = f"/admin/mturk/studies/{study}"
    launch = {"assignments": "5", "url": "https://h", "confirm": "1", "mode": "sandbox", "launch_id": "abc"}
    for action, data in (("launch", launch), ("notify", {"subject": "s", "message": "m"}), ("reconcile", {}),
                         ("approve", {"all_submitted": "1"}), ("bonus", {}), ("expire", {})):
        for token in ({}, {"csrf_token": "forged"}):
            response = http.post(f"{path}/{action}", data={**data, **token})
            assert response.status_code == 400, action
            assert "security token" in response.get_data(as_text=True)
    assert "ASKED_LIVE" not in app.config  # MTurk was never asked
    assert _hits(app) == []
