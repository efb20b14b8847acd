"""The simulation driver: simulated crowd workers that take part in a *running* perceptlab study over
its JSON API (aiohttp), whatever the study's paradigm.

This module does what every paradigm's worker does alike; each paradigm supplies what its worker
decides (:class:`SimulatedWorker`, returned by its :meth:`~server.paradigms.core.Paradigm.simulated_worker`
hook, in ``server/paradigms/<package>/simulated_worker.py``). The driver:

1. enters the study (``POST /api/v1/studies/{slug}/assignments``, platform "mturk", a worker ID
   ``SIMW<hex>``, an assignment ID and a HIT ID); the answer names the study's paradigm (``kind``), whose
   simulated worker then decides every answer. With ``pilot`` (the study's pilot signature,
   :func:`server.pilot.pilot_signature`, which ``perceptlab simulate`` always sends) the worker is stored
   as a simulated pilot participant, who counts in no estimate, wage, payment, target or default export;
2. sends the ``consent`` and ``instructions_done`` actions, and ``POST .../environment`` before the first
   response; a study with ``[viewing]`` checks has them taken first, before the action they stand before, over
   the worker pages' routes (:mod:`server.simulate_viewing`: careful workers compute the answers with the
   server's ``secret``, which ``perceptlab simulate`` holds; careless ones answer at random);
3. for paradigms that work in pages (quiz, trials, page_done: paired comparison, ratings), answers every
   open trial of the page with the paradigm's :meth:`SimulatedWorker.answer` (a fresh response ID per
   response, retried with the same ID and body); the response that completes a page brings the new State
   (else it is fetched again); at ``page_done`` it sends ``continue`` or ``finish``. Any other stage
   (motion's calibration and blocks) is the paradigm's :meth:`SimulatedWorker.run_stage`;
4. ends at ``completed``, ``stopped``, ``disqualified`` or ``full``; a worker that cannot go on *gives up*
   (outcome ``error``), and the report keeps why (:attr:`SimulationReport.gave_up`: the request and its
   HTTP status, ``network``, ``client:<Exception>`` or ``client:stuck``).

Worker types
------------
A fraction ``spam`` of the workers (exactly ``round(spam * workers)`` of them, chosen by the seed) are
*careless*: they answer at random (paired comparison: left or right at 1/2; ratings: any value of the
scale; motion: any vector). The others are *honest* observers whose model is their paradigm's. With
``observer="images"`` (the default) honest observers look at the stimuli: every distinct image URL is
downloaded once (one cache shared by all workers of a run, :meth:`SimulationSession.image`) and decoded
with Pillow to floats in [0, 1]; :meth:`SimulationSession.rmse` compares two of them. With
``observer="latent"`` no image is downloaded: each URL gets a seeded latent quality ~ N(0, 1)
(:meth:`SimulationSession.latent`), which measures only the API's response path and cannot pass quality
checks (use it on a study without them).

Retries and accounting
----------------------
A request that fails with a network error, a timeout, 5xx or 429 is retried with exponential backoff and
jitter, or after the time the answer gives when it gives one (its body's ``retry_after_s``, else its
``Retry-After``; at most a minute, plus up to 0.25 s of jitter). A new worker the server defers (429
``busy``: over its admission rate) is not an error: such answers are counted in ``deferred``, and each
worker's wait from its first entry request to its admission in ``entry_waits_s``. A response is always
retried with the SAME response ID and payload, which exercises the server's idempotency (a retried
response the server had already stored answers ``"status": "duplicate"``; these are counted). The report
keeps every response ID sent and its final fate: acknowledged (201 stored or 200 duplicate), rejected (a
definite 4xx answer), or unresolved (retries exhausted). :func:`run_simulation` never raises for
per-request errors; it counts them by code (the JSON ``error`` of a 4xx, or ``http_<status>``, or
``network:<ExceptionName>``). It raises :class:`ServerUnreachable` / :class:`StudyNotFound` when the server
cannot be reached or the study does not exist at the start.

Pacing: ``pace=None`` is a closed loop (the next response is sent as soon as the previous one is
answered). ``pace=S`` is an open loop: each worker's responses are scheduled at exponential gaps of mean
S seconds from the previous *scheduled* time (not from the previous answer), starting at its first
response, so a slow server does not slow their arrival down; a worker that fell behind its schedule sends
its overdue responses at once.

Seeds: the worker IDs, response IDs, types, choices and timings derive from ``seed``, the study's slug and
the worker index (``np.random.default_rng([seed, study_key(slug), index])``). Response IDs are unique in the
whole database (a vote ID names one vote of any study), so the slug is part of the seed: two studies
simulated with the same seed get other IDs. Two runs on the *same* study need different seeds, or the
"new" workers resume the old assignments.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import io
import json
import math
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

import numpy as np

from .paradigms.entry import BUSY
from .paradigms.stages import TERMINAL_STAGES, Stage  # full: no work left (study filled)
from .paradigms.viewing import GATES
from .simulate_viewing import take_checks

#: Median response time of a simulated answer, in ms (lognormal, sigma 0.5 in log units).
MEDIAN_RT_MS = 2000.0
RT_LOG_SIGMA = 0.5
WINDOW = {"width": 1366, "height": 768, "dpr": 1}
SCREEN = {"width": 1366, "height": 768}
USER_AGENT = "perceptlab-simulate/0.2 (aiohttp)"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
OBSERVERS = ("images", "latent")
#: The stages of the paged lifecycle (server/paradigms/paged.py) that the driver walks itself.
PAGE_STAGES = (Stage.QUIZ, Stage.TRIALS)
#: The stage each [viewing] ``when`` holds a worker at until the checks are passed.
VIEWING_GATES = {when: stage for when, (stage, _action) in GATES.items()}


class SimulationError(RuntimeError):
    """The simulation could not start."""


class ServerUnreachable(SimulationError):
    """No HTTP answer from the server at the start of a run."""


class StudyNotFound(SimulationError):
    """The server answered, but has no study with this slug."""


class GiveUp(Exception):
    """The worker cannot go on; ``reason`` (short, countable: ``"state:http_404"``) says why."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail or reason)
        self.reason = reason


