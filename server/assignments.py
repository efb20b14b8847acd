"""The worker's path through a paired-comparison study, as database transactions.

Stages of an assignment::

    consent -> instructions -> quiz -> trials <-> page_done -> completed
                                  \\-> disqualified (quiz failed: for good)
                                          trials -> stopped (hidden gold accuracy below the threshold)
    any of consent, instructions, quiz, page_done -> full (no work left for this worker before
                                                          min_pages; never paid, see no_work_left)

Every function here runs inside the caller's session and leaves committing to
it, so that a request either stores everything it changes or nothing.
Concurrency: the assignment row is locked (``SELECT ... FOR UPDATE``) while a
vote or an action changes it, and page allocation takes a per-study advisory
lock on PostgreSQL (SQLite serialises writers already), so two workers never
take the last open slot of a pair together.
"""
from __future__ import annotations

import datetime as dt
import re
import secrets
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from sqlalchemy import and_, case, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from . import validation as check
from .allocation import now, release_other_pages, renew_page, reservation_end
from .errors import ApiError, invalid, reject_unknown
from .models import Assignment, GoldResult, Page, Pair, Stimulus, Study, StudySet, Trial, Vote, Worker, utcnow
from .studies import StudySpec, spec_from_config
from .tokens import new_nonce

PREVIEW_ASSIGNMENT = "ASSIGNMENT_ID_NOT_AVAILABLE"
ACTIVE_STAGES = ("quiz", "trials", "page_done")
FULL_MESSAGE = ("This study has no work left for you right now: every remaining task is taken by other "
                "participants. Nothing was recorded for payment.")
VOTING_STAGES = ("quiz", "trials", "page_done", "completed", "stopped", "disqualified")
_ID_PATTERN = re.compile(r"[A-Za-z0-9_.:@-]{1,200}")

UrlFor = Callable[[str], str]
# The only places a completed MTurk assignment may be posted to, compared as whole strings: a crafted
# turkSubmitTo would otherwise send the worker's submission to a third party (and URL parsers disagree
# with browsers about hosts like "https://evil.example\\@www.mturk.com").
MTURK_SUBMIT_URLS = {"https://www.mturk.com", "https://workersandbox.mturk.com"}


# ---------------------------------------------------------------- entry

def enter(session: Session, study: Study, *, platform: str, worker_id: str | None, assignment_id: str | None = None,
          hit_id: str | None = None, turk_submit_to: str | None = None, signature: str | None = None,
          access_key: str | None = None, admit_new: Callable[[], None] | None = None) -> tuple[Assignment, bool]:
    """Find or create the assignment a worker arrives with; return it and whether it is new
    (a reload returns the same one).

    Plain links follow the study's ``[entry]`` rules (participant ID, signature, access key:
    :func:`server.entry.check_link_entry`); MTurk entries must name one of the study's HITs once it
    has any. ``admit_new`` is called just before a new assignment is created (the per-address rate
    limit raises there); re-entering an existing assignment never calls it. A new assignment for
    which no work is left starts at stage ``full``; an assignment at ``full`` re-entered when work
    is free again is reopened (:func:`reopen_if_room`).
    """
    from .entry import check_hit, check_link_entry

    if platform == "mturk":
        for name, value in (("workerId", worker_id), ("assignmentId", assignment_id), ("hitId", hit_id)):
            if not value or not _ID_PATTERN.fullmatch(value):
                raise invalid(f"{name} is missing or malformed")
        if assignment_id == PREVIEW_ASSIGNMENT:
            raise invalid("a preview cannot start the task: accept the HIT first")
        if (turk_submit_to or "").rstrip("/") not in MTURK_SUBMIT_URLS:
            raise invalid("turkSubmitTo must be MTurk's own https address")
        turk_submit_to = turk_submit_to.rstrip("/")
        check_hit(session, study, hit_id)
    elif platform == "link":
        check_link_entry(study, spec_for(session, study.id), worker_id, signature, access_key)
        worker_id = worker_id or f"anon-{secrets.token_hex(6)}"
        if not _ID_PATTERN.fullmatch(worker_id):
            raise invalid("participant ID is malformed (letters, digits and _.:@- only, at most 200)")
        assignment_id = worker_id  # one assignment per participant and study
        hit_id = turk_submit_to = None
    else:
        raise invalid(f"unknown platform {platform!r}")
    args = (session, study, platform, worker_id, assignment_id, hit_id, turk_submit_to, admit_new)
    try:
        with session.begin_nested():
            assignment, created = _find_or_create(*args)
    except IntegrityError:
        # A concurrent request (double click, reload) created the same rows first: use them.
        assignment, created = _find_or_create(*args)
    if not created and assignment.stage == "full":
        reopen_if_room(session, lock_assignment(session, assignment.id))
    return assignment, created


