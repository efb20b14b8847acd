"""Recruit until the numbers are good enough: a study's ``[stopping]`` target and budget caps.

:func:`evaluate` compares a study's precision now (its paradigm's ``Paradigm.precision``: per set the items'
95 % interval half-widths and the resolved pairs) and its counts (responses, participants, pay earned) with
the study file's ``[stopping]`` table; a cap always wins over the target. :func:`check` records the latest
evaluation and, the first time a target is met or a cap reached, records why and when (``StudyStopping``),
sets the study's status to ``stopped`` (entry refuses new participants; those already in finish and are paid
as usual) and tells the recruiters once: MTurk's open HITs are expired, the Prolific study is stopped. With
``notify_only`` the decision is recorded and shown, nothing else changes.

Who can move a target: the paradigm's precision comes from the workers its screening keeps (the screening of
``perceptlab results``), and an item counts only once ``[stopping] min_workers`` different kept workers answered it
(:func:`counted_widths`); a blank, non-finite or zero-width interval never meets a target, and a named pair is
resolved only when both items count. :func:`not_counted` says in plain words why items do not count yet. The caps
count participants who consented (:func:`consented`): entries that never consent fill no cap.

Exactly once: the decision and each recruiter's call are claimed by a conditional UPDATE (``... WHERE
stopped_at IS NULL``, ``... WHERE mturk_told_at IS NULL``) committed before the call, so two checks running
at once, or a check after a crash, never tell a recruiter twice (a call that failed is recorded in
``recruiter_note``; the experimenter repeats it by hand: ``perceptlab mturk expire``, ``perceptlab prolific
stop``, both idempotent).

Who checks: paired comparison after each live re-analysis (server/paradigms/paired/live_scales.py), every
paradigm after a page's action and after a response that completes a page (the API's views and the fast lane,
throttled per study: :func:`check_soon`), and
``perceptlab study check-stopping SLUG``. This module names no paradigm's table (ARCHITECTURE.md, The paradigm
contract): per-paradigm numbers come through ``Paradigm.precision``.

What is still needed (:func:`projection`): each item's half-width falls as 1/sqrt(n) of its responses, so the
responses still needed are ``n_now * ((h_now / target)^2 - 1)`` at the ``quantile`` item, with a band from the
10th to the 90th percentile item; participants, cost and time follow from the responses per participant, the
pay per participant and the response rate so far.
"""
from __future__ import annotations

import datetime as dt
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from .models import Assignment, MTurkHit, Page, ProlificStudy, Study, StudyStopping, as_utc, utcnow
from .paradigms import paradigm_for, spec_from_config
from .paradigms.core import Precision
from .paradigms.params import StoppingParams
from .paradigms.stages import Stage

log = logging.getLogger(__name__)

REASONS = {"target": "the precision target is met", "max_votes": "the response cap is reached",
           "max_participants": "the participant cap is reached", "max_cost": "the budget cap is reached"}
CHECK_INTERVAL_SECONDS = 30.0  # :func:`check_soon` checks a study at most this often per process
BAND = (10.0, 90.0)            # percentiles of the items that make the projection's band
# A half-width at most this (in any unit) is an interval of zero width: a degenerate one (every kept answer the same,
# or one worker's bootstrap) whose rounding left a trace of 1e-16. It never meets a target.
ZERO_WIDTH = 1e-9


@dataclass(frozen=True)
class Counts:
    """What the caps are compared with: responses (non-pilot, none that is only a check: a paired study's gold
    trials of design pairs are votes of them), participants (non-pilot assignments whose
    worker consented: :func:`consented`), pay earned so far (reward and bonus by the study's pay rules, dollars)
    and when the first non-pilot participant started."""
    responses: int
    participants: int
    completed: int
    cost: Decimal
    first_started: dt.datetime | None


@dataclass(frozen=True)
class Recruiters:
    """How :func:`check` reaches the recruiters: ``mturk(live)`` returns an MTurk client, ``prolific()`` a
    Prolific client (None: that recruiter is not told)."""
    mturk: Callable[[bool], Any] | None = None
    prolific: Callable[[], Any] | None = None


def stopping_spec(study: Study) -> StoppingParams | None:
    """The study's spec when it has ``[stopping]`` with a target or a cap, else None."""
    spec = spec_from_config(study.config)
    return spec if isinstance(spec, StoppingParams) and spec.stopping_configured else None