def study_key(slug: str) -> int:
    """A 32-bit number of a study's slug, part of every worker's seed (module docstring: Seeds)."""
    return int.from_bytes(hashlib.blake2b(slug.encode(), digest_size=4).digest(), "little")


# ----------------------------------------------------------------------------- report

@dataclass
class ResponseRecord:
    """One response the client sent (a vote, a rating, a motion response), and what became of it."""

    response_id: str
    trial_id: str
    assignment_id: str
    worker_index: int
    honest: bool
    choice: Any              # what was answered: "left", 4, (u, v) ...
    correct: bool | None     # agrees with what the stimuli show (None: unknown, or no right answer)
    status: str = "pending"  # stored | duplicate | rejected:<code> | unresolved
    attempts: int = 0
    answered_s: float | None = None  # seconds from the start of the run to the final answer


@dataclass
class SimulationReport:
    """What a :func:`run_simulation` run did and saw.

    ``sent`` counts distinct response IDs sent (retries of one response count once, in ``attempts``);
    ``acknowledged`` those the server answered 201 (stored) or 200 (duplicate: a retry of a stored
    response); ``duplicates`` the "duplicate" answers. ``latencies_ms`` holds one sample per HTTP answer,
    by request kind (entry, state, action, environment, image, and each response kind: votes, ratings,
    motion-responses ...); ``response_kind`` is the kind the study's workers answered with (the default of
    :meth:`p50` and :meth:`p99`). ``outcomes`` counts workers by their last stage (completed / stopped /
    disqualified / full, or ``error`` when a worker gave up), ``gave_up`` the reasons of those that gave up.
    The server's entry rate limit (``[server] entry_limit`` per client address) answers 429 to a fast
    simulation from one machine: ``limits`` keeps, per limit met, the setting the server named as lifting
    it (its answers' ``setting``), and :meth:`summary_lines` prints it.
    """

    base_url: str
    study: str
    workers: int
    spam: float
    concurrency: int
    seed: int
    pace: float | None
    observer: str
    kind: str | None = None           # the study's paradigm, as its entry answers named it
    response_kind: str | None = None  # the URL segment its responses went to ("votes", "ratings" ...)
    sent: int = 0
    acknowledged: int = 0
    rejected: int = 0
    unresolved: int = 0
    duplicates: int = 0
    attempts: int = 0
    retries: int = 0
    deferred: int = 0  # 429 "busy" answers to entries: new workers told to come back (the admission rate)
    entry_waits_s: list[float] = field(default_factory=list)  # first entry request to admission, per worker
    errors: Counter = field(default_factory=Counter)
    gave_up: Counter = field(default_factory=Counter)  # reason -> workers that gave up for it
    gave_up_workers: list[str] = field(default_factory=list)  # their worker IDs (the entry's worker_id)
    limits: dict[str, str] = field(default_factory=dict)  # error code of a limit met -> the setting lifting it
    latencies_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    outcomes: Counter = field(default_factory=Counter)
    elapsed_s: float = 0.0
    #: Seconds from the start until the first of the ``concurrency`` slots ran out of workers:
    #: until then exactly ``concurrency`` workers were running.
    full_concurrency_s: float = 0.0
    responses: list[ResponseRecord] = field(default_factory=list)
    images_downloaded: int = 0
    viewing: Counter = field(default_factory=Counter)  # "<check>:passed" / "<check>:failed" -> workers

    # -- derived figures
    def percentile(self, q: float, kind: str | None = None) -> float:
        """The ``q``-th percentile (0-100) of the latencies of ``kind`` (default: the responses) in ms
        (NaN when none)."""
        samples = self.latencies_ms.get(kind or self.response_kind or "") or []
        return float(np.percentile(samples, q)) if samples else math.nan

    def p50(self, kind: str | None = None) -> float:
        return self.percentile(50, kind)

    def p99(self, kind: str | None = None) -> float:
        return self.percentile(99, kind)

    def per_second(self) -> float:
        """Acknowledged responses per second of the whole run (entry and page changes included)."""
        return self.acknowledged / self.elapsed_s if self.elapsed_s > 0 else math.nan

    def per_second_full(self) -> float:
        """Acknowledged responses per second while all ``concurrency`` workers were running (from the
        start to :attr:`full_concurrency_s`), so the tail of the run, with fewer workers left, does not
        dilute the rate."""
        t = self.full_concurrency_s
        if t <= 0:
            return math.nan
        n = sum(1 for r in self.responses if r.status in ("stored", "duplicate") and r.answered_s is not None
                and r.answered_s <= t)
        return n / t

    def entry_wait_figures(self) -> dict[str, float]:
        """p50, p99 and max of the workers' waits for admission, seconds (NaN when none entered)."""
        waits = self.entry_waits_s
        if not waits:
            return {"p50": math.nan, "p99": math.nan, "max": math.nan}
        return {"p50": float(np.percentile(waits, 50)), "p99": float(np.percentile(waits, 99)),
                "max": float(max(waits))}

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def gave_up_count(self) -> int:
        """Workers that gave up (outcome ``error``)."""
        return self.outcomes.get("error", 0)

    def acknowledged_ids(self) -> set[str]:
        return {r.response_id for r in self.responses if r.status in ("stored", "duplicate")}

    def sent_ids(self) -> set[str]:
        return {r.response_id for r in self.responses}

    def agreement(self, honest: bool) -> tuple[int, int]:
        """(responses that agreed with what the stimuli show, responses with a known answer) among
        acknowledged responses of honest (``True``) or careless (``False``) workers."""
        known = [r for r in self.responses if r.honest == honest and r.correct is not None
                 and r.status in ("stored", "duplicate")]
        return sum(r.correct for r in known), len(known)

    def to_dict(self, *, include_responses: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "base_url": self.base_url, "study": self.study, "kind": self.kind, "response_kind": self.response_kind,
            "workers": self.workers, "spam": self.spam, "concurrency": self.concurrency, "seed": self.seed,
            "pace": self.pace, "observer": self.observer,
            "responses_sent": self.sent, "responses_acknowledged": self.acknowledged,
            "responses_rejected": self.rejected, "responses_unresolved": self.unresolved,
            "duplicates": self.duplicates, "response_attempts": self.attempts, "retries": self.retries,
            "deferred": self.deferred, "entry_wait_s": self.entry_wait_figures(),
            "errors": dict(self.errors), "outcomes": dict(self.outcomes), "gave_up": dict(self.gave_up),
            "elapsed_s": self.elapsed_s, "responses_per_second": self.per_second(),
            "full_concurrency_s": self.full_concurrency_s,
            "responses_per_second_full_concurrency": self.per_second_full(),
            "images_downloaded": self.images_downloaded, "viewing": dict(self.viewing),
            "latency_ms": {kind: {"n": len(s), "p50": self.p50(kind), "p99": self.p99(kind),
                                  "max": float(max(s)) if s else math.nan}
                           for kind, s in sorted(self.latencies_ms.items())},
            "agreement": {name: dict(zip(("agree", "n"), self.agreement(flag)))
                          for name, flag in (("honest", True), ("careless", False))},
        }
        if include_responses:
            out["responses"] = [r.__dict__.copy() for r in self.responses]
        return out

    def summary_lines(self) -> list[str]:
        """A short human summary (used by ``perceptlab simulate``)."""
        errors = ", ".join(f"{k} {v}" for k, v in self.errors.most_common()) or "none"
        honest, careless = self.agreement(True), self.agreement(False)
        pct = lambda a: f"{100 * a[0] / a[1]:.1f}% of {a[1]}" if a[1] else "-"  # noqa: E731
        waits = self.entry_wait_figures()
        what = self.response_kind or "responses"
        lines = [
            f"workers: {self.workers} ({min(self.concurrency, self.workers)} at a time), "
            f"completed {self.outcomes.get('completed', 0)}, stopped {self.outcomes.get('stopped', 0)}, "
            f"disqualified {self.outcomes.get('disqualified', 0)}, study full {self.outcomes.get('full', 0)}, "
            f"gave up {self.gave_up_count}",
            f"{what}: sent {self.sent}, acknowledged {self.acknowledged}, "
            f"duplicates {self.duplicates}, rejected {self.rejected}, unresolved {self.unresolved}",
            f"rate: {self.per_second():.1f} {what}/s over {self.elapsed_s:.1f} s "
            f"({self.per_second_full():.1f}/s in the first {self.full_concurrency_s:.1f} s, "
            f"all {min(self.concurrency, self.workers)} workers running)",
            f"{what} latency: p50 {self.p50():.1f} ms, p99 {self.p99():.1f} ms "
            f"({len(self.latencies_ms.get(self.response_kind or '', []))} answers)",
            f"errors: {errors} (retries {self.retries})",
            *(f"limit met ({code}, {self.errors.get(code, 0) or self.deferred} answers): {setting}"
              for code, setting in sorted(self.limits.items())),
            f"entries deferred (server busy, 429 + Retry-After): {self.deferred}; wait for admission "
            f"p50 {waits['p50']:.1f} s, max {waits['max']:.1f} s",
            f"agreement with the stimuli: honest {pct(honest)}, careless {pct(careless)}",
        ]
        if self.viewing:
            lines.append("viewing checks: " + ", ".join(f"{key} {n}" for key, n in sorted(self.viewing.items())))
        if self.gave_up:
            lines.append("gave up: " + ", ".join(f"{reason} {n}" for reason, n in self.gave_up.most_common()))
        if self.errors.get("bad_link"):
            lines.append("entries refused as bad_link: the server's secret key differs from this instance's (run "
                         "simulate with the server's instance folder: perceptlab --instance DIR simulate ...)")
        return lines


