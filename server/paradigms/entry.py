"""Who may enter a study, and how fast one client may create assignments.

Every entry path (the HTML entry ``/s/<slug>`` and its JSON twin, plain links and MTurk HITs alike)
follows the study file's ``[entry]`` table:

* ``allow_anonymous = false`` (default): a link without a participant ID is refused, so that
  nobody can create workers just by fetching the bare study URL. With ``true`` such a visit
  starts under a generated ``anon-...`` ID.
* ``signed_links = true``: the link must also carry ``sig``, an HMAC of the study and the
  participant ID under the study's own random key (``Study.entry_secret``);
  ``perceptlab study links SLUG ID...`` prints such links. Invented IDs are then refused.
* ``access_key = "..."``: the link must carry ``key=<access_key>``, one secret shared by every
  participant of the study (for platforms that can only append the participant ID).

MTurk entries (``?assignmentId=...&hitId=...&workerId=...&turkSubmitTo=...``, appended by MTurk to the
HIT's URL) obey the same table: the access key, and in a ``signed_links`` study the study's MTurk
signature (:func:`mturk_signature`: MTurk appends the worker's ID itself, so no link can be signed
per worker); ``perceptlab mturk launch`` puts both into the HIT's URL (:func:`mturk_question_url`). An
MTurk entry must name one of the study's HITs posted with ``perceptlab mturk launch``, so a study
without such HITs refuses MTurk entries, unless ``external_hits = true`` (HITs posted outside
perceptlab, the demo). MTurk's parameters must have MTurk's formats (:func:`check_mturk_entry`), and a
Prolific study's IDs Prolific's (:data:`~server.paradigms.recruiters.PROLIFIC_ID`).

Every request that would create a new assignment (a plain-link or MTurk entry, or the JSON
twin ``POST /api/v1/studies/<slug>/assignments``) passes :class:`EntryLimiter`, a sliding
window per client address (the views hold one per app: :mod:`server.views.entry_limit`; entries
by signed links are not limited per address, and a study may set ``[entry] entry_limit``);
re-entering an existing assignment (a reload) is never limited. Behind a reverse proxy set
``[server] proxy_fix`` so that the client's address is the one counted (else every visitor shares
the proxy's address and its limit).

Before that, every new assignment passes this process's :class:`AdmissionGate`, a token bucket of
``[server] admission_rate`` new assignments per second (``admission_burst`` at once). Starting a
worker (entry, consent, the first page of trials) costs many times a vote; when hundreds of workers
arrive in the same second (a HIT just posted), admitting them all at once would make the workers
already answering wait seconds for their votes. A worker over the rate gets 429 ``busy`` with a
``Retry-After`` (the worker page turns it into a waiting room that retries by itself); the retry
times handed out are spread one admission slot apart, so that the deferred arrive as a trickle,
not as a second burst.
"""
from __future__ import annotations

import hashlib
import hmac
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlencode

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from ..i18n import gettext, ngettext
from ..errors import ApiError, invalid
from ..models import MTurkHit, Study
from .recruiters import PROLIFIC_ID

SIGNATURE_HEX_DIGITS = 32  # 128 bits: far beyond guessing, short enough for a URL
DEFAULT_ENTRY_LIMIT = 20
DEFAULT_ENTRY_WINDOW = 600.0  # seconds
DEFAULT_ADMISSION_RATE = 5.0  # new assignments per second, per server process
DEFAULT_ADMISSION_BURST = 3.0
PILOT_PLATFORM = "pilot"  # the experimenter's preview participants (server/pilot.py)
BUSY = "busy"  # the error code of a new worker deferred by the admission rate (429 + Retry-After)
PREVIEW_ASSIGNMENT = "ASSIGNMENT_ID_NOT_AVAILABLE"  # MTurk's assignmentId while a worker previews a HIT
# MTurk's own format (its API's EntityId and CustomerId): worker, assignment and HIT IDs are capital
# letters and digits, at most 64. (Worker IDs also begin with "A"; that is not checked: it proves nothing.)
MTURK_ID = re.compile(r"[A-Z0-9]{1,64}")
# The only places a completed MTurk assignment may be posted to, compared as whole strings: a crafted
# turkSubmitTo would otherwise send the worker's submission to a third party (and URL parsers disagree
# with browsers about hosts like "https://evil.example\\@www.mturk.com").
MTURK_SUBMIT_URLS = {"https://www.mturk.com", "https://workersandbox.mturk.com"}


# ---------------------------------------------------------------- signed participant links

