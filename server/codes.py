"""Participants and their completion codes: who came from which recruiter, where they are, which code
they were given, and a check of the codes a recruiter says were submitted (``perceptlab codes check``,
the dashboard's participants page).

A participant's status (per assignment):

``completed``      finished; given a completion code
``stopped``        turned away by a quality rule (given a code when paid units were done before)
``disqualified``   failed the quiz or the motion screening (no code)
``full``           no work was left for them (no code)
``abandoned``      unfinished, and nothing came from them for longer than the study's
                   ``assignment_timeout_minutes`` (returned or timed out on the recruiter's side)
``started``        unfinished and still within that time

Who has a code is one rule (:func:`server.paradigms.stages.earns_code`, applied by
:meth:`~server.paradigms.recruiters.Recruiter.code`): an assignment that did not earn a code has none here,
neither one stored by an older version nor the study-wide ``completion_code``, so its participant is ``not
completed`` whatever code they submit.

A recruiter's CSV (Prolific's submissions export, MTurk's batch results, or any file with a participant and
a code column) is checked row by row: ``valid``, ``wrong code``, ``unknown participant``, ``not completed``,
``duplicate`` (the participant's second row or later), ``malformed`` (a row without the needed fields) or
``pilot`` (a pilot participant: :mod:`server.pilot`; never to be paid as a participant of the study).
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from analysis.formats import table_csv
from stimuli.csv_safety import csv_rows

from .allocation import now
from .models import Assignment, Study, Worker, as_utc
from .paradigms import paradigm_for, spec_from_config
from .paradigms.recruiters import Recruiter
from .paradigms.stages import Stage

STATUSES = ("started", "completed", "stopped", "disqualified", "full", "abandoned")
RESULTS = ("valid", "wrong code", "unknown participant", "not completed", "duplicate", "malformed", "pilot")
MAX_CSV_BYTES = 20 << 20   # Prolific's export of 10 000 participants is a few MB
MAX_CSV_ROWS = 200_000
# Header names (compared lowercase, letters and digits only) of the participant and the code column,
# in order of preference: Prolific's export ("Participant id", "Completion code"), MTurk's batch results
# ("WorkerId", "Answer.completionCode"), and the obvious ones.
PARTICIPANT_HEADERS = ("participantid", "prolificpid", "prolificid", "workerid", "participant", "pid",
                       "externalid")
CODE_HEADERS = ("completioncode", "answercompletioncode", "code", "cc", "submittedcode")
RECRUITER_STATUS_HEADERS = ("status", "assignmentstatus")


# ---------------------------------------------------------------- participants

@dataclass(frozen=True)
class Participant:
    """One assignment of a study as the recruiter sees it."""
    assignment_db_id: int
    worker_db_id: int
    external_id: str                 # the platform's participant ID (personal data)
    platform: str                    # mturk | prolific | link
    assignment_external_id: str      # MTurk AssignmentId; the participant ID for plain links
    entry_params: dict[str, Any]     # Prolific: STUDY_ID, SESSION_ID
    stage: str
    status: str                      # see STATUSES
    code: str | None                 # the completion code shown to the participant, None if none
    pages: int
    started_at: dt.datetime
    completed_at: dt.datetime | None
    last_activity: dt.datetime
    pilot: bool = False              # a pilot or simulated participant (server/pilot.py): never paid from here


def participation_status(stage: str, last_activity: dt.datetime, cutoff: dt.datetime) -> str:
    """One of :data:`STATUSES` for an assignment at ``stage`` last active at ``last_activity``."""
    if stage == Stage.COMPLETED:
        return "completed"
    if stage in (Stage.STOPPED, Stage.DISQUALIFIED, Stage.FULL):
        return str(stage)
    return "abandoned" if as_utc(last_activity) < cutoff else "started"


def participants(session: Session, study: Study) -> list[Participant]:
    """Every assignment of ``study`` as a :class:`Participant`, oldest first."""
    spec = spec_from_config(study.config)
    recruiter = Recruiter.of(study.config)
    answers = paradigm_for(study).response_model
    last = dict(session.execute(select(answers.assignment_id, func.max(answers.created_at))
                                .where(answers.study_id == study.id).group_by(answers.assignment_id)).all())
    cutoff = now(session) - dt.timedelta(minutes=spec.assignment_timeout_minutes)
    out = []
    for assignment, external_id in session.execute(
            select(Assignment, Worker.external_id).join(Worker, Assignment.worker_id == Worker.id)
            .where(Assignment.study_id == study.id).order_by(Assignment.id)):
        active = last.get(assignment.id) or assignment.created_at
        out.append(Participant(
            assignment_db_id=assignment.id, worker_db_id=assignment.worker_id, external_id=external_id,
            platform=recruiter.platform(assignment.platform), assignment_external_id=assignment.external_id,
            entry_params=dict(assignment.entry_params or {}), stage=assignment.stage,
            status=participation_status(assignment.stage, active, cutoff), code=recruiter.code(assignment),
            pages=assignment.pages_completed, started_at=as_utc(assignment.created_at),
            completed_at=as_utc(assignment.completed_at) if assignment.completed_at else None,
            last_activity=as_utc(active), pilot=assignment.pilot))
    return out


_STEP_LABELS = {"consent": "reading the consent", "instructions": "reading the instructions", "quiz": "in the quiz",
                "trials": "answering a page", "page_done": "between pages"}


def worker_state(status: str, stage: str | None) -> str:
    """One status of a worker for the dashboard, from the worker's status (turned away or not) and their
    latest assignment's stage: "disqualified", "stopped", "completed", "study full", "not started" or
    "in progress: <step>" (a worker is "active" until turned away, also after completing: shown as two
    columns, "active" beside "completed" read as a contradiction). Motion steps keep their stage names."""
    if status != "active":
        return status
    if stage is None:
        return "not started"
    if stage == "completed":
        return "completed"
    if stage == "full":
        return "study full"
    return f"in progress: {_STEP_LABELS.get(stage, stage)}"


def latest_per_worker(rows: list[Participant]) -> dict[int, Participant]:
    """Worker row ID -> the worker's latest assignment (for one-row-per-worker tables such as workers.csv)."""
    return {p.worker_db_id: p for p in rows}