def _find_or_create(session: Session, study: Study, platform: str, worker_id: str, assignment_id: str,
                    hit_id: str | None, turk_submit_to: str | None,
                    admit_new: Callable[[], None] | None) -> tuple[Assignment, bool]:
    worker = session.scalar(select(Worker).where(Worker.study_id == study.id, Worker.platform == platform,
                                                 Worker.external_id == worker_id))
    if worker is None:
        worker = Worker(study_id=study.id, platform=platform, external_id=worker_id)
        session.add(worker)
        session.flush()
    assignment = session.scalar(select(Assignment).where(
        Assignment.study_id == study.id, Assignment.platform == platform, Assignment.external_id == assignment_id))
    if assignment is not None:
        if assignment.worker_id != worker.id:
            raise ApiError(403, "forbidden", "This assignment belongs to another worker.")
        return assignment, False
    if study.status != "active":
        raise ApiError(409, "study_paused", "This study is paused. Please try again later.")
    if admit_new is not None:
        admit_new()
    stage = {"disqualified": "disqualified", "stopped": "stopped"}.get(worker.status, "consent")
    if stage == "consent" and not work_left(session, study, worker.id):
        stage = "full"  # told at once, before consent and instructions, instead of after the quiz
    assignment = Assignment(study_id=study.id, worker_id=worker.id, platform=platform, external_id=assignment_id,
                            hit_id=hit_id, turk_submit_to=turk_submit_to, stage=stage, token_nonce=new_nonce())
    session.add(assignment)
    session.flush()
    return assignment, True


def work_left(session: Session, study: Study, worker_id: int) -> bool:
    """Whether the study could give this worker a page (a clip session) now."""
    spec = spec_for(session, study.id)
    rng = np.random.default_rng(0)  # only whether anything is left matters, not which
    if getattr(spec, "kind", None) == "motion":
        from .motion import choose_clips

        return bool(choose_clips(session, study, worker_id, 1, spec, rng))
    if _worker_trial_pages(session, worker_id) >= spec.max_pages:
        return False
    return bool(choose_pairs(session, study, worker_id, 1, spec, rng))


def no_work_left(assignment: Assignment, spec) -> None:
    """Nothing to give the worker: complete when they did at least ``min_pages`` pages, else stage ``full``
    (told the study is full; no completion code, no MTurk submit form, so never paid)."""
    if assignment.pages_completed >= spec.min_pages:
        _complete(assignment)
    else:
        assignment.stage = "full"


def reopen_if_room(session: Session, assignment: Assignment) -> None:
    """A worker at stage ``full`` tries again: when work is free again (reservations lapsed), move on.

    Paired comparison: a worker who had any page (quiz or trials) gets a page of trials at once;
    one who had none starts again at consent. Motion: see :func:`server.motion.reopen_motion`.
    ``assignment`` must be locked. Does nothing while the study is still full.
    """
    if assignment.stage != "full" or assignment.study.status != "active":
        return
    if not work_left(session, assignment.study, assignment.worker_id):
        return
    spec = spec_for(session, assignment.study_id)
    if getattr(spec, "kind", None) == "motion":
        from .motion import reopen_motion

        reopen_motion(session, assignment, spec)
    elif _page_count(session, assignment.id):
        _start_trials_page(session, assignment, spec)
    else:
        assignment.stage = "consent"


# A study's parameters never change after creation (pausing changes only Study.status),
# so each process parses them once.
_SPECS: dict[tuple[str, int], StudySpec] = {}