# Stages reached only by consenting (every paradigm's stages after consent, server/paradigms/stages.py). The
# endings (stopped, disqualified, full) are also given at entry, before consent: there a page tells them apart.
PAST_CONSENT = (Stage.INSTRUCTIONS, Stage.QUIZ, Stage.TRIALS, Stage.PAGE_DONE, Stage.CALIBRATION, Stage.RDK,
                Stage.MAIN, Stage.COMPLETED)


def consented(stage: str, has_page: bool) -> bool:
    """Whether an assignment's worker consented: a stage past consent, or an ending after a page (a quiz failed,
    a quality stop after work). An entry that never consented (still at consent, or turned away or full at entry)
    is no participant: it counts toward no cap, so invented entries cannot fill ``max_participants``."""
    return stage in PAST_CONSENT or (stage != Stage.CONSENT and has_page)


def study_counts(session: Session, study: Study, responses: int) -> Counts:
    """The study's participants who consented, completions and pay earned so far (non-pilot), with
    ``responses``."""
    from .payments import earned, pay_unit

    has_page = exists().where(Page.assignment_id == Assignment.id)
    rows = session.execute(select(Assignment.stage, Assignment.pages_completed, Assignment.created_at,
                                  has_page.label("has_page"))
                           .where(Assignment.study_id == study.id, ~Assignment.pilot)).all()
    pay = pay_unit(study)
    cost = sum((earned(pay, row.stage, row.pages_completed) for row in rows), Decimal("0.00"))
    completed = sum(1 for row in rows if earned(pay, row.stage, row.pages_completed) > 0)
    first = min((as_utc(row.created_at) for row in rows), default=None)
    participants = sum(1 for row in rows if consented(row.stage, bool(row.has_page)))
    return Counts(responses, participants, completed, cost, first)


@dataclass(frozen=True)
class SetStatus:
    """One set against the half-width target (:func:`set_status`).

    ``meeting``: items that count and are within ``halfwidth``; ``needed``: items that must be; ``at_quantile``:
    the half-width of the ``quantile`` item among those that count (inf when too few count); ``too_few_workers``:
    items answered by fewer than ``min_workers`` kept workers; ``zero_width``: items with enough workers whose
    interval has zero width (every kept answer the same), which never meet a target."""
    meeting: int
    needed: int
    at_quantile: float
    too_few_workers: int
    zero_width: int


def counted_widths(spec: StoppingParams, halfwidths: np.ndarray, workers: np.ndarray) -> np.ndarray:
    """The items' half-widths as the target sees them: inf for an item with no estimate (NaN, blank), an interval of
    zero width, or fewer than ``min_workers`` kept workers (``workers`` empty: unknown, every item)."""
    widths = np.asarray(halfwidths, dtype=float)
    enough = (np.asarray(workers, dtype=float) >= spec.min_workers if len(workers) == len(widths)
              else np.zeros(len(widths), dtype=bool))
    with np.errstate(invalid="ignore"):
        usable = np.isfinite(widths) & (widths > ZERO_WIDTH) & enough
    return np.where(usable, widths, np.inf)


def set_status(spec: StoppingParams, halfwidths: np.ndarray, workers: np.ndarray) -> SetStatus:
    """Where one set stands against ``halfwidth`` (:class:`SetStatus`); only :func:`counted_widths` can meet it."""
    raw = np.asarray(halfwidths, dtype=float)
    widths = counted_widths(spec, raw, workers)
    needed = int(math.ceil(spec.quantile * len(widths) - 1e-9))
    meeting = int((widths <= spec.halfwidth).sum()) if spec.halfwidth > 0 else 0
    at_quantile = float(np.sort(widths)[needed - 1]) if needed else 0.0
    enough = (np.asarray(workers, dtype=float) >= spec.min_workers if len(workers) == len(raw)
              else np.zeros(len(raw), dtype=bool))
    zero = int((enough & np.isfinite(raw) & (np.nan_to_num(raw, nan=1.0) <= ZERO_WIDTH)).sum())
    return SetStatus(meeting, needed, at_quantile, int((~enough).sum()), zero)