# ----------------------------------------------------------------------------- helpers

MAX_RETRY_AFTER_S = 60.0  # a server asking for longer is waited on a minute at a time


def _json_or_none(payload: bytes | None) -> Any:
    """An answer's parsed JSON body, or None (no body, or not JSON: e.g. a proxy's HTML error page)."""
    try:
        return json.loads(payload) if payload else None
    except ValueError:
        return None


def _retry_after_s(header: str | None, parsed: Any) -> float | None:
    """The seconds to wait before retrying: the JSON body's ``retry_after_s`` (to the millisecond), else
    the ``Retry-After`` header (whole seconds), at most :data:`MAX_RETRY_AFTER_S`; None when neither
    says (an HTTP date counts as neither)."""
    candidates = [parsed.get("retry_after_s") if isinstance(parsed, dict) else None, header]
    for value in candidates:
        try:
            seconds = float(value) if value is not None and not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            continue
        if math.isfinite(seconds):
            return min(max(0.0, seconds), MAX_RETRY_AFTER_S)
    return None


def _error_code(parsed: Any) -> str | None:
    """The ``error`` code of a parsed JSON error body, or None."""
    return parsed.get("error") if isinstance(parsed, dict) else None


def is_deferral(status: int | None, parsed: Any) -> bool:
    """Whether an answer defers a new worker (429 ``busy``: the admission rate), which is not an error."""
    return status == 429 and _error_code(parsed) == BUSY


