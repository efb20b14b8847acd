"""Paired comparison's experimenter routes and the figures of its study page (``admin_blueprint``).

HTML downloads
    GET  /admin/studies/<slug>/votes.csv         ?raw_worker_ids=1 &no_gold=1 &include_pilot=1
    GET  /admin/studies/<slug>/scales.csv        the running estimate
JSON (401 JSON when not logged in)
    POST /admin/api/studies/<slug>/refresh       recompute the running estimate now

:func:`dashboard_summary` is what ``GET /admin/api/studies/<slug>/summary`` adds to the study row for a
paired-comparison study: per-set fill of the pairs, the workers table and the running scales, which
``pc/admin_study.html`` (through static/js/dashboard.js) shows. Every route needs a logged-in
experimenter and the session's CSRF token on POST (:func:`server.admin_support.protect`).
"""
from __future__ import annotations

import math
from typing import Any

from flask import Blueprint, current_app, jsonify
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from werkzeug.exceptions import HTTPException

from ... import auth, codes, exports
from ...db import db_session
from ...admin_support import admin_error, csv_download, download_salt, flag, protect, study_or_404
from ..core import spec_for
from . import export as paired_export, live_scales
from .models import Pair, ScaleSnapshot, StudySet, Vote
from ...models import Assignment, Study

bp = Blueprint("pc_admin", __name__, url_prefix="/admin")
protect(bp)
bp.register_error_handler(HTTPException, admin_error)

HISTOGRAM_BINS = 20


@bp.get("/studies/<slug>/votes.csv")
@auth.login_required
def votes_csv(slug: str):
    study = study_or_404(slug)
    raw = flag("raw_worker_ids")
    rows = paired_export.export_votes(db_session(), study.id, pseudonymise=not raw, include_gold=not flag("no_gold"),
                                      salt=download_salt(study, raw), include_pilot=flag("include_pilot"),
                                      spec=spec_for(db_session(), study.id))
    return csv_download(paired_export.votes_csv_text(rows), f"{slug}-votes{'-raw-ids' if raw else ''}.csv")


@bp.get("/studies/<slug>/scales.csv")
@auth.login_required
def scales_csv(slug: str):
    from analysis.formats import table_csv

    study_id = study_or_404(slug).id
    session = db_session()
    if session.get(ScaleSnapshot, study_id) is None:
        session.rollback()  # no transaction may stay open while the estimate is computed (SQLite's write lock)
        live_scales.refresh_if_stale(current_app._get_current_object(), study_id)
    snapshot = session.get(ScaleSnapshot, study_id)
    records = [{"set_id": s["set_id"], **item} for s in (snapshot.payload["sets"] if snapshot else [])
               for item in s["items"] if item["scale"] is not None]
    columns = ("set_id", "item_id", "scale", "ci_low", "ci_high", "rank", "n_votes")
    for r in records:
        r.update({k: (float("nan") if r[k] is None else r[k]) for k in ("ci_low", "ci_high")})
    return csv_download(table_csv(columns, records), f"{slug}-scales-running.csv")


@bp.post("/api/studies/<slug>/refresh")
@auth.login_required
def api_refresh(slug: str):
    study = study_or_404(slug)
    study_id, session = study.id, db_session()
    session.rollback()  # as in scales_csv: no open transaction during the computation
    computed = live_scales.refresh_if_stale(current_app._get_current_object(), study_id)
    return jsonify({"computed": computed, "scales": _scales(session, study, trigger=False)})


# ---------------------------------------------------------------- the study page's figures

def dashboard_summary(session: Session, study: Study, salt: bytes, *, raw_ids: bool = False) -> dict[str, Any]:
    """Per-set pair fill, the workers table and the running scales (starting their recomputation when stale)."""
    return {"sets": pair_fill(session, study.id), "workers": _workers(session, study, salt, raw=raw_ids),
            "scales": _scales(session, study)}