def spec_for(session: Session, study_id: int) -> StudySpec:
    """The study's parameters (a ``MotionSpec`` for motion-matching studies), parsed once per process."""
    key = (str(session.get_bind().url), study_id)
    if key not in _SPECS:
        _SPECS[key] = spec_from_config(session.scalar(select(Study.config).where(Study.id == study_id)))
    return _SPECS[key]


def lock_assignment(session: Session, assignment_id: int) -> Assignment:
    """The assignment row, locked for this transaction (no-op lock on SQLite, which serialises writers)."""
    assignment = session.scalar(select(Assignment).where(Assignment.id == assignment_id).with_for_update())
    if assignment is None:
        raise ApiError(404, "not_found", "no such assignment")
    return assignment


# ---------------------------------------------------------------- stage actions

def perform_action(session: Session, assignment: Assignment, action: str) -> None:
    """Move the assignment on: consent, instructions_done, continue (another page), finish."""
    spec = spec_for(session, assignment.study_id)
    if getattr(spec, "kind", None) == "motion":
        from .motion import perform_motion_action

        return perform_motion_action(session, assignment, action)
    expected = {"consent": "consent", "instructions_done": "instructions", "continue": "page_done",
                "finish": "page_done"}
    if action not in expected:
        raise invalid(f"unknown action {action!r}")
    if assignment.stage != expected[action]:
        if _already_done(assignment.stage, action):
            return  # a repeated click or a retried request: the first one did it
        raise ApiError(409, "wrong_stage", f"cannot {action.replace('_', ' ')} at stage {assignment.stage}")
    if action == "consent":
        assignment.stage = "instructions"
    elif action == "instructions_done":
        # A worker who passed the quiz in an earlier assignment of the study does not take it again.
        if _worker_trial_pages(session, assignment.worker_id) or spec.quiz_size == 0:
            _start_trials_page(session, assignment, spec)
        else:
            _allocate_quiz_page(session, assignment, spec)
            assignment.stage = "quiz"
    elif action == "continue":
        if assignment.pages_completed >= spec.max_pages:
            raise ApiError(409, "wrong_stage", "the page limit of this study is reached")
        _start_trials_page(session, assignment, spec)
    else:
        if assignment.pages_completed < spec.min_pages:
            raise ApiError(409, "wrong_stage", f"complete at least {spec.min_pages} page(s) before finishing")
        _complete(assignment)


def _already_done(stage: str, action: str) -> bool:
    order = ["consent", "instructions", "quiz", "trials", "page_done", "completed"]
    first = {"consent": "instructions", "instructions_done": "quiz", "finish": "completed", "continue": "trials"}[action]
    if stage in ("disqualified", "stopped", "full"):
        return True
    return stage in order and order.index(stage) >= order.index(first)


def _worker_trial_pages(session: Session, worker_id: int) -> int:
    """Pages of trials the worker was given in any assignment of the study (only quiz passers get one)."""
    return int(session.scalar(select(func.count()).select_from(Page).join(Assignment).where(
        Assignment.worker_id == worker_id, Page.kind == "trials")))


def _complete(assignment: Assignment) -> None:
    assignment.stage = "completed"
    assignment.completed_at = utcnow()
    if assignment.completion_code is None:
        assignment.completion_code = secrets.token_hex(5).upper()


def _rng(study: Study, assignment: Assignment, page_index: int) -> np.random.Generator:
    return np.random.default_rng([study.seed, assignment.id, page_index])


def _page_count(session: Session, assignment_id: int) -> int:
    return int(session.scalar(select(func.count()).select_from(Page).where(Page.assignment_id == assignment_id)))


def _new_page(session: Session, assignment: Assignment, kind: str, index: int,
              reserved_until: dt.datetime | None = None) -> Page:
    page = Page(assignment_id=assignment.id, index=index, kind=kind, created_at=now(session),
                reserved_until=reserved_until)
    session.add(page)
    session.flush()
    return page