def evaluate(spec: StoppingParams, precision: Precision | None, counts: Counts) -> dict[str, Any]:
    """Where the study stands against ``[stopping]``: JSON-ready.

    Returns
    -------
    dict
        ``reason`` (None, ``"max_votes"``, ``"max_participants"``, ``"max_cost"`` or ``"target"``: caps first),
        ``message``, ``target_met``, ``unit``, ``counts`` and ``caps``, and ``sets``: per set its items, how many
        meet the target and are needed to, the ``quantile`` item's half-width among the items that count, the
        resolved pairs, the items with too few kept workers or a zero-width interval and, in words, why they do not
        count (``not_counted``).
    """
    caps = {"max_votes": (counts.responses, spec.max_votes), "max_participants": (counts.participants,
                                                                                 spec.max_participants),
            "max_cost": (float(counts.cost), float(spec.max_cost))}
    reason = next((name for name, (now, cap) in caps.items() if cap > 0 and now >= cap), None)
    sets, met = [], precision is not None and (spec.halfwidth > 0 or bool(spec.resolve))
    pairs_seen: set[str] = set()
    for s in precision.sets if precision is not None else ():
        status = set_status(spec, np.asarray(s.halfwidths, dtype=float), np.asarray(s.workers))
        # A named pair counts as resolved only when both items have min_workers kept workers.
        enough = dict(zip(s.item_ids, (w >= spec.min_workers for w in s.workers))) if s.workers else {}
        resolved = {pair: bool(ok) and all(enough.get(item, False) for item in pair.split("|"))
                    for pair, ok in s.resolved.items() if pair in spec.resolve}
        pairs_seen |= set(resolved)
        set_met = (spec.halfwidth <= 0 or status.meeting >= status.needed) and all(resolved.values())
        met = met and set_met
        sets.append({"name": s.name, "items": len(s.item_ids), "responses": s.responses, "meeting": status.meeting,
                     "needed": status.needed, "halfwidth": _finite(status.at_quantile), "resolved": resolved,
                     "too_few_workers": status.too_few_workers, "zero_width": status.zero_width, "met": set_met})
        sets[-1]["not_counted"] = not_counted(sets[-1], spec.min_workers)
    if precision is not None and not precision.sets:
        met = False
    if spec.resolve and set(spec.resolve) - pairs_seen:
        met = False  # a named pair no set holds (or not measured yet) is not resolved
    if reason is None and met:
        reason = "target"
    message = None
    if reason is not None:
        message = REASONS[reason] + (f" ({caps[reason][0]:g} of {caps[reason][1]:g})" if reason in caps else "")
    return {"reason": reason, "message": message, "target_met": bool(met), "unit": precision.unit if precision
            else None, "note": precision.note if precision else "",
            "counts": {"responses": counts.responses, "participants": counts.participants,
                       "completed": counts.completed, "cost": f"{counts.cost:.2f}"},
            "caps": {name: cap for name, (_, cap) in caps.items()},
            "target": {"halfwidth": spec.halfwidth, "quantile": spec.quantile, "resolve": list(spec.resolve),
                       "min_workers": spec.min_workers},
            "notify_only": spec.notify_only, "sets": sets}


def projection(spec: StoppingParams, precision: Precision | None, counts: Counts,
               now: dt.datetime) -> dict[str, Any] | None:
    """What is still needed to reach ``halfwidth``: responses, participants, dollars and hours, each with a band.

    Every item's half-width is taken to fall as 1/sqrt(n) (n: the responses of its set, spread over its items as
    now); the set needs ``n * (h / halfwidth)^2`` responses for the item at ``quantile`` (the estimate) and for the
    items at the 10th and 90th percentiles (the band). Ratings give a per-item SD of one response
    (``spreads``): ``n = (s * t / halfwidth)^2`` per item, t the 95 % normal quantile. None without a half-width
    target or before every set has an estimate.
    """
    if precision is None or spec.halfwidth <= 0 or not precision.sets:
        return None
    low = mid = high = 0.0
    for s in precision.sets:
        widths = np.asarray(s.halfwidths, dtype=float)
        counts_now = s.responses / max(len(widths), 1)
        # An item short of min_workers needs at least that many more responses (one each), one with a zero-width
        # interval at least one more (an answer that differs), whatever its spread says.
        workers = np.asarray(s.workers, dtype=float) if len(s.workers) == len(widths) else np.zeros(len(widths))
        floor = np.maximum(spec.min_workers - workers, np.where(np.abs(widths) <= ZERO_WIDTH, 1.0, 0.0)) * len(widths)
        if s.spreads:
            per_item = (1.959964 * np.asarray(s.spreads, dtype=float) / spec.halfwidth) ** 2
            remaining = np.maximum(np.maximum(per_item - counts_now, 0.0) * len(widths), floor)
        else:
            if s.responses == 0 or not np.isfinite(widths).any():
                return None
            remaining = np.maximum(np.maximum(s.responses * ((widths / spec.halfwidth) ** 2 - 1.0), 0.0), floor)
        remaining = remaining[np.isfinite(remaining)]
        if not len(remaining):
            return None
        q = 100.0 * spec.quantile
        low += float(np.percentile(remaining, min(BAND[0], q)))
        mid += float(np.percentile(remaining, q))
        high += float(np.percentile(remaining, max(BAND[1], q)))
    per_participant = counts.responses / counts.completed if counts.completed else None
    cost_each = float(counts.cost) / counts.completed if counts.completed else None
    hours = (now - counts.first_started).total_seconds() / 3600 if counts.first_started else 0.0
    rate = counts.responses / hours if hours > 0 and counts.responses else None

    def band(scale: float | None, digits: int) -> dict[str, float] | None:
        if scale is None:
            return None
        return {"estimate": round(mid * scale, digits), "low": round(low * scale, digits),
                "high": round(high * scale, digits)}

    return {"responses": band(1.0, 0), "participants": band(1 / per_participant if per_participant else None, 1),
            "cost": band(cost_each / per_participant if per_participant and cost_each is not None else None, 2),
            "hours": band(1 / rate if rate else None, 1),
            "method": "1/sqrt(n) per item; band: the items at the 10th and 90th percentiles"}


