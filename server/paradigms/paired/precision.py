"""How precise a paired-comparison study's scales are now, for ``[stopping]`` (server/stopping.py): read off the
latest running-scale snapshot (server/paradigms/paired/live_scales.py), never recomputed here.

Half-widths are in the unit ``[stopping] units`` names: ``"jod"`` and ``"z"`` read the snapshot's JOD intervals
(each resample's raw fit reported in JOD; z is JOD / 1.4826 exactly, both being the set's centred raw values
times a constant), ``"anchored"`` its anchored ones (each set's virtual worst anchor 0, best 1). A snapshot
computed before the JOD intervals existed has none: its half-widths are NaN (not met) until the next votes
recompute it. A named pair counts as resolved when the two items' 95 % intervals do not overlap: then the
interval of their difference excludes 0 as well (a conservative test; the snapshot keeps no covariances).

The snapshot is the analysis of ``perceptlab analyze`` (the same worker screening, gold and targeted-bias tests),
and each item carries ``n_workers``, the different kept workers who voted on its real pairs: ``[stopping]
min_workers`` compares those (server/stopping.py), so an item a few workers answered never counts, whatever its
interval. A snapshot stored before ``n_workers`` existed counts no item until the next votes recompute it."""
from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from analysis.thurstone import JOD_PER_Z

from ...models import Assignment, Study
from ..core import Precision, SetPrecision
from .models import Pair, ScaleSnapshot, Vote


@dataclass(frozen=True)
class SnapshotUnit:
    """How the half-widths of one ``[stopping] units`` are read off a snapshot's items: the interval's fields,
    the factor that turns them into the unit, and the unit's name for people (``Precision.unit``)."""
    low: str
    high: str
    factor: float
    label: str


UNITS = {"jod": SnapshotUnit("ci_low_jod", "ci_high_jod", 1.0, "JOD"),
         "z": SnapshotUnit("ci_low_jod", "ci_high_jod", 1.0 / JOD_PER_Z, "z units"),
         "anchored": SnapshotUnit("ci_low", "ci_high", 1.0, "anchored units (worst anchor 0, best 1)")}
OLD_SNAPSHOT_NOTE = "the running estimate has no {label} intervals yet: recomputed with the next votes"
NO_WORKERS_NOTE = "the running estimate does not count each item's kept workers yet: recomputed with the next votes"


def real_votes(session: Session, study_id: int) -> int:
    """Votes on real (non-gold) pairs by participants who are not pilots."""
    return int(session.scalar(select(func.count()).select_from(Vote).join(Pair, Pair.id == Vote.pair_id)
                              .join(Assignment, Assignment.id == Vote.assignment_id)
                              .where(Vote.study_id == study_id, ~Pair.is_gold, ~Assignment.pilot)) or 0)


def resolved(items: dict[str, tuple[float | None, float | None]], pair: str) -> bool | None:
    """Whether ``"a|b"``'s intervals are disjoint; None when the set lacks either item."""
    a, b = pair.split("|")
    if a not in items or b not in items:
        return None
    (low_a, high_a), (low_b, high_b) = items[a], items[b]
    if None in (low_a, high_a, low_b, high_b):
        return False
    return high_a < low_b or high_b < low_a