def url_signature(secret: str, purpose: str, *parts: str) -> str:
    """HMAC-SHA256 under ``secret`` of ``perceptlab-<purpose>`` and ``parts`` (NUL-separated), as the
    :data:`SIGNATURE_HEX_DIGITS` lowercase hexadecimal digits a URL carries. The purpose keeps a link's,
    an MTurk entry's and a pilot entry's signatures apart even under one secret."""
    message = "\0".join((f"perceptlab-{purpose}", *parts)).encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()[:SIGNATURE_HEX_DIGITS]


def link_signature(secret: str, slug: str, participant: str) -> str:
    """The ``sig`` of a participant link: HMAC-SHA256 of the study slug and the participant ID.

    Parameters
    ----------
    secret : str
        The study's ``entry_secret``.
    slug, participant : str
        The study and the participant ID the link is for.

    Returns
    -------
    str
        32 lowercase hexadecimal digits.
    """
    return url_signature(secret, "link", slug, participant)


def participant_link(study: Study, spec, participant: str, base_url: str = "") -> str:
    """The link to hand one participant: ``<base_url>/s/<slug>?participant=ID`` plus ``sig`` when the
    study signs its links and ``key`` when it has an access key."""
    query = {"participant": participant}
    if spec.signed_links:
        query["sig"] = link_signature(study.entry_secret or "", study.slug, participant)
    if spec.access_key:
        query["key"] = spec.access_key
    return f"{base_url.rstrip('/')}/s/{study.slug}?{urlencode(query)}"


def check_link_entry(study: Study, spec, participant: str | None, signature: str | None,
                     access_key: str | None) -> None:
    """Refuse a plain-link entry that the study's ``[entry]`` rules do not admit.

    Raises
    ------
    ApiError
        403 ``participant_required`` (no participant ID where one is required) or ``bad_link``
        (missing or wrong access key or signature). The messages are written for the worker.
        (403, not 400: the request is well-formed, the study's rules refuse it.)
    """
    _check_access_key(spec, access_key)
    if not participant:
        if spec.allow_anonymous and not spec.signed_links:
            return
        raise ApiError(403, "participant_required",
                       gettext("This study link needs your participant ID. Please open the exact link you were "
                               "given (it ends with ?participant=...)."))
    if spec.recruiter == "prolific" and not PROLIFIC_ID.fullmatch(participant):
        raise invalid("the Prolific ID is malformed (letters and digits, at most 64). Please open the study "
                      "from Prolific.")
    if spec.signed_links:
        expected = link_signature(study.entry_secret or "", study.slug, participant)
        if not study.entry_secret or not hmac.compare_digest((signature or "").lower().encode(), expected.encode()):
            raise ApiError(403, "bad_link", gettext("This study link is not valid for this participant ID. "
                                                    "Please open the exact link you were given."))


def _check_access_key(spec, access_key: str | None) -> None:
    if spec.access_key and not hmac.compare_digest((access_key or "").encode(), spec.access_key.encode()):
        raise ApiError(403, "bad_link", gettext("This study link is incomplete or wrong (its access key does not "
                                                "match). Please open the exact link you were given."))


# ---------------------------------------------------------------- MTurk entries

def mturk_signature(secret: str, slug: str) -> str:
    """The ``sig`` of a ``signed_links`` study's MTurk entries: HMAC-SHA256 of the study slug (one for the
    study: MTurk appends the worker's ID to the HIT's URL, so no URL can be signed per worker).

    Parameters
    ----------
    secret : str
        The study's ``entry_secret``.
    slug : str
        The study.

    Returns
    -------
    str
        32 lowercase hexadecimal digits (never a plain link's signature: the message differs).
    """
    return url_signature(secret, "mturk", slug)


def mturk_question_url(study: Study, spec, url: str) -> str:
    """The URL a HIT of the study shows (its ExternalQuestion): ``<url>/s/<slug>`` (``url`` may be the server,
    ``https://HOST``, or already the study's ``/s/`` URL), with ``key`` when the study has an access key and
    ``sig`` (:func:`mturk_signature`) when it signs its links. MTurk appends its own parameters after them."""
    base = url.rstrip("/") if "/s/" in url else f"{url.rstrip('/')}/s/{study.slug}"
    query = {}
    if spec.access_key:
        query["key"] = spec.access_key
    if spec.signed_links:
        query["sig"] = mturk_signature(study.entry_secret or "", study.slug)
    if not query:
        return base
    return f"{base}{'&' if '?' in base else '?'}{urlencode(query)}"


