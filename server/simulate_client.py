"""Simulated crowd workers that drive a *running* perceptlab server through its JSON API.

Each simulated worker does what the browser app does, over real HTTP (aiohttp):

1. ``POST /api/v1/studies/{slug}/assignments`` (platform "mturk", a worker ID
   ``SIMW<hex>``, an assignment ID and a HIT ID), giving a bearer token; with
   ``pilot`` (the study's pilot signature, :func:`server.pilot.pilot_signature`,
   which ``perceptlab simulate`` always sends) the worker is stored as a simulated
   pilot participant, who counts in no estimate, wage, payment, pair target or
   default export;
2. the ``consent`` and ``instructions_done`` actions, then ``POST .../environment``;
3. a loop over the assignment's State: every unanswered trial of the current
   page (quiz or trials) gets a vote (a fresh uuid4 ``vote_id``, ``left`` or
   ``right``, a lognormal response time around 2 s, mouse or keyboard, the
   client time and a 1366x768 window); the vote that completes the page brings
   the new State (else it is fetched again), and at ``page_done`` the worker
   sends ``continue`` or ``finish``; it ends at ``completed``, ``stopped`` or
   ``disqualified``.

Worker types
------------
*Honest* workers are Thurstone Case V observers. With ``observer="images"``
(the default) they actually look at the stimuli: every distinct image URL is
downloaded once (one cache shared by all workers of a run) and decoded with
Pillow to floats in [0, 1]. The quality of a candidate is the RMSE between its
full image and the trial's reference image, and the worker chooses *right* when

    (rmse_left - rmse_right) / noise_rmse + e > 0,    e ~ N(0, 1),

so a candidate closer to the reference wins more often. ``noise_rmse`` is the
observer noise in RMSE units (images scaled to [0, 1]). Its default,
:data:`DEFAULT_NOISE_RMSE` = 0.01, was calibrated on the demo study
(``perceptlab stimuli build-demo``, 4 scenes x 11 methods, amplified images):
there the median |RMSE difference| of a design pair is 0.026, so honest
workers agree with the lower-RMSE candidate on 88 % of design pairs on average
(82 % at 0.02, 92 % at 0.005), and the gold pairs (pairs of candidates whose
errors differ by at least 1.5x and 8 grey levels, see :mod:`stimuli.gold`) are
answered correctly with probability >= 0.997 each, far above the 70 % gold
threshold.

With ``observer="latent"`` no image is downloaded: each image URL gets a
latent quality ~ N(0, 1) derived from a hash of (seed, URL), the same for every
worker, and the worker chooses right when ``latent_right - latent_left + e > 0``.
Nothing in a URL tells a gold pair or its better image (candidates' files under
opaque names, their latent qualities drawn like any other's), so latent workers answer gold pairs at chance
and fail the quiz: use this mode on a study without quiz and hidden gold
(``quiz_size = 0``, ``gold_rate = 0``). It measures only the API/vote path
(used by ``benchmarks/server_load.py``).

*Random clickers* (a fraction ``spam`` of the workers, exactly
``round(spam * workers)`` of them, chosen by the seed) pick left or right with
probability 1/2. Their choice ignores the images, but the simulator still
works out which side was closer to the reference for the report's agreement
figures (:meth:`SimulationReport.agreement`), so with ``observer="images"``
their trials' images are fetched too (once, through the shared cache).

Retries and accounting
----------------------
A request that fails with a network error, a timeout, 5xx or 429 is retried
with exponential backoff and jitter, or after the time the answer gives when it
gives one (its body's ``retry_after_s``, else its ``Retry-After``; at most a
minute, plus up to 0.25 s of jitter). A new worker the server defers (429
``busy``: over its admission rate) is not an error: such answers are counted in
``deferred``, and each worker's wait from its first entry request to its
admission in ``entry_waits_s``. A vote is always retried with the SAME
``vote_id`` and payload, which exercises the server's idempotency (a retried
vote the server had already stored answers ``"status": "duplicate"``; these
are counted). The report keeps every vote_id sent and its final fate:
acknowledged (201 stored or 200 duplicate), rejected (a definite 4xx answer),
or unresolved (retries exhausted). :func:`run_simulation` never raises for
per-request errors; it counts them by code (the JSON ``error`` of a 4xx, or
``http_<status>``, or ``network:<ExceptionName>``). It raises
:class:`ServerUnreachable` / :class:`StudyNotFound` when the server cannot be
reached or the study does not exist at the start.

Pacing: ``pace=None`` is a closed loop (the next vote is sent as soon as the
previous one is answered). ``pace=S`` is an open loop: each worker's votes are
scheduled at exponential gaps of mean S seconds from the previous *scheduled*
time (not from the previous answer), starting at its first vote, so a slow
server does not slow the arrival of votes down; a worker that fell behind its
schedule (a slow answer, a page change) sends its overdue votes at once.

Seeds: the worker IDs, types, choices and timings derive from ``seed`` and the
worker index (``np.random.default_rng([seed, index])``). Two runs against the
same database need different seeds, or the "new" workers resume the old
assignments.
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
from typing import Any

import numpy as np

from .paradigms.entry import BUSY
from .paradigms.stages import TERMINAL_STAGES, Stage  # full: no work left (study filled)

#: Observer noise in RMSE units (images in [0, 1]); calibrated on the demo study (module docstring).
DEFAULT_NOISE_RMSE = 0.01
#: Median response time of a simulated vote, in ms (lognormal, sigma 0.5 in log units).
MEDIAN_RT_MS = 2000.0
RT_LOG_SIGMA = 0.5
WINDOW = {"width": 1366, "height": 768, "dpr": 1}
SCREEN = {"width": 1366, "height": 768}
USER_AGENT = "perceptlab-simulate/0.1 (aiohttp)"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
OBSERVERS = ("images", "latent")


class SimulationError(RuntimeError):
    """The simulation could not start."""


class ServerUnreachable(SimulationError):
    """No HTTP answer from the server at the start of a run."""


class StudyNotFound(SimulationError):
    """The server answered, but has no study with this slug."""


class _GiveUp(Exception):
    """A request failed for good (retries exhausted); already counted."""


# ----------------------------------------------------------------------------- report

@dataclass
class VoteRecord:
    """One vote the client sent, and what became of it."""

    vote_id: str
    trial_id: str
    assignment_id: str
    worker_index: int
    honest: bool
    choice: str
    correct: bool | None     # chose the candidate closer to the reference (None: unknown or tie)
    status: str = "pending"  # stored | duplicate | rejected:<code> | unresolved
    attempts: int = 0
    answered_s: float | None = None  # seconds from the start of the run to the final answer


@dataclass
class SimulationReport:
    """What a :func:`run_simulation` run did and saw.

    ``votes_sent`` counts distinct vote_ids sent (retries of one vote count
    once, in ``vote_attempts``); ``votes_acknowledged`` those the server
    answered 201 (stored) or 200 (duplicate: a retry of a stored vote);
    ``duplicates`` the "duplicate" answers. ``latencies_ms`` holds one sample
    per HTTP answer, by request kind (entry, state, action, environment,
    vote, image). ``outcomes`` counts workers by their last stage
    (completed / stopped / disqualified / full, or ``error`` when a worker gave up). The server's entry
    rate limit (``[server] entry_limit`` per client address) answers 429 to a fast simulation from one
    machine: ``limits`` keeps, per limit met, the setting the server named as lifting it (its answers'
    ``setting``), and :meth:`summary_lines` prints it (e.g. the study's ``[entry] entry_limit``, or
    ``PERCEPTLAB_SERVER_ENTRY_LIMIT=0`` for the server under test).
    """

    base_url: str
    study: str
    workers: int
    spam: float
    concurrency: int
    seed: int
    pace: float | None
    observer: str
    votes_sent: int = 0
    votes_acknowledged: int = 0
    votes_rejected: int = 0
    votes_unresolved: int = 0
    duplicates: int = 0
    vote_attempts: int = 0
    retries: int = 0
    deferred: int = 0  # 429 "busy" answers to entries: new workers told to come back (the admission rate)
    entry_waits_s: list[float] = field(default_factory=list)  # first entry request to admission, per worker
    errors: Counter = field(default_factory=Counter)
    limits: dict[str, str] = field(default_factory=dict)  # error code of a limit met -> the setting lifting it
    latencies_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    outcomes: Counter = field(default_factory=Counter)
    elapsed_s: float = 0.0
    #: Seconds from the start until the first of the ``concurrency`` slots ran out of workers:
    #: until then exactly ``concurrency`` workers were running.
    full_concurrency_s: float = 0.0
    votes: list[VoteRecord] = field(default_factory=list)
    images_downloaded: int = 0

    # -- derived figures
    def percentile(self, q: float, kind: str = "vote") -> float:
        """The ``q``-th percentile (0-100) of the latencies of ``kind`` in ms (NaN when none)."""
        samples = self.latencies_ms.get(kind) or []
        return float(np.percentile(samples, q)) if samples else math.nan

    def p50(self, kind: str = "vote") -> float:
        return self.percentile(50, kind)

    def p99(self, kind: str = "vote") -> float:
        return self.percentile(99, kind)

    def votes_per_second(self) -> float:
        """Acknowledged votes per second of the whole run (entry and page changes included)."""
        return self.votes_acknowledged / self.elapsed_s if self.elapsed_s > 0 else math.nan

    def votes_per_second_full(self) -> float:
        """Acknowledged votes per second while all ``concurrency`` workers were running
        (from the start to :attr:`full_concurrency_s`), so the tail of the run, with fewer
        workers left, does not dilute the rate."""
        t = self.full_concurrency_s
        if t <= 0:
            return math.nan
        n = sum(1 for v in self.votes if v.status in ("stored", "duplicate") and v.answered_s is not None
                and v.answered_s <= t)
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

    def acknowledged_vote_ids(self) -> set[str]:
        return {v.vote_id for v in self.votes if v.status in ("stored", "duplicate")}

    def sent_vote_ids(self) -> set[str]:
        return {v.vote_id for v in self.votes}

    def agreement(self, honest: bool) -> tuple[int, int]:
        """(votes that chose the candidate closer to the reference, votes with a known answer)
        among acknowledged votes of honest (``True``) or random (``False``) workers."""
        known = [v for v in self.votes if v.honest == honest and v.correct is not None
                 and v.status in ("stored", "duplicate")]
        return sum(v.correct for v in known), len(known)

    def to_dict(self, *, include_votes: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "base_url": self.base_url, "study": self.study, "workers": self.workers, "spam": self.spam,
            "concurrency": self.concurrency, "seed": self.seed, "pace": self.pace, "observer": self.observer,
            "votes_sent": self.votes_sent, "votes_acknowledged": self.votes_acknowledged,
            "votes_rejected": self.votes_rejected, "votes_unresolved": self.votes_unresolved,
            "duplicates": self.duplicates, "vote_attempts": self.vote_attempts, "retries": self.retries,
            "deferred": self.deferred, "entry_wait_s": self.entry_wait_figures(),
            "errors": dict(self.errors), "outcomes": dict(self.outcomes),
            "elapsed_s": self.elapsed_s, "votes_per_second": self.votes_per_second(),
            "full_concurrency_s": self.full_concurrency_s,
            "votes_per_second_full_concurrency": self.votes_per_second_full(),
            "images_downloaded": self.images_downloaded,
            "latency_ms": {kind: {"n": len(s), "p50": self.p50(kind), "p99": self.p99(kind),
                                  "max": float(max(s)) if s else math.nan}
                           for kind, s in sorted(self.latencies_ms.items())},
            "agreement": {name: dict(zip(("agree", "n"), self.agreement(flag)))
                          for name, flag in (("honest", True), ("random", False))},
        }
        if include_votes:
            out["votes"] = [v.__dict__.copy() for v in self.votes]
        return out

    def summary_lines(self) -> list[str]:
        """A short human summary (used by ``perceptlab simulate``)."""
        errors = ", ".join(f"{k} {v}" for k, v in self.errors.most_common()) or "none"
        honest, random_ = self.agreement(True), self.agreement(False)
        pct = lambda a: f"{100 * a[0] / a[1]:.1f}% of {a[1]}" if a[1] else "-"  # noqa: E731
        waits = self.entry_wait_figures()
        return [
            f"workers: {self.workers} ({min(self.concurrency, self.workers)} at a time), "
            f"completed {self.outcomes.get('completed', 0)}, stopped {self.outcomes.get('stopped', 0)}, "
            f"disqualified {self.outcomes.get('disqualified', 0)}, study full {self.outcomes.get('full', 0)}, "
            f"gave up {self.outcomes.get('error', 0)}",
            f"votes: sent {self.votes_sent}, acknowledged {self.votes_acknowledged}, "
            f"duplicates {self.duplicates}, rejected {self.votes_rejected}, unresolved {self.votes_unresolved}",
            f"rate: {self.votes_per_second():.1f} votes/s over {self.elapsed_s:.1f} s "
            f"({self.votes_per_second_full():.1f} votes/s in the first {self.full_concurrency_s:.1f} s, "
            f"all {min(self.concurrency, self.workers)} workers running)",
            f"vote latency: p50 {self.p50():.1f} ms, p99 {self.p99():.1f} ms "
            f"({len(self.latencies_ms.get('vote', []))} answers)",
            f"errors: {errors} (retries {self.retries})",
            *(f"limit met ({code}, {self.errors.get(code, 0) or self.deferred} answers): {setting}"
              for code, setting in sorted(self.limits.items())),
            f"entries deferred (server busy, 429 + Retry-After): {self.deferred}; wait for admission "
            f"p50 {waits['p50']:.1f} s, max {waits['max']:.1f} s",
            f"agreement with the reference: honest {pct(honest)}, random {pct(random_)}",
        ] + (["entries refused as bad_link: the server's secret key differs from this instance's (run simulate "
              "with the server's instance folder: perceptlab --instance DIR simulate ...)"]
             if self.errors.get("bad_link") else [])


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


def _now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _latent(seed: int, url: str) -> float:
    digest = hashlib.blake2b(f"{seed}\0{url}".encode(), digest_size=8).digest()
    return float(np.random.default_rng(int.from_bytes(digest, "little")).normal())


def _decode_png(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        if img.mode in ("I;16", "I;16B", "I;16L", "I"):
            return np.asarray(img, dtype=np.float32) / 65535.0
        return np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:  # should not happen (a set's images share one size): compare the overlap
        if a.ndim != b.ndim:
            a, b = (x if x.ndim == 3 else np.repeat(x[..., None], 3, axis=2) for x in (a, b))
        h, w = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
        a, b = a[:h, :w], b[:h, :w]
    return float(np.sqrt(np.mean((a - b) ** 2)))


class _Session:
    """Shared state of one run: the HTTP session, the report, the image cache."""

    def __init__(self, base_url: str, slug: str, http, report: SimulationReport, *, observer: str,
                 noise_rmse: float, seed: int, max_retry_s: float, max_attempts: int, pilot: str | None = None):
        self.base_url = base_url.rstrip("/") + "/"
        self.slug = slug
        self.pilot = pilot  # the study's pilot signature: the workers are stored as simulated
        self.http = http
        self.report = report
        self.observer = observer
        self.noise_rmse = noise_rmse
        self.seed = seed
        self.max_retry_s = max_retry_s
        self.max_attempts = max_attempts
        self._images: dict[str, asyncio.Future] = {}
        self._rmse: dict[tuple[str, str], float | None] = {}
        self._latent: dict[str, float] = {}
        self.started = time.perf_counter()

    def url(self, path: str) -> str:
        # A plain join: the paths are the server's own (no "..", no query to merge), and urljoin
        # cost the client more CPU per vote than building the vote's body.
        return path if path.startswith("http") else self.base_url + path.lstrip("/")

    async def request(self, kind: str, method: str, path: str, *, token: str | None = None,
                      body: Any = None, rng: np.random.Generator | None = None,
                      retry: bool = True, raw: bool = False, stats: dict | None = None) -> tuple[int, Any]:
        """One API call with retries on network errors, 5xx and 429.

        Returns (status, parsed JSON or None; bytes when ``raw``) of the last answer, which
        may be a 4xx (counted in ``errors`` under its JSON code). Raises :class:`_GiveUp`
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
            if not retry or attempt >= self.max_attempts or time.monotonic() - started > self.max_retry_s:
                raise _GiveUp(f"{method} {path}: gave up after {attempt} attempts")
            self.report.retries += 1
            if retry_after is not None:
                delay = retry_after + 0.25 * jitter()  # two told nearly the same time must not come back together
            else:
                delay = min(2.0, 0.05 * 2 ** (attempt - 1)) * (0.5 + jitter())
            await asyncio.sleep(delay)

    # -- what an observer sees
    async def image(self, url: str) -> np.ndarray | None:
        future = self._images.get(url)
        if future is None:
            future = self._images[url] = asyncio.get_running_loop().create_future()
            try:
                status, data = await self.request("image", "GET", url, raw=True)
                array = await asyncio.to_thread(_decode_png, data) if status == 200 and data else None
                if array is not None:
                    self.report.images_downloaded += 1
            except Exception:  # _GiveUp or an undecodable image: this observer guesses
                array = None
            if array is None:
                self.report.errors["image_unavailable"] += 1
            future.set_result(array)
        return await future

    async def rmse(self, candidate_url: str, reference_url: str) -> float | None:
        key = (candidate_url, reference_url)
        if key not in self._rmse:
            if candidate_url == reference_url:
                value = 0.0
            else:
                cand, ref = await asyncio.gather(self.image(candidate_url), self.image(reference_url))
                value = None if cand is None or ref is None else _rmse(cand, ref)
            self._rmse[key] = value
        return self._rmse[key]

    def latent(self, url: str, reference_url: str) -> float:
        if url not in self._latent:
            self._latent[url] = _latent(self.seed, url)
        return self._latent[url]

    async def quality_gap(self, trial: dict) -> float | None:
        """How much better the right image is than the left, in observer z units (None: unknown)."""
        ref = trial["reference"]["full"]
        left, right = trial["left"]["full"], trial["right"]["full"]
        if self.observer == "latent":
            return self.latent(right, ref) - self.latent(left, ref)
        r_left, r_right = await asyncio.gather(self.rmse(left, ref), self.rmse(right, ref))
        if r_left is None or r_right is None:
            return None
        return (r_left - r_right) / self.noise_rmse