def now_iso() -> str:
    """The client's clock as the API's ``client_time`` (ISO 8601, milliseconds, Z)."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _latent(seed: int, url: str) -> float:
    digest = hashlib.blake2b(f"{seed}\0{url}".encode(), digest_size=8).digest()
    return float(np.random.default_rng(int.from_bytes(digest, "little")).normal())


def decode_image(data: bytes) -> np.ndarray:
    """An image file's pixels as floats in [0, 1] (16-bit greys scaled by 65535; else RGB); of a video clip
    (MP4, WebM), its middle frame as RGB, what a simulated worker judges the clip by."""
    from PIL import Image

    if data[4:8] == b"ftyp" or data[:4] == b"\x1a\x45\xdf\xa3":
        return _middle_frame(data)
    with Image.open(io.BytesIO(data)) as img:
        if img.mode in ("I;16", "I;16B", "I;16L", "I"):
            return np.asarray(img, dtype=np.float32) / 65535.0
        return np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0


def _middle_frame(data: bytes) -> np.ndarray:
    import av

    with av.open(io.BytesIO(data)) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    return frames[len(frames) // 2].astype(np.float32) / 255.0


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:  # should not happen (a set's images share one size): compare the overlap
        if a.ndim != b.ndim:
            a, b = (x if x.ndim == 3 else np.repeat(x[..., None], 3, axis=2) for x in (a, b))
        h, w = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
        a, b = a[:h, :w], b[:h, :w]
    return float(np.sqrt(np.mean((a - b) ** 2)))


class SimulationSession:
    """Shared state of one run: the HTTP session, the report, the image cache, the workers' paradigm."""

    def __init__(self, base_url: str, slug: str, http, report: SimulationReport, *, observer: str,
                 options: dict[str, Any], seed: int, max_retry_s: float, max_attempts: int,
                 pilot: str | None = None, secret: str | None = None):
        self.base_url = base_url.rstrip("/") + "/"
        self.slug = slug
        self.pilot = pilot  # the study's pilot signature: the workers are stored as simulated
        self.secret = secret  # the server's secret key: careful workers compute the [viewing] checks' answers
        self.http = http
        self.report = report
        self.observer = observer
        self.options = options  # the paradigms' own observer options (noise_rmse ...)
        self.seed = seed
        self.max_retry_s = max_retry_s
        self.max_attempts = max_attempts
        self._images: dict[str, asyncio.Future] = {}
        self._rmse: dict[tuple[str, str], float | None] = {}
        self._latent: dict[str, float] = {}
        self._worker_classes: dict[str, type[SimulatedWorker]] = {}
        self.shared: dict[str, Any] = {}  # what a paradigm's workers share in a run (caches)
        self.started = time.perf_counter()

    def url(self, path: str) -> str:
        # A plain join: the paths are the server's own (no "..", no query to merge), and urljoin
        # cost the client more CPU per vote than building the vote's body.
        return path if path.startswith("http") else self.base_url + path.lstrip("/")

    def worker_class(self, kind: str) -> type[SimulatedWorker]:
        """The simulated worker of the paradigm ``kind`` (its :meth:`Paradigm.simulated_worker`)."""
        found = self._worker_classes.get(kind)
        if found is None:
            from .paradigms import paradigm_named

            try:
                found = paradigm_named(kind).simulated_worker()
            except KeyError:
                found = None
            if found is None:
                raise GiveUp(f"client:no_simulated_worker:{kind}", f"the paradigm {kind!r} has no simulated worker")
            self._worker_classes[kind] = found
        return found

    async def request(self, kind: str, method: str, path: str, *, token: str | None = None,
                      body: Any = None, rng: np.random.Generator | None = None,
                      retry: bool = True, raw: bool = False, stats: dict | None = None) -> tuple[int, Any]:
        """One API call with retries on network errors, 5xx and 429.

        Returns (status, parsed JSON or None; bytes when ``raw``) of the last answer, which
        may be a 4xx (counted in ``errors`` under its JSON code). Raises :class:`GiveUp`
        when retries are exhausted.
        """
        import aiohttp

        headers = {"User-Agent": USER_AGENT}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        jitter = rng.random if rng is not None else np.random.random
        started = time.monotonic()
        attempt = 0
        last = "network"
        while True:
            attempt += 1
            if stats is not None:
                stats["attempts"] = attempt
            t0 = time.perf_counter()
            try:
                async with self.http.request(method, self.url(path), data=data, headers=headers,
                                             allow_redirects=False) as resp:
                    payload = await resp.read()
                    status = resp.status
                    retry_header = resp.headers.get("Retry-After")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                self.report.errors[f"network:{type(exc).__name__}"] += 1
                status, payload = None, None
            else:
                self.report.latencies_ms[kind].append((time.perf_counter() - t0) * 1000.0)
            retry_after = None
            if status is not None and status not in RETRY_STATUSES:
                if raw:
                    if status >= 400:
                        self.report.errors[f"http_{status}"] += 1
                    return status, payload
                parsed = _json_or_none(payload)
                if status >= 400:
                    self.report.errors[_error_code(parsed) or f"http_{status}"] += 1
                return status, parsed
            if status is not None:
                parsed = _json_or_none(payload)
                retry_after = _retry_after_s(retry_header, parsed)
                if isinstance(parsed, dict) and isinstance(parsed.get("setting"), str):
                    self.report.limits[_error_code(parsed) or f"http_{status}"] = parsed["setting"]
                if is_deferral(status, parsed):
                    self.report.deferred += 1
                else:
                    code = _error_code(parsed) if status == 429 else None
                    self.report.errors[code or ("rate_limited" if status == 429 else f"http_{status}")] += 1
                last = f"http_{status}"
            else:
                last = "network"
            if not retry or attempt >= self.max_attempts or time.monotonic() - started > self.max_retry_s:
                raise GiveUp(f"{kind}:{last}", f"{method} {path}: gave up after {attempt} attempts")
            self.report.retries += 1
            if retry_after is not None:
                delay = retry_after + 0.25 * jitter()  # two told nearly the same time must not come back together
            else:
                delay = min(2.0, 0.05 * 2 ** (attempt - 1)) * (0.5 + jitter())
            await asyncio.sleep(delay)

    # -- what an observer sees
    async def fetch(self, url: str, kind: str = "media", token: str | None = None) -> bytes | None:
        """A file's bytes (a stimulus, a dot movie), or None when it cannot be had (counted in ``errors``)."""
        try:
            status, data = await self.request(kind, "GET", url, token=token, raw=True)
        except GiveUp:
            return None
        return data if status == 200 and data else None

    async def image(self, url: str) -> np.ndarray | None:
        """A stimulus image as floats in [0, 1], downloaded once per run; None when unavailable."""
        future = self._images.get(url)
        if future is None:
            future = self._images[url] = asyncio.get_running_loop().create_future()
            try:
                data = await self.fetch(url, "image")
                array = await asyncio.to_thread(decode_image, data) if data else None
                if array is not None:
                    self.report.images_downloaded += 1
            except Exception:  # an undecodable image: this observer guesses
                array = None
            if array is None:
                self.report.errors["image_unavailable"] += 1
            future.set_result(array)
        return await future

    async def rmse(self, candidate_url: str, reference_url: str) -> float | None:
        """RMSE between two stimulus images in [0, 1] (None when one is unavailable)."""
        key = (candidate_url, reference_url)
        if key not in self._rmse:
            if candidate_url == reference_url:
                value = 0.0
            else:
                cand, ref = await asyncio.gather(self.image(candidate_url), self.image(reference_url))
                value = None if cand is None or ref is None else _rmse(cand, ref)
            self._rmse[key] = value
        return self._rmse[key]

    def latent(self, url: str) -> float:
        """A seeded latent quality ~ N(0, 1) of a URL, the same for every worker of the run."""
        if url not in self._latent:
            self._latent[url] = _latent(self.seed, url)
        return self._latent[url]


