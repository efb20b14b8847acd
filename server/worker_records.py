"""What every study knows of its workers, whatever its paradigm: keyed pseudonyms of their IDs, the
pilot filter, and the per-worker facts of workers.csv (:meth:`server.paradigms.core.Paradigm.workers_table`'s
default). :mod:`server.exports` builds the export files on these.

Worker IDs are personal data (an MTurk WorkerId links to a public profile), so
every export replaces them by default with a keyed pseudonym::

    salt      = HMAC-SHA256(secret key, "perceptlab/worker-pseudonym/" + study slug)
    pseudonym = "w_" + HMAC-SHA256(salt, raw worker ID).hex()[:12]

The same worker gets the same pseudonym in every export of a study (so
exports can be joined), different pseudonyms in different studies, and
nobody without the server's secret key can test a guessed worker ID against
a pseudonym. Raw IDs are an explicit opt-in (``--raw-worker-ids``).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from typing import Any

from sqlalchemy import select, true
from sqlalchemy.orm import Session

from .models import Assignment, Worker, as_utc


# ---------------------------------------------------------------- pseudonyms

def study_salt(secret_key: str, slug: str) -> bytes:
    """The per-study pseudonym key, derived from the server's secret key and the study slug."""
    return hmac.new(secret_key.encode(), b"perceptlab/worker-pseudonym/" + slug.encode(), hashlib.sha256).digest()


def pseudonym(salt: bytes, raw_id: str) -> str:
    """``"w_"`` + 12 hex digits of HMAC-SHA256(salt, raw ID): stable, unlinkable without the key."""
    return "w_" + hmac.new(salt, raw_id.encode(), hashlib.sha256).hexdigest()[:12]


def worker_label(raw_id: str, salt: bytes | None) -> str:
    """The ID an export shows: the pseudonym, or the raw ID when ``salt`` is None."""
    return raw_id if salt is None else pseudonym(salt, raw_id)


def iso_utc(value: dt.datetime | None) -> str:
    """A stored time as ISO-8601 UTC text (blank for None), as every export writes it."""
    if value is None:
        return ""
    return as_utc(value).astimezone(dt.timezone.utc).isoformat()


def pilot_filter(include_pilot: bool):
    """A WHERE clause on :class:`~server.models.Worker`: every worker with ``include_pilot``, else only
    those who are not pilot or simulated participants (:mod:`server.pilot`)."""
    return true() if include_pilot else ~Worker.pilot


WORKER_COLUMNS = ("worker_id", "platform", "status", "stage", "assignments", "pages", "window_width", "window_height",
                  "dpr", "screen_width", "screen_height", "first_seen")


def worker_facts(session: Session, study_id: int, *, include_pilot: bool = False) -> list[dict[str, Any]]:
    """Per worker of a study, what every paradigm's study knows: status, latest stage, assignments, pages,
    environment.

    Keys: ``db_id``, ``raw_id``, ``platform``, ``status``, ``stage`` (of the latest assignment), ``stages``
    (the set of every assignment's stage), ``assignments``, ``pages``, ``environment`` (of the latest
    assignment that reported one), ``first_seen``, ``pilot``. Ordered by first appearance. Pilot and
    simulated participants only with ``include_pilot``.
    """
    workers = session.scalars(select(Worker).where(Worker.study_id == study_id, pilot_filter(include_pilot))
                              .order_by(Worker.id)).all()
    stats = {w.id: {"db_id": w.id, "raw_id": w.external_id, "platform": w.platform, "status": w.status,
                    "stage": None, "stages": set(), "assignments": 0, "pages": 0, "environment": None,
                    "first_seen": iso_utc(w.created_at), "pilot": w.pilot} for w in workers}
    for worker_id, stage, pages, environment in session.execute(
            select(Assignment.worker_id, Assignment.stage, Assignment.pages_completed, Assignment.environment)
            .where(Assignment.study_id == study_id).order_by(Assignment.id)):
        if worker_id not in stats:  # a pilot's
            continue
        s = stats[worker_id]
        s["stage"], s["assignments"], s["pages"] = stage, s["assignments"] + 1, s["pages"] + pages
        s["environment"] = environment or s["environment"]
        s["stages"].add(stage)
    return list(stats.values())


def environment_columns(environment: dict[str, Any] | None) -> dict[str, Any]:
    """The window and screen columns of workers.csv from an assignment's stored environment (blank if none)."""
    env = environment or {}
    window, screen = env.get("window") or {}, env.get("screen") or {}
    return {"window_width": window.get("width", ""), "window_height": window.get("height", ""),
            "dpr": window.get("dpr", ""), "screen_width": screen.get("width", ""),
            "screen_height": screen.get("height", "")}


def worker_records(session: Session, study_id: int, *, salt: bytes | None,
                   include_pilot: bool = False) -> list[dict[str, Any]]:
    """Records of :data:`WORKER_COLUMNS` (the workers.csv of a paradigm without columns of its own:
    :meth:`server.paradigms.core.Paradigm.workers_table`); raw IDs only when ``salt`` is None."""
    return [{"worker_id": worker_label(s["raw_id"], salt), "platform": s["platform"], "status": s["status"],
             "stage": s["stage"] or "", "assignments": s["assignments"], "pages": s["pages"],
             **environment_columns(s["environment"]), "first_seen": s["first_seen"]}
            for s in worker_facts(session, study_id, include_pilot=include_pilot)]