# ----------------------------------------------------------------------------- one worker

class _Worker:
    def __init__(self, sim: _Session, index: int, honest: bool, rng: np.random.Generator,
                 pages: int | None, pace: float | None):
        self.sim = sim
        self.index = index
        self.honest = honest
        self.rng = rng
        self.pages = pages
        self.pace = pace
        self.input = "keyboard" if rng.random() < 0.3 else "mouse"
        self.token: str | None = None
        self.aid: str | None = None
        self.next_send: float | None = None  # open loop: when the next vote is due

    async def api(self, kind: str, method: str, path: str, body: Any = None,
                  stats: dict | None = None) -> tuple[int, Any]:
        return await self.sim.request(kind, method, path, token=self.token, body=body, rng=self.rng,
                                      stats=stats)

    async def state(self) -> dict:
        status, body = await self.api("state", "GET", f"/api/v1/assignments/{self.aid}/state")
        if status != 200 or not isinstance(body, dict):
            raise _GiveUp(f"state: HTTP {status}")
        return body

    async def action(self, name: str) -> dict:
        status, body = await self.api("action", "POST", f"/api/v1/assignments/{self.aid}/actions",
                                      {"action": name})
        if status == 200 and isinstance(body, dict) and "stage" in body:
            return body
        # e.g. 409 wrong_stage after a retried action the server had already applied: re-read.
        return await self.state()

    async def run(self) -> str:
        hexid = "".join(f"{b:02X}" for b in self.rng.integers(0, 256, 6))
        entry = {"platform": "mturk", "worker_id": f"SIMW{hexid}",
                 "assignment_id": f"SIMA{hexid}{self.rng.integers(0, 1 << 30):08X}",
                 "hit_id": f"SIMH{self.rng.integers(0, 1 << 30):08X}",
                 "turk_submit_to": "https://workersandbox.mturk.com"}
        if self.sim.pilot is not None:
            entry.update(pilot=self.sim.pilot, simulated=True)
        asked = time.monotonic()
        status, body = await self.api("entry", "POST", f"/api/v1/studies/{self.sim.slug}/assignments", entry)
        self.sim.report.entry_waits_s.append(time.monotonic() - asked)
        if status not in (200, 201) or not isinstance(body, dict):
            return "error"
        self.token, self.aid = body["token"], str(body["assignment_id"])
        state: dict | None = None
        stage = body.get("stage")
        env_sent = False
        target_pages = self.pages
        stalls, last_key = 0, None
        for _ in range(100_000):
            if stage in TERMINAL_STAGES:
                return stage
            if stage == Stage.CONSENT:
                state = await self.action("consent")
            elif stage == Stage.INSTRUCTIONS:
                state = await self.action("instructions_done")
            elif stage in (Stage.QUIZ, Stage.TRIALS):
                if not env_sent:
                    env = {"window": dict(WINDOW), "screen": dict(SCREEN), "user_agent": USER_AGENT}
                    await self.api("environment", "POST", f"/api/v1/assignments/{self.aid}/environment", env)
                    env_sent = True
                if state is None or state.get("stage") != stage or not state.get("page"):
                    state = await self.state()
                if state.get("stage") == stage and state.get("page"):
                    # The vote that completed the page brings the next State; else ask for it.
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
                state = await self.action("continue" if done < min(target_pages, hi) else "finish")
            else:
                state = await self.state()
            stage = state.get("stage")
            page = state.get("page") or {}
            key = (stage, page.get("index"), page.get("n_answered"),
                   (state.get("progress") or {}).get("pages_completed"))
            stalls = stalls + 1 if key == last_key else 0
            last_key = key
            if stalls >= 5:  # the same state five times in a row: the server does not move on
                self.sim.report.errors["client:stuck"] += 1
                return "error"
        return "error"

    async def answer_page(self, state: dict) -> dict | None:
        """Vote on the page's open trials; the State the page's last vote brought, if any."""
        page = state.get("page") or {}
        for trial in sorted(page.get("trials") or [], key=lambda t: t.get("position", 0)):
            if trial.get("answered"):
                continue
            stage, page_complete, new_state = await self.vote(trial)
            if page_complete or stage not in (Stage.QUIZ, Stage.TRIALS):
                return new_state
        return None

    async def vote(self, trial: dict) -> tuple[str | None, bool, dict | None]:
        """Send one vote; the answer's stage, whether it completed the page, and the State it brought."""
        sim = self.sim
        gap = await sim.quality_gap(trial)
        if self.honest and gap is not None:
            choice = "right" if gap + self.rng.normal() > 0 else "left"
        else:
            choice = "right" if self.rng.random() < 0.5 else "left"
        correct = None if gap is None or gap == 0 else (choice == "right") == (gap > 0)
        if self.pace is not None:
            if self.next_send is None:  # the schedule starts at the first vote, not at the entry
                self.next_send = time.monotonic()
            self.next_send += self.rng.exponential(self.pace)
            wait = self.next_send - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
        vote_id = str(uuid.UUID(bytes=self.rng.bytes(16), version=4))
        body = {"vote_id": vote_id, "trial_id": str(trial["trial_id"]), "choice": choice,
                "rt_ms": round(float(self.rng.lognormal(math.log(MEDIAN_RT_MS), RT_LOG_SIGMA)), 1),
                "input": self.input, "client_time": _now_iso(), "window": dict(WINDOW)}
        record = VoteRecord(vote_id, body["trial_id"], self.aid, self.index, self.honest, choice, correct)
        report = sim.report
        report.votes.append(record)
        report.votes_sent += 1
        stats: dict = {}
        try:
            status, answer = await self.api("vote", "POST", f"/api/v1/assignments/{self.aid}/votes", body, stats)
        except _GiveUp:
            record.status = "unresolved"
            report.votes_unresolved += 1
            raise
        finally:
            record.attempts = stats.get("attempts", 0)
            record.answered_s = time.perf_counter() - sim.started
            report.vote_attempts += record.attempts
        if status in (200, 201) and isinstance(answer, dict):
            record.status = "duplicate" if answer.get("status") == "duplicate" else "stored"
            report.votes_acknowledged += 1
            report.duplicates += record.status == "duplicate"
            new_state = answer.get("state")
            return answer.get("stage"), bool(answer.get("page_complete")), new_state if isinstance(new_state, dict) else None
        code = answer.get("error") if isinstance(answer, dict) else None
        record.status = f"rejected:{code or status}"
        report.votes_rejected += 1
        return None, True, None  # the page is not what we thought: re-read the state


