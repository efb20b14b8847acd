"""Who may enter a study, and how fast one client may create assignments.

Plain links (``/s/<slug>?participant=ID``) follow the study file's ``[entry]`` table:

* ``allow_anonymous = false`` (default): a link without a participant ID is refused, so that
  nobody can create workers just by fetching the bare study URL. With ``true`` such a visit
  starts under a generated ``anon-...`` ID.
* ``signed_links = true``: the link must also carry ``sig``, an HMAC of the study and the
  participant ID under the study's own random key (``Study.entry_secret``);
  ``perceptlab study links SLUG ID...`` prints such links. Invented IDs are then refused.
* ``access_key = "..."``: the link must carry ``key=<access_key>``, one secret shared by every
  participant of the study (for platforms that can only append the participant ID).

MTurk entries must name a HIT of the study when the study has HITs (posted with
``perceptlab mturk launch``).

Every request that would create a new assignment (a plain-link or MTurk entry, or the JSON
twin ``POST /api/v1/studies/<slug>/assignments``) passes :class:`EntryLimiter`, a sliding
window per client address (the views hold one per app: :mod:`server.views.entry_limit`);
re-entering an existing assignment (a reload) is never limited. Behind a reverse proxy set
``[server] proxy_fix`` so that the client's address is the one counted (else every visitor shares
the proxy's address and its limit).

Before that, every new assignment passes the :class:`AdmissionGate`, a token bucket of ``[server]
admission_rate`` new assignments per second (``admission_burst`` at once), shared through the
database by every server process and instance. Starting a
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
import threading
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlencode

from sqlalchemy import Float, bindparam, case, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..errors import ApiError
from ..models import Admission, MTurkHit, Study

SIGNATURE_HEX_DIGITS = 32  # 128 bits: far beyond guessing, short enough for a URL
DEFAULT_ENTRY_LIMIT = 20
DEFAULT_ENTRY_WINDOW = 600.0  # seconds
DEFAULT_ADMISSION_RATE = 20.0  # new assignments per second, all server processes together
DEFAULT_ADMISSION_BURST = 10.0


# ---------------------------------------------------------------- signed participant links

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
    message = f"perceptlab-link\0{slug}\0{participant}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()[:SIGNATURE_HEX_DIGITS]


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
    if spec.access_key and not hmac.compare_digest((access_key or "").encode(), spec.access_key.encode()):
        raise ApiError(403, "bad_link", "This study link is incomplete or wrong (its access key does not match). "
                                        "Please open the exact link you were given.")
    if not participant:
        if spec.allow_anonymous and not spec.signed_links:
            return
        raise ApiError(403, "participant_required",
                       "This study link needs your participant ID. Please open the exact link you were given "
                       "(it ends with ?participant=...).")
    if spec.signed_links:
        expected = link_signature(study.entry_secret or "", study.slug, participant)
        if not study.entry_secret or not hmac.compare_digest((signature or "").lower().encode(), expected.encode()):
            raise ApiError(403, "bad_link", "This study link is not valid for this participant ID. "
                                            "Please open the exact link you were given.")


def check_hit(session: Session, study: Study, hit_id: str) -> None:
    """An MTurk entry must name one of the study's HITs, once the study has any (403 ``unknown_hit``)."""
    hits = select(MTurkHit.hit_id).where(MTurkHit.study_id == study.id, MTurkHit.hit_id.is_not(None))
    if session.scalar(hits.limit(1)) is None:
        return  # HITs posted outside perceptlab: nothing to check against
    if session.scalar(hits.where(MTurkHit.hit_id == hit_id)) is None:
        raise ApiError(403, "unknown_hit", "This HIT does not belong to this study. Please open the task from "
                                           "its HIT on Mechanical Turk.")


# ---------------------------------------------------------------- rate limit

