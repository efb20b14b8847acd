"""Pilot participants, the experimenter's preview, and clearing a study's participants.

A *pilot* participant takes part like anyone (the same consent, instructions, quiz and trial pages,
the same rules) but counts for nothing that matters to the study:

* no time estimate (:mod:`server.worker_time`), wage (:mod:`server.wages`), payment plan
  (:mod:`server.payments`), MTurk or Prolific action, or figure of the dashboard counts them;
* exports and ``perceptlab results`` leave them out unless asked (``--include-pilot``);
* their votes fill no pair's target, and their pages hold no pair: a pilot's votes are not
  independent observations of the study's population (the experimenter knows the stimuli, a bot
  answers by a model), and a target filled by them would end the study with fewer real votes than
  the researcher planned and paid for. Pilots get their pages from the same needy pairs as anyone,
  so a preview shows what the next real worker would see.

Three kinds of pilot exist:

* the **preview**: ``/s/<slug>?pilot=<signature>`` (``perceptlab study links SLUG --preview``, the
  dashboard's "Preview as a worker") starts a new pilot participant ``pilot-<hex>`` at each visit,
  whatever the study's entry rules, and even while the study is paused;
* **simulated** workers: ``perceptlab simulate`` sends the signature (and ``simulated``) with each
  entry, so its bots are stored as simulated pilots;
* participants the experimenter **marks**: ``perceptlab study pilot SLUG WORKER...`` or the
  dashboard's participant list (a colleague who tried the study through an ordinary link).

The signature is an HMAC of the study's slug under the deployment's secret key, which the server
and the CLI of the same instance share: a worker cannot make one (and so cannot dodge the screening
or the pay rules by declaring themselves a pilot), and the CLI always sends it, so a bot of
``perceptlab simulate`` cannot enter unmarked.

``Assignment.pilot`` copies ``Worker.pilot`` (a vote reads only its locked assignment row). A pilot's
token names no study, so that its responses take the regular path. What a paradigm counts of its
responses follows the marks (:meth:`~server.paradigms.core.Paradigm.change_pilots`; paired comparison:
server/paradigms/paired/pilots.py recounts the pairs' votes).
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass
from urllib.parse import urlencode

from sqlalchemy import delete, false, func, select, update
from sqlalchemy.orm import Session

from .errors import ApiError
from .models import Assignment, Bonus, MTurkAssignment, MTurkHit, Study, Worker
from .paradigms.entry import PILOT_PLATFORM  # noqa: F401 - the platform of preview participants
from .paradigms.entry import url_signature
from .paradigms.stages import TERMINAL_STAGES, Stage

_assignment = Assignment.__table__


# ---------------------------------------------------------------- the signed pilot entry

def pilot_signature(secret_key: str, slug: str) -> str:
    """The ``pilot`` entry parameter of a study: HMAC-SHA256 of its slug under the deployment's secret key.

    Parameters
    ----------
    secret_key : str
        The deployment's secret key (the server's ``SECRET_KEY``; the CLI's :func:`server.cli.base.cli_secret_key`).
    slug : str
        The study.

    Returns
    -------
    str
        32 lowercase hexadecimal digits.
    """
    return url_signature(secret_key, "pilot", slug)


def check_pilot_signature(secret_key: str, slug: str, signature: str | None) -> None:
    """Refuse an entry that claims to be a pilot without the study's pilot signature (403 ``bad_link``)."""
    expected = pilot_signature(secret_key, slug)
    if not hmac.compare_digest((signature or "").lower().encode(), expected.encode()):
        raise ApiError(403, "bad_link", "This study link is not valid. Please open the exact link you were given.")


def pilot_entry(secret_key: str, slug: str, signature: str | None, simulated) -> str | None:
    """What an entry's ``pilot`` and ``simulated`` parameters make of the participant: None (a real
    one: neither given), "pilot" or "simulated" (``simulated`` true: "1", "true" or JSON true).

    Raises
    ------
    ApiError
        403 ``bad_link``: a pilot signature that does not match, or ``simulated`` without one.
    """
    is_simulated = simulated is True or (isinstance(simulated, str) and simulated.lower() in ("1", "true", "yes"))
    if signature is None:
        if is_simulated:
            raise ApiError(403, "bad_link", "simulated participants need the study's pilot signature (pilot=...)")
        return None
    check_pilot_signature(secret_key, slug, signature)
    return "simulated" if is_simulated else "pilot"