# ----------------------------------------------------------------------------- a paradigm's simulated worker

class Answer(NamedTuple):
    """One response a :class:`SimulatedWorker` decided on: the request body without its response ID,
    what it chose (for the report) and whether that agrees with the stimuli (None: unknown)."""

    body: dict[str, Any]
    choice: Any
    correct: bool | None


class SimulatedWorker:
    """What a paradigm's simulated worker decides; :class:`WorkerDriver` does the HTTP.

    A paradigm subclasses this in its package (``simulated_worker.py``) and returns the subclass from
    :meth:`~server.paradigms.core.Paradigm.simulated_worker`. It names its response kind
    (:attr:`response_kind`, the URL segment of ``POST /api/v1/assignments/{id}/{kind}``) and the body's
    response ID field (:attr:`id_field`), answers a trial of a page (:meth:`answer`) and, when its
    paradigm has stages beyond the paged lifecycle, runs them (:meth:`run_stage`).

    Attributes
    ----------
    driver : WorkerDriver
        The HTTP side: ``send``, ``state``, ``action``, ``api``, and the run's :class:`SimulationSession`.
    honest : bool
        An honest observer (else careless: answers at random).
    rng : numpy.random.Generator
        This worker's generator (its choices and timings).
    """

    response_kind: ClassVar[str] = ""
    id_field: ClassVar[str] = ""

    def __init__(self, driver: WorkerDriver, honest: bool, rng: np.random.Generator):
        self.driver = driver
        self.sim = driver.sim
        self.honest = honest
        self.rng = rng
        self.input = "keyboard" if rng.random() < 0.3 else "mouse"

    def rt_ms(self) -> float:
        """A response time: lognormal around :data:`MEDIAN_RT_MS`."""
        return round(float(self.rng.lognormal(math.log(MEDIAN_RT_MS), RT_LOG_SIGMA)), 1)

    def playback(self, sequence: list[list[dict[str, Any]]]) -> dict[str, float]:
        """A simulated playback log of a video trial (media.js's log, server/paradigms/media.py parse_playback):
        ``sequence`` lists what plays one after the other, each step the clips (the State's stimuli, with
        ``duration_s`` and ``fps``) that play together. A start delay of a few frames per step, now and then
        a dropped frame, no stall; steps of several clips add ``max_drift_ms``, a few ms of drift."""
        def frames(clip: dict[str, Any]) -> int:
            return round(float(clip.get("duration_s") or 0.0) * float(clip.get("fps") or 25.0))

        duration_ms = sum(max(1000.0 * float(clip.get("duration_s") or 0.0) for clip in step) for step in sequence)
        total = sum(frames(clip) for step in sequence for clip in step)
        dropped = int(self.rng.binomial(total, 0.002))
        start_delay = float(sum(self.rng.gamma(4.0, 10.0) for _ in sequence))
        log = {"stall_ms": 0.0, "dropped_frames": dropped, "presented_frames": total - dropped,
               "start_delay_ms": round(start_delay, 1), "replays": 0,
               "playing_ms": round(duration_ms + start_delay, 1), "duration_ms": round(duration_ms, 1)}
        if any(len(step) > 1 for step in sequence):
            log["max_drift_ms"] = round(float(self.rng.gamma(2.0, 2.0)), 1)
        return log

    async def answer(self, trial: dict[str, Any], state: dict[str, Any]) -> Answer:
        """The response to one open trial of a page (stage quiz or trials) of the State ``state``."""
        raise GiveUp(f"client:no_pages:{type(self).__name__}", "this paradigm's worker answers no pages")

    async def run_stage(self, stage: str, state: dict[str, Any]) -> dict[str, Any]:
        """Do the work of a stage the paged lifecycle does not know (motion: calibration, rdk, main);
        return the State after it. Default: give up (the paradigm has no such stage)."""
        raise GiveUp(f"client:unknown_stage:{stage}", f"no simulated work for stage {stage!r}")