# ---------------------------------------------------------------- reading a recruiter's CSV

class CodeFileError(ValueError):
    """The submitted-codes file cannot be read; the message names the line when there is one."""


@dataclass(frozen=True)
class SubmittedRow:
    line: int
    participant: str
    code: str
    recruiter_status: str
    problem: str | None = None       # why the row is malformed


def _header_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _pick(keys: list[str], wanted: tuple[str, ...]) -> int | None:
    for name in wanted:
        if name in keys:
            return keys.index(name)
    return None


def read_submitted(data: bytes, *, max_bytes: int = MAX_CSV_BYTES, max_rows: int = MAX_CSV_ROWS) -> list[SubmittedRow]:
    """Rows of a recruiter's CSV: participant ID, submitted code and the recruiter's status, by line.

    Parameters
    ----------
    data : bytes
        The file's bytes: UTF-8 (with or without a byte-order mark), comma, semicolon or tab separated,
        with a header row naming a participant column (``Participant id``, ``PROLIFIC_PID``, ``WorkerId``,
        ``participant``...) and a code column (``Completion code``, ``Answer.completionCode``, ``code``...).
    max_bytes, max_rows : int
        Larger files are refused.

    Returns
    -------
    list of SubmittedRow
        One per non-blank data row; a row too short for the needed columns has ``problem`` set.

    Raises
    ------
    CodeFileError
        Too large, NUL bytes, not UTF-8, no header or no participant/code column, a CSV syntax error.
    """
    if len(data) > max_bytes:
        raise CodeFileError(f"the file has {len(data):,} bytes; at most {max_bytes:,} are read")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise CodeFileError("the file is UTF-16: save it as CSV UTF-8")
    if b"\0" in data:
        line = data[:data.index(b"\0")].count(b"\n") + 1
        raise CodeFileError(f"line {line}: NUL byte (a binary file, not CSV)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise CodeFileError(f"line {line}: not UTF-8 text (save the file as CSV UTF-8)") from None
    if not text.strip():
        raise CodeFileError("the file is empty")
    first_line = text.lstrip().splitlines()[0]
    delimiter = max(",;\t", key=first_line.count)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    cells = csv_rows(reader)  # a code file checked and saved (--out) reads back unchanged: stimuli/csv_safety.py
    rows: list[SubmittedRow] = []
    try:
        header = next(cells)
        keys = [_header_key(h) for h in header]
        who, code, status = (_pick(keys, PARTICIPANT_HEADERS), _pick(keys, CODE_HEADERS),
                             _pick(keys, RECRUITER_STATUS_HEADERS))
        if who is None or code is None:
            missing = " and ".join(name for name, index in (("participant", who), ("completion code", code))
                                   if index is None)
            raise CodeFileError(f"line 1: no {missing} column in the header ({', '.join(header[:12]) or 'empty'}); "
                                "expected e.g. 'Participant id' and 'Completion code'")
        needed = max(who, code)
        for fields in cells:
            if not any(f.strip() for f in fields):
                continue
            if len(rows) >= max_rows:
                raise CodeFileError(f"more than {max_rows:,} rows; split the file")
            line = reader.line_num
            if len(fields) <= needed:
                rows.append(SubmittedRow(line, "", "", "", f"{len(fields)} fields, the header has {len(header)}"))
                continue
            participant = fields[who].strip()
            rows.append(SubmittedRow(line, participant, fields[code].strip(),
                                     fields[status].strip() if status is not None and status < len(fields) else "",
                                     None if participant else "no participant ID"))
    except csv.Error as exc:
        raise CodeFileError(f"line {reader.line_num}: {exc}") from None
    except StopIteration:
        raise CodeFileError("the file has no header row") from None
    return rows


# ---------------------------------------------------------------- checking

@dataclass(frozen=True)
class CheckedRow:
    line: int
    participant: str
    code: str
    recruiter_status: str
    result: str            # one of RESULTS
    detail: str


@dataclass(frozen=True)
class CodeCheck:
    rows: list[CheckedRow]
    counts: dict[str, int]           # result -> rows, every result named
    not_submitted: int               # participants with a code here whose ID is in no row

    @property
    def all_valid(self) -> bool:
        return bool(self.rows) and self.counts["valid"] == len(self.rows)

    def summary(self) -> str:
        parts = [f"{n} {result}" for result, n in self.counts.items() if n]
        line = f"{len(self.rows)} rows: " + (", ".join(parts) if parts else "none")
        if self.not_submitted:
            line += f"; {self.not_submitted} participant(s) with a code here are in no row"
        return line


def _same(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()


def check_codes(session: Session, study: Study, submitted: list[SubmittedRow]) -> CodeCheck:
    """Judge every submitted row against the study's participants (see the module's docstring)."""
    by_id: dict[str, list[Participant]] = {}
    for p in participants(session, study):
        by_id.setdefault(p.external_id, []).append(p)
    owner = {p.code.casefold(): p.external_id for ps in by_id.values() for p in ps if p.code}
    seen: dict[str, int] = {}
    out = []
    for row in submitted:
        result, detail = _judge(row, by_id, owner, seen)
        out.append(CheckedRow(row.line, row.participant, row.code, row.recruiter_status, result, detail))
    counts = Counter(r.result for r in out)
    coded = {pid for pid, ps in by_id.items() if any(p.code for p in ps)}
    return CodeCheck(out, {r: counts.get(r, 0) for r in RESULTS}, len(coded - set(seen)))


def _judge(row: SubmittedRow, by_id: dict[str, list[Participant]], owner: dict[str, str],
           seen: dict[str, int]) -> tuple[str, str]:
    if row.problem:
        return "malformed", row.problem
    if row.participant in seen:
        return "duplicate", f"already on line {seen[row.participant]}"
    seen[row.participant] = row.line
    mine = by_id.get(row.participant)
    if not mine:
        return "unknown participant", "no participant with this ID entered the study"
    if all(p.pilot for p in mine):
        return "pilot", "a pilot participant (perceptlab study pilot): not paid by the study"
    coded = [p for p in mine if p.code]
    if not coded:
        latest = mine[-1]
        return "not completed", f"{latest.status} (stage {latest.stage}, {latest.pages} page(s) done)"
    if not row.code:
        return "wrong code", "no code submitted"
    match = next((p for p in coded if _same(p.code, row.code)), None)
    if match is None:
        other = owner.get(row.code.strip().casefold())
        if other is not None and other != row.participant:
            return "wrong code", "this is another participant's code"
        return "wrong code", "not the code this participant was given"
    if match.status == "stopped":
        return "valid", f"stopped by a quality rule after {match.pages} paid page(s): review"
    return "valid", f"completed {match.completed_at:%Y-%m-%d %H:%M} UTC" if match.completed_at else "completed"


CHECK_COLUMNS = ("line", "participant", "code", "recruiter_status", "result", "detail")


def check_csv_text(check: CodeCheck) -> str:
    """The checked rows as CSV (:data:`CHECK_COLUMNS`)."""
    return table_csv(CHECK_COLUMNS, [{c: getattr(r, c) for c in CHECK_COLUMNS} for r in check.rows])
