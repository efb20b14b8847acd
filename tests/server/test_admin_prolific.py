"""The experimenter's Prolific page (server/views/admin_prolific.py) against the fake Prolific: readable errors
for a missing token, bad forms and Prolific's refusals, CSRF, login and unknown studies. The click-through is
tests/browser/test_prolific_dashboard.py."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from server.services import app_services
from server import auth
from server.models import ProlificStudy
from server.prolific import ProlificClient

from .admin_support import PASSWORD, csrf_of, log_in
from .conftest import SMALL_STUDY, create_test_study
from .prolific_fake import BASE_URL, PROLIFIC_ENTRY, TOKEN, FaultyTransport, make_fake

# Pages, forms and messages: the records behind them are checked on both databases by test_prolific.py.
pytestmark = pytest.mark.one_database
ACTIONS = ("create", "publish", "pause", "resume", "stop", "places", "reconcile", "approve", "reject", "bonus")


@pytest.fixture
def fake(app):
    fake_app, state = make_fake()
    transport = FaultyTransport(fake_app)
    app.config["PROLIFIC_CLIENT_FACTORY"] = lambda: ProlificClient(TOKEN, base_url=BASE_URL, transport=transport,
                                                                   sleep=lambda s: None)
    return state


@pytest.fixture
def pro(app, demo_stimuli, tmp_path) -> str:
    return create_test_study(app, demo_stimuli, tmp_path, slug="pro", entry=PROLIFIC_ENTRY, **SMALL_STUDY)


@pytest.fixture
def http(app, pro):
    with app_services(app).sessions() as db:
        auth.create_user(db, "alice", PASSWORD)
        db.commit()
    http = app.test_client()
    assert log_in(http).status_code == 303
    return http


def _post(http, slug, action, **form):
    path = f"/admin/prolific/studies/{slug}"
    response = http.post(f"{path}/{action}", data={"csrf_token": csrf_of(http, path), **form})
    assert response.status_code == 302, response.get_data(as_text=True)
    return http.get(response.location).get_data(as_text=True)


def test_the_page_needs_a_login_and_a_known_study(app, pro, fake):
    anonymous = app.test_client()
    assert anonymous.get(f"/admin/prolific/studies/{pro}").status_code in (302, 303)
    with app_services(app).sessions() as db:
        auth.create_user(db, "alice", PASSWORD)
        db.commit()
    log_in(anonymous)
    assert anonymous.get("/admin/prolific/studies/nope").status_code == 404


def test_a_missing_token_and_bad_forms_are_readable_messages(http, app, pro, monkeypatch):
    monkeypatch.delenv("PROLIFIC_TOKEN", raising=False)
    html = http.get(f"/admin/prolific/studies/{pro}").get_data(as_text=True)
    assert 'id="create-form"' in html and "Real money" in html  # no Prolific call to show the page
    assert "Prolific: set PROLIFIC_TOKEN" in _post(http, pro, "create", places="5", url="https://lab.example.org")
    assert "Places must be a whole number." in _post(http, pro, "create", places="many", url="https://h")
    with app_services(app).sessions() as db:
        assert db.scalar(select(func.count()).select_from(ProlificStudy)) == 0


def test_refusals_come_back_as_the_pages_message(http, app, pro, study, fake):
    assert "no Prolific study yet" in _post(http, pro, "publish")
    assert 'recruiter = &#34;prolific&#34;' in _post(http, study, "create", places="5", url="https://h")
    html = _post(http, pro, "create", places="5", url="https://lab.example.org")
    assert "Draft study" in html and "UNPUBLISHED" in html
    assert "Places to add must be a whole number." in _post(http, pro, "places", more="x")
    assert "at least 100 characters" in _post(http, pro, "reject", submission_id="s1", category="OTHER",
                                              message="short")
    assert "no submission" in _post(http, pro, "approve", submission_id="not-mine")
    assert "Prolific study: publishing" in _post(http, pro, "publish")  # Prolific publishes asynchronously
    assert "PUBLISHING: wait until Prolific has finished" in _post(http, pro, "pause")
    fake.settle()
    assert "Prolific study: paused" in _post(http, pro, "pause")


def test_posts_without_the_csrf_token_are_refused(http, pro, fake):
    for action in ACTIONS:
        for token in ({}, {"csrf_token": "forged"}):
            response = http.post(f"/admin/prolific/studies/{pro}/{action}", data={"places": "5", **token})
            assert response.status_code == 400, action
    assert fake.calls == []  # Prolific was never asked
