"""Server CPU, SQL statements and PostgreSQL CPU of one worker's whole life, in-process, by request.

Where :mod:`benchmarks.vote_cpu` measures the vote request, this measures everything a worker of
``benchmarks/server_load.py --quick`` sends (its study: 20 pairs a page, no quiz, no gold; one page per
worker), in the order :mod:`server.simulate_client` sends it: the entry, ``consent``,
``instructions_done`` (the page start), ``POST .../environment``, the State when the page did not come
with the action, the 20 votes (the last brings the State of stage page_done) and ``finish``. Each request
goes straight into the WSGI app (no HTTP, no server process; its environ is built before the clock
starts), one worker after another, on a fresh PostgreSQL database on 127.0.0.1:5432 (dropped at the end).

For each kind of request it prints, per worker:

* the CPU of the app (``time.thread_time``: this thread only);
* the SQL statements sent (SQLAlchemy's ``before_cursor_execute``; a one-statement path on the driver's
  connection, ``server.paradigms.core.autocommit_driver_connection``, counts as one);
* the CPU of the app's PostgreSQL backends over the request (user + system from ``/proc``, in clock ticks
  of 10 ms: meaningful summed over many workers, not per request).

``--logs`` writes the app's logs as under gunicorn (``configure_logging``: the JSON access log, to /dev/null), so
that their cost is counted; run with ``PROMETHEUS_MULTIPROC_DIR`` set to an empty folder to count the metrics'
multiprocess mode too (files written per observation), as deploy/gunicorn.conf.py runs them.

``--gunicorn`` then measures the same lives over HTTP: ``gunicorn 'server:create_app()' -k gthread`` (one worker,
two threads, as benchmarks/server_load.py's workers run) on the same database, one keep-alive connection, and for
each kind the gunicorn worker process's CPU (user + system from ``/proc``, clock ticks as PostgreSQL's): beside the
in-process table, what HTTP and the server add to each request. Measured (``--workers 100 --gunicorn``, issue 38
item 12): load 1.1, in-process 13.9 ms app CPU a worker (plain votes 0.18 ms each), over HTTP 29.8 ms (plain votes
0.74 ms each): the server process adds about 0.6 ms to every request, more than a vote's own CPU: gunicorn's HTTP
work (parse, answer, the gthread poller's hand-offs; a bare 403 through Flask costs a gunicorn worker 0.45-0.74 ms,
the baseline's as perceptlab's) and the app's code running slower among threads; load 2.4, 31.9 against 57.2 ms. The ``Instrumented`` middleware with its
JSON access line and multiprocess metrics is 15-20 us of it (benchmarks/middleware_cpu.py).

``--show-sql`` prints the statements of one worker; ``--profile N`` cProfiles N more workers (their requests
only, of the kinds in ``--kinds``) and prints the top entries by cumulative and by own time.

``--baseline`` measures the stack's limit the same way, in the same database, after perceptlab's workers:
:mod:`benchmarks.baseline_app` (the app ``benchmarks/server_load.py`` compares perceptlab with) driven as
:mod:`server.simulate_client` drives it (the entry, the State, the environment, the 20 votes, the State at the
end; the statements are the driver's own and not counted), and prints the ratio of the two lives' CPU (app +
PostgreSQL): where server_load.py's fraction of the baseline is lost, request by request, without HTTP.

Run: .venv/bin/python benchmarks/worker_cpu.py [--workers 100] [--profile 50] [--kinds entry,finish] [--show-sql]
     [--baseline] [--logs] [--gunicorn]
"""
from __future__ import annotations

import argparse
import cProfile
import http.client
import json
import os
import pstats
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks._common import build_demo_stimuli  # noqa: E402
from benchmarks.vote_cpu import CLOCK_TICK_S, PG_ADMIN, VENV_BIN, WINDOW, pg_admin  # noqa: E402
from server.services import app_services  # noqa: E402

KINDS = ("entry", "consent", "instructions_done", "environment", "state", "vote", "vote (page end)", "finish")
PAIRS_PER_PAGE = 20


