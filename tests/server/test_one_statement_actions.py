"""The consent action and the environment in one statement on PostgreSQL (``core.consent_in_one_statement``,
``core.environment_in_one_statement``), against the regular path of the API's views.

Each case is played twice on fresh PostgreSQL databases, once with the one-statement paths and once with
them declining everything: the answers (status and body) and the assignment's row must be the same, and the
one-statement path must have stored what it could (otherwise the comparison would prove nothing).
"""
from __future__ import annotations

import pytest
from sqlalchemy import select

from server.models import Assignment
from server.paradigms import core
from server.services import app_services
from server.tokens import make_token
from server.views import api

from .conftest import SMALL_STUDY, WorkerClient, create_test_study, make_test_app

ENVIRONMENT = {"window": {"width": 1366, "height": 768, "dpr": 1.25}, "screen": {"width": 1920, "height": 1080},
               "user_agent": "Mozilla/5.0 (X11; Linux x86_64) test"}


def _to_page_done(worker, client) -> list:
    """Consent, instructions, the quiz answered right and a page of trials answered: the worker at page_done."""
    answers = [_post(client, worker, "actions", {"action": "consent"}),
               _post(client, worker, "actions", {"action": "instructions_done"})]
    worker.answer_page(worker.correct_side)  # the quiz
    worker.answer_page(worker.correct_side)  # a page of trials
    assert worker.state()["stage"] == "page_done"
    return answers


def _turn_away(client, worker) -> None:
    """The worker stopped in another assignment of the study (their worker row's status, as stop() leaves it)."""
    from server.models import Worker

    with app_services(client.application).sessions() as session:
        row = session.scalar(select(Worker).where(Worker.external_id == worker.worker_id))
        row.status, row.status_reason = "stopped", "stopped elsewhere"
        session.commit()


class Counting:
    """Wraps a one-statement function: counts the calls that stored something (a row, or True)."""

    def __init__(self, function, enabled: bool):
        self.function, self.enabled, self.stored = function, enabled, 0

    def __call__(self, *args, **kwargs):
        if not self.enabled:
            return False if self.function is core.environment_in_one_statement else None
        result = self.function(*args, **kwargs)
        self.stored += result not in (None, False)
        return result


def _play(database_url, tmp_path, clock, demo_stimuli, monkeypatch, enabled: bool, script) -> tuple[list, dict, int]:
    """Run ``script(worker, client)`` on a fresh study; return its answers, the assignment's row (without its
    environment's time stamp) and how many requests the one-statement paths stored."""
    app = make_test_app(database_url, tmp_path / f"instance{enabled}", clock=clock)
    try:
        consent = Counting(core.consent_in_one_statement, enabled)
        environment = Counting(core.environment_in_one_statement, enabled)
        finish = Counting(core.finish_in_one_statement, enabled)
        monkeypatch.setattr(api, "consent_in_one_statement", consent)
        monkeypatch.setattr(api, "environment_in_one_statement", environment)
        monkeypatch.setattr(api, "finish_in_one_statement", finish)
        folder = tmp_path / f"study{enabled}"
        folder.mkdir()
        slug = create_test_study(app, demo_stimuli, folder, **SMALL_STUDY)
        client = app.test_client()
        warm = WorkerClient(client, slug)  # this process knows the study after a first request of it
        assert warm.state()["stage"] == "consent"
        worker = WorkerClient(client, slug, worker_id="WORKER1")
        answers = [(r.status_code, _scrub(r.get_json(silent=True), worker)) for r in script(worker, client)]
        with app_services(app).sessions() as session:
            row = session.scalar(select(Assignment).where(Assignment.id == int(worker.assignment_id)))
            kept = {"stage": row.stage, "token_nonce_same": row.token_nonce == worker.token_nonce_at_entry,
                    "environment": {k: v for k, v in (row.environment or {}).items() if k != "recorded_at"},
                    "pages_completed": row.pages_completed, "code": _code_shape(row.completion_code),
                    "completed": row.completed_at is not None, "status": row.worker.status}
        return answers, kept, consent.stored + environment.stored + finish.stored
    finally:
        app_services(app).engine.dispose()


def _code_shape(code: str | None) -> str | None:
    """A completion code as its shape (codes are random): ten capital hexadecimal digits, or None."""
    import re

    return None if code is None else ("HEX10" if re.fullmatch(r"[0-9A-F]{10}", code) else code)