# ----------------------------------------------------------------------------- one worker

class WorkerDriver:
    """One simulated worker's HTTP side and the lifecycle every paradigm shares (module docstring)."""

    def __init__(self, sim: SimulationSession, index: int, honest: bool, rng: np.random.Generator,
                 pages: int | None, pace: float | None):
        self.sim = sim
        self.index = index
        self.honest = honest
        self.rng = rng
        self.pages = pages
        self.pace = pace
        self.token: str | None = None
        self.aid: str | None = None
        self.external_id: str | None = None
        self.next_send: float | None = None  # open loop: when the next response is due
        self.model: SimulatedWorker | None = None
        self.viewing: dict[str, Any] | None = None  # the entry's [viewing] fields, until the checks are taken

    async def api(self, kind: str, method: str, path: str, body: Any = None,
                  stats: dict | None = None) -> tuple[int, Any]:
        return await self.sim.request(kind, method, path, token=self.token, body=body, rng=self.rng,
                                      stats=stats)

    def path(self, tail: str) -> str:
        """``/api/v1/assignments/{id}/{tail}``."""
        return f"/api/v1/assignments/{self.aid}/{tail}"

    async def state(self) -> dict:
        status, body = await self.api("state", "GET", self.path("state"))
        if status != 200 or not isinstance(body, dict):
            raise GiveUp(f"state:http_{status}")
        return body

    async def action(self, name: str) -> dict:
        status, body = await self.api("action", "POST", self.path("actions"), {"action": name})
        if status == 200 and isinstance(body, dict) and "stage" in body:
            return body
        # e.g. 409 wrong_stage after a retried action the server had already applied: re-read.
        return await self.state()

    async def send_environment(self) -> None:
        env = {"window": dict(WINDOW), "screen": dict(SCREEN), "user_agent": USER_AGENT}
        await self.api("environment", "POST", self.path("environment"), env)

    async def send(self, answer: Answer, trial_id: Any) -> tuple[int, Any]:
        """Send one response of the worker's kind with a fresh response ID (retried with the same ID and
        body); its record goes into the report. Returns the final ``(status, body)``."""
        model, sim = self.model, self.sim
        if self.pace is not None:
            if self.next_send is None:  # the schedule starts at the first response, not at the entry
                self.next_send = time.monotonic()
            self.next_send += self.rng.exponential(self.pace)
            wait = self.next_send - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        response_id = str(uuid.UUID(bytes=self.rng.bytes(16), version=4))
        body = {model.id_field: response_id, **answer.body}
        record = ResponseRecord(response_id, str(trial_id), self.aid, self.index, self.honest, answer.choice,
                                answer.correct)
        report = sim.report
        report.responses.append(record)
        report.sent += 1
        stats: dict = {}
        try:
            status, reply = await self.api(model.response_kind, "POST", self.path(model.response_kind), body, stats)
        except GiveUp:
            record.status = "unresolved"
            report.unresolved += 1
            raise
        finally:
            record.attempts = stats.get("attempts", 0)
            record.answered_s = time.perf_counter() - sim.started
            report.attempts += record.attempts
        if status in (200, 201) and isinstance(reply, dict):
            record.status = "duplicate" if reply.get("status") == "duplicate" else "stored"
            report.acknowledged += 1
            report.duplicates += record.status == "duplicate"
        else:
            record.status = f"rejected:{_error_code(reply) or status}"
            report.rejected += 1
        return status, reply

    async def enter(self) -> dict:
        hexid = "".join(f"{b:02X}" for b in self.rng.integers(0, 256, 6))
        self.external_id = f"SIMW{hexid}"
        entry = {"platform": "mturk", "worker_id": self.external_id,
                 "assignment_id": f"SIMA{hexid}{self.rng.integers(0, 1 << 30):08X}",
                 "hit_id": f"SIMH{self.rng.integers(0, 1 << 30):08X}",
                 "turk_submit_to": "https://workersandbox.mturk.com"}
        if self.sim.pilot is not None:
            entry.update(pilot=self.sim.pilot, simulated=True)
        asked = time.monotonic()
        status, body = await self.api("entry", "POST", f"/api/v1/studies/{self.sim.slug}/assignments", entry)
        self.sim.report.entry_waits_s.append(time.monotonic() - asked)
        if status not in (200, 201) or not isinstance(body, dict):
            raise GiveUp(f"entry:{_error_code(body) or f'http_{status}'}")
        self.token, self.aid = body["token"], str(body["assignment_id"])
        self.viewing = body.get("viewing")
        from .paradigms import DEFAULT_KIND

        kind = str(body.get("kind") or DEFAULT_KIND)  # a server from before the entry named its paradigm
        worker_class = self.sim.worker_class(kind)
        self.sim.report.kind, self.sim.report.response_kind = kind, worker_class.response_kind
        self.model = worker_class(self, self.honest, self.rng)
        return body

    async def run(self) -> str:
        """Take part from entry to the end; return the last stage (a :class:`GiveUp` escapes)."""
        body = await self.enter()
        state: dict | None = None
        stage = body.get("stage")
        env_sent = False
        target_pages = self.pages
        stalls, last_key = 0, None
        for _ in range(100_000):
            if stage in TERMINAL_STAGES:
                return stage
            if stage not in (Stage.CONSENT, Stage.INSTRUCTIONS) and not env_sent:
                await self.send_environment()
                env_sent = True
            if self.viewing is not None and stage == VIEWING_GATES.get(self.viewing["config"].get("when")):
                fields, self.viewing = self.viewing, None
                if not await take_checks(self, fields, self.sim.secret):
                    state = await self.state()  # turned away (disqualified), or a check the server refused
                    stage = state.get("stage")
                    continue
            if stage == Stage.CONSENT:
                state = await self.action("consent")
            elif stage == Stage.INSTRUCTIONS:
                state = await self.action("instructions_done")
            elif stage in PAGE_STAGES:
                if state is None or state.get("stage") != stage or not state.get("page"):
                    state = await self.state()
                if state.get("stage") == stage and state.get("page"):
                    # The response that completed the page brings the next State; else ask for it.
                    state = await self.answer_page(state) or await self.state()
            elif stage == Stage.PAGE_DONE:
                if state is None or state.get("stage") != Stage.PAGE_DONE:
                    state = await self.state()
                progress = state.get("progress") or {}
                done = int(progress.get("pages_completed", 0))
                lo, hi = int(progress.get("min_pages", 1)), int(progress.get("max_pages", 1))
                if target_pages is None:
                    target_pages = int(self.rng.integers(min(lo, hi), max(lo, hi) + 1))
                target_pages = max(target_pages, lo)  # the server refuses to finish before min_pages
                more = done < min(target_pages, hi) and progress.get("next_page", True) is not False
                state = await self.action("continue" if more else "finish")
            else:
                if state is None or state.get("stage") != stage:
                    state = await self.state()
                if state.get("stage") == stage:
                    state = await self.model.run_stage(stage, state)
            stage = state.get("stage")
            page = state.get("page") or {}
            # What would change if the server moved on: the page, its answered trials, the pages done, and
            # the open trials of a paradigm that lists them (motion: a failed practice trial's repeat is new).
            key = (stage, page.get("index"), sum(bool(t.get("answered")) for t in page.get("trials") or []),
                   (state.get("progress") or {}).get("pages_completed"),
                   tuple(t.get("trial_id") for t in state.get("trials") or []))
            stalls = stalls + 1 if key == last_key else 0
            last_key = key
            if stalls >= 5:  # the same state five times in a row: the server does not move on
                raise GiveUp("client:stuck", f"stuck at stage {stage}")
        raise GiveUp("client:stuck")

    async def answer_page(self, state: dict) -> dict | None:
        """Answer the page's open trials; the State the page's last response brought, if any."""
        page = state.get("page") or {}
        for trial in sorted(page.get("trials") or [], key=lambda t: t.get("position", 0)):
            if trial.get("answered"):
                continue
            answer = await self.model.answer(trial, state)
            status, reply = await self.send(answer, answer.body.get("trial_id"))
            if status not in (200, 201) or not isinstance(reply, dict):
                return None  # the page is not what we thought: re-read the state
            new_state = reply.get("state")
            if reply.get("page_complete") or reply.get("stage") not in PAGE_STAGES:
                return new_state if isinstance(new_state, dict) else None
        return None