def _add_trials(session: Session, page: Page, assignment: Assignment, pair_ids: list[int], gold_ids: list[int],
                rng: np.random.Generator, is_quiz: bool) -> None:
    entries = [(pid, False) for pid in pair_ids] + [(pid, True) for pid in gold_ids]
    order = rng.permutation(len(entries))
    sides = rng.random(len(entries)) < 0.5
    for position, k in enumerate(order):
        pair_id, is_gold = entries[k]
        session.add(Trial(page_id=page.id, assignment_id=assignment.id, worker_id=assignment.worker_id,
                          position=position, pair_id=int(pair_id), left_is_a=bool(sides[position]),
                          is_gold=is_gold or is_quiz, is_quiz=is_quiz))
    session.flush()


def _gold_pairs(session: Session, study: Study) -> dict[int, int]:
    """The study's gold pairs: pair ID -> set ID."""
    return dict(session.execute(select(Pair.id, Pair.set_id).join(StudySet).where(
        StudySet.study_id == study.id, Pair.is_gold).order_by(Pair.id)).all())


def _gold_seen(session: Session, worker_id: int) -> dict[int, int]:
    """How often the worker was shown each gold pair (quiz and hidden, any assignment): pair ID -> count."""
    return dict(session.execute(select(Trial.pair_id, func.count()).where(
        Trial.worker_id == worker_id, Trial.is_gold).group_by(Trial.pair_id)).all())


def _pick_gold(session: Session, study: Study, worker_id: int, n: int, rng: np.random.Generator) -> list[int]:
    """``n`` gold pairs for one of the worker's pages, the least seen by this worker first.

    A gold pair that comes back is a pattern that marks it as gold (real pairs never
    repeat for a worker), so every pick is one the worker has seen least often, in
    any of their assignments: unseen ones while any remain. Ties go to the set the
    worker has seen least gold of (spreading gold over the sets), then at random.
    """
    gold = _gold_pairs(session, study)
    if not gold or n == 0:
        return []
    seen = _gold_seen(session, worker_id)
    times = {pair_id: seen.get(pair_id, 0) for pair_id in gold}
    per_set: dict[int, int] = {}
    for pair_id, count in times.items():
        per_set[gold[pair_id]] = per_set.get(gold[pair_id], 0) + count
    tie_break = dict(zip(gold, rng.random(len(gold))))
    picks: list[int] = []
    for _ in range(n):
        pick = min(gold, key=lambda p: (times[p], per_set[gold[p]], tie_break[p]))
        picks.append(int(pick))
        times[pick] += 1
        per_set[gold[pick]] += 1
    return picks


def _allocate_quiz_page(session: Session, assignment: Assignment, spec: StudySpec) -> None:
    study = assignment.study
    page_index = _page_count(session, assignment.id)
    gold = _pick_gold(session, study, assignment.worker_id, spec.quiz_size, _rng(study, assignment, page_index))
    if not gold:
        raise ApiError(409, "wrong_stage", "this study has no gold pairs for its quiz")
    page = _new_page(session, assignment, "quiz", page_index)
    _add_trials(session, page, assignment, [], gold, _rng(study, assignment, 10_000 + page.index), is_quiz=True)


def _start_trials_page(session: Session, assignment: Assignment, spec: StudySpec) -> None:
    """Give the worker a new page, or (:func:`no_work_left`) complete the assignment or tell the worker
    the study is full when no pair needs votes any more."""
    study = assignment.study
    worker = assignment.worker
    if worker.status in ("stopped", "disqualified"):  # stopped in another of the worker's HITs
        _stop(assignment, worker.status, worker.status_reason)
        return
    if _worker_trial_pages(session, assignment.worker_id) >= spec.max_pages:
        no_work_left(assignment, spec)
        return
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": 7_000_000 + study.id})
    page_index = _page_count(session, assignment.id)
    rng = _rng(study, assignment, page_index)
    n_gold = spec.gold_per_page
    pair_ids = choose_pairs(session, study, assignment.worker_id, spec.pairs_per_page - n_gold, spec, rng)
    if not pair_ids:
        no_work_left(assignment, spec)
        return
    release_other_pages(session, assignment.worker_id, assignment.id)  # one reserved page per worker
    page = _new_page(session, assignment, "trials", page_index, reservation_end(session, spec))
    _add_trials(session, page, assignment, pair_ids, _pick_gold(session, study, assignment.worker_id, n_gold, rng),
                rng, is_quiz=False)
    assignment.stage = "trials"


