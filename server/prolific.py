"""Prolific: the one module that talks to Prolific's API (https://api.prolific.com/api/v1/, ``httpx``).

Two layers:

* :class:`ProlificClient`: typed requests and responses over one ``httpx.Client``, the token from
  ``PROLIFIC_TOKEN`` (``Authorization: Token ...``), timeouts, and retries: exponential backoff with jitter
  on server errors, timeouts and connection errors, and a 429 waits as long as its ``Retry-After`` says.
  A call that is not idempotent (creating a study, paying bonuses) is retried only when Prolific cannot
  have acted on it (a 429, a connection never made); after a timeout or a 5xx its outcome is unknown and
  :class:`ProlificError` says so (``uncertain``), so that the caller reconciles instead of repeating it.
* :class:`ProlificService`: a perceptlab study's Prolific study over the client and a database session,
  keeping the database in line with Prolific as :mod:`server.mturk` does for MTurk:

  - the Prolific study is recorded (status ``creating``) *before* the create call, under a deterministic
    ``internal_name``; a create whose answer was lost is found again in Prolific's list of studies;
  - the create body carries every field the documentation marks required, ``filters`` among them (an empty
    list: no screening beyond the devices);
  - submissions are fetched page by page into ``prolific_submission``: ``limit``/``offset`` against
    ``meta.count``, and ``_links.next`` when Prolific gives one (the study-submissions list may not);
  - "approve" asks Prolific to approve the submissions awaiting review whose completion codes check
    (:func:`server.codes.check_codes`, as ``perceptlab codes check`` does for a CSV). Bulk approval is
    asynchronous ("bulk approve in progress"): the rows are claimed and marked as asked for, and count as
    approved only once reading the submissions back shows APPROVED. No bonus goes to a submission before that;
  - transitional states (a study PUBLISHING, a submission PROCESSING) are waited out, never acted on;
  - bonuses go through the bulk-bonus endpoints (set up, then pay) with a ledger row per bonus written
    before each call (``prolific_bonus``: recorded -> setting_up -> set_up -> paying -> paid). Each step is a
    claim (:mod:`server.claims`): one conditional UPDATE from the state read, committed before the call, so
    two runs, two processes or a retry never both call. The cents Prolific's set-up answer gives must equal
    the ledger's before anything is paid. Prolific's pay call is not idempotent, so a bonus whose pay call got
    no answer (or whose run died after claiming it) stays ``paying`` until reconciling against the
    submission's bonuses on Prolific settles it: seen there, it is paid; not seen after :data:`SETTLE`
    (Prolific pays asynchronously, "in the following minutes"), it is set up again. A retry never pays twice.

Prolific has no sandbox: every call acts on the real account. Amounts are in the Prolific study's
currency (the workspace's, GBP or USD): the bonus CSV takes them as decimals; rewards, set-up totals and a
submission's ``bonus_payments`` are in cents (pence).
"""
from __future__ import annotations

import datetime as dt
import email.utils
import hashlib
import math
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from . import claims
from .models import (Assignment, ProlificBonus, ProlificStudy, ProlificSubmission, Study, Worker, as_utc,
                     utcnow)
from .paradigms import paradigm_for
from .paradigms.recruiters import Recruiter

API_ROOT = "https://api.prolific.com/api/v1/"
TOKEN_ENV = "PROLIFIC_TOKEN"
# Prolific fills these in for each participant (the study URL's placeholders, ARCHITECTURE.md "Data flow").
URL_PLACEHOLDERS = "PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"
STUDY_ACTIONS = ("PUBLISH", "PAUSE", "START", "STOP")
STOPPED_STATES = ("AWAITING REVIEW", "COMPLETED")  # what a stopped study shows
# States Prolific passes through on its own after an action: nothing is asked of a study or submission in them.
STUDY_TRANSITIONAL = ("PUBLISHING",)
SUBMISSION_TRANSITIONAL = ("PROCESSING",)
PAGE_LIMIT = 100             # items asked for per page of a list (``limit``)
REJECTION_CATEGORIES = ("TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "FAILED_CHECK",
                        "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA", "UNSUPP_DEVICE", "OTHER")
MIN_REJECTION_MESSAGE = 100  # Prolific refuses shorter rejection messages
AWAITING_REVIEW = "AWAITING REVIEW"
BONUS_BATCH = 200            # participants per bulk bonus payment
# A pay call whose answer was lost is not repeated before Prolific has had this long to show the bonus.
SETTLE = dt.timedelta(hours=1)
# Prolific's names of the device classes (server/paradigms/display.py DEVICE_CLASSES).
PROLIFIC_DEVICES = {"desktop": "desktop", "tablet": "tablet", "phone": "mobile"}
BONUS_REASON = "Bonus for {extra} extra {unit}(s) of the study {slug}. Thank you!"


class ProlificError(RuntimeError):
    """A Prolific call failed, or an action is not possible; ``str()`` says what happened.

    Attributes
    ----------
    status : int or None
        The HTTP status (None: no answer).
    error_code, title, detail
        From Prolific's error body ``{"error": {"status", "error_code", "title", "detail", ...}}``.
    uncertain : bool
        The request may have been carried out although no success came back (a timeout, a 5xx on a call
        that is not idempotent): reconcile before repeating it.
    """

    def __init__(self, message: str, *, status: int | None = None, error_code: Any = None, title: str = "",
                 detail: Any = None, uncertain: bool = False):
        super().__init__(message)
        self.status, self.error_code, self.title, self.detail = status, error_code, title, detail
        self.uncertain = uncertain

    @classmethod
    def from_response(cls, response: httpx.Response, what: str, *, uncertain: bool = False) -> ProlificError:
        try:
            body = response.json()
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            error = {"detail": body if body is not None else response.text[:300]}
        detail = error.get("detail")
        if isinstance(detail, dict):  # field -> messages
            detail_text = "; ".join(f"{k}: {' '.join(map(str, v)) if isinstance(v, list) else v}"
                                    for k, v in detail.items())
        elif isinstance(detail, list):
            detail_text = " ".join(map(str, detail))
        else:
            detail_text = str(detail or "")
        code = error.get("error_code")
        title = str(error.get("title") or response.reason_phrase)
        message = (f"Prolific refused {what}: {response.status_code}"
                   f"{f' ({code})' if code is not None else ''} {title}{f': {detail_text}' if detail_text else ''}")
        return cls(message, status=response.status_code, error_code=code, title=title, detail=detail,
                   uncertain=uncertain)


