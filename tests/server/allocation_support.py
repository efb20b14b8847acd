"""Workers through a paired-comparison study for the allocation tests: walking an assignment to its end
(:func:`work`), reading which pairs a worker got, and client addresses of their own (:class:`Client`).

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit

from sqlalchemy import select

from server.models import Worker
from server.paradigms.paired.models import Trial
from server.services import app_services

from .api_support import SpecClient
from .conftest import WorkerClient


def _session(app):
    return app_services(app).sessions()


def start(worker: WorkerClient) -> dict:
    """Consent, instructions and (when there is one) a correctly answered quiz: the state after."""
    assert worker.action("consent").status_code == 200
    state = worker.action("instructions_done").json
    if state["stage"] == "quiz":
        worker.answer_page(worker.correct_side)
        state = worker.state()
    return state


def work(worker: WorkerClient, pages: int | None = None, choose=None) -> dict:
    """Start, then answer pages until the assignment completes (or ``pages`` pages, then finish)."""
    state = start(worker)
    done = 0
    while state["stage"] == "trials":
        worker.answer_page(choose or worker.correct_side)
        done += 1
        state = worker.state()
        if state["stage"] == "page_done":
            state = worker.action("finish" if pages is not None and done >= pages else "continue").json
    return state


def real_pairs_of(app, **where) -> list[int]:
    """Pair IDs of the real (not gold) trials matching ``where`` (Trial columns)."""
    with _session(app) as session:
        query = select(Trial.pair_id).where(~Trial.is_gold)
        for column, value in where.items():
            query = query.where(getattr(Trial, column) == value)
        return list(session.scalars(query.order_by(Trial.id)))


def worker_row_id(app, external_id: str) -> int:
    with _session(app) as session:
        return session.scalar(select(Worker.id).where(Worker.external_id == external_id))


# 44 real pairs (4 scenes x 11), one vote each; 10 pairs a page. No quiz and no hidden gold: the rules
# under test are about allocation, and scripted answers need no right side.
SMALL = {"design": {"degree": 2, "votes_per_pair": 1},
         "pages": {"pairs_per_page": 10, "min_pages": 1, "max_pages": 3},
         "quality": {"quiz_size": 0, "gold_rate": 0.0, "reservation_minutes": 5, "assignment_timeout_minutes": 20}}


class Client:
    """One client address: HTML pages over the plain WSGI test client, the API over the spec-checked one."""

    def __init__(self, app, address: str):
        self.raw = app.test_client()
        self.api = SpecClient(self.raw)
        self.environ = {"REMOTE_ADDR": address}

    def page(self, url: str):
        return self.raw.get(url, environ_base=self.environ)

    def form(self, url: str, data: dict | None = None):
        return self.raw.post(url, data=data or {}, environ_base=self.environ)

    def enter(self, slug: str, **body):
        return self.api.post(f"/api/v1/studies/{slug}/assignments", json=body, environ_base=self.environ)


def token_of(response) -> str:
    """The worker token of an entry redirect (``/w/<token>/``)."""
    assert response.status_code == 302, (response.status_code, response.data[:300])
    return re.fullmatch(r"/w/([^/]+)/", urlsplit(response.headers["Location"]).path).group(1)