# ----------------------------------------------------------------------------- the run

async def _preflight(sim: _Session) -> None:
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
                               observer: str = "images", noise_rmse: float = DEFAULT_NOISE_RMSE,
                               request_timeout: float = 60.0, max_retry_s: float = 120.0,
                               max_attempts: int = 1000, pilot: str | None = None) -> SimulationReport:
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
    if not noise_rmse > 0:
        raise ValueError(f"noise_rmse must be > 0, got {noise_rmse}")

    report = SimulationReport(base_url=base_url, study=study_slug, workers=workers, spam=spam,
                              concurrency=concurrency, seed=seed, pace=pace, observer=observer)
    n_spam = int(round(spam * workers))
    spammers = set(np.random.default_rng([seed, 0xC0FFEE]).permutation(workers)[:n_spam].tolist())
    connector = aiohttp.TCPConnector(limit=concurrency + 8, limit_per_host=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=10)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=workers, unit="worker", desc=f"simulate {study_slug}", leave=False)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        sim = _Session(base_url, study_slug, http, report, observer=observer, noise_rmse=noise_rmse,
                       seed=seed, max_retry_s=max_retry_s, max_attempts=max_attempts, pilot=pilot)
        await _preflight(sim)
        indices: Iterable[int] = iter(range(workers))
        started = sim.started = time.perf_counter()

        async def runner() -> None:
            for index in indices:  # a shared iterator: each runner takes the next worker
                if ramp_s:  # arrivals spread evenly over the ramp instead of all at the start
                    await asyncio.sleep(max(0.0, started + ramp_s * index / workers - time.perf_counter()))
                rng = np.random.default_rng([seed, index])
                worker = _Worker(sim, index, index not in spammers, rng, pages, pace)
                try:
                    outcome = await worker.run()
                except _GiveUp:
                    outcome = "error"
                except Exception as exc:  # a bug or an unexpected answer: count it, go on
                    report.errors[f"client:{type(exc).__name__}"] += 1
                    outcome = "error"
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
    workers : int
        Workers in all; a new one starts whenever one of the ``concurrency`` running ones ends.
    spam : float
        Fraction of random clickers (exactly ``round(spam * workers)`` of them).
    concurrency : int
        Workers running at the same time (and HTTP connections allowed).
    seed : int
    pages : int or None
        Pages each worker does; None: a random number between the study's min_pages and max_pages.
    pace : float or None
        None: closed loop (no pause between votes); S: open loop, exponential gaps of mean S seconds.
    ramp_s : float
        Worker ``i`` enters no earlier than ``ramp_s * i / workers`` seconds after the start (0: each
        enters as soon as a slot is free), as workers arrive at a study over time rather than all at once.
    progress : bool
        Show a tqdm bar over workers.
    **options
        ``observer`` ("images" or "latent"), ``noise_rmse`` (default :data:`DEFAULT_NOISE_RMSE`),
        ``request_timeout`` (s per HTTP attempt), ``max_retry_s`` and ``max_attempts`` (per request),
        ``pilot`` (the study's pilot signature: the workers are stored as simulated pilot participants;
        without it they are ordinary MTurk workers, as load benchmarks need).

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