# ---------------------------------------------------------------- typed requests and responses

@dataclass(frozen=True)
class Request:
    """One API call: ``path`` is relative to :data:`API_ROOT`; ``idempotent`` says whether repeating it after
    an unknown outcome (a timeout, a 5xx) is safe."""
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    idempotent: bool = True

    @property
    def what(self) -> str:
        return f"{self.method} {self.path}"


@dataclass(frozen=True)
class StudyDraft:
    """What a draft study is created with (``POST /studies/``)."""
    name: str
    internal_name: str
    description: str
    external_study_url: str
    completion_code: str
    reward_cents: int
    estimated_minutes: int
    places: int
    devices: tuple[str, ...]
    # Prolific's audience filters (``[{"filter_id": ..., "selected_values" | "selected_range": ...}]``). The field
    # is required; an empty list recruits from everyone the devices allow.
    filters: tuple[dict[str, Any], ...] = ()

    def body(self) -> dict[str, Any]:
        return {"name": self.name, "internal_name": self.internal_name, "description": self.description,
                "external_study_url": self.external_study_url, "prolific_id_option": "url_parameters",
                "completion_codes": [{"code": self.completion_code, "code_type": "COMPLETED",
                                      "actions": [{"action": "MANUALLY_REVIEW"}]}],
                "total_available_places": self.places, "estimated_completion_time": self.estimated_minutes,
                "reward": self.reward_cents, "device_compatibility": list(self.devices),
                "filters": [dict(f) for f in self.filters]}


@dataclass(frozen=True)
class StudyInfo:
    """Prolific's view of a study."""
    id: str
    status: str
    internal_name: str = ""
    total_available_places: int = 0
    places_taken: int = 0
    reward: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StudyInfo:
        return cls(id=str(data["id"]), status=str(data.get("status") or ""),
                   internal_name=str(data.get("internal_name") or ""),
                   total_available_places=int(data.get("total_available_places") or 0),
                   places_taken=int(data.get("places_taken") or 0), reward=int(data.get("reward") or 0))


@dataclass(frozen=True)
class SubmissionInfo:
    """Prolific's view of a submission (the list and the single view name some fields differently)."""
    id: str
    participant_id: str
    status: str
    entered_code: str = ""
    started_at: dt.datetime | None = None
    completed_at: dt.datetime | None = None
    # Cents of the bonuses paid, as the single view lists them; None when the answer has no such list.
    bonus_payments: tuple[int, ...] | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubmissionInfo:
        return cls(id=str(data["id"]), participant_id=str(data.get("participant_id") or data.get("participant") or ""),
                   status=str(data.get("status") or ""),
                   entered_code=str(data.get("study_code") or data.get("entered_code") or ""),
                   started_at=_time(data.get("started_at")), completed_at=_time(data.get("completed_at")),
                   bonus_payments=(None if data.get("bonus_payments") is None
                                   else tuple(int(round(float(b))) for b in data["bonus_payments"])))


@dataclass(frozen=True)
class BulkBonus:
    """A bulk bonus payment set up on Prolific (not paid yet): its ID and what paying it costs, in cents (pence),
    as Prolific answers them."""
    id: str
    amount_cents: int = 0
    fees_cents: int = 0
    total_cents: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BulkBonus:
        def whole(name: str) -> int:
            return int(round(float(data.get(name) or 0)))

        return cls(id=str(data["id"]), amount_cents=whole("amount"), fees_cents=whole("fees"),
                   total_cents=whole("total_amount"))


def _time(value: Any) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


# ---------------------------------------------------------------- the client

