"""Exports of a study's data: :func:`export_study`, which asks the study's paradigm for its files
(:meth:`~server.paradigms.core.Paradigm.export`; paired comparison's votes.csv:
``server/paradigms/paired/export.py``, motion matching's: ``server/paradigms/motion/export.py``), and
workers.csv / workers_meta.csv: the paradigm's per-worker columns
(:meth:`~server.paradigms.core.Paradigm.workers_table`) with the recruiter's view and pay of every worker.
Worker IDs are pseudonymised by default (:mod:`server.worker_records`, whose names this module re-exports).
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from analysis.formats import table_csv
from analysis.sockpuppets import FINGERPRINT_COLUMNS  # keyed hashes of the entry (server/fingerprints.py)

from . import wages
from .codes import latest_per_worker, participants
from .models import Assignment, Study, Worker
from .paradigms import paradigm_for, viewing
from .paradigms.core import spec_for
from .paradigms.display_monitor import DISPLAY_COLUMNS, display_columns
from .paradigms.questionnaire import QUESTIONNAIRE_COLUMNS, questionnaire_rows, study_parts_of
from .worker_records import pilot_filter, pseudonym, study_salt, worker_label
from .worker_time import PaySettings

# pilot_filter, pseudonym, study_salt and worker_label are server.worker_records', re-exported for the exporters.
__all__ = ["FINGERPRINT_COLUMNS", "LOCALE_COLUMNS", "RECRUITER_COLUMNS", "export_study", "find_study", "pilot_filter", "pseudonym",
           "recruiter_columns", "study_salt", "worker_label", "workers_csv_text"]

# The recruiter's view of each worker's latest assignment (server/codes.py), in every kind of study's workers.csv.
RECRUITER_COLUMNS = ("completion_status", "completion_code", "pilot")  # pilot: 1 for pilots (server/pilot.py)
# The language the worker's pages were shown in (worker.locale, server/i18n.py), in every kind of study's workers.csv.
LOCALE_COLUMNS = ("locale",)
# Why the worker was turned away, stopped or refused: a code of server/reasons.py (blank: not turned away).
REASON_COLUMN = "reason_code"


# ---------------------------------------------------------------- workers

def workers_csv_text(session: Session, study: Study, *, salt: bytes | None,
                     pay_settings: PaySettings | None = None, include_pilot: bool = False) -> tuple[str, int]:
    """workers.csv of a study (the dashboard's download, workers_meta.csv of an export) and its number of
    workers: the paradigm's columns (:meth:`~server.paradigms.core.Paradigm.workers_table`; motion: calibration,
    screening, trials); then time on task, pay and effective wage (:data:`server.wages.WORKER_COLUMNS`,
    measured with ``pay_settings``). Pilot and simulated participants only with ``include_pilot`` (with
    blank pay columns: no wage counts them)."""
    columns, records = paradigm_for(study).workers_table(session, study.id, salt=salt, include_pilot=include_pilot)
    recruited = {worker_label(p.external_id, salt): p for p in latest_per_worker(participants(session, study)).values()}
    pay = {worker_label(raw, salt): values
           for raw, values in wages.worker_columns(wages.study_pay(session, study, pay_settings)).items()}
    unpaid = dict.fromkeys(wages.WORKER_COLUMNS, "")  # a pilot's: no wage counts them
    groups = {worker_label(raw, salt): {"address_group": address or "", "agent_group": agent or "",
                                        "locale": locale or ""}
              for raw, address, agent, locale in session.execute(
                  select(Worker.external_id, Worker.address_group, Worker.agent_group, Worker.locale)
                  .where(Worker.study_id == study.id))}
    unknown = dict.fromkeys(FINGERPRINT_COLUMNS + LOCALE_COLUMNS, "")
    reasons = {worker_label(raw, salt): {REASON_COLUMN: code} for raw, code in worker_reason_codes(session, study.id)}
    checked, viewing_columns = _viewing_columns(session, study, salt)
    display = {worker_label(raw, salt): values for raw, values in display_columns(session, study.id).items()}
    undisplayed = dict.fromkeys(DISPLAY_COLUMNS, "")
    records = [{**record, **recruiter_columns(recruited.get(record["worker_id"])),
                **groups.get(record["worker_id"], unknown), **reasons.get(record["worker_id"], {REASON_COLUMN: ""}),
                **display.get(record["worker_id"], undisplayed), **pay.get(record["worker_id"], unpaid),
                **checked.get(record["worker_id"], dict.fromkeys(viewing_columns, ""))}
               for record in records]
    return (table_csv(tuple(columns) + RECRUITER_COLUMNS + FINGERPRINT_COLUMNS + LOCALE_COLUMNS + (REASON_COLUMN,)
                      + DISPLAY_COLUMNS + wages.WORKER_COLUMNS + viewing_columns, records), len(records))


def worker_reason_codes(session: Session, study_id: int) -> list[tuple[str, str]]:
    """``(raw worker ID, reason code)`` of each worker of the study whose participation ended for a reason of
    server/reasons.py: the worker's own (turned away in the study), else their latest assignment's (a full
    study, a refused display)."""
    codes: dict[str, str] = {}
    for raw, own, assignment_code in session.execute(
            select(Worker.external_id, Worker.status_reason_code, Assignment.reason_code)
            .join(Assignment, Assignment.worker_id == Worker.id).where(Worker.study_id == study_id)
            .order_by(Assignment.id)):
        codes[raw] = own or assignment_code or ""
    return [(raw, code) for raw, code in codes.items() if code]


def _viewing_columns(session: Session, study: Study, salt: bytes | None) -> tuple[dict[str, dict[str, Any]], tuple]:
    """The ``[viewing]`` checks' columns of workers.csv by exported worker ID, and the columns: none for a study
    without checks (its file keeps the columns it always had)."""
    spec = spec_for(session, study.id)
    if not viewing.checks_of(spec):
        return {}, ()
    labels = {db_id: worker_label(raw, salt) for db_id, raw in
              session.execute(select(Worker.id, Worker.external_id).where(Worker.study_id == study.id))}
    return ({labels[db_id]: values for db_id, values in viewing.worker_columns(session, study, spec).items()},
            viewing.WORKER_COLUMNS)


def recruiter_columns(participant) -> dict[str, Any]:
    """workers.csv's recruiter columns of one worker's latest assignment (:class:`server.codes.Participant`):
    its platform (``prolific`` for a Prolific study's links), completion status and the code it was given."""
    if participant is None:
        return {"completion_status": "", "completion_code": "", "pilot": ""}
    return {"platform": participant.platform, "completion_status": participant.status, "pilot": int(participant.pilot),
            "completion_code": participant.code or ""}


def find_study(session: Session, slug: str) -> Study | None:
    return session.scalar(select(Study).where(Study.slug == slug))


def export_study(session: Session, study: Study, *, salt: bytes | None, include_gold: bool = True,
                 pay_settings: PaySettings | None = None, include_pilot: bool = False):
    """Every export file of a study: its paradigm's (:meth:`~server.paradigms.core.Paradigm.export`) and
    workers_meta.csv.

    Parameters
    ----------
    session : Session
    study : Study
    salt : bytes or None
        :func:`study_salt` of the server's secret key and the study slug; None writes raw worker IDs.
    include_gold : bool
        Keep quality-check answers (paired comparison: quiz and hidden gold votes).
    pay_settings : PaySettings, optional
        How workers_meta.csv measures time on task (``[server]`` idle and lead-in caps).
    include_pilot : bool
        Also the pilot and simulated participants (:mod:`server.pilot`), left out by default.

    Returns
    -------
    StudyExport
        ``files`` (name -> CSV text), ``report`` (``(file name, description)`` lines) and ``warning``.
    """
    export = paradigm_for(study).export(session, study.id, salt=salt, include_gold=include_gold,
                                        include_pilot=include_pilot)
    export.files["workers_meta.csv"], n_workers = workers_csv_text(session, study, salt=salt, pay_settings=pay_settings,
                                                                   include_pilot=include_pilot)
    export.report.append(("workers_meta.csv", f"{n_workers} workers"))
    if any(study_parts_of(study).values()):  # a study with a questionnaire: its answers, one row per item
        rows = questionnaire_rows(session, study, salt=salt, include_pilot=include_pilot)
        export.files["questionnaire.csv"] = table_csv(QUESTIONNAIRE_COLUMNS, rows)
        export.report.append(("questionnaire.csv", f"{len(rows)} answers"))
    return export