def _scrub(body, worker):
    """An answer without what differs between two plays by construction: the assignment's IDs (ours, and MTurk's
    in a completion), of a page its trials (their stimuli's URLs are named under each study's own random key), a
    completion code's digits."""
    if isinstance(body, dict) and body.get("assignment_id") == worker.assignment_id:
        page, completion = body.get("page"), body.get("completion")
        return {**body, "assignment_id": "<id>",
                "page": page and {k: v for k, v in page.items() if k != "trials"},
                "completion": completion and {**completion, "code": _code_shape(completion.get("code")),
                                              "assignment_id": "<MTurk's ID>"}}
    return body


@pytest.fixture(autouse=True)
def _nonce_at_entry(monkeypatch):
    """WorkerClient remembers its assignment's nonce at entry (to tell a revoked token in the rows)."""
    from server.tokens import read_token

    original = WorkerClient.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.token_nonce_at_entry = read_token("test-secret", self.token).nonce
    monkeypatch.setattr(WorkerClient, "__init__", init)


def _post(client, worker, path, body, token=None):
    return client.post(f"/api/v1/assignments/{worker.assignment_id}/{path}", json=body,
                       headers={"Authorization": f"Bearer {token or worker.token}"})


def _forged(worker, nonce="0" * 32):
    """A token signed with the server's key for the worker's assignment but another nonce (a revoked one)."""
    from server.tokens import read_token

    claims = read_token("test-secret", worker.token)
    return make_token("test-secret", claims.assignment_id, nonce, study_id=claims.study_id)


SCRIPTS = {
    "consent, twice, then the environment": lambda w, c: [
        _post(c, w, "actions", {"action": "consent"}), _post(c, w, "actions", {"action": "consent"}),
        _post(c, w, "environment", ENVIRONMENT)],
    "a revoked token": lambda w, c: [
        _post(c, w, "actions", {"action": "consent"}, token=_forged(w)),
        _post(c, w, "environment", ENVIRONMENT, token=_forged(w))],
    "a malformed environment, then a good one": lambda w, c: [
        _post(c, w, "environment", {**ENVIRONMENT, "window": {"width": -3}}), _post(c, w, "environment", ENVIRONMENT)],
    "consent after the instructions": lambda w, c: [
        _post(c, w, "actions", {"action": "consent"}), _post(c, w, "actions", {"action": "instructions_done"}),
        _post(c, w, "actions", {"action": "consent"})],
    "an unknown field beside consent": lambda w, c: [_post(c, w, "actions", {"action": "consent", "x": 1})],
    "finish, twice": lambda w, c: [*_to_page_done(w, c), _post(c, w, "actions", {"action": "finish"}),
                                   _post(c, w, "actions", {"action": "finish"})],
    "finish at the quiz": lambda w, c: [_post(c, w, "actions", {"action": "consent"}),
                                        _post(c, w, "actions", {"action": "instructions_done"}),
                                        _post(c, w, "actions", {"action": "finish"})],
    "finish of a worker turned away elsewhere": lambda w, c: [*_to_page_done(w, c), _turn_away(c, w) or
                                                              _post(c, w, "actions", {"action": "finish"})],
    "finish with a revoked token": lambda w, c: [*_to_page_done(w, c),
                                                 _post(c, w, "actions", {"action": "finish"}, token=_forged(w))],
}
STORED_IN_ONE_STATEMENT = {"consent, twice, then the environment": 2, "a revoked token": 0,
                           "a malformed environment, then a good one": 1, "consent after the instructions": 1,
                           "an unknown field beside consent": 0, "finish, twice": 2, "finish at the quiz": 1,
                           "finish of a worker turned away elsewhere": 1, "finish with a revoked token": 1}


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_one_statement_actions_answer_and_store_as_the_regular_path(two_postgres_urls, tmp_path, clock, demo_stimuli,
                                                                     monkeypatch, case):
    fast = _play(two_postgres_urls[0], tmp_path, clock, demo_stimuli, monkeypatch, True, SCRIPTS[case])
    regular = _play(two_postgres_urls[1], tmp_path, clock, demo_stimuli, monkeypatch, False, SCRIPTS[case])
    assert fast[0] == regular[0]
    assert fast[1] == regular[1]
    assert fast[2] == STORED_IN_ONE_STATEMENT[case]
    assert regular[2] == 0


def test_sqlite_takes_the_regular_path(app, study):
    """Another database: both functions decline at once, and the views answer as always."""
    engine = app_services(app).engine
    worker = WorkerClient(app.test_client(), study)
    from server.tokens import read_token

    claims = read_token("test-secret", worker.token)
    if engine.dialect.name != "postgresql":
        assert core.consent_in_one_statement(engine, claims) is None
        assert core.environment_in_one_statement(engine, claims, ENVIRONMENT) is False
    assert worker.action("consent").json["stage"] == "instructions"