@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` in all; backoff ``uniform(0, min(cap_s, base_s * 2**attempt))`` ("full jitter"); a 429 waits
    its ``Retry-After`` (at most ``max_retry_after_s``), or the backoff when it gives none."""
    attempts: int = 5
    base_s: float = 0.5
    cap_s: float = 30.0
    max_retry_after_s: float = 300.0


def token_from_environment() -> str:
    """``PROLIFIC_TOKEN``, or :class:`ProlificError` saying where to get one."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise ProlificError(f"set {TOKEN_ENV} to a Prolific API token (Prolific: Settings > API tokens)")
    return token


class ProlificClient:
    """Typed calls of Prolific's API over ``httpx``.

    Parameters
    ----------
    token : str, optional
        Default: ``PROLIFIC_TOKEN`` from the environment.
    base_url : str
    transport : httpx.BaseTransport, optional
        Tests pass a transport to a fake Prolific (tests/server/prolific_fake.py).
    timeout : httpx.Timeout
    retry : RetryPolicy
    sleep, clock, rng
        Injected for tests: the wait between attempts, the time (a ``Retry-After`` date), the jitter.
    """

    def __init__(self, token: str | None = None, *, base_url: str = API_ROOT,
                 transport: httpx.BaseTransport | None = None,
                 timeout: httpx.Timeout = httpx.Timeout(30.0, connect=10.0), retry: RetryPolicy = RetryPolicy(),
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], dt.datetime] = utcnow,
                 rng: random.Random | None = None):
        self.http = httpx.Client(base_url=base_url, transport=transport, timeout=timeout,
                                 headers={"Authorization": f"Token {token or token_from_environment()}",
                                          "Accept": "application/json"})
        self.retry, self.sleep, self.clock = retry, sleep, clock
        self.rng = rng or random.Random()

    def close(self) -> None:
        self.http.close()

    # ------------------------------------------------------------ plumbing

    def backoff(self, attempt: int) -> float:
        return self.rng.uniform(0, min(self.retry.cap_s, self.retry.base_s * 2 ** attempt))

    def retry_after(self, response: httpx.Response, attempt: int) -> float:
        """Seconds to wait after a 429: its ``Retry-After`` (seconds or an HTTP date), else the backoff."""
        value = response.headers.get("Retry-After", "").strip()
        wait = None
        if value.isdigit():
            wait = float(value)
        elif value:
            try:
                wait = (email.utils.parsedate_to_datetime(value) - self.clock()).total_seconds()
            except (TypeError, ValueError):
                wait = None
        if wait is None:
            return self.backoff(attempt)
        return min(max(0.0, wait), self.retry.max_retry_after_s)

    def send(self, request: Request) -> Any:
        """The call's JSON answer (None when empty), after the retries :class:`RetryPolicy` allows."""
        for attempt in range(self.retry.attempts):
            last = attempt + 1 == self.retry.attempts
            try:
                response = self.http.request(request.method, request.path, json=request.json, params=request.params)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                # No connection was made: Prolific cannot have acted, so any call may be repeated.
                if last:
                    raise ProlificError(f"cannot reach Prolific for {request.what}: {exc}") from exc
                self.sleep(self.backoff(attempt))
                continue
            except httpx.TransportError as exc:  # a read timeout, a dropped connection: the outcome is unknown
                if last or not request.idempotent:
                    raise ProlificError(f"no answer from Prolific to {request.what} ({type(exc).__name__}); it may "
                                        "have been carried out", uncertain=True) from exc
                self.sleep(self.backoff(attempt))
                continue
            status = response.status_code
            if status == 429:  # refused before any work: always safe to repeat
                if last:
                    raise ProlificError.from_response(response, request.what)
                self.sleep(self.retry_after(response, attempt))
                continue
            if status >= 500:
                if last or not request.idempotent:
                    raise ProlificError.from_response(response, request.what, uncertain=True)
                self.sleep(self.backoff(attempt))
                continue
            if status >= 400:
                raise ProlificError.from_response(response, request.what)
            if not response.content:
                return None
            try:
                return response.json()
            except ValueError:
                return response.text
        raise AssertionError("unreachable: the last attempt returns or raises")

    def pages(self, path: str, params: dict[str, Any] | None = None, *,
              offsets: bool = False) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list (``results``), each once (by ``id``).

        A page's ``_links.next.href`` is followed when given (a full URL or a path from the host's root). With
        ``offsets`` (lists documented with ``limit``/``offset``), a page without a next link is followed by the
        next offset while fewer items than ``meta.count`` were seen: such a list may give no next link at all.
        An empty page ends the list (the count changed under us, or it was wrong)."""
        params = dict(params or {})
        if offsets:
            params.setdefault("limit", PAGE_LIMIT)
            params["offset"] = 0
        page = self.send(Request("GET", path, params=params))
        seen: set[str] = set()
        followed: set[str] = set()
        offset = 0
        while True:
            results = page.get("results") or []
            for item in results:
                key = str(item.get("id", id(item)))
                if key not in seen:
                    seen.add(key)
                    yield item
            offset += len(results)
            following = ((page.get("_links") or {}).get("next") or {}).get("href")
            count = (page.get("meta") or {}).get("count")
            if following and following not in followed:
                followed.add(following)
                page = self.send(Request("GET", str(self.http.base_url.join(following))))
            elif offsets and results and isinstance(count, int) and offset < count:
                page = self.send(Request("GET", path, params={**params, "offset": offset}))
            else:
                return

    # ------------------------------------------------------------ endpoints

    def me(self) -> dict[str, Any]:
        """``GET /users/me/``: the account the token belongs to."""
        return self.send(Request("GET", "users/me/"))

    def list_studies(self) -> list[StudyInfo]:
        """``GET /studies/``, every page."""
        return [StudyInfo.from_json(s) for s in self.pages("studies/")]

    def create_study(self, draft: StudyDraft) -> StudyInfo:
        """``POST /studies/``: a draft (UNPUBLISHED) study. Not idempotent: a repeat makes a second draft."""
        return StudyInfo.from_json(self.send(Request("POST", "studies/", json=draft.body(), idempotent=False)))

    def get_study(self, study_id: str) -> StudyInfo:
        return StudyInfo.from_json(self.send(Request("GET", f"studies/{quote(study_id)}/")))

    def transition_study(self, study_id: str, action: str) -> StudyInfo:
        """``POST /studies/{id}/transition/`` with PUBLISH, PAUSE, START or STOP (a repeat of a transition
        that happened is refused, never done twice, so it counts as idempotent)."""
        if action not in STUDY_ACTIONS:
            raise ValueError(f"unknown study action {action!r}")
        return StudyInfo.from_json(self.send(Request("POST", f"studies/{quote(study_id)}/transition/",
                                                     json={"action": action})))

    def set_places(self, study_id: str, places: int) -> StudyInfo:
        """``PATCH /studies/{id}/`` with the total number of places (an absolute value: idempotent)."""
        return StudyInfo.from_json(self.send(Request("PATCH", f"studies/{quote(study_id)}/",
                                                     json={"total_available_places": int(places)})))

    def study_submissions(self, study_id: str) -> list[SubmissionInfo]:
        """``GET /studies/{id}/submissions/``, every page."""
        return [SubmissionInfo.from_json(s)
                for s in self.pages(f"studies/{quote(study_id)}/submissions/", offsets=True)]

    def get_submission(self, submission_id: str) -> SubmissionInfo:
        return SubmissionInfo.from_json(self.send(Request("GET", f"submissions/{quote(submission_id)}/")))

    def transition_submission(self, submission_id: str, action: str, *, rejection_category: str | None = None,
                              message: str | None = None) -> SubmissionInfo:
        """``POST /submissions/{id}/transition/`` APPROVE or REJECT (Prolific ignores a repeated request)."""
        body: dict[str, Any] = {"action": action}
        if action == "REJECT":
            body.update(rejection_category=rejection_category, message=message)
        return SubmissionInfo.from_json(self.send(Request("POST", f"submissions/{quote(submission_id)}/transition/",
                                                          json=body)))

    def bulk_approve(self, submission_ids: list[str]) -> Any:
        """``POST /submissions/bulk-approve/`` with submission IDs (approving an approved one changes nothing).
        Asynchronous: Prolific answers "in progress"; only reading the submissions back shows them approved."""
        return self.send(Request("POST", "submissions/bulk-approve/", json={"submission_ids": list(submission_ids)}))

    def set_up_bonuses(self, study_id: str, lines: Iterable[tuple[str, Decimal]]) -> BulkBonus:
        """``POST /submissions/bonus-payments/``: a bulk bonus record from ``participant_id,amount`` lines. Pays
        nothing; a repeat makes at worst a second unpaid record, so it is retried like an idempotent call."""
        csv = "\n".join(f"{who},{amount:.2f}" for who, amount in lines)
        return BulkBonus.from_json(self.send(Request("POST", "submissions/bonus-payments/",
                                                     json={"study_id": study_id, "csv_bonuses": csv})))

    def pay_bonuses(self, bulk_id: str) -> Any:
        """``POST /bulk-bonus-payments/{id}/pay/``. NOT idempotent: every accepted call pays again."""
        return self.send(Request("POST", f"bulk-bonus-payments/{quote(bulk_id)}/pay/", idempotent=False))


# ---------------------------------------------------------------- a perceptlab study on Prolific

def cents(amount: Decimal | str) -> int:
    return int((Decimal(str(amount)) * 100).quantize(Decimal("1")))


def study_url(host: str, study: Study) -> str:
    """The study URL Prolific sends participants to: ``https://HOST/s/SLUG`` with Prolific's placeholders (and
    the study's access key)."""
    if not host.lower().startswith("https://"):
        raise ProlificError(f"the study URL must start with https:// (participants' browsers need it): {host!r}")
    base = host.rstrip("/")
    base = base if "/s/" in base else f"{base}/s/{study.slug}"
    key = study.config.get("access_key")
    return f"{base}?{URL_PLACEHOLDERS}" + (f"&key={quote(key, safe='')}" if key else "")


def devices(requirement) -> tuple[str, ...]:
    """Prolific's ``device_compatibility`` from a study's :class:`~server.paradigms.display.WindowRequirement`:
    the classes its device rule admits (``WindowRequirement.devices``), in Prolific's names."""
    return tuple(PROLIFIC_DEVICES[name] for name in requirement.devices())


def internal_name(study: Study) -> str:
    """The deterministic name the Prolific study is created under (found again after a lost answer)."""
    digest = hashlib.sha256(f"{study.id}\n{study.slug}\n{study.seed}".encode()).hexdigest()[:12]
    return f"perceptlab {study.slug} {digest}"


def bonus_key(prolific_study_id: str, participant_id: str, reason: str) -> str:
    digest = hashlib.sha256(f"{prolific_study_id}\n{participant_id}\n{reason}".encode()).hexdigest()[:40]
    return f"pl-bonus-{digest}"


@dataclass(frozen=True)
class BonusDue:
    """A bonus the pay rules give a participant (paid only once Prolific shows the submission approved)."""
    participant_id: str
    submission_id: str | None
    submission_status: str | None
    amount: Decimal
    reason: str
    ledger_status: str | None


@dataclass
class BonusRun:
    """What :meth:`ProlificService.pay_bonuses` did."""
    recorded: int = 0
    paid: list[str] = field(default_factory=list)          # ledger keys paid by this run's pay calls
    confirmed: list[str] = field(default_factory=list)     # pay calls without an answer, seen paid on Prolific
    unconfirmed: list[str] = field(default_factory=list)   # still ``paying``: not seen yet, within SETTLE
    waiting: int = 0                                       # due, but the submission is not approved yet

    def summary(self) -> str:
        parts = [f"{len(self.paid)} bonus(es) paid"]
        if self.confirmed:
            parts.append(f"{len(self.confirmed)} earlier pay call(s) confirmed on Prolific")
        if self.unconfirmed:
            parts.append(f"{len(self.unconfirmed)} pay call(s) without an answer not seen on Prolific yet "
                         "(not paid again: reconcile later)")
        if self.waiting:
            parts.append(f"{self.waiting} wait for their submission to be approved")
        return "; ".join(parts)


class ProlificService:
    """A perceptlab study's Prolific study over a :class:`ProlificClient` and a database session. Methods that
    start money moving or create a study commit before and after their calls; the others leave committing to
    the caller.

    Parameters
    ----------
    client : ProlificClient
    session : Session
    clock
        The time (ledger times, :data:`SETTLE`); tests inject theirs.
    settle : datetime.timedelta
    """

    def __init__(self, client: ProlificClient, session: Session, *, clock: Callable[[], dt.datetime] = utcnow,
                 settle: dt.timedelta = SETTLE):
        self.client, self.session, self.clock, self.settle = client, session, clock, settle

    # ------------------------------------------------------------ studies

    def record(self, study: Study) -> ProlificStudy | None:
        return self.session.scalar(select(ProlificStudy).where(ProlificStudy.study_id == study.id))

    def prolific_study(self, study: Study) -> ProlificStudy:
        row = self.record(study)
        if row is None or row.prolific_id is None:
            raise ProlificError(f"study {study.slug} has no Prolific study yet: perceptlab prolific create "
                                f"{study.slug} --url https://HOST")
        return row

    def draft(self, study: Study, *, host: str, places: int) -> StudyDraft:
        """The draft study of ``study``: its MTurk texts as title and description, the reward of its pay rules
        (the HIT reward), the estimated time of that work, the completion code, the study URL with Prolific's
        placeholders and the devices its display needs."""
        from .mturk import study_settings
        from .payments import pay_unit
        from .worker_time import TimeEstimate, time_estimate

        recruiter = Recruiter.of(study.config)
        if recruiter.name != "prolific" or not recruiter.completion_code:
            raise ProlificError(f"study {study.slug} is not set up for Prolific: its study file needs [entry] "
                                'recruiter = "prolific" and completion_code = "<the code participants submit>"')
        if places < 1:
            raise ProlificError("a Prolific study needs at least 1 place")
        pay = pay_unit(study)
        settings = study_settings(study)
        minutes = TimeEstimate.minutes(time_estimate(self.session, study).hit_seconds(pay.required))
        requirement = paradigm_for(study).window_requirement(self.session, study)
        return StudyDraft(name=settings["title"], internal_name=internal_name(study),
                          description=settings["description"], external_study_url=study_url(host, study),
                          completion_code=recruiter.completion_code, reward_cents=cents(pay.hit_reward),
                          estimated_minutes=minutes, places=places, devices=devices(requirement))

    def create(self, study: Study, *, host: str, places: int) -> ProlificStudy:
        """Create the draft study on Prolific (once: a second call returns the study made before; a create whose
        answer was lost is found in Prolific's list by its ``internal_name``). Commits before and after."""
        row = self.record(study)
        if row is not None and row.prolific_id is not None:
            return row
        draft = self.draft(study, host=host, places=places)
        if row is None:
            row = ProlificStudy(study_id=study.id, internal_name=draft.internal_name, status="creating",
                                places=draft.places, reward_cents=draft.reward_cents,
                                estimated_minutes=draft.estimated_minutes, devices=",".join(draft.devices),
                                external_url=draft.external_study_url)
            self.session.add(row)
            self.session.commit()  # recorded before Prolific has it
        else:  # an earlier create got no answer: did Prolific make the study?
            found = self.find_study(row.internal_name)
            if found is not None:
                return self._update_study(row, found)
        try:
            info = self.client.create_study(draft)
        except ProlificError as exc:
            if not exc.uncertain:
                raise
            info = self.find_study(row.internal_name)
            if info is None:
                raise ProlificError(f"{exc}; Prolific lists no study {row.internal_name!r} yet: run create "
                                    "again to look again (it never makes a second one)", uncertain=True) from exc
        return self._update_study(row, info)

    def find_study(self, name: str) -> StudyInfo | None:
        return next((s for s in self.client.list_studies() if s.internal_name == name), None)

    def _update_study(self, row: ProlificStudy, info: StudyInfo) -> ProlificStudy:
        row.prolific_id, row.status, row.updated_at = info.id, info.status or row.status, self.clock()
        if info.total_available_places:
            row.places = info.total_available_places
        self.session.commit()
        return row

    def refresh(self, study: Study) -> ProlificStudy:
        row = self.prolific_study(study)
        info = self.client.get_study(row.prolific_id)
        row.status, row.places, row.updated_at = info.status, info.total_available_places or row.places, self.clock()
        return row

    def transition(self, study: Study, action: str) -> str:
        """PUBLISH, PAUSE, START (resume) or STOP; a study already in the state the action leads to is left as it
        is ("already ..."), so each may be repeated safely."""
        row = self.refresh(study)
        done = {"PUBLISH": ("ACTIVE", "SCHEDULED", "PAUSED", *STUDY_TRANSITIONAL, *STOPPED_STATES),
                "PAUSE": ("PAUSED", *STOPPED_STATES), "START": ("ACTIVE",), "STOP": STOPPED_STATES}[action]
        if row.status in done:
            return f"already {row.status.lower()}"
        if row.status in STUDY_TRANSITIONAL:  # Prolific is still carrying out the last action: ask again later
            raise ProlificError(f"the Prolific study is {row.status}: wait until Prolific has finished (reconcile "
                                f"shows its state), then {action.lower()} it")
        info = self.client.transition_study(row.prolific_id, action)
        row.status, row.updated_at = info.status or row.status, self.clock()
        return row.status.lower()

    def publish(self, study: Study) -> str:
        return self.transition(study, "PUBLISH")

    def pause(self, study: Study) -> str:
        return self.transition(study, "PAUSE")

    def resume(self, study: Study) -> str:
        return self.transition(study, "START")

    def stop(self, study: Study) -> str:
        """Stop recruiting for good (Prolific's STOP; repeating it is harmless)."""
        return self.transition(study, "STOP")

    def add_places(self, study: Study, more: int) -> int:
        """Raise the study's places by ``more`` (from Prolific's current total); returns the new total."""
        if more < 1:
            raise ProlificError("add at least 1 place")
        row = self.refresh(study)
        info = self.client.set_places(row.prolific_id, row.places + more)
        row.places, row.updated_at = info.total_available_places, self.clock()
        return row.places

    # ------------------------------------------------------------ submissions

    def reconcile(self, study: Study) -> dict[str, int]:
        """Fetch the study's state and every submission (all pages) into the database, then settle the bonuses
        whose pay call got no answer (:meth:`reconcile_bonuses`)."""
        self.refresh(study)
        counts = self.fetch_submissions(study)
        settled = self.reconcile_bonuses(study)
        counts["bonuses_confirmed"], counts["bonuses_unconfirmed"] = len(settled.confirmed), len(settled.unconfirmed)
        return counts

    def _record_submission(self, study: Study, item: SubmissionInfo) -> tuple[ProlificSubmission, bool]:
        row = self.session.scalar(select(ProlificSubmission).where(ProlificSubmission.submission_id == item.id))
        new = row is None
        if new:
            row = ProlificSubmission(study_id=study.id, submission_id=item.id, participant_id=item.participant_id,
                                     status=item.status)
            self.session.add(row)
        row.status, row.entered_code = item.status, item.entered_code or row.entered_code or ""
        row.started_at = item.started_at or row.started_at
        row.completed_at = item.completed_at or row.completed_at
        row.updated_at = self.clock()
        return row, new

    def submissions(self, study: Study) -> list[ProlificSubmission]:
        # Fresh from the database: claims are written by UPDATEs beside the session's objects.
        return list(self.session.scalars(select(ProlificSubmission).where(ProlificSubmission.study_id == study.id)
                                         .order_by(ProlificSubmission.started_at, ProlificSubmission.id)
                                         .execution_options(populate_existing=True)))

    def own_submission(self, study: Study, submission_id: str) -> ProlificSubmission:
        row = self.session.scalar(select(ProlificSubmission).where(ProlificSubmission.study_id == study.id,
                                                                   ProlificSubmission.submission_id == submission_id))
        if row is None:
            raise ProlificError(f"no submission {submission_id!r} in study {study.slug} (fetch the submissions first)")
        return row

    def review(self, study: Study) -> tuple[list[ProlificSubmission], list[tuple[ProlificSubmission, str]]]:
        """The submissions awaiting review (and not already asked to be approved, :meth:`pending_approval`) split
        by the completion-code check (:func:`server.codes.check_codes`): ``(approvable, [(refused, why)])``;
        "valid" rows are approvable."""
        from .codes import SubmittedRow, check_codes

        pending = {s.id for s in self.pending_approval(study)}
        waiting = [s for s in self.submissions(study) if s.status == AWAITING_REVIEW and s.id not in pending]
        rows = [SubmittedRow(i + 1, s.participant_id, s.entered_code, s.status) for i, s in enumerate(waiting)]
        checked = check_codes(self.session, study, rows).rows
        ok = [s for s, c in zip(waiting, checked) if c.result == "valid"]
        refused = [(s, f"{c.result}: {c.detail}") for s, c in zip(waiting, checked) if c.result != "valid"]
        return ok, refused

    def pending_approval(self, study: Study) -> list[ProlificSubmission]:
        """Submissions whose approval was asked for within :data:`server.claims.LEASE` and that Prolific does not
        show approved yet (still awaiting review, or PROCESSING): asked again only after the lease."""
        since = self.clock() - claims.LEASE
        return [s for s in self.submissions(study)
                if s.claimed_at is not None and as_utc(s.claimed_at) > since
                and s.status in (AWAITING_REVIEW, *SUBMISSION_TRANSITIONAL)]

    def _claim_for_approval(self, ids: list[int]) -> tuple[str, list[ProlificSubmission]]:
        """Claim the submissions (awaiting review, not asked for within the lease) this run asks Prolific to
        approve: of two runs, one asks."""
        now = self.clock()
        return claims.claim(self.session, ProlificSubmission,
                            [ProlificSubmission.id.in_(ids), ProlificSubmission.status == AWAITING_REVIEW,
                             or_(ProlificSubmission.claimed_at.is_(None),
                                 ProlificSubmission.claimed_at <= now - claims.LEASE)], now)

    def approve_checked(self, study: Study) -> tuple[list[ProlificSubmission], list[tuple[ProlificSubmission, str]]]:
        """Ask Prolific (one bulk call) to approve every submission awaiting review whose code checks; the others
        are returned with the reason, for a person to look at. Bulk approval is asynchronous: the submissions
        asked for are recorded as such (claimed), and count as approved only once :meth:`reconcile` reads them
        back APPROVED. Returns ``(asked for, refused)``; commits."""
        ok, refused = self.review(study)
        if not ok:
            return [], refused
        token, rows = self._claim_for_approval([s.id for s in ok])
        if rows:
            try:
                self.client.bulk_approve([s.submission_id for s in rows])
            except ProlificError as exc:
                if not exc.uncertain:  # refused: nothing was asked for; free the rows for the next run
                    claims.finish(self.session, ProlificSubmission, token, [], claim=None, claimed_at=None)
                raise
        return rows, refused

    def approve(self, study: Study, submission_id: str) -> str:
        """Approve one submission (claimed first, so two runs send one request); Prolific's answer gives its state,
        which may be PROCESSING: it counts as approved once Prolific shows APPROVED."""
        row = self.own_submission(study, submission_id)
        if row.status == "APPROVED":
            return "already approved"
        if row.status in SUBMISSION_TRANSITIONAL:
            return f"approval in progress on Prolific ({row.status})"
        token, rows = self._claim_for_approval([row.id])
        if not rows:
            self.session.refresh(row)
            return ("already approved" if row.status == "APPROVED"
                    else "approval already asked for (reconcile shows when Prolific has approved it)")
        try:
            info = self.client.transition_submission(submission_id, "APPROVE")
        except ProlificError as exc:
            if not exc.uncertain:
                claims.finish(self.session, ProlificSubmission, token, [], claim=None, claimed_at=None)
            raise
        row = rows[0]
        row.status, row.updated_at = info.status or row.status, self.clock()
        self.session.commit()
        return "approved" if row.status == "APPROVED" else f"approval asked for (Prolific: {row.status})"

    def reject(self, study: Study, submission_id: str, category: str, message: str) -> str:
        """Reject with one of :data:`REJECTION_CATEGORIES` and a message of at least
        :data:`MIN_REJECTION_MESSAGE` characters for the participant (Prolific's rules, checked first)."""
        if category not in REJECTION_CATEGORIES:
            raise ProlificError(f"unknown rejection category {category!r}; one of {', '.join(REJECTION_CATEGORIES)}")
        message = (message or "").strip()
        if len(message) < MIN_REJECTION_MESSAGE:
            raise ProlificError(f"Prolific needs a rejection message of at least {MIN_REJECTION_MESSAGE} characters "
                                f"(this one has {len(message)}): say what was wrong")
        row = self.own_submission(study, submission_id)
        if row.status == "REJECTED":
            return "already rejected"
        info = self.client.transition_submission(submission_id, "REJECT", rejection_category=category,
                                                 message=message)
        row.status, row.updated_at = info.status or "REJECTED", self.clock()
        return "rejected"

    # ------------------------------------------------------------ bonuses

    def bonus_plan(self, study: Study) -> list[BonusDue]:
        """Every bonus the study's pay rules give its Prolific participants: each unit of pay after the required
        ones (up to the most that count) earns the unit's bonus (:mod:`server.payments`); pilots and rejected
        submissions get none."""
        from .payments import earns_pay, money, pay_unit

        if Recruiter.of(study.config).name != "prolific":
            return []
        pay = pay_unit(study)
        record = self.record(study)
        by_participant = {s.participant_id: s for s in self.submissions(study)}
        ledger = {(b.participant_id, b.reason): b.status for b in self.ledger(study)}
        due = []
        for assignment, participant in self.session.execute(
                select(Assignment, Worker.external_id).join(Worker, Worker.id == Assignment.worker_id)
                .where(Assignment.study_id == study.id, Assignment.platform == "link", ~Assignment.pilot)
                .order_by(Assignment.id)):
            if not earns_pay(assignment.stage, assignment.pages_completed):
                continue
            extra = pay.extra_units(assignment.pages_completed)
            amount = money(pay.bonus * extra)
            if amount <= 0:
                continue
            reason = BONUS_REASON.format(extra=extra, unit=pay.name, slug=study.slug)
            submission = by_participant.get(participant)
            if submission is not None and submission.status == "REJECTED":  # a rejected submission earns nothing
                continue
            due.append(BonusDue(participant, submission.submission_id if submission else None,
                                submission.status if submission else None, amount, reason,
                                ledger.get((participant, reason)) if record else None))
        return due

    def ledger(self, study: Study) -> list[ProlificBonus]:
        return list(self.session.scalars(select(ProlificBonus).where(ProlificBonus.study_id == study.id)
                                         .order_by(ProlificBonus.id).execution_options(populate_existing=True)))

    def record_bonuses(self, study: Study) -> tuple[int, int]:
        """Write a ledger row (``recorded``) for every bonus due to a submission Prolific shows APPROVED that has
        none; returns ``(recorded, waiting for approval)``. Commits each row (the unique ``key`` keeps a second
        run, recording the same bonus at once, from writing it twice)."""
        record = self.prolific_study(study)
        recorded = waiting = 0
        for bonus in self.bonus_plan(study):
            if bonus.ledger_status is not None:
                continue
            if bonus.submission_status != "APPROVED":
                waiting += 1
                continue
            key = bonus_key(record.prolific_id, bonus.participant_id, bonus.reason)
            if self.session.scalar(select(ProlificBonus.id).where(ProlificBonus.key == key)) is not None:
                continue
            self.session.add(ProlificBonus(study_id=study.id, key=key, participant_id=bonus.participant_id,
                                           submission_id=bonus.submission_id, amount=str(bonus.amount),
                                           reason=bonus.reason, status="recorded", note=""))
            try:
                self.session.commit()
            except IntegrityError:  # another run recorded it a moment ago
                self.session.rollback()
                continue
            recorded += 1
        return recorded, waiting

    def fetch_submissions(self, study: Study) -> dict[str, int]:
        """Every submission of the study (all pages) read back from Prolific into the database; commits."""
        row = self.prolific_study(study)
        counts = {"submissions": 0, "new": 0}
        for item in self.client.study_submissions(row.prolific_id):
            _, new = self._record_submission(study, item)
            counts["submissions"] += 1
            counts["new"] += new
        self.session.commit()
        return counts

    def pay_bonuses(self, study: Study) -> BonusRun:
        """Pay every bonus of the plan once: read the submissions back (a bonus goes only to a submission Prolific
        shows APPROVED), settle earlier pay calls without an answer, record the new bonuses, then set up and pay
        bulk bonuses, each step a claim committed before its call (:meth:`_set_up`, :meth:`_pay`). A pay call
        without an answer leaves its rows ``paying`` (settled by a later run or reconcile)."""
        record = self.prolific_study(study)
        self.fetch_submissions(study)
        run = self.reconcile_bonuses(study)
        run.recorded, run.waiting = self.record_bonuses(study)
        self._set_up(study, record)
        self._pay(study, run)
        return run

    def _set_up(self, study: Study, record: ProlificStudy) -> None:
        """Claim the ``recorded`` rows (-> ``setting_up``) and set up a bulk bonus per batch of them; a batch whose
        set-up answer does not give the ledger's cents is never paid. A set-up pays nothing, so a claim left by a
        run that died before its set-up call is taken back after :data:`server.claims.LEASE`."""
        now = self.clock()
        claims.claim(self.session, ProlificBonus,
                     [ProlificBonus.study_id == study.id, ProlificBonus.status == "setting_up",
                      ProlificBonus.claimed_at <= now - claims.LEASE], now, status="recorded",
                     note="a set-up claimed by a run that did not finish: set up again")
        token, rows = claims.claim(self.session, ProlificBonus,
                                   [ProlificBonus.study_id == study.id, ProlificBonus.status == "recorded"], now,
                                   status="setting_up")

        def release(note: str) -> None:
            claims.finish(self.session, ProlificBonus, token, [ProlificBonus.status == "setting_up"],
                          status="recorded", note=note)

        for start in range(0, len(rows), BONUS_BATCH):
            batch = rows[start:start + BONUS_BATCH]
            try:
                bulk = self.client.set_up_bonuses(record.prolific_id,
                                                  [(b.participant_id, Decimal(b.amount)) for b in batch])
            except ProlificError as exc:
                release(str(exc))
                raise
            due = sum(cents(b.amount) for b in batch)
            if bulk.amount_cents != due:
                message = (f"Prolific set up bulk bonus {bulk.id} for {bulk.amount_cents} cents where the ledger has "
                           f"{due} cents due: nothing paid; check the amounts")
                release(message)
                raise ProlificError(message)
            # All of the batch, or none (its claim was taken over): a bulk is paid whole, so it must be ours whole.
            ids = [b.id for b in batch]
            claims.finish(self.session, ProlificBonus, token,
                          [ProlificBonus.id.in_(ids), ProlificBonus.status == "setting_up"], expected=len(ids),
                          status="set_up", bulk_id=bulk.id, note="")

    def _pay(self, study: Study, run: BonusRun) -> None:
        """Pay each set-up bulk once: its rows are claimed whole (``set_up`` -> ``paying``, committed) before the
        pay call; a bulk another run claimed, or holds in part, is left alone."""
        bulk_ids = list(self.session.scalars(select(ProlificBonus.bulk_id).distinct().where(
            ProlificBonus.study_id == study.id, ProlificBonus.status == "set_up")))
        for bulk_id in bulk_ids:
            now = self.clock()
            token, rows = claims.claim_all(self.session, ProlificBonus, [ProlificBonus.bulk_id == bulk_id],
                                           [ProlificBonus.status == "set_up"], now, status="paying", pay_sent_at=now)
            if not rows:
                continue
            mine = [ProlificBonus.status == "paying"]
            try:
                self.client.pay_bonuses(bulk_id)
            except ProlificError as exc:
                if exc.uncertain:
                    claims.finish(self.session, ProlificBonus, token, mine,
                                  note=f"pay call without an answer: {exc}")
                    run.unconfirmed.extend(b.key for b in rows)
                    continue
                # refused: nothing was paid; set up again next time
                claims.finish(self.session, ProlificBonus, token, mine, status="recorded", bulk_id=None,
                              pay_sent_at=None, note=str(exc))
                raise
            claims.finish(self.session, ProlificBonus, token, mine, status="paid", paid_at=self.clock(), note="")
            run.paid.extend(b.key for b in rows)

    def reconcile_bonuses(self, study: Study) -> BonusRun:
        """Settle every ``paying`` row against Prolific's bonuses of its submission: the cents Prolific lists beyond
        the ledger's ``paid`` rows of that submission confirm ``paying`` rows, oldest first; a row still unseen
        :attr:`settle` after its pay call goes back to ``recorded`` (a new bulk pays it), else it waits. When
        Prolific's answer lists no bonuses at all, the rows wait for a person: nothing is paid on a guess. Each
        change is conditioned on the row's state and claim as read, so two reconciling runs (or a run paying
        meanwhile) cannot undo each other's steps. Commits."""
        run = BonusRun()
        self.session.commit()
        paying = [b for b in self.ledger(study) if b.status == "paying"]
        by_submission: dict[str, list[ProlificBonus]] = {}
        for bonus in paying:
            by_submission.setdefault(bonus.submission_id, []).append(bonus)
        now = self.clock()

        def settle(bonus: ProlificBonus, **values: Any) -> bool:
            return claims.finish(self.session, ProlificBonus, bonus.claim,
                                 [ProlificBonus.id == bonus.id, ProlificBonus.status == "paying"], **values) == 1

        for submission_id, rows in by_submission.items():
            payments = self.client.get_submission(submission_id).bonus_payments
            if payments is None:  # nothing to reconcile against: never pay again on a guess
                for bonus in rows:
                    settle(bonus, note="pay call without an answer, and Prolific's submission lists no bonuses: check "
                                       "the study's bonuses on Prolific")
                    run.unconfirmed.append(bonus.key)
                continue
            listed = sum(payments)
            known = sum(cents(b.amount) for b in self.session.scalars(select(ProlificBonus).where(
                ProlificBonus.submission_id == submission_id, ProlificBonus.status == "paid")))
            unexplained = listed - known
            for bonus in sorted(rows, key=lambda b: (as_utc(b.pay_sent_at or b.created_at), b.id)):
                amount = cents(bonus.amount)
                if amount <= unexplained:
                    unexplained -= amount
                    if settle(bonus, status="paid", paid_at=now,
                              note="confirmed on Prolific after a pay call without an answer"):
                        run.confirmed.append(bonus.key)
                elif now - as_utc(bonus.pay_sent_at or bonus.created_at) >= self.settle:
                    settle(bonus, status="recorded", bulk_id=None, pay_sent_at=None,
                           note=(f"not on Prolific {math.ceil(self.settle.total_seconds() / 60)} min after a pay "
                                 "call without an answer: set up again"))
                else:
                    if settle(bonus, note="pay call without an answer; not on Prolific yet (not paid again)"):
                        run.unconfirmed.append(bonus.key)
        return run