# ----------------------------------------------------------------------------- the run

async def _preflight(sim: SimulationSession) -> None:
    """Raise ServerUnreachable / StudyNotFound before any worker starts.

    Sends the JSON entry of an MTurk *preview* (assignmentId ASSIGNMENT_ID_NOT_AVAILABLE),
    which the server refuses (400) without writing anything, or 404 when the study is unknown.
    """
    import aiohttp

    body = {"platform": "mturk", "worker_id": "SIMPREFLIGHT", "assignment_id": "ASSIGNMENT_ID_NOT_AVAILABLE",
            "hit_id": "SIMPREFLIGHT", "turk_submit_to": "https://workersandbox.mturk.com"}
    try:
        async with sim.http.post(sim.url(f"/api/v1/studies/{sim.slug}/assignments"), json=body,
                                 allow_redirects=False, headers={"User-Agent": USER_AGENT}) as resp:
            payload = await resp.read()
            status = resp.status
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise ServerUnreachable(f"cannot reach {sim.base_url}: {exc}") from exc
    if status == 404:
        raise StudyNotFound(f"{sim.base_url}: no study {sim.slug!r}")
    if status >= 500:
        raise ServerUnreachable(f"{sim.base_url}: HTTP {status} at the study's entry: {payload[:200]!r}")