def choose_pairs(session: Session, study: Study, worker_id: int, n: int, spec: StudySpec,
                 rng: np.random.Generator) -> list[int]:
    """Up to ``n`` pairs that still need votes and that this worker has never seen, neediest first.

    A pair's filled count is its votes plus the trials showing it that are still reserved
    (unanswered, on a page whose reservation has not lapsed: see :mod:`server.allocation`), so
    concurrent workers share out the remaining votes instead of all taking the same pairs, and
    pages abandoned for a few minutes give theirs back. Ties break at random, which mixes the sets.
    """
    open_trials = (select(Trial.pair_id, func.count().label("n")).join(Page, Trial.page_id == Page.id)
                   .join(Assignment, Page.assignment_id == Assignment.id)
                   .where(~Trial.answered, ~Trial.is_gold, Page.reserved_until > now(session),
                          Assignment.study_id == study.id)
                   .group_by(Trial.pair_id).subquery())
    seen = select(Trial.pair_id).where(Trial.worker_id == worker_id, Trial.pair_id.is_not(None))
    deficit = Pair.target_votes - Pair.n_votes - func.coalesce(open_trials.c.n, 0)
    rows = session.execute(
        select(Pair.id, deficit)
        .join(StudySet, Pair.set_id == StudySet.id).outerjoin(open_trials, open_trials.c.pair_id == Pair.id)
        .where(StudySet.study_id == study.id, ~Pair.is_gold, Pair.id.not_in(seen), deficit > 0)).all()
    if not rows:
        return []
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    deficit = np.array([r[1] for r in rows], dtype=np.int64)
    order = np.lexsort((rng.random(len(ids)), -deficit))
    return [int(i) for i in ids[order[:n]]]


# ---------------------------------------------------------------- votes

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def parse_vote(payload: Any) -> dict[str, Any]:
    """Validate a vote body (see the OpenAPI file); raise a 400 naming the first problem."""
    if not isinstance(payload, dict):
        raise invalid("the body must be a JSON object")
    reject_unknown(payload, ("vote_id", "trial_id", "choice", "rt_ms", "input", "client_time", "window"))
    vote_id = payload.get("vote_id")
    if not isinstance(vote_id, str) or not _UUID.fullmatch(vote_id):
        raise invalid("vote_id must be a UUID made by the browser")
    trial_id = payload.get("trial_id")
    if not isinstance(trial_id, str) or not (trial_id.isascii() and trial_id.isdigit()) or len(trial_id) > 18:
        raise invalid("trial_id must be the trial's ID string")
    if payload.get("choice") not in ("left", "right"):
        raise invalid("choice must be 'left' or 'right'")
    rt = check.number(payload.get("rt_ms"), "rt_ms (milliseconds)", *check.RT_MS)
    if payload.get("input", "mouse") not in ("mouse", "keyboard", "touch"):
        raise invalid("input must be 'mouse', 'keyboard' or 'touch'")
    client_time = check.client_time(payload.get("client_time"))
    window = check.size_object(payload.get("window"), "window", with_dpr=True)
    return {"vote_id": vote_id.lower(), "trial_id": int(trial_id), "chose_left": payload["choice"] == "left",
            "rt_ms": rt, "input": payload.get("input", "mouse"), "client_time": client_time,
            "window_width": window.get("width"), "window_height": window.get("height"),
            "device_pixel_ratio": window.get("dpr")}


# The columns of a trial and its pair that the vote path needs, fetched in one query as a plain row.
_TRIAL_COLUMNS = (Trial.id.label("trial_id"), Trial.page_id, Trial.left_is_a, Trial.answered, Trial.is_gold,
                  Trial.is_quiz, Pair.id.label("pair_id"), Pair.stimulus_a_id, Pair.stimulus_b_id,
                  Pair.is_gold.label("pair_is_gold"), Pair.gold_winner_id)