def preview_link(secret_key: str, slug: str, base_url: str = "") -> str:
    """The experimenter's preview link of a study: each visit starts a new pilot participant."""
    return f"{base_url.rstrip('/')}/s/{slug}?{urlencode({'pilot': pilot_signature(secret_key, slug)})}"


# ---------------------------------------------------------------- counting only real participants

REAL_ASSIGNMENT = _assignment.c.pilot.is_(false())
"""A WHERE clause: the assignment is not a pilot's (use with the assignment table in the query)."""


def real_worker_ids(study_id: int):
    """A SELECT of the IDs of the study's workers who are not pilots (for ``worker_id.in_(...)``)."""
    return select(Worker.id).where(Worker.study_id == study_id, ~Worker.pilot)


class SimulatedWorkerError(ValueError):
    """Simulated workers named for ``pilot=False``: bots never become real, paid participants."""


def mark_pilot(session: Session, study: Study, workers: list[Worker], pilot: bool = True) -> None:
    """Mark the study's ``workers`` as pilot participants (or, with ``pilot=False``, as real ones again).

    Their assignments follow; the study's paradigm holds and updates what it counts around the change
    (:meth:`~server.paradigms.core.Paradigm.change_pilots`; paired comparison: under its allocation lock,
    the pilots' held pages stop holding pairs and the pairs are recounted from the votes that count).

    Raises
    ------
    SimulatedWorkerError
        ``pilot=False`` names a simulated worker (``perceptlab simulate``'s): nothing is changed, since it
        would then count toward pay, targets and stopping as a real participant.
    """
    from .paradigms import paradigm_for

    if not workers:
        return
    simulated = [w.external_id for w in workers if w.simulated]
    if not pilot and simulated:
        shown = ", ".join(simulated[:5]) + (f" and {len(simulated) - 5} more" if len(simulated) > 5 else "")
        raise SimulatedWorkerError(f"{shown}: simulated worker(s) of `perceptlab simulate`, never real participants "
                                   "(nothing changed)")
    ids = [w.id for w in workers]

    def mark() -> None:
        for worker in workers:
            worker.pilot = pilot
        session.flush()
        session.execute(update(_assignment).where(_assignment.c.worker_id.in_(ids)).values(pilot=pilot))
    paradigm_for(study).change_pilots(session, study, ids, pilot, mark)


def find_workers(session: Session, study: Study, names: list[str], salt: bytes | None = None) -> list[Worker]:
    """The study's workers named by their platform ID (MTurk WorkerId, participant ID) or, given the
    export ``salt``, by the pseudonym of the exports and the dashboard.

    Raises
    ------
    LookupError
        A name matches no worker of the study (the message names it).
    """
    from .exports import pseudonym

    workers = list(session.scalars(select(Worker).where(Worker.study_id == study.id).order_by(Worker.id)))
    by_name: dict[str, Worker] = {}
    for worker in workers:
        by_name.setdefault(worker.external_id, worker)
        if salt is not None:
            by_name.setdefault(pseudonym(salt, worker.external_id), worker)
    found = []
    for name in names:
        if name not in by_name:
            raise LookupError(f"no participant {name!r} in study {study.slug!r}")
        if by_name[name] not in found:
            found.append(by_name[name])
    return found


# ---------------------------------------------------------------- reset and delete

@dataclass(frozen=True)
class PaidWork:
    """What a study holds that money was (or is owed) for: reset and delete refuse it unless forced."""

    approved: int            # MTurk assignments approved (rewards paid)
    bonuses: int             # bonuses recorded (sent or on their way)
    completed_with_code: int  # completed assignments of real participants, holding a completion code
    open_hits: int = 0       # HITs that may still be on MTurk (not expired, disposed or deleted): workers may come

    def __bool__(self) -> bool:
        return bool(self.approved or self.bonuses or self.completed_with_code or self.open_hits)

    def describe(self) -> str:
        parts = [f"{n} {what}" for n, what in ((self.approved, "approved MTurk assignment(s)"),
                                                (self.bonuses, "bonus(es)"),
                                                (self.completed_with_code,
                                                 "completed assignment(s) of real participants with a completion "
                                                 "code"),
                                                (self.open_hits, "HIT(s) not expired: perceptlab mturk expire "
                                                                 "SLUG first")) if n]
        return ", ".join(parts)


