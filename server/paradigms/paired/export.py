"""Paired comparison's export files: votes.csv (ARCHITECTURE.md, File formats; the input of
``perceptlab analyze``; video votes add their playback log's columns,
:data:`server.paradigms.media.PLAYBACK_COLUMNS` and the drift between the clips, judged by the study's
``[media]`` rule) and its per-worker columns of workers.csv (pages, votes, gold and quiz scores),
on the pseudonyms and per-worker facts every study shares (:mod:`server.worker_records`).

Rows are read with one query each; the CSV text is written by :mod:`analysis.formats`, so
``perceptlab analyze`` reads an export as it is.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session, aliased

from analysis.formats import REQUIRED_VOTE_COLUMNS, table_csv

from ...models import Worker
from ..media import DRIFT_COLUMN, PLAYBACK_COLUMNS, MediaParams, drift_column, faithful, playback_columns
from ...worker_records import environment_columns, iso_utc, pilot_filter, worker_facts, worker_label
from ..stages import Stage
from .models import GoldResult, Pair, Stimulus, StudySet, Trial, Vote

VOTES_COLUMNS = REQUIRED_VOTE_COLUMNS + ("position_a", "trial_id", "is_gold", "is_quiz", "gold_winner",
                                         "created_at", "rt_ms", *PLAYBACK_COLUMNS, DRIFT_COLUMN)
WORKERS_META_COLUMNS = ("worker_id", "platform", "status", "stage", "assignments", "pages", "n_votes",
                        "gold_correct", "gold_total", "gold_accuracy", "quiz", "quiz_correct", "quiz_total",
                        "window_width", "window_height", "dpr", "screen_width", "screen_height", "first_seen")


# ---------------------------------------------------------------- votes

def vote_rows_query(study_id: int, include_gold: bool = True, include_pilot: bool = False):
    """The SELECT behind :func:`export_votes` (one row per vote, oldest first); without ``include_gold``, no
    vote on a gold-only pair (a gold trial of one of the study's real pairs is a vote of that pair)."""
    a, b, won, gold = (aliased(Stimulus) for _ in range(4))
    query = (select(Worker.external_id, StudySet.name, a.item_id, b.item_id, won.item_id, Trial.left_is_a,
                    Trial.id, Trial.is_gold, Trial.is_quiz, gold.item_id, Vote.created_at, Vote.rt_ms,
                    Vote.worker_id, Vote.playback, Pair.is_gold)
             .select_from(Vote)
             .join(Trial, Vote.trial_id == Trial.id)
             .join(Pair, Vote.pair_id == Pair.id)
             .join(StudySet, Pair.set_id == StudySet.id)
             .join(a, Pair.stimulus_a_id == a.id)
             .join(b, Pair.stimulus_b_id == b.id)
             .join(won, Vote.winner_id == won.id)
             .outerjoin(gold, Pair.gold_winner_id == gold.id)
             .join(Worker, Vote.worker_id == Worker.id)
             .where(Vote.study_id == study_id, pilot_filter(include_pilot))
             .order_by(Vote.id))
    return query if include_gold else query.where(~Pair.is_gold)


def export_votes(session: Session, study_id: int, *, pseudonymise: bool = True, include_gold: bool = True,
                 salt: bytes | None = None, include_pilot: bool = False,
                 spec: MediaParams | None = None) -> list[dict[str, Any]]:
    """Every vote of a study as votes.csv records (ARCHITECTURE.md columns plus a few extra).

    Parameters
    ----------
    session : Session
    study_id : int
    pseudonymise : bool
        Replace worker IDs by keyed pseudonyms (default); needs ``salt``.
    include_gold : bool
        Include the checks: the votes on gold-only pairs (``is_gold`` = 1) and every gold trial's
        ``gold_winner``. A gold trial of one of the study's real pairs (a design pair chosen as gold) is a vote
        of that pair: ``is_gold`` 0, its candidates' IDs, scaled by the analysis like any vote, and with
        ``include_gold`` its ``gold_winner``, which makes it a check too (:attr:`analysis.formats.Votes.is_check`).
    salt : bytes
        :func:`study_salt` of the server's secret key and the study slug.
    include_pilot : bool
        Also the votes of pilot and simulated participants (:mod:`server.pilot`).
    spec : MediaParams, optional
        The study's ``[media]`` rule (default: its defaults): ``playback_faithful``, and with
        ``unfaithful = "exclude"`` the votes of unfaithful playbacks left out (the database keeps them).

    Returns
    -------
    list of dict
        Keys :data:`VOTES_COLUMNS`; ``winner`` is ``item_a`` or ``item_b``,
        ``position_a`` is the side item_a was shown on, ``created_at`` is ISO-8601 UTC.
        Each record also carries ``_worker_db_id`` (the Worker row), which
        :func:`votes_csv_text` leaves out.
    """
    if pseudonymise and salt is None:
        raise ValueError("pseudonymised exports need the study's salt (study_salt(secret_key, slug))")
    labels: dict[str, str] = {}
    rows = []
    spec = spec or MediaParams()
    for (raw, set_name, item_a, item_b, winner, left_is_a, trial_id, is_gold, is_quiz, gold_winner, created,
         rt_ms, worker_db_id, playback, gold_only) in session.execute(
            vote_rows_query(study_id, include_gold, include_pilot)):
        if spec.unfaithful == "exclude" and faithful(playback, spec) is False:
            continue
        if raw not in labels:
            labels[raw] = worker_label(raw, salt if pseudonymise else None)
        rows.append({"worker_id": labels[raw], "set_id": set_name, "item_a": item_a, "item_b": item_b,
                     "winner": winner, "position_a": "left" if left_is_a else "right", "trial_id": str(trial_id),
                     "is_gold": "1" if is_gold and gold_only else "0", "is_quiz": "1" if is_quiz else "0",
                     "gold_winner": gold_winner if is_gold and gold_winner and include_gold else "",
                     "created_at": iso_utc(created), "rt_ms": float(rt_ms), "_worker_db_id": worker_db_id,
                     **playback_columns(playback, spec), **drift_column(playback)})
    return rows


def votes_csv_text(rows: list[dict[str, Any]]) -> str:
    """votes.csv text of :func:`export_votes` records (header only when there are none)."""
    return table_csv(VOTES_COLUMNS, rows)


def worker_stats(session: Session, study_id: int, *, include_pilot: bool = False) -> list[dict[str, Any]]:
    """Per worker of a paired-comparison study: :func:`worker_facts` with votes, gold and quiz scores.

    Keys: those of :func:`worker_facts` but ``stages``, and ``n_votes`` (on real pairs, a design pair's gold
    trials included), ``gold_correct``/
    ``gold_total`` (hidden gold), ``quiz_correct``/``quiz_total``, ``quiz`` ("passed", "failed", "in
    progress", "not taken" or "no quiz").
    """
    stats = {}
    for s in worker_facts(session, study_id, include_pilot=include_pilot):
        stages = s.pop("stages")
        stats[s["db_id"]] = {**s, "n_votes": 0, "gold_correct": 0, "gold_total": 0, "quiz_correct": 0,
                             "quiz_total": 0,
                             "has_trials": bool(stages & {Stage.TRIALS, Stage.PAGE_DONE, Stage.COMPLETED,
                                                          Stage.STOPPED})}
    for worker_id, n in session.execute(
            select(Vote.worker_id, func.count()).join(Pair, Vote.pair_id == Pair.id)
            .where(Vote.study_id == study_id, ~Pair.is_gold).group_by(Vote.worker_id)):
        if worker_id in stats:
            stats[worker_id]["n_votes"] = int(n)
    for worker_id, is_quiz, correct, total in session.execute(
            select(GoldResult.worker_id, GoldResult.is_quiz, func.sum(case((GoldResult.correct, 1), else_=0)),
                   func.count()).join(Worker, GoldResult.worker_id == Worker.id)
            .where(Worker.study_id == study_id, pilot_filter(include_pilot))
            .group_by(GoldResult.worker_id, GoldResult.is_quiz)):
        prefix = "quiz" if is_quiz else "gold"
        stats[worker_id][f"{prefix}_correct"] = int(correct or 0)
        stats[worker_id][f"{prefix}_total"] = int(total)
    for s in stats.values():
        s["quiz"] = _quiz_outcome(s)
        del s["has_trials"]
    return list(stats.values())


def _quiz_outcome(s: dict[str, Any]) -> str:
    started_trials = s["has_trials"] or s["n_votes"] > 0
    if s["status"] == Stage.DISQUALIFIED:
        return "failed"
    if s["quiz_total"] == 0:  # a study without a quiz, or a worker who has not answered it yet
        return "no quiz" if started_trials else "not taken"
    return "passed" if started_trials else "in progress"


def _ratio(correct: int, total: int) -> float:
    return correct / total if total else float("nan")


def workers_meta(session: Session, study_id: int, *, salt: bytes | None,
                 include_pilot: bool = False) -> list[dict[str, Any]]:
    """Records for workers_meta.csv (:data:`WORKERS_META_COLUMNS`); raw IDs only when ``salt`` is None."""
    records = []
    for s in worker_stats(session, study_id, include_pilot=include_pilot):
        records.append({"worker_id": worker_label(s["raw_id"], salt), "platform": s["platform"],
                        "status": s["status"], "stage": s["stage"] or "", "assignments": s["assignments"],
                        "pages": s["pages"], "n_votes": s["n_votes"], "gold_correct": s["gold_correct"],
                        "gold_total": s["gold_total"], "gold_accuracy": _ratio(s["gold_correct"], s["gold_total"]),
                        "quiz": s["quiz"], "quiz_correct": s["quiz_correct"], "quiz_total": s["quiz_total"],
                        **environment_columns(s["environment"]), "first_seen": s["first_seen"]})
    return records


def workers_meta_csv_text(records: list[dict[str, Any]]) -> str:
    return table_csv(WORKERS_META_COLUMNS, records)


def vote_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Counts for a one-line report of an export: votes, gold votes (the checks: with a ``gold_winner``), workers,
    sets."""
    return {"votes": len(rows), "gold": sum(r["is_gold"] == "1" or bool(r["gold_winner"]) for r in rows),
            "workers": len({r["worker_id"] for r in rows}),
            "sets": len({r["set_id"] for r in rows})}