class EntryLimiter:
    """New assignments per client address within a sliding window (thread-safe, in memory).

    The counts live in this process: with several server processes (gunicorn workers, several
    instances) each keeps its own, so one address may create up to that many times the limit
    in a window. That still turns "thousands of workers a minute" into a trickle; an exact
    limit across processes would need a shared store and a write on every entry.

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

    def admit(self, address: str) -> float:
        """Count one new assignment for ``address`` and return 0, or return the seconds to wait
        (and count nothing) when the address is at its limit."""
        if self.limit <= 0:
            return 0.0
        now = self.clock()
        with self._lock:
            if len(self._entries) > 50_000:  # bound memory under a spray of addresses
                self._entries = {a: t for a, t in self._entries.items() if self._recent(a, now)}
            times = self._recent(address, now)
            if len(times) >= self.limit:
                return max(1.0, times[-self.limit] + self.window - now)
            times.append(now)
            self._entries[address] = times
            return 0.0


def rate_limited(retry_after: float) -> ApiError:
    """The 429 answer to an address over its entry limit (with a ``Retry-After`` header)."""
    seconds = int(retry_after + 0.999)
    minutes = max(1, round(seconds / 60))
    return ApiError(429, "rate_limited",
                    f"Too many new sessions were started from your network in a short time. Please try again "
                    f"in {minutes} minute{'s' if minutes != 1 else ''}.", headers={"Retry-After": str(seconds)})


# ---------------------------------------------------------------- admission of new workers under load

class AdmissionGate:
    """New assignments per second across every process and instance on the database: a token bucket
    (generic cell rate algorithm) kept in one row of the ``admission`` table.

    A call takes a token (returns 0) or is deferred and told when to come back. Successive
    deferrals are told successive token times, one every ``1 / rate`` seconds, so that a burst of
    arrivals comes back spread over the time the bucket needs to admit them all. A promise is not a
    reservation: whoever asks when a token is there gets it, and a caller who finds none is
    deferred again, behind the others. The decision is one UPDATE of the gate's row in a
    transaction of its own (another connection of the engine's pool), so that a deferral is
    remembered even though the entry that asked is rolled back.

    Parameters
    ----------
    engine : Engine
        The app's database engine.
    rate : float
        Tokens (new assignments) per second; 0 admits everyone without asking the database.
    burst : float
        Capacity of the bucket: how many may start in the same instant after a quiet spell (at least 1).
    clock : callable, optional
        Seconds since the epoch as a float (default :func:`time.time`: the processes and instances
        sharing the gate share its clock); tests inject their own.
    """

    NAME = "workers"

    def __init__(self, engine: Engine, rate: float = DEFAULT_ADMISSION_RATE, burst: float = DEFAULT_ADMISSION_BURST,
                 clock: Callable[[], float] | None = None):
        self.engine = engine
        self.rate, self.burst = float(rate), max(1.0, float(burst))
        self.clock = clock or time.time

    def admit(self) -> float:
        """Take a token and return 0, or return the seconds after which to ask again."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        params = {"gate": self.NAME, "now": now, "interval": 1.0 / self.rate, "horizon": self.burst / self.rate}
        with self.engine.begin() as connection:
            row = connection.execute(_TAKE_TOKEN, params).one_or_none()
        if row is None:  # a database made without the migrations' row: make it, then ask again
            try:
                with self.engine.begin() as connection:
                    connection.execute(insert(_admission).values(name=self.NAME, next_free=0.0, promised=0.0,
                                                                 last_admitted=False))
            except IntegrityError:
                pass  # another process made it first
            with self.engine.begin() as connection:
                row = connection.execute(_TAKE_TOKEN, params).one()
        admitted, promised = row
        return 0.0 if admitted else max(promised - now, 1e-3)


class LocalAdmissionGate:
    """:class:`AdmissionGate` kept in this process's memory, for SQLite: a request there holds the
    database's one write lock from its first statement (BEGIN IMMEDIATE), so the gate cannot write
    its row on a connection of its own; and SQLite serves one server process. Same decisions, same
    promises; thread-safe.
    """

    def __init__(self, rate: float = DEFAULT_ADMISSION_RATE, burst: float = DEFAULT_ADMISSION_BURST,
                 clock: Callable[[], float] | None = None):
        self.rate, self.burst = float(rate), max(1.0, float(burst))
        self.clock = clock or time.time
        self._next_free = self._promised = 0.0
        self._lock = threading.Lock()

    def admit(self) -> float:
        """Take a token and return 0, or return the seconds after which to ask again."""
        if self.rate <= 0:
            return 0.0
        now, interval, horizon = self.clock(), 1.0 / self.rate, self.burst / self.rate
        with self._lock:
            start = max(self._next_free, now)
            if start + interval <= now + horizon:
                self._next_free = start + interval
                return 0.0
            self._promised = max(self._promised + interval, start + interval - horizon)
            return max(self._promised - now, 1e-3)


def _later(a, b):
    """The later of two times (a CASE: GREATEST and MAX are spelt differently by each database)."""
    return case((a > b, a), else_=b)


def _take_token_statement():
    g = _admission.c
    now, interval, horizon = (bindparam(name, type_=Float) for name in ("now", "interval", "horizon"))
    start = _later(g.next_free, now)              # when the next token is issued
    admitted = start + interval <= now + horizon  # within the burst the bucket holds
    first_free = start + interval - horizon       # when a token is next there for a newcomer
    return (update(_admission).where(g.name == bindparam("gate"))
            .values(next_free=case((admitted, start + interval), else_=g.next_free),
                    promised=case((admitted, g.promised), else_=_later(g.promised + interval, first_free)),
                    last_admitted=admitted)
            .returning(g.last_admitted, g.promised))


_admission = Admission.__table__
_TAKE_TOKEN = _take_token_statement()  # every SET sees the row as it was: one decision, one statement


def server_busy(retry_after: float) -> ApiError:
    """The 429 answer to a new worker over the admission rate (``Retry-After`` in whole seconds, and
    ``retry_after_s`` in the body to the millisecond: the deferred are promised slots a fraction of a
    second apart)."""
    seconds = max(1, math.ceil(retry_after))
    return ApiError(429, "busy", f"Many people are starting this study right now, and new participants are "
                                 f"let in a few at a time. Please try again in {seconds} "
                                 f"second{'s' if seconds != 1 else ''}.", headers={"Retry-After": str(seconds)},
                    retry_after_s=retry_after)