def study_precision(session: Session, study: Study, resolve: tuple[str, ...], units: str = "jod") -> Precision:
    """Per set: each item's half-width in ``units`` ((ci_high - ci_low) / 2; NaN without an interval), its real
    votes, and the named pairs it holds."""
    unit = UNITS[units]
    snapshot = session.get(ScaleSnapshot, study.id)
    votes = real_votes(session, study.id)
    if snapshot is None:
        return Precision(unit.label, (), votes, note="no running scale estimate yet")
    payload = snapshot.payload
    kept = (payload.get("screening") or {}).get("kept_workers") or 0
    sets, has_unit, has_workers = [], True, True
    for record in payload.get("sets", []):
        has_unit = has_unit and all(unit.low in i for i in record["items"])
        has_workers = has_workers and all("n_workers" in i for i in record["items"])
        items = {i["item_id"]: _bounds(i, unit) for i in record["items"]}
        widths = tuple((high - low) / 2 if low is not None and high is not None else math.nan
                       for low, high in items.values())
        workers = tuple(int(i["n_workers"]) for i in record["items"]) if has_workers else ()
        pairs = {pair: ok for pair in resolve if (ok := resolved(items, pair)) is not None}
        sets.append(SetPrecision(record["set_id"], tuple(items), widths, int(record.get("n_votes") or 0), pairs,
                                 workers=workers))
    note = payload.get("error") or ("" if has_unit else OLD_SNAPSHOT_NOTE.format(label=unit.label)) or (
        "" if has_workers else NO_WORKERS_NOTE)
    if not note and snapshot.n_votes and votes:
        note = (f"from the running estimate of {payload.get('n_scaling_votes', 0)} votes, {kept} workers kept by "
                "the screening of perceptlab analyze")
    return Precision(unit.label, tuple(sets), votes, note=note)


def _bounds(item: dict, unit: SnapshotUnit) -> tuple[float | None, float | None]:
    """An item's interval in ``unit``: (None, None) without one, or in a snapshot that predates the unit's fields."""
    low, high = item.get(unit.low), item.get(unit.high)
    if low is None or high is None:
        return None, None
    return low * unit.factor, high * unit.factor


FORECAST_REPLICATES = 8  # simulated studies of the dashboard's forecast (perceptlab forecast runs more)
FORECAST_BOOT = 40       # worker-bootstrap resamples per checkpoint


def simulation_forecast(session: Session, study: Study, spec, seconds_prior: float | None = None) -> dict | None:
    """What the study still needs to reach ``[stopping] halfwidth`` by analysis/forecast.py, with the study's own
    votes (non-pilot) as its pilot: the votes, participants, dollars and hours still needed (median of the
    simulated studies, band their 10th to 90th percentile). Seconds of CPU: run on demand, in the background.
    Commits ``session`` before computing (no transaction stays open). None without a half-width target or votes.
    ``seconds_prior``: the study's own time estimate per trial, for hours when its votes have no usable times."""
    from analysis.formats import build_votes
    from analysis.forecast import (StudyPlan, fit_pilot, forecast, remaining, report, share_refits_for,
                                   with_study_time)
    from analysis.threads import limited_blas_threads

    from .live_scales import load_study_votes

    if spec.halfwidth <= 0:
        return None
    rows = load_study_votes(session, study.id).rows
    session.commit()
    if not rows:
        return None
    column = {k: [r[k] for r in rows] for k in rows[0]}
    votes = build_votes(column["worker_id"], column["set_id"], column["item_a"], column["item_b"], column["winner"],
                        is_gold=column["is_gold"], gold_winner=column["gold_winner"],
                        extra={"created_at": column["created_at"], "position_a": column["position_a"]},
                        path=f"study {study.slug}")
    plan = StudyPlan(pairs_per_page=spec.pairs_per_page, gold_per_page=spec.gold_per_page, min_pages=spec.min_pages,
                     max_pages=spec.max_pages, reward=float(spec.reward_per_page),
                     bonus_per_page=float(spec.bonus_per_page))
    sampling = "active" if spec.sampling == "active" else "random"
    with limited_blas_threads():
        # In the target's unit: the forecast's half-widths are those [stopping] compares with halfwidth.
        fit = fit_pilot(votes, spec.units, n_boot=FORECAST_BOOT, seed=study.seed, rt_ms=column["rt_ms"],
                        share_refits=share_refits_for(sampling))
        result = forecast(fit, spec.halfwidth, quantiles=[spec.quantile], sampling=sampling,
                          replicates=FORECAST_REPLICATES, seed=study.seed, n_boot=FORECAST_BOOT, units=spec.units)
    plan = with_study_time(plan, fit, seconds_prior)  # no usable times (none, or a bot's)
    return {**remaining(report(result, plan), fit.n_votes), "sampling": sampling}