def measure(session: Session, study: Study, spec: StoppingParams, now: dt.datetime) -> tuple[dict, dict | None]:
    """The study's evaluation (:func:`evaluate`) and projection (:func:`projection`) now."""
    paradigm = paradigm_for(study)
    precision = paradigm.precision(session, study, spec)
    responses = precision.responses if precision is not None else paradigm.responses(session, study)
    counts = study_counts(session, study, responses)
    return evaluate(spec, precision, counts), projection(spec, precision, counts, now)


def _ensure_row(session: Session, study_id: int) -> None:
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    session.execute(insert(StudyStopping).values(study_id=study_id).on_conflict_do_nothing())


def _claim(session: Session, study_id: int, column, value: dt.datetime) -> bool:
    """Set ``column`` to ``value`` unless it is set; True when this call set it (then committed)."""
    claimed = session.execute(update(StudyStopping).where(StudyStopping.study_id == study_id, column.is_(None))
                              .values({column: value})).rowcount == 1
    session.commit()
    return claimed


def check(session: Session, study_id: int, *, recruiters: Recruiters = Recruiters(),
          clock: Callable[[], dt.datetime] = utcnow) -> StudyStopping | None:
    """Evaluate the study's ``[stopping]`` rules now; stop it and tell its recruiters the first time a target
    is met or a cap reached. Commits. Returns its record, or None when the study sets no target or cap.

    Safe to run twice or concurrently: the stop and each recruiter's call happen once."""
    study = session.get(Study, study_id)
    if study is None:
        raise LookupError(f"no study with id {study_id}")
    spec = stopping_spec(study)
    if spec is None:
        return None
    now = clock()
    _ensure_row(session, study_id)
    evaluation, projected = measure(session, study, spec, now)
    session.execute(update(StudyStopping).where(StudyStopping.study_id == study_id)
                    .values(checked_at=now, measured=evaluation, projection=projected))
    session.commit()
    if evaluation["reason"] is not None:
        decided = session.execute(
            update(StudyStopping).where(StudyStopping.study_id == study_id, StudyStopping.stopped_at.is_(None))
            .values(stopped_at=now, reason=evaluation["reason"], message=evaluation["message"],
                    at_stop=evaluation, notify_only=spec.notify_only)).rowcount == 1
        if decided and not spec.notify_only:
            session.execute(update(Study).where(Study.id == study_id, Study.status == "active")
                            .values(status="stopped"))
        session.commit()
        if decided:
            log.info("study %s stops taking participants: %s", study.slug, evaluation["message"])
    record = session.get(StudyStopping, study_id)
    session.refresh(record)
    if record.stopped_at is not None and not record.notify_only:
        tell_recruiters(session, study, recruiters, clock)
        session.refresh(record)
    return record