def check_mturk_entry(session: Session, study: Study, spec, *, worker_id: str | None, assignment_id: str | None,
                      hit_id: str | None, turk_submit_to: str | None, signature: str | None,
                      access_key: str | None, pilot: bool = False) -> str:
    """Refuse an MTurk entry that MTurk cannot have made or that the study's ``[entry]`` rules do not admit;
    return ``turk_submit_to`` without its trailing slash.

    Raises
    ------
    ApiError
        400 ``invalid_request``: a preview (``ASSIGNMENT_ID_NOT_AVAILABLE``), a worker, assignment or HIT ID
        that is not in MTurk's format, a ``turkSubmitTo`` other than MTurk's own https addresses. 403
        ``bad_link``: a wrong or missing access key or MTurk signature. 403 ``unknown_hit``: a HIT that is not
        the study's, or any HIT while the study has none and does not admit ``external_hits``.

    ``pilot``: the entry carries the study's pilot signature (``perceptlab simulate``, made with the
    instance's secret key, :mod:`server.pilot`): MTurk's formats still apply, the study's HITs, access key
    and signature do not (the experimenter's own simulated workers need no HIT).
    """
    if assignment_id == PREVIEW_ASSIGNMENT:
        raise invalid("a preview cannot start the task: accept the HIT first")
    for name, value in (("workerId", worker_id), ("assignmentId", assignment_id), ("hitId", hit_id)):
        if not value or not MTURK_ID.fullmatch(value):
            raise invalid(f"{name} is missing or malformed (MTurk's IDs are capital letters and digits, at most 64)")
    if (turk_submit_to or "").rstrip("/") not in MTURK_SUBMIT_URLS:
        raise invalid("turkSubmitTo must be MTurk's own https address")
    if pilot:
        return turk_submit_to.rstrip("/")
    _check_access_key(spec, access_key)
    if spec.signed_links:
        expected = mturk_signature(study.entry_secret or "", study.slug)
        if not study.entry_secret or not hmac.compare_digest((signature or "").lower().encode(), expected.encode()):
            raise ApiError(403, "bad_link", gettext("This task's link is not valid. Please open the task from its "
                                                    "HIT on Mechanical Turk."))
    check_hit(session, study, hit_id, external_hits=spec.external_hits)
    return turk_submit_to.rstrip("/")


# Built once: every MTurk entry asks both (a statement built per request costs more CPU than running it).
_STUDY_HITS = select(MTurkHit.hit_id).where(MTurkHit.study_id == bindparam("study_id"), MTurkHit.hit_id.is_not(None))
_ANY_HIT = _STUDY_HITS.limit(1)
_THIS_HIT = _STUDY_HITS.where(MTurkHit.hit_id == bindparam("hit_id"))


def check_hit(session: Session, study: Study, hit_id: str, *, external_hits: bool = False) -> None:
    """An MTurk entry must name one of the study's HITs (403 ``unknown_hit``); while the study has none, any
    HIT is admitted only when it takes ``external_hits`` (posted outside perceptlab: nothing to check
    against)."""
    # On the session's connection: a Core statement through the ORM's execution costs several times as much CPU.
    if session.connection().execute(_ANY_HIT, {"study_id": study.id}).scalar() is None:
        if external_hits:
            return
        raise ApiError(403, "unknown_hit", gettext("This study takes no Mechanical Turk HITs (none was posted for "
                                                   "it). Please open the study from the link you were given."))
    if session.connection().execute(_THIS_HIT, {"study_id": study.id, "hit_id": hit_id}).scalar() is None:
        raise ApiError(403, "unknown_hit", gettext("This HIT does not belong to this study. Please open the task "
                                                   "from its HIT on Mechanical Turk."))


# ---------------------------------------------------------------- rate limit