def record_vote(session: Session, assignment: Assignment, payload: Any) -> tuple[int, dict[str, Any]]:
    """Store one vote; return ``(HTTP status, body)``. A retry of a stored vote returns 200 "duplicate".

    ``assignment`` must be locked (:func:`lock_assignment`): votes of one assignment are then
    applied one at a time, so the end of a page or of the quiz is seen exactly once. The
    common path is seven statements in SQLAlchemy Core (the ORM's unit of work costs more CPU
    than the database does here): the trial with its pair, claiming the trial, counting the
    pair's vote, inserting the vote, renewing the page's reservation, counting the page's open
    trials, and the commit.
    """
    vote = parse_vote(payload)
    if vote["trial_id"] > 2_147_483_647:  # beyond Trial.id's INTEGER: no such trial (PostgreSQL would raise)
        raise ApiError(404, "unknown_trial", "this trial is not part of your assignment")
    connection = session.connection()
    trial = connection.execute(select(*_TRIAL_COLUMNS).join(Pair, Trial.pair_id == Pair.id).where(
        Trial.id == vote["trial_id"], Trial.assignment_id == assignment.id)).first()
    if trial is None:
        raise ApiError(404, "unknown_trial", "this trial is not part of your assignment")
    if trial.answered:
        return _replay(session, assignment, trial, vote)
    if assignment.stage not in VOTING_STAGES:
        raise ApiError(409, "wrong_stage", f"no votes are accepted at stage {assignment.stage}")
    winner = trial.stimulus_a_id if vote["chose_left"] == trial.left_is_a else trial.stimulus_b_id
    # The assignment lock makes this claim uncontested; the WHERE clause still guards the invariant.
    claimed = connection.execute(update(Trial).where(Trial.id == trial.trial_id, ~Trial.answered)
                                 .values(answered=True)).rowcount
    if claimed != 1:
        raise ApiError(409, "trial_already_answered", "this trial was answered already")
    if not trial.pair_is_gold:  # gold pairs are shared by every worker: no counter, so no hot row
        connection.execute(update(Pair).where(Pair.id == trial.pair_id).values(n_votes=Pair.n_votes + 1))
    insert_vote = insert(Vote).values(
        client_vote_id=vote["vote_id"], trial_id=trial.trial_id, assignment_id=assignment.id,
        worker_id=assignment.worker_id, study_id=assignment.study_id, pair_id=trial.pair_id, winner_id=winner,
        chose_left=vote["chose_left"], rt_ms=vote["rt_ms"], input=vote["input"], client_time=vote["client_time"],
        window_width=vote["window_width"], window_height=vote["window_height"],
        device_pixel_ratio=vote["device_pixel_ratio"], created_at=utcnow())
    try:
        if trial.is_gold:
            vote_row = connection.execute(insert_vote.returning(Vote.id)).scalar_one()
            connection.execute(insert(GoldResult).values(
                vote_id=vote_row, worker_id=assignment.worker_id, assignment_id=assignment.id,
                is_quiz=trial.is_quiz, correct=winner == trial.gold_winner_id))
        else:
            connection.execute(insert_vote)
    except IntegrityError:
        # Only the unique client_vote_id can clash here (the trial is ours and locked): the browser
        # reused a vote ID for another trial. The caller rolls the whole request back.
        raise ApiError(409, "conflict", "this vote_id was already used for a different response") from None
    renew_page(session, trial.page_id, spec_for(session, assignment.study_id))  # the worker is active
    open_left = _open_trials(session, trial.page_id)
    _after_vote(session, assignment, trial, open_left)
    return 201, _vote_body(assignment, trial, winner, vote["vote_id"], "stored", open_left)


def _open_trials(session: Session, page_id: int) -> int:
    return int(session.connection().execute(select(func.count()).select_from(Trial).where(
        Trial.page_id == page_id, ~Trial.answered)).scalar_one())