def tell_recruiters(session: Session, study: Study, recruiters: Recruiters,
                    clock: Callable[[], dt.datetime] = utcnow) -> list[str]:
    """Expire the study's MTurk HITs and stop its Prolific study, each at most once (claimed before the call).
    Returns what was told ("mturk", "prolific")."""
    told = []
    hits = session.scalars(select(MTurkHit.sandbox).where(MTurkHit.study_id == study.id,
                                                          MTurkHit.hit_id.is_not(None))).all()
    if hits and recruiters.mturk is not None and _claim(session, study.id, StudyStopping.mturk_told_at, clock()):
        from .mturk import MTurkService

        live = not all(hits)
        try:
            expired = MTurkService(recruiters.mturk(live), session, sandbox=not live).expire_study(study)
            _note(session, study.id, f"MTurk: {expired} HIT(s) expired")
        except Exception as exc:  # noqa: BLE001 - recorded for the experimenter, who repeats it by hand
            session.rollback()
            _note(session, study.id, f"MTurk: expiring the HITs failed ({exc}); run perceptlab mturk expire")
        told.append("mturk")
    prolific_id = session.scalar(select(ProlificStudy.prolific_id).where(ProlificStudy.study_id == study.id))
    if prolific_id and recruiters.prolific is not None and _claim(session, study.id, StudyStopping.prolific_told_at,
                                                                  clock()):
        from .prolific import ProlificService

        client = recruiters.prolific()
        try:
            status = ProlificService(client, session).stop(study)
            session.commit()
            _note(session, study.id, f"Prolific: study {status}")
        except Exception as exc:  # noqa: BLE001
            session.rollback()
            _note(session, study.id, f"Prolific: stopping failed ({exc}); run perceptlab prolific stop")
        finally:
            close = getattr(client, "close", None)
            if close is not None:
                close()
        told.append("prolific")
    return told


def _note(session: Session, study_id: int, text: str) -> None:
    record = session.get(StudyStopping, study_id)
    session.refresh(record)
    record.recruiter_note = "; ".join(filter(None, [record.recruiter_note, text]))
    session.commit()


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


# ---------------------------------------------------------------- the app's triggers

def app_recruiters(app) -> Recruiters:
    """The recruiters' clients as the app's experimenter pages make them (``MTURK_CLIENT_FACTORY`` and
    ``PROLIFIC_CLIENT_FACTORY`` in tests)."""
    def mturk(live: bool):
        factory = app.config.get("MTURK_CLIENT_FACTORY")
        if factory is not None:
            return factory(live)
        from .mturk import instance_metadata_allowed, make_client

        return make_client(live=live, use_instance_metadata=instance_metadata_allowed(app.config["PERCEPTLAB"]))

    def prolific():
        factory = app.config.get("PROLIFIC_CLIENT_FACTORY")
        if factory is not None:
            return factory()
        from .prolific import ProlificClient

        return ProlificClient()

    return Recruiters(mturk=mturk, prolific=prolific)


def check_in_app(app, study_id: int) -> StudyStopping | None:
    """:func:`check` with the app's sessions, clock and recruiters; a failure is logged, never raised."""
    from .services import app_services

    from .metrics import STOPPING_CHECKS

    services = app_services(app)
    try:
        with services.sessions() as session:
            record = check(session, study_id, recruiters=app_recruiters(app), clock=services.clock)
    except Exception as exc:  # noqa: BLE001 - a failed check must not fail a worker's request or the live scales
        from .outages import log_failure

        STOPPING_CHECKS.labels("failed").inc()
        log_failure(app, log, exc, "stopping check of study %s failed", study_id)  # no traceback in an outage
        return None
    STOPPING_CHECKS.labels("stopped" if record is not None and record.stopped_at is not None else "checked").inc()
    return record


_last_checks: dict[tuple[int, int], float] = {}
_last_lock = threading.Lock()


def check_soon(app, study_id: int) -> bool:
    """:func:`check_in_app` unless this process checked the study less than ``[server] stopping_check_seconds``
    (default :data:`CHECK_INTERVAL_SECONDS`) ago by the app's clock; True when it checked. Cheap enough after a page's action: one query for the
    paradigm's precision and one for the counts."""
    from .services import app_services

    now = app_services(app).clock().timestamp()
    interval = float(app.config.get("SERVER", {}).get("stopping_check_seconds", CHECK_INTERVAL_SECONDS))
    key = (id(app), study_id)
    with _last_lock:
        if now - _last_checks.get(key, -math.inf) < interval:
            return False
        _last_checks[key] = now
    check_in_app(app, study_id)
    return True


def check_soon_if_set(app, study_id: int, spec) -> bool:
    """:func:`check_soon` when ``spec`` (the study's spec, as the request paths hold it) sets ``[stopping]``; for
    any other study nothing, without a query. True when it checked."""
    if not (isinstance(spec, StoppingParams) and spec.stopping_configured):
        return False
    return check_soon(app, study_id)