class EntryLimiter:
    """New assignments per client address within a sliding window (thread-safe, in memory).

    The counts live in this process: with several server processes (gunicorn workers, several
    instances) each keeps its own, so one address may create up to that many times the limit
    in a window, and a restart forgets them. With ``[server] redis_url`` the views use
    :class:`server.limits.SharedEntryLimiter` instead, the same rule on counts in Redis.

    Parameters
    ----------
    limit : int
        New assignments one address may create within ``window`` seconds (0 = no limit).
    window : float
        Length of the sliding window, seconds.
    clock : callable, optional
        Seconds as a float, monotonic (default :func:`time.monotonic`); tests inject their own.
    """

    def __init__(self, limit: int = DEFAULT_ENTRY_LIMIT, window: float = DEFAULT_ENTRY_WINDOW,
                 clock: Callable[[], float] | None = None):
        self.limit, self.window = limit, window
        self.clock = clock or time.monotonic
        self._entries: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float) -> deque[float]:
        times = self._entries.get(address, deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        return times

    def admit(self, address: str, *, count: bool = True) -> float:
        """Count one new assignment for ``address`` and return 0, or return the seconds to wait
        (and count nothing) when the address is at its limit. With ``count=False`` only tell."""
        if self.limit <= 0:
            return 0.0
        now = self.clock()
        with self._lock:
            if len(self._entries) > 50_000:  # bound memory under a spray of addresses
                self._entries = {a: t for a, t in self._entries.items() if self._recent(a, now)}
            times = self._recent(address, now)
            if len(times) >= self.limit:
                return max(1.0, times[-self.limit] + self.window - now)
            if not count:
                return 0.0
            times.append(now)
            self._entries[address] = times
            return 0.0


def rate_limited(retry_after: float) -> ApiError:
    """The 429 answer to an address over its entry limit (with a ``Retry-After`` header)."""
    seconds = int(retry_after + 0.999)
    minutes = max(1, round(seconds / 60))
    return ApiError(429, "rate_limited",
                    ngettext("Too many new sessions were started from your network in a short time. Please try "
                             "again in %(num)s minute.", "Too many new sessions were started from your network in a "
                             "short time. Please try again in %(num)s minutes.", minutes),
                    headers={"Retry-After": str(seconds)},
                    setting=ENTRY_LIMIT_SETTING)


ENTRY_LIMIT_SETTING = ("new participants per network address are limited (a lab session or a simulation behind "
                       "one address meets the limit): give participants signed links ([entry] signed_links = true "
                       "in the study file; they are never limited per address), or raise the study's [entry] "
                       "entry_limit (0 = no limit), or [server] entry_limit / entry_window_seconds for every study.")
ADMISSION_SETTING = ("new participants are let in at [server] admission_rate per second (admission_burst at "
                     "once); raise it on a server with cores to spare.")


# ---------------------------------------------------------------- admission of new workers under load

class AdmissionGate:
    """New assignments this process starts per second: a token bucket (generic cell rate algorithm;
    thread-safe, in memory).

    A call takes a token (returns 0) or is deferred and told when to come back. Successive
    deferrals are told successive token times, one every ``1 / rate`` seconds, so that a burst of
    arrivals comes back spread over the time the bucket needs to admit them all. A promise is not a
    reservation: whoever asks when a token is there gets it, and a caller who finds none is
    deferred again, behind the others.

    Each server process keeps its own bucket: with N processes, up to N times the rate start in
    all (with ``[server] redis_url``, :class:`server.limits.SharedAdmissionGate` keeps one bucket in
    Redis for the whole deployment). A burst reaches the processes unevenly (each serves the connections it accepted, and a
    retry comes back over the same one), so some deferred workers wait longer than the burst over
    the total rate. (One bucket in a database row, shared by all processes, was tried: with hundreds
    of entries of a burst queueing on that one row, one of three burst runs took PostgreSQL to 5.8 ms
    of CPU per vote and the votes' p99 to 16 s.)

    Parameters
    ----------
    rate : float
        Tokens (new assignments) per second; 0 admits everyone.
    burst : float
        Capacity of the bucket: how many may start in the same instant after a quiet spell (at least 1).
    clock : callable, optional
        Seconds as a float (default :func:`time.monotonic`); tests inject their own.
    """

    def __init__(self, rate: float = DEFAULT_ADMISSION_RATE, burst: float = DEFAULT_ADMISSION_BURST,
                 clock: Callable[[], float] | None = None):
        self.rate, self.burst = float(rate), max(1.0, float(burst))
        self.clock = clock or time.monotonic
        self._next_free = self._promised = float("-inf")
        self._lock = threading.Lock()

    def admit(self) -> float:
        """Take a token and return 0, or return the seconds after which to ask again."""
        if self.rate <= 0:
            return 0.0
        now, interval, horizon = self.clock(), 1.0 / self.rate, self.burst / self.rate
        with self._lock:
            start = max(self._next_free, now)  # when the next token is issued
            if start + interval <= now + horizon:  # within the burst the bucket holds
                self._next_free = start + interval
                return 0.0
            # Promised the first refill no deferred caller was told yet.
            self._promised = max(self._promised + interval, start + interval - horizon)
            return max(self._promised - now, 1e-3)


def server_busy(retry_after: float) -> ApiError:
    """The 429 answer to a new worker over the admission rate (``Retry-After`` in whole seconds, and
    ``retry_after_s`` in the body to the millisecond: the deferred are promised slots a fraction of a
    second apart)."""
    seconds = max(1, math.ceil(retry_after))
    return ApiError(429, BUSY, ngettext("Many people are starting this study right now, and new participants are "
                                        "let in a few at a time. Please try again in %(num)s second.",
                                        "Many people are starting this study right now, and new participants are "
                                        "let in a few at a time. Please try again in %(num)s seconds.", seconds),
                    headers={"Retry-After": str(seconds)},
                    retry_after_s=retry_after, setting=ADMISSION_SETTING)