def paid_work(session: Session, study: Study) -> PaidWork:
    """The study's paid (or payable) work: see :class:`PaidWork`."""
    approved = session.scalar(select(func.count()).select_from(MTurkAssignment).where(
        MTurkAssignment.study_id == study.id, MTurkAssignment.status == "Approved"))
    bonuses = session.scalar(select(func.count()).select_from(Bonus).where(Bonus.study_id == study.id))
    completed = session.scalar(select(func.count()).select_from(Assignment).where(
        Assignment.study_id == study.id, ~Assignment.pilot, Assignment.stage == Stage.COMPLETED,
        Assignment.completion_code.is_not(None)))
    open_hits = session.scalar(select(func.count()).select_from(MTurkHit).where(
        MTurkHit.study_id == study.id, MTurkHit.status.not_in(_CLOSED_HIT_STATUSES)))
    return PaidWork(int(approved or 0), int(bonuses or 0), int(completed or 0), int(open_hits or 0))


# MTurkHit.status of HITs no new worker can take (Reviewable: every assignment submitted; their work shows as
# completed assignments with codes).
_CLOSED_HIT_STATUSES = ("Reviewable", "Reviewing", "Disposed", "expired", "deleted")


@dataclass(frozen=True)
class Participants:
    """How many participants and responses a study holds (what a reset deletes)."""

    workers: int
    pilots: int
    assignments: int
    responses: int


def participants(session: Session, study: Study) -> Participants:
    """Count the study's participants (pilots among them), assignments and responses."""
    from .paradigms import paradigm_for

    answers = paradigm_for(study).response_model.__table__
    workers, pilots = session.execute(select(func.count(), func.count().filter(Worker.pilot))
                                      .where(Worker.study_id == study.id)).one()
    assignments = session.scalar(select(func.count()).select_from(Assignment).where(Assignment.study_id == study.id))
    responses = session.scalar(select(func.count()).select_from(answers).where(answers.c.study_id == study.id))
    return Participants(int(workers), int(pilots or 0), int(assignments or 0), int(responses or 0))


def reset_study(session: Session, study: Study) -> Participants:
    """Delete the study's participants and everything they did (assignments, with the pages, trials and
    responses of every paradigm, the MTurk assignment records); keep the study, its settings, what it
    shows and its HITs. Its paradigm resets what it counts of the deleted work
    (:meth:`~server.paradigms.core.Paradigm.reset_counts`: paired comparison's pairs start again at zero).

    Returns what was deleted. The caller checks :func:`paid_work` first and commits.
    """
    from .paradigms import paradigm_for

    deleted = participants(session, study)
    paradigm = paradigm_for(study)
    answers = paradigm.response_model.__table__
    # Rows that hold a copy of the assignment without a foreign key (votes): delete them explicitly.
    session.execute(delete(answers).where(answers.c.study_id == study.id))
    session.execute(delete(MTurkAssignment).where(MTurkAssignment.study_id == study.id))
    session.execute(delete(Assignment).where(Assignment.study_id == study.id))  # pages, trials... cascade
    session.execute(delete(Worker).where(Worker.study_id == study.id))
    paradigm.reset_counts(session, study)  # paired comparison: the running scales, the pairs' counts
    return deleted


def delete_study(session: Session, study: Study) -> Participants:
    """Delete the study with its participants, stimuli records and HIT records (not its prepared image
    files, which may be shared). Returns what was deleted of its participants."""
    deleted = reset_study(session, study)
    session.execute(delete(Bonus).where(Bonus.study_id == study.id))
    session.execute(delete(MTurkHit).where(MTurkHit.study_id == study.id))
    session.execute(delete(Study).where(Study.id == study.id))  # sets, stimuli, pairs, clips... cascade
    session.expunge(study)
    return deleted


def end_simulated(session: Session, study: Study, external_ids: list[str], reason: str) -> int:
    """End the open assignments of simulated participants of ``study`` who gave up (``perceptlab simulate``):
    each goes to ``stopped`` with ``reason`` as any turned-away participant, so none is left at a stage it
    will never leave (what its open page holds lapses as an abandoned page's hold does). Only
    workers entered as simulated are touched; ended assignments stay as they are. Returns the number of
    assignments ended. The caller commits."""
    from .paradigms.core import stop

    if not external_ids:
        return 0
    open_ = session.scalars(select(Assignment).join(Worker, Assignment.worker_id == Worker.id).where(
        Assignment.study_id == study.id, Worker.simulated, Worker.external_id.in_(external_ids),
        Assignment.stage.not_in([str(stage) for stage in TERMINAL_STAGES]))).all()
    for assignment in open_:
        stop(assignment, "simulated_gave_up", why=reason)
    return len(open_)