def _replay(session: Session, assignment: Assignment, trial, vote: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The answer to a vote for an answered trial: "duplicate" when it is the same vote again."""
    existing = session.connection().execute(select(Vote.trial_id, Vote.chose_left, Vote.winner_id).where(
        Vote.client_vote_id == vote["vote_id"])).first()
    if existing is None:
        raise ApiError(409, "trial_already_answered", "this trial was answered already")
    if existing.trial_id != trial.trial_id or existing.chose_left != vote["chose_left"]:
        raise ApiError(409, "conflict", "this vote_id was already used for a different response")
    return 200, _vote_body(assignment, trial, existing.winner_id, vote["vote_id"], "duplicate",
                           _open_trials(session, trial.page_id))


def _vote_body(assignment: Assignment, trial, winner_id: int, vote_id: str, status: str,
               open_left: int) -> dict[str, Any]:
    body: dict[str, Any] = {"vote_id": vote_id, "status": status, "stage": assignment.stage,
                            "page_complete": open_left == 0}
    if trial.is_quiz:
        body["feedback"] = {"correct": winner_id == trial.gold_winner_id}
    return body


def _after_vote(session: Session, assignment: Assignment, trial, open_left: int) -> None:
    """Apply the quiz rule, the hidden-gold rule and the end of a page."""
    spec = spec_for(session, assignment.study_id)
    if trial.is_quiz:
        if open_left == 0 and assignment.stage == "quiz":
            correct, total = _gold_score(session, [GoldResult.assignment_id == assignment.id, GoldResult.is_quiz])
            _mark_page_done(session, trial.page_id)
            if correct < spec.accuracy_threshold * total - 1e-9:
                _stop(assignment, "disqualified",
                      f"You answered {correct} of {total} quiz questions correctly; {spec.accuracy_threshold:.0%} "
                      "are needed. You cannot take part in this study.")
            else:
                _start_trials_page(session, assignment, spec)
        return
    if trial.is_gold and assignment.stage in ("trials", "page_done"):
        correct, total = _gold_score(session, [GoldResult.worker_id == assignment.worker_id, ~GoldResult.is_quiz])
        if total >= spec.gold_min_answered and correct < spec.accuracy_threshold * total - 1e-9:
            _stop(assignment, "stopped",
                  f"Too many check questions were answered wrongly ({total - correct} of {total}). "
                  "Thank you for your time; you cannot continue with this study.")
            return
    if open_left == 0 and assignment.stage == "trials":
        _mark_page_done(session, trial.page_id)
        assignment.pages_completed += 1
        if assignment.pages_completed >= spec.max_pages:
            _complete(assignment)
        else:
            assignment.stage = "page_done"


def _mark_page_done(session: Session, page_id: int) -> None:
    session.execute(update(Page).where(Page.id == page_id).values(completed_at=utcnow())
                    .execution_options(synchronize_session=False))


def _gold_score(session: Session, where: list) -> tuple[int, int]:
    correct, total = session.execute(select(func.coalesce(func.sum(case((GoldResult.correct, 1), else_=0)), 0),
                                            func.count()).where(and_(*where))).one()
    return int(correct), int(total)


def _stop(assignment: Assignment, stage: str, message: str) -> None:
    assignment.stage = stage
    if assignment.completion_code is None:
        assignment.completion_code = secrets.token_hex(5).upper()
    worker = assignment.worker
    worker.status = stage
    worker.status_reason = message


# ---------------------------------------------------------------- state for the browser

def assignment_state(session: Session, assignment: Assignment, url_for: UrlFor) -> dict[str, Any]:
    """The JSON State of the API: stage, the current page with image URLs, progress, completion."""
    spec = spec_for(session, assignment.study_id)
    if getattr(spec, "kind", None) == "motion":
        from .motion import motion_state

        return motion_state(session, assignment, url_for)
    page = session.scalar(select(Page).where(Page.assignment_id == assignment.id).order_by(Page.index.desc()).limit(1))
    page_data = None
    if page is not None and assignment.stage in ("quiz", "trials", "page_done"):
        page_data = _page_data(session, page, url_for)
    return {
        "assignment_id": str(assignment.id),
        "stage": assignment.stage,
        "message": stage_message(assignment),
        "page": page_data,
        "progress": {"pages_completed": assignment.pages_completed, "min_pages": spec.min_pages,
                     "max_pages": spec.max_pages, "reward_per_page": spec.reward_per_page,
                     "bonus_per_page": spec.bonus_per_page},
        "limits": {"min_window_width": spec.min_window_width, "min_window_height": spec.min_window_height,
                   "min_image_scale": spec.min_image_scale},
        "completion": completion_info(assignment),
    }


def stage_message(assignment: Assignment) -> str | None:
    """What the worker is told at stages disqualified and stopped (why) and full; else None."""
    if assignment.stage == "full":
        return FULL_MESSAGE
    if assignment.stage in ("disqualified", "stopped"):
        return assignment.worker.status_reason
    return None


def completion_info(assignment: Assignment) -> dict[str, Any] | None:
    """How the worker submits: MTurk's form or a completion code. A worker stopped by hidden gold
    after completing pages may still submit them; the experimenter decides at review."""
    if assignment.stage != "completed" and not (assignment.stage == "stopped" and assignment.pages_completed > 0):
        return None
    if assignment.platform == "mturk":
        return {"mode": "mturk", "submit_url": assignment.turk_submit_to.rstrip("/") + "/mturk/externalSubmit",
                "assignment_id": assignment.external_id, "code": assignment.completion_code}
    return {"mode": "code", "code": assignment.completion_code}


def _page_data(session: Session, page: Page, url_for: UrlFor) -> dict[str, Any]:
    trials = list(session.scalars(select(Trial).where(Trial.page_id == page.id).order_by(Trial.position)))
    pair_ids = {t.pair_id for t in trials}
    pairs = {p.id: p for p in session.scalars(select(Pair).where(Pair.id.in_(pair_ids)))}
    stimulus_ids = {s for p in pairs.values() for s in (p.stimulus_a_id, p.stimulus_b_id)}
    stimuli = {s.id: s for s in session.scalars(select(Stimulus).where(Stimulus.id.in_(stimulus_ids)))}
    sets = {s.id: s for s in session.scalars(select(StudySet).where(StudySet.id.in_({p.set_id for p in pairs.values()})))}
    out = []
    for trial in trials:
        pair = pairs[trial.pair_id]
        study_set = sets[pair.set_id]
        a, b = stimuli[pair.stimulus_a_id], stimuli[pair.stimulus_b_id]
        left, right = (a, b) if trial.left_is_a else (b, a)
        boxes = study_set.crops.get("boxes", [])
        out.append({"trial_id": str(trial.id), "position": trial.position, "answered": trial.answered,
                    "reference": _image(study_set.reference["full"], study_set.reference["crops"], study_set, boxes,
                                        url_for),
                    "left": _image(left.full, left.crops["paths"], study_set, boxes, url_for),
                    "right": _image(right.full, right.crops["paths"], study_set, boxes, url_for)})
    return {"index": page.index, "kind": page.kind, "n_trials": len(trials),
            "n_answered": sum(t.answered for t in trials), "trials": out}


def _image(full: str, crops: list[str], study_set: StudySet, boxes: list[dict], url_for: UrlFor) -> dict[str, Any]:
    crop_list = []
    for path, box in zip(crops, boxes):
        crop_list.append({"url": url_for(path), "display_width": int(box.get("display_width", box["width"])),
                          "display_height": int(box.get("display_height", box["height"])), "rank": int(box["rank"])})
    return {"full": url_for(full), "crops": crop_list, "width": study_set.image_width,
            "height": study_set.image_height}


def record_environment(assignment: Assignment, payload: Any) -> None:
    """Validate the worker's window, screen and browser (informative) and keep them on the assignment."""
    if not isinstance(payload, dict):
        raise invalid("the body must be a JSON object")
    reject_unknown(payload, ("window", "screen", "user_agent"))
    clean: dict[str, Any] = {"window": check.size_object(payload.get("window"), "window", with_dpr=True),
                             "screen": check.size_object(payload.get("screen"), "screen", with_dpr=False)}
    agent = payload.get("user_agent")
    # Truncated rather than refused (browsers' strings grow), but never stored with control characters.
    agent = check.text(agent, "user_agent", max_length=1 << 20)
    clean["user_agent"] = agent[:check.USER_AGENT_LENGTH] if agent is not None else None
    clean["recorded_at"] = utcnow().isoformat()
    assignment.environment = clean


def new_vote_id() -> str:
    return str(uuid.uuid4())