def pair_fill(session, study_id: int) -> list[dict]:
    """Per set: items, pairs, votes against the target, min/median/max votes per pair and a histogram."""
    counts = (select(Vote.pair_id, func.count().label("n")).join(Assignment, Assignment.id == Vote.assignment_id)
              .where(Vote.study_id == study_id, ~Assignment.pilot).group_by(Vote.pair_id).subquery())
    rows = session.execute(
        select(StudySet.name, Pair.target_votes, func.coalesce(counts.c.n, 0))
        .join(Pair, Pair.set_id == StudySet.id).outerjoin(counts, counts.c.pair_id == Pair.id)
        .where(StudySet.study_id == study_id, ~Pair.is_gold).order_by(StudySet.id, Pair.id)).all()
    per_set: dict[str, list[tuple[int, int]]] = {}
    for name, target, n in rows:
        per_set.setdefault(name, []).append((int(target), int(n)))
    names = session.scalars(select(StudySet.name).where(StudySet.study_id == study_id).order_by(StudySet.id))
    return [_fill_record(name, per_set.get(name, [])) for name in names]


def _fill_record(name: str, pairs: list[tuple[int, int]]) -> dict:
    votes = sorted(n for _, n in pairs)
    target = sum(t for t, _ in pairs)
    top = max([0] + votes + [t for t, _ in pairs])
    width = max(1, math.ceil(top / HISTOGRAM_BINS))  # 0..target in at most 21 bins, one count each when it fits
    bins = [0] * (top // width + 1)
    for n in votes:
        bins[n // width] += 1
    middle = len(votes) // 2
    median = None if not votes else (votes[middle] if len(votes) % 2 else (votes[middle - 1] + votes[middle]) / 2)
    return {"set_id": name, "n_pairs": len(pairs), "n_votes": sum(votes), "target_votes": target,
            "fill": sum(votes) / target if target else 0.0,
            "per_pair": {"min": votes[0] if votes else None, "median": median, "max": votes[-1] if votes else None,
                         "target": max((t for t, _ in pairs), default=0)},
            "histogram": [{"low": k * width, "high": k * width + width - 1, "pairs": c} for k, c in enumerate(bins)]}


def _workers(session, study: Study, salt: bytes, *, raw: bool) -> list[dict]:
    """The workers table: pseudonym (raw ID only when asked), one status (``state``:
    :func:`server.codes.worker_state`; ``status`` and ``stage`` stay for API readers), pages, votes, gold,
    quiz, TPR, kept."""
    snapshot = session.get(ScaleSnapshot, study.id)
    screened = snapshot.payload.get("workers", {}) if snapshot else {}
    out = []
    for s in paired_export.worker_stats(session, study.id):
        scores = screened.get(str(s["db_id"]), {})
        record = {"worker_id": exports.pseudonym(salt, s["raw_id"]), "platform": s["platform"],
                  "status": s["status"], "stage": s["stage"],
                  "state": codes.worker_state(s["status"], s["stage"]),
                  "pages": s["pages"], "n_votes": s["n_votes"],
                  "gold_correct": s["gold_correct"], "gold_total": s["gold_total"],
                  "gold_accuracy": s["gold_correct"] / s["gold_total"] if s["gold_total"] else None,
                  "quiz": s["quiz"], "quiz_correct": s["quiz_correct"], "quiz_total": s["quiz_total"],
                  "tpr": scores.get("tpr"), "kept": scores.get("kept"), "flags": scores.get("flags") or ""}
        if raw:
            record["raw_id"] = s["raw_id"]
        out.append(record)
    return out


def _scales(session, study: Study, *, trigger: bool = True) -> dict:
    """The stored running estimate with its freshness; starts a recomputation when it is stale."""
    app = current_app._get_current_object()
    snapshot = session.get(ScaleSnapshot, study.id)
    n_votes = live_scales.vote_count(session, study.id)
    stale = n_votes > 0 and (snapshot is None or snapshot.n_votes != n_votes)
    if stale and trigger:
        interval = float(current_app.config["SERVER"].get("live_scales_interval", 0) or 0)
        min_age = interval if interval > 0 else 10.0
        if snapshot is None or live_scales.snapshot_age(snapshot) >= min_age:
            live_scales.refresh_in_background(app, study.id, min_age=0 if snapshot is None else min_age)
    body = {"stale": stale, "computing": live_scales.is_computing(app, study.id), "votes_now": n_votes}
    if snapshot is None:
        return {**body, "available": False, "error": None if n_votes else "no votes yet", "sets": []}
    # Per-worker figures go into the workers table instead (keyed by pseudonym there).
    shown = {k: v for k, v in snapshot.payload.items() if k != "workers"}
    return {**body, "available": True, "snapshot_votes": snapshot.n_votes, **shown}