def create_study(url: str, folder: Path, manifest: Path, slug: str, votes_per_pair: int) -> None:
    """The study of ``benchmarks/server_load.py`` (its create_study), made by ``perceptlab study create``."""
    toml = folder / f"{slug}.toml"
    toml.write_text(
        f'[study]\nslug = "{slug}"\nname = "worker CPU benchmark"\nmanifests = ["{manifest.as_posix()}"]\nseed = 0\n\n'
        f'[design]\ndegree = 12\nvotes_per_pair = {votes_per_pair}\n\n'
        f'[pages]\npairs_per_page = {PAIRS_PER_PAGE}\nmin_pages = 1\nmax_pages = 100\n'
        '[quality]\nquiz_size = 0\ngold_rate = 0.0\n\n'
        '[texts]\nresearcher = "the worker CPU benchmark"\ncontact = "bench@perceptlab.invalid"\n\n'
        "[entry]\nexternal_hits = true\n")
    subprocess.run([str(VENV_BIN / "perceptlab"), "study", "create", str(toml), "--database-url", url], check=True,
                   cwd=ROOT, stdout=subprocess.DEVNULL)


def backend_pids(dbname: str) -> list[int]:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        return [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (dbname,))]


def cpu_ticks(pids: list[int]) -> int:
    """User + system clock ticks used so far by the processes ``pids`` (those still running)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total


class Lives:
    """Workers of one study on one app, one after another; CPU, statements and backend CPU kept per request kind."""

    def __init__(self, app, slug: str):
        from sqlalchemy import event

        from server.paradigms import core

        self.app, self.slug = app, slug
        self._start_tallies()
        event.listen(app_services(app).engine, "before_cursor_execute",
                     lambda _c, _cur, statement, *_: self._count(statement))
        plain = core.autocommit_driver_connection

        @contextmanager
        def counted(engine):  # the one-statement paths' driver connection: SQLAlchemy's events do not see it
            with plain(engine) as connection:
                self._count("<one statement on the driver's connection, autocommit>")
                yield connection

        core.autocommit_driver_connection = counted

    def _start_tallies(self) -> None:
        """What a life's requests are tallied in (the subclasses, which measure other apps, start these too)."""
        self.kind: str | None = None  # the request under way (statements are counted for it)
        self.cpu_ms: dict[str, list[float]] = {}
        self.statements: dict[str, int] = {}
        self.backend_ticks: dict[str, int] = {}
        self.pids: list[int] = []
        self.captured: list[str] | None = None
        self.profiler: cProfile.Profile | None = None
        self.profiled: tuple[str, ...] = ()

    def clear(self) -> None:
        self.cpu_ms.clear()
        self.statements.clear()
        self.backend_ticks.clear()

    def _count(self, statement: str) -> None:
        if self.kind is not None:
            self.statements[self.kind] = self.statements.get(self.kind, 0) + 1
            if self.captured is not None:
                self.captured.append(f"[{self.kind}] " + " ".join(statement.split())[:160])

    def call(self, kind: str, method: str, path: str, token: str | None = None, body=None):
        from werkzeug.test import EnvironBuilder

        headers = {"User-Agent": "perceptlab-bench"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        builder = EnvironBuilder(path=path, method=method, headers=headers,
                                 data=None if body is None else json.dumps(body),
                                 content_type=None if body is None else "application/json")
        try:
            environ = builder.get_environ()
        finally:
            builder.close()
        status: list[str] = []
        profiler = self.profiler if kind in self.profiled else None
        ticks0 = cpu_ticks(self.pids)
        self.kind = kind
        if profiler is not None:
            profiler.enable()
        cpu0 = time.thread_time()
        result = self.app(environ, lambda line, _headers, _exc_info=None: status.append(line))
        try:
            payload = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        cpu1 = time.thread_time()
        if profiler is not None:
            profiler.disable()
        self.kind = None
        self.backend_ticks[kind] = self.backend_ticks.get(kind, 0) + cpu_ticks(self.pids) - ticks0
        self.cpu_ms.setdefault(kind, []).append((cpu1 - cpu0) * 1000.0)
        if not status or status[0][:3] not in ("200", "201", "204"):
            raise RuntimeError(f"{method} {path}: {status} {payload[:300]!r}")
        return json.loads(payload) if payload else None

    def worker(self) -> None:
        """One worker from entry to finish, as server/simulate_client.py's takes part."""
        hexid = uuid.uuid4().hex[:12].upper()
        entry = self.call("entry", "POST", f"/api/v1/studies/{self.slug}/assignments", body={
            "platform": "mturk", "worker_id": f"BENCHW{hexid}", "assignment_id": f"BENCHA{hexid}",
            "hit_id": "BENCHHIT", "turk_submit_to": "https://workersandbox.mturk.com"})
        token, base = entry["token"], f"/api/v1/assignments/{entry['assignment_id']}"
        self.call("consent", "POST", f"{base}/actions", token, {"action": "consent"})
        state = self.call("instructions_done", "POST", f"{base}/actions", token, {"action": "instructions_done"})
        self.call("environment", "POST", f"{base}/environment", token,
                  {"window": WINDOW, "screen": {"width": 1366, "height": 768}, "user_agent": "perceptlab-bench"})
        if state.get("stage") != "trials" or not state.get("page"):
            state = self.call("state", "GET", f"{base}/state", token)
        trials = sorted(state["page"]["trials"], key=lambda t: t["position"])
        answer = None
        for trial in trials:
            answer = self.call("vote (page end)" if trial is trials[-1] else "vote", "POST", f"{base}/votes", token, {
                "vote_id": str(uuid.uuid4()), "trial_id": trial["trial_id"], "choice": "left", "rt_ms": 900.0,
                "input": "mouse", "client_time": "2026-11-21T10:00:00.000Z", "window": WINDOW})
        if answer is None or answer["stage"] != "page_done":
            raise RuntimeError(f"the page's last vote led to {answer and answer['stage']!r}, not page_done")
        if self.call("finish", "POST", f"{base}/actions", token, {"action": "finish"})["stage"] != "completed":
            raise RuntimeError("finish did not complete the assignment")


class BaselineLives(Lives):
    """Workers of :mod:`benchmarks.baseline_app` (the stack's limit), one after another, measured as :class:`Lives`
    measures perceptlab's (its statements are the driver's: not counted)."""

    KINDS = ("entry", "state", "environment", "vote", "vote (page end)", "state (end)")

    def __init__(self, app, slug: str):  # not Lives.__init__: it counts the statements of perceptlab's engine
        self.app, self.slug = app, slug
        self._start_tallies()

    def worker(self) -> None:
        """One worker as server/simulate_client.py drives the baseline: it enters at stage trials."""
        entry = self.call("entry", "POST", f"/api/v1/studies/{self.slug}/assignments",
                          body={"platform": "mturk", "assignment_id": f"BENCHA{uuid.uuid4().hex[:12].upper()}"})
        token, base = entry["token"], f"/api/v1/assignments/{entry['assignment_id']}"
        trials = self.call("state", "GET", f"{base}/state", token)["page"]["trials"]
        self.call("environment", "POST", f"{base}/environment", token,
                  {"window": WINDOW, "screen": {"width": 1366, "height": 768}, "user_agent": "perceptlab-bench"})
        for trial in trials:
            self.call("vote (page end)" if trial is trials[-1] else "vote", "POST", f"{base}/votes", token, {
                "vote_id": str(uuid.uuid4()), "trial_id": trial["trial_id"], "choice": "left", "rt_ms": 900.0,
                "input": "mouse", "client_time": "2026-11-21T10:00:00.000Z", "window": WINDOW})
        if self.call("state (end)", "GET", f"{base}/state", token)["stage"] != "completed":
            raise RuntimeError("the baseline's worker did not complete its page")


class HttpLives(Lives):
    """The lives of :class:`Lives` sent over HTTP to a gunicorn worker process ``worker_pid`` on ``port`` (one
    keep-alive connection); a request's CPU is that process's (user + system clock ticks)."""

    def __init__(self, port: int, worker_pid: int, slug: str):  # not Lives.__init__: no app in this process
        self.slug, self.worker_pid = slug, worker_pid
        self._start_tallies()
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, kind: str, method: str, path: str, token: str | None = None, body=None):
        headers = {"User-Agent": "perceptlab-bench"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = "application/json"
        worker0, backends0 = cpu_ticks([self.worker_pid]), cpu_ticks(self.pids)
        self.connection.request(method, path, body=data, headers=headers)
        response = self.connection.getresponse()
        payload = response.read()
        worker1, backends1 = cpu_ticks([self.worker_pid]), cpu_ticks(self.pids)
        self.cpu_ms.setdefault(kind, []).append((worker1 - worker0) * CLOCK_TICK_S * 1000.0)
        self.backend_ticks[kind] = self.backend_ticks.get(kind, 0) + backends1 - backends0
        if response.status not in (200, 201, 204):
            raise RuntimeError(f"{method} {path}: {response.status} {payload[:300]!r}")
        return json.loads(payload) if payload else None


def measure_gunicorn(url: str, secret: str, instance: Path, dbname: str, warmup: int, n: int) -> tuple[float, float]:
    """:func:`measure` of perceptlab's lives over HTTP to one gunicorn worker (gthread, two threads) on ``url``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PERCEPTLAB_DATABASE_URL": url, "PERCEPTLAB_SERVER_DATABASE_URL": url,
           "PERCEPTLAB_SECRET_KEY": secret, "PERCEPTLAB_SERVER_SECRET_KEY": secret,
           "PERCEPTLAB_SERVER_LIVE_SCALES_INTERVAL": "0", "PERCEPTLAB_SERVER_ENTRY_LIMIT": "0",
           "PERCEPTLAB_SERVER_ADMISSION_RATE": "0", "PERCEPTLAB_SERVER_INSTANCE_PATH": str(instance)}
    with (instance.parent / "gunicorn.log").open("ab") as log:
        server = subprocess.Popen([str(VENV_BIN / "gunicorn"), "server:create_app()", "-k", "gthread", "--workers", "1",
                                   "--threads", "2", "-b", f"127.0.0.1:{port}", "--keep-alive", "60"], cwd=ROOT, env=env,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        for _ in range(600):
            try:
                probe = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                probe.request("GET", "/healthz")
                probe.getresponse().read()
                break
            except OSError:
                time.sleep(0.1)
        worker_pid = int(subprocess.check_output(["pgrep", "-P", str(server.pid)]).split()[0])
        print()
        return measure(HttpLives(port, worker_pid, "workercpu"), KINDS, warmup, n, dbname,
                       "perceptlab over HTTP (the gunicorn worker process's CPU)")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()


def measure(lives: Lives, kinds: tuple[str, ...], warmup: int, n: int, dbname: str, title: str) -> tuple[float, float]:
    """Run ``warmup`` then ``n`` measured workers of ``lives`` and print their table; return the app's and
    PostgreSQL's CPU ms per worker."""
    for _ in range(warmup):
        lives.worker()
    lives.clear()
    lives.pids = backend_pids(dbname)
    for _ in range(n):
        lives.worker()
    tick_ms = CLOCK_TICK_S * 1000.0
    print(f"{title}: {n} workers ({PAIRS_PER_PAGE} votes each), PostgreSQL at 127.0.0.1:5432; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'request':>18} {'per worker':>10} {'CPU p50 ms':>10} {'CPU ms/worker':>13} {'statements/worker':>17} "
          f"{'PostgreSQL ms/worker':>20}")
    for kind in (k for k in kinds if k in lives.cpu_ms):
        samples = lives.cpu_ms[kind]
        print(f"{kind:>18} {len(samples) / n:10.1f} {statistics.median(samples):10.3f} {sum(samples) / n:13.2f} "
              f"{lives.statements.get(kind, 0) / n:17.1f} {lives.backend_ticks.get(kind, 0) * tick_ms / n:20.2f}")
    app_ms = sum(sum(v) for v in lives.cpu_ms.values()) / n
    db_ms = sum(lives.backend_ticks.values()) * tick_ms / n
    print(f"{'all':>18} {sum(len(v) for v in lives.cpu_ms.values()) / n:10.1f} {'':>10} {app_ms:13.2f} "
          f"{sum(lives.statements.values()) / n:17.1f} {db_ms:20.2f}")
    return app_ms, db_ms


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=100, help="measured workers")
    parser.add_argument("--warmup", type=int, default=10, help="workers first, not measured")
    parser.add_argument("--profile", type=int, default=0, help="workers of the profiling pass (0 = none)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="the requests the profiling pass profiles")
    parser.add_argument("--top", type=int, default=40, help="profile entries to print")
    parser.add_argument("--show-sql", action="store_true", help="print the statements of one worker")
    parser.add_argument("--scenes", type=int, default=8, help="demo scenes (78 pairs each)")
    parser.add_argument("--stimuli", type=Path, default=None, help="demo stimulus folder, built if missing")
    parser.add_argument("--baseline", action="store_true",
                        help="then measure benchmarks/baseline_app.py's workers the same way, and compare")
    parser.add_argument("--gunicorn", action="store_true",
                        help="then the same lives over HTTP to one gunicorn worker: its CPU by request")
    parser.add_argument("--logs", action="store_true", help="the app's JSON logs on, as under gunicorn (to /dev/null)")
    args = parser.parse_args(argv)
    from server import create_app
    from server.metrics import MULTIPROCESS_VARIABLE, configure_logging

    if args.logs:
        configure_logging(stream=open(os.devnull, "w"))  # noqa: SIM115 - open for the process's life
    print(f"logs: {'JSON to /dev/null' if args.logs else 'off'}; metrics: "
          f"{'multiprocess files' if os.environ.get(MULTIPROCESS_VARIABLE) else 'in memory'}")

    work = Path(tempfile.mkdtemp(prefix="perceptlab_workercpu_"))
    manifest = build_demo_stimuli(args.stimuli or work / "stimuli", args.scenes)
    dbname = f"perceptlab_workercpu_{os.getpid()}"
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{dbname}"
    pg_admin(f'CREATE DATABASE "{dbname}"')
    app = None
    try:
        workers = (args.warmup + args.workers) * (2 if args.gunicorn else 1) + args.profile + 1
        # Every pair has votes to spare: the study never fills during the run.
        create_study(url, work, manifest, "workercpu", max(20, -(-2 * workers * PAIRS_PER_PAGE // (args.scenes * 78))))
        secret = "bench-" + uuid.uuid4().hex
        app = create_app(database_url=url, instance_path=str(work / "instance"), secret_key=secret,
                         entry_limit=0, admission_rate=0, live_scales_interval=0)
        lives = Lives(app, "workercpu")
        ours = measure(lives, KINDS, args.warmup, args.workers, dbname, "perceptlab")
        if args.show_sql:
            lives.captured = []
            lives.worker()
            print("\nthe statements of one worker:\n" + "\n".join(lives.captured))
            lives.captured = None
        if args.profile:
            lives.profiler, lives.profiled = cProfile.Profile(time.thread_time), tuple(args.kinds.split(","))
            for _ in range(args.profile):
                lives.worker()
            stats = pstats.Stats(lives.profiler)
            stats.sort_stats("cumulative").print_stats(args.top)
            stats.sort_stats("tottime").print_stats(args.top)
        if args.gunicorn:
            over_http = measure_gunicorn(url, secret, work / "instance", dbname, args.warmup, args.workers)
            print(f"\nover HTTP per worker: {over_http[0] - ours[0]:+.2f} ms in the server process, "
                  f"{over_http[1] - ours[1]:+.2f} ms PostgreSQL, beside in-process")
        if args.baseline:
            theirs = measure_baseline(dbname, args.warmup, args.workers)
            print(f"\nthe baseline's CPU per worker over perceptlab's: app {theirs[0] / ours[0]:.2f}, PostgreSQL "
                  f"{theirs[1] / max(ours[1], 1e-9):.2f}, both {sum(theirs) / sum(ours):.2f} (server_load.py's goal: its "
                  "votes/s at >= 0.8 of the baseline's)")
    finally:
        if app is not None:
            app_services(app).engine.dispose()
        pg_admin(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    return 0


def measure_baseline(dbname: str, warmup: int, n: int) -> tuple[float, float]:
    """:func:`measure` of :mod:`benchmarks.baseline_app` on the database ``dbname`` (its own table; the slug's
    last part is the pages a worker answers)."""
    from benchmarks.baseline_app import create_app, ensure_table

    dsn = f"host=127.0.0.1 port=5432 user=postgres dbname={dbname}"
    ensure_table(dsn)
    os.environ["BASELINE_DSN"], os.environ["BASELINE_SECRET_KEY"] = dsn, "bench-" + uuid.uuid4().hex
    print()
    return measure(BaselineLives(create_app(), "workercpu-1"), BaselineLives.KINDS, warmup, n, dbname,
                   "baseline (benchmarks/baseline_app.py)")


if __name__ == "__main__":
    sys.exit(main())