async def run_simulation_async(base_url: str, study_slug: str, *, workers: int, spam: float = 0.25,
                               concurrency: int = 50, seed: int = 0, pages: int | None = None,
                               pace: float | None = None, ramp_s: float = 0.0, progress: bool = True,
                               observer: str = "images", request_timeout: float = 60.0,
                               max_retry_s: float = 120.0, max_attempts: int = 1000, pilot: str | None = None,
                               secret: str | None = None, **observer_options) -> SimulationReport:
    """Asynchronous :func:`run_simulation` (for callers that already run an event loop)."""
    import aiohttp

    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if not 0 <= spam <= 1:
        raise ValueError(f"spam must be in [0, 1], got {spam}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if pace is not None and pace <= 0:
        raise ValueError(f"pace must be > 0 seconds, got {pace}")
    if pages is not None and pages < 1:
        raise ValueError(f"pages must be >= 1, got {pages}")
    if not 0 <= ramp_s < 86_400:
        raise ValueError(f"ramp_s must be in [0, 86400) seconds, got {ramp_s}")
    if observer not in OBSERVERS:
        raise ValueError(f"observer must be one of {', '.join(OBSERVERS)}, got {observer!r}")
    for name, value in observer_options.items():
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"{name} must be > 0, got {value}")

    report = SimulationReport(base_url=base_url, study=study_slug, workers=workers, spam=spam,
                              concurrency=concurrency, seed=seed, pace=pace, observer=observer)
    n_spam = int(round(spam * workers))
    key = study_key(study_slug)
    spammers = set(np.random.default_rng([seed, key, 0xC0FFEE]).permutation(workers)[:n_spam].tolist())
    connector = aiohttp.TCPConnector(limit=concurrency + 8, limit_per_host=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=10)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=workers, unit="worker", desc=f"simulate {study_slug}", leave=False)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        sim = SimulationSession(base_url, study_slug, http, report, observer=observer,
                                options={k: v for k, v in observer_options.items() if v is not None}, seed=seed,
                                max_retry_s=max_retry_s, max_attempts=max_attempts, pilot=pilot, secret=secret)
        await _preflight(sim)
        indices: Iterable[int] = iter(range(workers))
        started = sim.started = time.perf_counter()

        async def runner() -> None:
            for index in indices:  # a shared iterator: each runner takes the next worker
                if ramp_s:  # arrivals spread evenly over the ramp instead of all at the start
                    await asyncio.sleep(max(0.0, started + ramp_s * index / workers - time.perf_counter()))
                rng = np.random.default_rng([seed, key, index])
                worker = WorkerDriver(sim, index, index not in spammers, rng, pages, pace)
                reason = None
                try:
                    outcome = await worker.run()
                except GiveUp as gave_up:
                    reason = gave_up.reason
                except Exception as exc:  # a bug or an unexpected answer: count it, go on
                    reason = f"client:{type(exc).__name__}"
                    report.errors[reason] += 1
                if reason is not None:
                    outcome = "error"
                    report.gave_up[reason] += 1
                    if worker.aid is not None and worker.external_id is not None:
                        report.gave_up_workers.append(worker.external_id)
                report.outcomes[outcome] += 1
                if bar is not None:
                    bar.update(1)
            if not report.full_concurrency_s:  # the first runner left without a next worker
                report.full_concurrency_s = time.perf_counter() - started

        try:
            await asyncio.gather(*(runner() for _ in range(min(concurrency, workers))))
        finally:
            report.elapsed_s = time.perf_counter() - started
            if bar is not None:
                bar.close()
    return report


def run_simulation(base_url: str, study_slug: str, *, workers: int, spam: float = 0.25,
                   concurrency: int = 50, seed: int = 0, pages: int | None = None,
                   pace: float | None = None, ramp_s: float = 0.0, progress: bool = True,
                   **options) -> SimulationReport:
    """Run ``workers`` simulated workers (``concurrency`` at a time) against a running server.

    Parameters
    ----------
    base_url : str
        e.g. ``"http://127.0.0.1:5000"``.
    study_slug : str
        The study, of any paradigm that has a simulated worker.
    workers : int
        Workers in all; a new one starts whenever one of the ``concurrency`` running ones ends.
    spam : float
        Fraction of careless workers (exactly ``round(spam * workers)`` of them).
    concurrency : int
        Workers running at the same time (and HTTP connections allowed).
    seed : int
    pages : int or None
        Pages each worker does in a paged study; None: a random number between the study's min_pages
        and max_pages.
    pace : float or None
        None: closed loop (no pause between responses); S: open loop, exponential gaps of mean S seconds.
    ramp_s : float
        Worker ``i`` enters no earlier than ``ramp_s * i / workers`` seconds after the start (0: each
        enters as soon as a slot is free), as workers arrive at a study over time rather than all at once.
    progress : bool
        Show a tqdm bar over workers.
    **options
        ``observer`` ("images" or "latent"), ``request_timeout`` (s per HTTP attempt), ``max_retry_s`` and
        ``max_attempts`` (per request), ``pilot`` (the study's pilot signature: the workers are stored as
        simulated pilot participants; without it they are ordinary MTurk workers, as load benchmarks need),
        ``secret`` (the server's secret key, with ``pilot``: careful workers answer the ``[viewing]`` checks right;
        without it every worker answers them at random),
        and the paradigms' observer options (``noise_rmse`` of paired comparison and ratings; None: the
        paradigm's default).

    Raises :class:`ServerUnreachable` or :class:`StudyNotFound` at the start; per-request
    errors are counted in the report, never raised.
    """
    def simulate() -> SimulationReport:
        return asyncio.run(run_simulation_async(base_url, study_slug, workers=workers, spam=spam,
                                                concurrency=concurrency, seed=seed, pages=pages, pace=pace,
                                                ramp_s=ramp_s, progress=progress, **options))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return simulate()
    # Called from code that runs an event loop in this thread (a notebook, Playwright's sync API):
    # asyncio.run() cannot nest, so the simulation gets a thread and a loop of its own.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(simulate).result()
