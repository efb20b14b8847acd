"""What the tests comparing PostgreSQL's one-statement responses with the regular path share
(tests/server/test_vote_rules.py for paired votes, test_rating_response_rules.py for ratings): the two
sides, one database each, played in lockstep (:class:`Twins`); API answers with their random values
scrubbed, database snapshots with random and real-clock values reduced to "set or not", and the first
difference of two snapshots.

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime, select

from server.models import Assignment, Base
from server.services import app_services
from server.tokens import make_token

from .conftest import ManualClock, make_test_app

# Columns drawn at random (tokens, codes, MTurk IDs made by WorkerClient, the study's secrets and its
# study-file folder in its config) or from the real clock: compared as "set or not". reserved_until
# comes from the injected clock and is compared exactly.
VARYING_COLUMNS = {"token_nonce", "completion_code", "external_id", "entry_secret", "config"}
EXACT_TIMES = {"reserved_until"}
MTURK_ASSIGNMENT = re.compile(r"A[0-9A-F]{12}")  # WorkerClient's random MTurk assignment IDs
# Keys of API answers that carry random values: the token, links holding it, completion codes.
RANDOM_KEYS = {"token", "worker_url", "code", "completion_code", "redirect", "submit_url"}


class Scrubber:
    """API answers with random values replaced; stimulus URLs (named with a random per-study key) by
    their order of first appearance, so that the same image keeps the same name within a play."""

    def __init__(self):
        self.urls: dict[str, str] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ("<random>" if k in RANDOM_KEYS and v is not None else self(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, str) and value.startswith("/stimuli/"):
            return self.urls.setdefault(value, f"<image {len(self.urls)}>")
        if isinstance(value, str) and MTURK_ASSIGNMENT.fullmatch(value):
            return "<MTurk assignment ID>"
        return value


def snapshot(app) -> dict[str, list[tuple]]:
    """Every row of every table by primary key, random and real-clock values reduced to "set or not"."""
    snapshot = {}
    with app_services(app).sessions() as session:
        for table in Base.metadata.sorted_tables:
            rows = session.execute(select(table).order_by(*table.primary_key.columns)).all()
            kept = []
            for row in rows:
                kept.append(tuple(
                    (value is not None) if (column.name in VARYING_COLUMNS or (
                        isinstance(column.type, DateTime) and column.name not in EXACT_TIMES)) else value
                    for column, value in zip(table.columns, row)))
            snapshot[table.name] = kept
    return snapshot


def first_difference(left: dict, right: dict) -> str:
    """Where two snapshots first differ ("" when they are the same)."""
    for table in left:
        for k, (x, y) in enumerate(zip(left[table], right[table])):
            if x != y:
                return f"{table} row {k}: {x} != {y}"
        if len(left[table]) != len(right[table]):
            return f"{table}: {len(left[table])} rows != {len(right[table])}"
    return ""


# What the one-statement function itself did with a rule's response: "stored" (201), "ended" (the 409
# assignment_ended of a response after the end), "defer" (nothing changed: the regular path decides; also
# a body the fast path does not parse), "regular" (never offered to it: a token naming no study, a pilot).
STORED, ENDED, DEFER, REGULAR = "stored", "ended", "defer", "regular"


@dataclasses.dataclass
class Side:
    """One of the two databases, its app, its clock and its workers (by the names the test gives them)."""

    name: str
    app: Any
    client: Any
    clock: ManualClock
    scrub: Scrubber = dataclasses.field(default_factory=Scrubber)
    workers: dict[str, Any] = dataclasses.field(default_factory=dict)


def twin_sides(postgres_urls, tmp_path: Path, create_studies: Callable[[Any, Path], None]) -> tuple[Side, Side]:
    """The "sql" and the "python" side: an app on each database, its clock at the same time as the other's,
    and the same studies (``create_studies(app, folder)``, with a folder of the side's own)."""
    sides = []
    start = ManualClock()
    for name, url in zip(("sql", "python"), postgres_urls):
        clock = ManualClock()
        clock.now = start.now
        folder = tmp_path / name
        folder.mkdir()
        app = make_test_app(url, folder / "instance", clock=clock)
        create_studies(app, folder)
        sides.append(Side(name, app, app.test_client(), clock))
    return sides[0], sides[1]


def revoked_token(side: Side, client) -> str:
    """A token of the worker's assignment whose nonce is not the assignment's."""
    with app_services(side.app).sessions() as session:
        assignment = session.get(Assignment, int(client.assignment_id))
        return make_token(side.app.config["SECRET_KEY"], assignment.id, "0" * 16, assignment.study_id)


class Twins:
    """The same requests on both sides, in the same order; every rule's answer and rows compared.

    Parameters
    ----------
    sql, python : Side
        The side whose responses the one-statement function may take, and the side it never does.
    record : callable
        The paradigm's one-statement handler (``record_..._in_one_statement``), which
        :meth:`one_statement` runs for the SQL side; the test installs :meth:`one_statement` as the
        response kind's handler on both.
    responses : str
        The response kind's route name (``votes``, ``ratings``).
    """

    def __init__(self, sql: Side, python: Side, record: Callable, responses: str):
        self.sql, self.python = sql, python
        self.record, self.responses = record, responses
        self.active: Side | None = None  # the side whose request is running (the function's wrapper asks)
        self.outcome = REGULAR           # what the function did with the last response of the SQL side
        self.decided: dict[str, set[str]] = {}  # rule -> what the function did each time it was played
        self.next_id = 0

    def play(self, monkeypatch, paradigm: type, *plays: Callable[[Twins], None]) -> None:
        """Run ``plays`` in turn with :meth:`one_statement` as the one-statement handler of the paradigm's
        response kinds (on both sides: it decides per side), then close both databases' connections."""
        monkeypatch.setattr(paradigm, "response_kinds", tuple(
            dataclasses.replace(kind, one_statement=self.one_statement) for kind in paradigm.response_kinds))
        try:
            for play in plays:
                play(self)
        finally:
            for side in (self.sql, self.python):
                app_services(side.app).engine.dispose()

    def one_statement(self, *args):
        """The fast path's handler: the function on the SQL side, nothing on the Python side."""
        if self.active is self.python:
            return None
        answer = self.record(*args)
        self.outcome = DEFER if answer is None else STORED if answer[0] == 201 else ENDED
        return answer

    def each(self, action) -> list[Any]:
        results = []
        for side in (self.sql, self.python):
            self.active = side
            try:
                results.append(action(side))
            finally:
                self.active = None
        return results

    def client_id(self) -> str:
        """A new client-made response ID, the same on both sides."""
        self.next_id += 1
        return str(uuid.UUID(int=self.next_id, version=4))

    def rule(self, rule: str, worker: str, body: Any, expected: str, *, status: int | None = None,
             token=None) -> dict:
        """Send one response for ``rule`` on both sides; the answers, the rows and the function's part checked."""
        self.outcome = REGULAR

        def send(side: Side):
            client = side.workers[worker]
            headers = client.headers if token is None else {"Authorization": f"Bearer {token(side, client)}"}
            response = side.client.post(f"/api/v1/assignments/{client.assignment_id}/{self.responses}",
                                        headers=headers, json=body)
            return response.status_code, side.scrub(response.get_json())

        (sql_status, sql_body), (python_status, python_body) = self.each(send)
        assert (sql_status, sql_body) == (python_status, python_body), rule
        if status is not None:
            assert sql_status == status, (rule, sql_status, sql_body)
        assert self.outcome == expected, f"{rule}: the function's part was {self.outcome}, expected {expected}"
        rows = self.each(lambda side: snapshot(side.app))
        assert rows[0] == rows[1], f"{rule}: {first_difference(rows[1], rows[0])}"
        self.decided.setdefault(rule, set()).add(self.outcome)
        return sql_body

    def same(self, label: str, action) -> Any:
        """A step that is not a response (entry, state, action): the same answer on both sides."""
        answers = self.each(action)
        assert answers[0] == answers[1], label
        return answers[0]

    def state(self, worker: str) -> dict:
        return self.same(f"state of {worker}", lambda side: side.scrub(side.workers[worker].state()))

    def act(self, worker: str, action: str) -> dict:
        def run(side: Side):
            response = side.workers[worker].action(action)
            assert response.status_code == 200, response.json
            return side.scrub(response.json)
        return self.same(f"{worker} {action}", run)

    def open_trials(self, worker: str) -> list[dict]:
        return [t for t in self.state(worker)["page"]["trials"] if not t["answered"]]

    def stored_rules(self) -> set[str]:
        """The rules the function stored every time they were played."""
        return {rule for rule, outcomes in self.decided.items() if outcomes == {STORED}}