def describe(record: StudyStopping | None) -> list[str]:
    """Lines for people (``perceptlab study show``, ``perceptlab study check-stopping``): the decision, where each
    set stands, what is still needed."""
    if record is None or record.measured is None:
        return ["stopping: not checked yet"]
    m = record.measured
    lines = []
    if record.stopped_at is not None:
        action = "would stop (notify_only: nothing changed)" if record.notify_only else "stopped taking participants"
        lines.append(f"stopping: {action} at {record.stopped_at:%Y-%m-%d %H:%M} UTC: {record.message}")
    else:
        lines.append("stopping: still recruiting")
    counts, caps = m["counts"], m["caps"]
    lines.append(f"  responses {counts['responses']}" + (f" of {caps['max_votes']}" if caps["max_votes"] else "")
                 + f", participants {counts['participants']}"
                 + (f" of {caps['max_participants']}" if caps["max_participants"] else "")
                 + f", cost ${counts['cost']}" + (f" of ${caps['max_cost']:.2f}" if caps["max_cost"] else ""))
    if m.get("note"):
        lines.append(f"  precision in {m['unit'] or ''}: {m['note']}")
    lines.extend(set_lines(m))
    if record.projection:
        p = record.projection
        for key, label in (("responses", "responses"), ("participants", "participants"), ("cost", "dollars"),
                           ("hours", "hours")):
            if p.get(key):
                b = p[key]
                lines.append(f"  still needed: {b['estimate']:.12g} {label} ({b['low']:.12g}-{b['high']:.12g})")
    if record.recruiter_note:
        lines.append(f"  recruiters: {record.recruiter_note}")
    return lines


def set_lines(m: dict[str, Any]) -> list[str]:
    """Where each set of an :func:`evaluate` result stands, with why items do not count yet (:func:`describe`,
    :func:`target_lines`)."""
    target, unit, lines = m["target"], m["unit"] or "", []
    for s in m["sets"]:
        width = "n/a" if s["halfwidth"] is None else f"{s['halfwidth']:.3f}"
        resolved = "".join(f", {p} {'resolved' if ok else 'not resolved'}" for p, ok in s["resolved"].items())
        lines.append(f"  {s['name']}: {s['meeting']}/{s['needed']} items within {target['halfwidth']:g} {unit} "
                     f"(quantile half-width {width}){resolved}")
        lines.extend(f"    {why}" for why in s.get("not_counted", ()))
    return lines


def target_lines(spec: StoppingParams, precision: Precision) -> list[str]:
    """The half-width target of ``[stopping]`` judged by :func:`evaluate` on ``precision``, for people: what
    ``perceptlab results`` prints from its own analysis files, so the reader sees the same rule on the same
    numbers as the stopping check (named pairs and caps are left to ``perceptlab study check-stopping``)."""
    from dataclasses import replace

    m = evaluate(replace(spec, resolve=()), precision, Counts(0, 0, 0, Decimal("0.00"), None))
    head = (f"[stopping] target {'met' if m['target_met'] else 'not met'} by this analysis: 95 % half-width at most "
            f"{spec.halfwidth:g} {precision.unit} for {100 * spec.quantile:g} % of the items of every set, each "
            f"answered by at least {spec.min_workers} different kept workers")
    return [head, *set_lines(m)]


def not_counted(set_record: dict[str, Any], minimum: int) -> list[str]:
    """Why some items of a set (an :func:`evaluate` set record) cannot count toward the target yet, in plain words
    (``perceptlab study check-stopping``, the study page's panel); nothing when every item may count."""
    few, zero = set_record["too_few_workers"], set_record["zero_width"]
    lines = []
    if few:
        lines.append(f"{few} of {set_record['items']} items {'does' if few == 1 else 'do'} not count yet: fewer "
                     f"than {minimum} different workers who passed screening answered {'it' if few == 1 else 'each'} "
                     "([stopping] min_workers)")
    if zero:
        lines.append(f"{zero} of {set_record['items']} items {'does' if zero == 1 else 'do'} not count: every kept "
                     "answer agrees, and an interval of zero width never meets a target")
    return lines


def cli_recruiters() -> Recruiters:
    """The recruiters' clients as ``perceptlab mturk`` and ``perceptlab prolific`` make them (credentials from
    the environment)."""
    def mturk(live: bool):
        from .mturk import make_client

        return make_client(live=live)

    def prolific():
        from .prolific import ProlificClient

        return ProlificClient()

    return Recruiters(mturk=mturk, prolific=prolific)
