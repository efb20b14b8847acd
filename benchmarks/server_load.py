"""Server load: perceptlab under gunicorn + PostgreSQL, driven by simulated workers over HTTP.

Creates a fresh PostgreSQL database (``perceptlab_bench_<pid>`` on
127.0.0.1:5432, user postgres), builds demo stimuli and one study per run,
starts ``gunicorn 'server:create_app()' -k gthread`` on a free loopback port
and drives it with :mod:`server.simulate_client` (honest workers in the
``latent`` observer mode, so that no image is downloaded and only the API and
vote path is measured):

(a) closed loop (each worker sends its next vote as soon as the previous one is
    answered) at each of --workers-list concurrent workers: saved votes/s,
    p50/p99 latency of the vote POSTs, errors;
(b) open loop at --open-workers concurrent workers, each answering every
    --pace seconds on average (exponential gaps): p99 latency and errors. By
    default all workers enter at the same instant (a burst of entries, consents
    and first pages); the server admits new workers at its ``[server]
    admission_rate`` as shipped (or --admission-rate) and defers the rest (429
    busy + Retry-After), so the table also gives the entries deferred and
    each worker's wait for admission; --ramp S spreads their entries over S
    seconds instead, as crowd workers pick up a study. The closed-loop and
    crash runs have no admission rate (--closed-admission-rate 0): there every
    worker enters at once and is done within seconds, and what is measured is
    how many votes the server stores;
(c) a crash run: mid-run, gunicorn's master and workers get SIGKILL (the
    whole process group) and a new gunicorn starts on the same port; clients
    retry (same vote_id) until they are done;
(d) the stack's limit: the same closed- and open-loop runs against
    :mod:`benchmarks.baseline_app` (a minimal Flask app that verifies the same
    signed token and inserts one row per vote into the same database) under the
    same gunicorn settings, driven by the same client, each right after the perceptlab run
    it repeats (so that both meet about the same load from the rest of the machine);
    perceptlab's closed-loop rate is printed as a fraction of it (goal >= 0.8, issue 38)
    and its p99 beside perceptlab's (goal for the open loop: no worse).

Before each run the benchmark database is vacuumed and checkpointed and the machine is given until
it is idle (:func:`settle`, at most --settle-timeout seconds: on a machine other work keeps busy the run
starts anyway, and says so), so that a run does not pay for the clean-up of the one before. A server's
first run starts once every gunicorn worker has booted (:meth:`Gunicorn.wait_booted`), not at the first
answer: with --settle-timeout 0 it would otherwise count the other workers' boot as its own CPU.

Each run also reports the CPU it cost: the client's (this process: the simulated
workers share the machine's cores with the server, and can be its bottleneck),
gunicorn's (master and workers) and PostgreSQL's (the database's backends), per
acknowledged vote, read from ``/proc``.

After every run the database is checked against what the clients saw: every
vote_id the clients sent must be acknowledged and present exactly once, no
trial may hold two votes, and the database may hold no vote the clients did
not get acknowledged. The psiTurk figures printed beside ours are the measured
facts quoted in ARCHITECTURE.md (Reference figures of peers) (psiTurk 3.3.1, gunicorn with 5 gevent
workers, SQLite, 100 trials per participant re-sending the whole data blob),
not re-measured here.

The benchmark database is always dropped at the end (unless --keep-db).

Last measured (issue 38 item 12, second session; ``nice -n 5 .venv/bin/python benchmarks/server_load.py --quick
--no-crash [--settle-timeout 30]``, a 2-core machine shared with three other sessions' work: load average 9-21
throughout, so no run settled). Fraction of the baseline's votes/s (closed loop 50 / 500 workers), open-loop
vote p99 (ours vs the baseline's) and CPU ratio (the baseline's CPU per vote over ours, client + gunicorn +
PostgreSQL, closed 50 / closed 500 / open), per run:
  before this session's changes (base 33ff229): 0.25 / 0.51, 17020 vs 6126 ms, CPU 0.41 / 0.48 / 0.56;
  after (three runs): 0.33 / 0.61, 4219 vs 97 ms, CPU 0.35 / 0.68 / 0.58;
                      0.28 / 0.65, 3943 vs 1403 ms, CPU 0.38 / 0.69 / 0.54;
                      0.66 / 0.60, 1773 vs 141 ms, CPU 0.53 / 0.56 / 0.55.
Goals not met (>= 0.8; an open-loop p99 no worse than the baseline's); under this load the changes are within
the noise of these figures. CPU per vote, ours: client 0.8-1.7 ms, gunicorn 2.2-3.4 ms, PostgreSQL 1.0-1.5 ms;
the baseline's: 0.5-1.1, 1.2-1.9, 0.2-0.4.
Third session (entry without a SAVEPOINT; each server's first run after every worker booted; same command with
--settle-timeout 30, load 7-13): 0.58 / 0.38, 1439 vs 93 ms, CPU 0.56 / 0.39 / 0.53; per vote ours client
0.87-1.08, gunicorn 2.47-2.69, PostgreSQL 1.06-1.35 ms, the baseline's 0.48-0.83, 1.12-1.64, 0.22-0.37. The
baseline's closed-500 rate moved between 362 and 619 votes/s from one run to the next: the fraction is within this
noise, and its CPU ratio agrees with benchmarks/worker_cpu.py --baseline (in-process, no HTTP): 0.39 (perceptlab
23.0 ms app + 18.2 ms PostgreSQL per worker, the baseline 10.6 + 5.4, load 5.4). The goals stay unmet. A scratch
copy of perceptlab_paired_vote whose vote-ID check and open-trial count are subqueries of the trial's SELECT (two
statements fewer) cost its backend as much (0.63 against 0.59 ms a vote, 6 runs each, load 10); the same function
reduced to one INSERT costs 0.20-0.33 ms, the bare INSERT's cost: what remains is its writes (row lock, three
UPDATEs, the vote's five index entries), about 0.1 ms each.
Where a worker's CPU goes, in-process (benchmarks/worker_cpu.py, 100 workers, load 13-14; app CPU + PostgreSQL
backend CPU per worker): 19 plain votes 12.5 + 15.9 ms (one statement each), entry 7.2 + 2.0 (8 statements),
instructions_done with its page start 5.9 + 3.1 (6), the page's last vote with its State 4.1 + 2.2 (4), consent
1.4 + 0.7 (1), environment 1.1 + 0.2 (1), finish 1.4 + 0.4 (1): 33.7 ms + 24.5 ms and 40 statements per
worker. So the largest single part is PostgreSQL's vote: perceptlab_paired_vote called alone from one connection
costs its backend about 0.6 ms of CPU against 0.12-0.28 ms for the baseline's bare INSERT (assignment locked, trial
checked and marked, pair counted, vote inserted, page renewed, committed); removing any one of its statements in a
scratch copy moved it by less than this load's noise. Then HTTP and WSGI per request (gunicorn's CPU per vote is
about 1 ms above the baseline's), and the requests around the votes (about 21 ms of app CPU per worker, where the
baseline's cost about 1 ms). Under a burst of page starts (500 workers entering at once) the study's allocation
lock also queues the server's threads.

Run: .venv/bin/python benchmarks/server_load.py [--workers-list 50,500] [--quick] [--keep-db] [--json-out FILE]
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks._common import build_demo_stimuli, print_table  # noqa: E402
from server.simulate_client import SimulationReport, run_simulation  # noqa: E402

VENV_BIN = Path(sys.executable).parent
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
# gunicorn closes idle keep-alive connections after 2 s by default; a worker pausing ~2 s between
# votes (open loop) would then race the server's close and see "server disconnected" on reuse.
# 30 s is longer than the client's own idle limit (aiohttp: 15 s), so the client always closes first.
KEEP_ALIVE_S = 30

# psiTurk 3.3.1 on a machine of this kind, quoted from ARCHITECTURE.md (measured once on a machine of this kind, not here).
PSITURK = {
    "rate": "115-190 saved trials/s",
    "p99": {50: "about 1 s", 200: "3.4-6.1 s", 500: "10.5-13.6 s"},
    "errors_500": "0.7% of requests reset; 5-17 of 500 participants with missing trials",
}


# ----------------------------------------------------------------------------- database

def create_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def machine_busy_fraction(interval_s: float = 1.0) -> float:
    """The share of the machine's CPU time that was busy over the next ``interval_s`` (from /proc/stat)."""
    def snapshot() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields), idle

    total0, idle0 = snapshot()
    time.sleep(interval_s)
    total1, idle1 = snapshot()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def settle(dsn: str, *, busy_below: float = 0.15, timeout_s: float = 90.0) -> tuple[float, bool]:
    """Start a run from a quiet machine: the previous run's clean-up done and the CPU idle again.

    A closed-loop run leaves tens of thousands of dead row versions behind; left alone, autovacuum
    and the next checkpoint do that work during the following run and its figures measure both.
    Here the benchmark database's tables that hold rows are vacuumed and analysed and the database
    is checkpointed, then the machine is given until it is busy less than ``busy_below`` of the time
    for two seconds running (at most ``timeout_s``). Returns the seconds it took and whether the machine
    was idle then (False: the wait timed out, and the run measures beside whatever else keeps the CPU busy).

    Empty tables are left alone: analysed while empty, they would be planned as empty (sequential
    scans of the vote and assignment tables for every vote) until autovacuum analyses them again,
    a minute or more into the run.
    """
    import psycopg
    from psycopg import sql

    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace")]
        for table in tables:
            if conn.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(table))).fetchone()[0]:
                conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(table)))
        conn.execute("CHECKPOINT")
    quiet = 0
    while quiet < 2 and time.perf_counter() - started < timeout_s:
        quiet = quiet + 1 if machine_busy_fraction() < busy_below else 0
    return time.perf_counter() - started, quiet >= 2


def drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Check:
    """The database against the clients' record of one run."""

    acknowledged: int
    in_db: int
    lost: int            # acknowledged or sent, but not in the database
    unacknowledged: int  # in the database but never acknowledged to a client (e.g. a retry gave up)
    duplicated: int      # vote_ids stored twice + trials with two votes
    unresolved: int      # sent, never answered definitely (retries exhausted)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.unacknowledged == 0 and self.unresolved == 0


def verify(dsn: str, slug: str, report: SimulationReport, baseline: bool = False) -> Check:
    """Compare the votes stored for study ``slug`` (in the baseline's table when ``baseline``)
    with what the clients sent and were told."""
    import psycopg

    if baseline:
        from benchmarks.baseline_app import TABLE

        votes = f"SELECT client_vote_id, assignment_id::text || '/' || trial_id AS trial FROM {TABLE} WHERE slug = %s"
    else:
        votes = ("SELECT v.client_vote_id, v.trial_id::text AS trial FROM vote v JOIN study s ON s.id = v.study_id "
                 "WHERE s.slug = %s")
    with psycopg.connect(dsn) as conn:
        counts = dict(conn.execute(f"SELECT client_vote_id, count(*) FROM ({votes}) v GROUP BY client_vote_id",
                                   (slug,)).fetchall())
        double_trials = conn.execute(
            f"SELECT count(*) FROM (SELECT trial FROM ({votes}) v GROUP BY trial HAVING count(*) > 1) t",
            (slug,)).fetchone()[0]
    acknowledged = report.acknowledged_ids()
    sent = report.sent_ids()
    rejected = {v.response_id for v in report.responses if v.status.startswith("rejected")}
    held = set(counts)
    lost = len(acknowledged - held) + len({v.response_id for v in report.responses if v.status == "unresolved"} - held)
    return Check(acknowledged=len(acknowledged), in_db=len(held), lost=lost,
                 unacknowledged=len(held - acknowledged) + len(held & rejected),
                 duplicated=sum(1 for n in counts.values() if n > 1) + int(double_trials) + len(held - sent),
                 unresolved=report.unresolved)


# ----------------------------------------------------------------------------- server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gunicorn:
    """gunicorn in its own process group (so that one killpg reaches master and workers)."""

    def __init__(self, env: dict[str, str], port: int, workers: int, threads: int, log: Path,
                 app: str = "server:create_app()"):
        self.env, self.port, self.workers, self.threads, self.log, self.app = env, port, workers, threads, log, app
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> float:
        """Start and wait until it answers HTTP; return the seconds that took."""
        started = time.perf_counter()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(VENV_BIN / "gunicorn"), self.app, "-k", "gthread", "--workers", str(self.workers),
                 "--threads", str(self.threads), "-b", f"127.0.0.1:{self.port}", "--backlog", "2048",
                 "--graceful-timeout", "5", "--timeout", "60", "--keep-alive", str(KEEP_ALIVE_S)],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while time.perf_counter() - started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}; see {self.log}")
            try:
                urllib.request.urlopen(f"{self.url}/", timeout=2).read()
                return time.perf_counter() - started
            except urllib.error.HTTPError:  # any HTTP answer (404 included) means it serves
                return time.perf_counter() - started
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"gunicorn did not answer within {timeout:.0f} s; see {self.log}")

    def wait_booted(self, timeout: float = 120.0, quiet_s: float = 0.5) -> float:
        """Wait until every worker process has booted: ``workers`` children of the master whose CPU stopped
        climbing for ``quiet_s`` (the app imported and built); return the seconds waited.

        :meth:`start` returns at the first answer, from the first worker up; the others may still be importing
        the app then (perceptlab's import and app factory cost about 2 CPU seconds a process, the baseline's
        0.3), and a run started at once would count their boot in its CPU and share the cores with it: the
        first run of a server measured its boot as much as its votes."""
        started = time.perf_counter()
        last: int | None = None
        quiet_since = None
        while time.perf_counter() - started < timeout:
            children = [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()
                        and (fields := _proc_stat(entry.name)) is not None and int(fields[1]) == self.proc.pid]
            ticks = sum(int(f[11]) + int(f[12]) for f in map(_proc_stat, children) if f is not None)
            if len(children) < self.workers or ticks != last:
                last, quiet_since = ticks, None
            elif quiet_since is None:
                quiet_since = time.perf_counter()
            elif time.perf_counter() - quiet_since >= quiet_s:
                break
            time.sleep(0.1)
        return time.perf_counter() - started

    def cpu_s(self) -> float:
        """CPU seconds (user + system) used so far by gunicorn's master and its live workers."""
        return process_group_cpu_s(self.proc.pid) if self.proc is not None else 0.0

    def kill(self) -> None:
        """SIGKILL the whole process group (master and workers), no clean-up."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (graceful), then SIGKILL the group after ``timeout`` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers of the group, if any
        except ProcessLookupError:
            pass
        self.proc.wait()


# ----------------------------------------------------------------------------- CPU accounting

CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 onwards), or None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of the live processes of process group ``pgid``."""
    ticks = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _proc_stat(entry.name)
            if fields is not None and int(fields[2]) == pgid:  # field 5: pgrp
                ticks += int(fields[11]) + int(fields[12])    # fields 14, 15: utime, stime
    return ticks * CLOCK_TICK_S


class CpuMeter:
    """CPU of the client (this process), gunicorn and the database over one run.

    Database backends are sampled by PID at both ends: a backend that starts during the run counts
    from its start (it is new), one that ends during the run is missed (the pools keep theirs)."""

    def __init__(self, server: Gunicorn, dbname: str):
        self.server, self.dbname = server, dbname
        self.client0 = time.process_time()
        self.server0 = server.cpu_s()
        self.db0 = self._db_by_pid()

    def _db_by_pid(self) -> dict[int, float]:
        import psycopg

        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            pids = [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s",
                                                   (self.dbname,))]
        out = {}
        for pid in pids:
            fields = _proc_stat(pid)
            if fields is not None:
                out[pid] = (int(fields[11]) + int(fields[12])) * CLOCK_TICK_S
        return out

    def stop(self, server_restarted: bool = False) -> dict[str, float | None]:
        """The CPU seconds of each party since the meter started (gunicorn's: None after a restart,
        whose killed workers took their counts with them)."""
        db1 = self._db_by_pid()
        return {"client_cpu_s": time.process_time() - self.client0,
                "server_cpu_s": None if server_restarted else self.server.cpu_s() - self.server0,
                "db_cpu_s": sum(cpu - self.db0.get(pid, 0.0) for pid, cpu in db1.items())}


# ----------------------------------------------------------------------------- stimuli and studies


def create_study(env: dict[str, str], folder: Path, manifest: Path, slug: str, votes_per_pair: int,
                 seed: int) -> None:
    toml = folder / f"{slug}.toml"
    toml.write_text(
        f'[study]\nslug = "{slug}"\nname = "load benchmark {slug}"\nmanifests = ["{manifest}"]\nseed = {seed}\n\n'
        f'[design]\ndegree = 12\nvotes_per_pair = {votes_per_pair}\n\n'
        '[pages]\npairs_per_page = 20\nmin_pages = 1\nmax_pages = 100\n'
        '[quality]\nquiz_size = 0\ngold_rate = 0.0\n\n'  # latent observers cannot tell gold pairs
        '[texts]\nresearcher = "the load benchmark"\ncontact = "bench@perceptlab.invalid"\n\n'
        "[entry]\nexternal_hits = true\n")  # perceptlab simulate enters as MTurk workers of an unposted HIT
    subprocess.run([str(VENV_BIN / "perceptlab"), "study", "create", str(toml)], check=True, cwd=ROOT, env=env,
                   stdout=subprocess.DEVNULL)


# ----------------------------------------------------------------------------- runs

@dataclass
class Run:
    label: str
    slug: str
    concurrency: int
    workers: int
    pages: int
    pace: float | None
    ramp: float = 0.0  # workers enter spread over this many seconds (0: as soon as a slot is free)
    crash: bool = False
    baseline: bool = False  # against benchmarks/baseline_app.py (the stack's limit), not perceptlab


def execute(run: Run, server: Gunicorn, dsn: str, dbname: str, seed: int, spam: float,
            crash_after: float, settle_timeout: float = 90.0) -> tuple[SimulationReport, Check, dict]:
    extra: dict = {}
    kwargs = dict(workers=run.workers, spam=spam, concurrency=run.concurrency, seed=seed, pages=run.pages,
                  pace=run.pace, ramp_s=run.ramp, progress=False, observer="latent", max_retry_s=300.0)
    print(f"# {run.label}: {run.workers} workers, {run.concurrency} at a time, {run.pages} page(s) each, "
          f"{'closed loop' if run.pace is None else f'pace {run.pace} s'}"
          f"{f', entering over {run.ramp:g} s' if run.ramp else ''}", flush=True)
    settled, idle = settle(dsn, timeout_s=settle_timeout)
    machine = ("machine idle" if idle else f"machine still busy, load average {os.getloadavg()[0]:.1f}: run anyway"
               if settle_timeout > 0 else f"no wait for an idle machine, load average {os.getloadavg()[0]:.1f}")
    print(f"  settled in {settled:.1f} s (VACUUM, CHECKPOINT, {machine})", flush=True)
    meter = CpuMeter(server, dbname)
    if not run.crash:
        report = run_simulation(server.url, run.slug, **kwargs)
    else:
        box: dict = {}

        def target() -> None:
            try:
                box["report"] = run_simulation(server.url, run.slug, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                box["error"] = exc

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        time.sleep(crash_after)
        stored_before = count_votes(dsn, run.slug)
        t0 = time.perf_counter()
        server.kill()
        killed = time.perf_counter()
        up = server.start()
        extra = {"votes_before_kill": stored_before, "kill_s": killed - t0, "restart_s": up,
                 "down_s": time.perf_counter() - t0}
        print(f"  killed gunicorn (SIGKILL to its process group) {crash_after:g} s into the run with {stored_before} "
              f"votes stored; new gunicorn started {extra['kill_s'] * 1000:.0f} ms after the kill, serving again "
              f"{extra['down_s']:.2f} s after it (its boot time)", flush=True)
        thread.join()
        if "error" in box:
            raise box["error"]
        report = box["report"]
    extra.update(meter.stop(server_restarted=run.crash))  # client: this process (the simulated workers)
    extra["load_avg_1min"] = os.getloadavg()[0]  # other processes on the machine distort wall-clock figures
    check = verify(dsn, run.slug, report, baseline=run.baseline)
    return report, check, extra


def count_votes(dsn: str, slug: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM vote v JOIN study s ON s.id = v.study_id WHERE s.slug = %s",
                            (slug,)).fetchone()[0]


def votes_needed(run: Run, pairs_per_page: int = 20) -> int:
    return run.workers * run.pages * pairs_per_page


BASELINE_APP = "benchmarks.baseline_app:create_app()"
FRACTION_GOAL = 0.8  # perceptlab's closed-loop rate over the baseline's (issue 38; it was 0.6 in issue 13)


def run_figures(run: Run, report: SimulationReport, check: Check, extra: dict) -> dict:
    """One run's figures (the ``--json-out`` object, before the baseline's rate is added)."""
    votes = report.acknowledged
    waits = report.entry_wait_figures()
    per_vote = lambda seconds: None if seconds is None or not votes else 1000.0 * seconds / votes  # noqa: E731
    return {
        "name": run.label, "workers": run.concurrency, "workers_total": run.workers, "pages": run.pages,
        "pace_s": run.pace, "ramp_s": run.ramp, "votes": votes, "votes_per_s": report.per_second(),
        "votes_per_s_full_load": report.per_second_full(),
        "p50_ms": report.p50(), "p99_ms": report.p99(), "errors": report.error_count,
        "lost": check.lost, "duplicated": check.duplicated + check.unacknowledged, "db_exact": check.ok,
        "duplicate_answers": report.duplicates, "elapsed_s": report.elapsed_s,
        "entries_deferred": report.deferred, "admission_wait_p50_s": waits["p50"],
        "admission_wait_max_s": waits["max"],
        "client_cpu_pct": 100.0 * extra["client_cpu_s"] / report.elapsed_s if report.elapsed_s else None,
        "client_cpu_ms_per_vote": per_vote(extra["client_cpu_s"]),
        "server_cpu_ms_per_vote": per_vote(extra["server_cpu_s"]),
        "db_cpu_ms_per_vote": per_vote(extra["db_cpu_s"]),
        "load_avg_1min": extra["load_avg_1min"],
    }


def _ms(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers-list", default="50,500", help="comma-separated concurrent workers, closed loop")
    parser.add_argument("--workers-per-slot", type=int, default=2,
                        help="closed loop: workers in all = this x concurrent workers")
    parser.add_argument("--pages", type=int, default=2, help="trial pages per worker (20 trials each), closed loop")
    parser.add_argument("--open-workers", type=int, default=500, help="concurrent workers of the open-loop run")
    parser.add_argument("--pace", type=float, default=2.0, help="open loop: mean seconds between a worker's votes")
    parser.add_argument("--open-pages", type=int, default=2, help="trial pages per worker, open loop")
    parser.add_argument("--ramp", type=float, default=0.0,
                        help="open loop: the workers enter spread evenly over this many seconds, as they arrive at a "
                             "live study (0, the default: all enter at the same instant, a burst of entries and page "
                             "starts before the first vote)")
    parser.add_argument("--crash-workers", type=int, default=200, help="concurrent workers of the crash run")
    parser.add_argument("--crash-after", type=float, default=8.0, help="seconds into the crash run to SIGKILL")
    parser.add_argument("--spam", type=float, default=0.0,
                        help="fraction of random clickers (they fail the quiz and leave early)")
    parser.add_argument("--admission-rate", type=float, default=None,
                        help="[server] admission_rate of perceptlab in the open-loop run: new workers per second "
                             "per gunicorn worker (default: the shipped configuration's; 0 = no limit)")
    parser.add_argument("--closed-admission-rate", type=float, default=0.0,
                        help="[server] admission_rate in the closed-loop and crash runs (default 0 = no limit: a "
                             "closed loop measures how many votes the server stores, not how fast it lets new "
                             "workers in; every worker there enters at once and finishes in seconds)")
    parser.add_argument("--gunicorn-workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=2, help="threads per gunicorn worker")
    parser.add_argument("--scenes", type=int, default=8, help="demo scenes (13 methods each, 78 pairs per scene)")
    parser.add_argument("--stimuli", type=Path, default=None,
                        help="demo stimulus folder, built if missing [default: a temporary folder]")
    parser.add_argument("--quick", action="store_true", help="smaller runs (1 page per worker, 1 worker per slot, "
                                                             "shorter open loop)")
    parser.add_argument("--no-crash", action="store_true", help="skip the crash run")
    parser.add_argument("--no-open", action="store_true", help="skip the open-loop run")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the stack's limit (benchmarks/baseline_app.py under the same gunicorn settings)")
    parser.add_argument("--settle-timeout", type=float, default=90.0,
                        help="before each run, wait at most this many seconds for the machine to be idle (0: VACUUM "
                             "and CHECKPOINT only; on a machine other work keeps busy the wait only times out)")
    parser.add_argument("--keep-db", action="store_true", help="do not drop the benchmark database at the end")
    parser.add_argument("--seed", type=int, default=0, help="base seed (each run adds its own offset)")
    parser.add_argument("--json-out", type=Path, default=None,
                        help="write one object per run (name, workers, votes_per_s, p50_ms, p99_ms, errors, lost, "
                             "duplicated, baseline_votes_per_s, CPU per vote, ...) and the full reports as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers_per_slot, args.pages, args.open_pages = 1, 1, 1
        args.open_workers = min(args.open_workers, 500)
        args.crash_workers, args.crash_after = min(args.crash_workers, 100), min(args.crash_after, 4.0)

    work = Path(tempfile.mkdtemp(prefix="perceptlab_bench_"))
    stimuli_dir = args.stimuli or work / "stimuli"
    dbname = f"perceptlab_bench_{os.getpid()}"
    dsn = f"host=127.0.0.1 port=5432 user=postgres dbname={dbname}"
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{dbname}"
    secret = "bench-" + os.urandom(16).hex()
    env = {**os.environ, "PERCEPTLAB_DATABASE_URL": url, "PERCEPTLAB_SERVER_DATABASE_URL": url,
           "PERCEPTLAB_SECRET_KEY": secret, "PERCEPTLAB_SERVER_SECRET_KEY": secret,
           "PERCEPTLAB_SERVER_LIVE_SCALES_INTERVAL": "0",
           "PERCEPTLAB_SERVER_ENTRY_LIMIT": "0",  # every simulated worker comes from 127.0.0.1
           "PERCEPTLAB_SERVER_INSTANCE_PATH": str(work / "instance")}
    open_env = dict(env)
    if args.admission_rate is not None:
        open_env["PERCEPTLAB_SERVER_ADMISSION_RATE"] = str(args.admission_rate)
    closed_env = {**env, "PERCEPTLAB_SERVER_ADMISSION_RATE": str(args.closed_admission_rate)}
    baseline_env = {**os.environ, "BASELINE_DSN": dsn, "BASELINE_SECRET_KEY": secret}

    runs = [Run(f"closed loop, {c} workers", f"bench-closed-{c}", c, c * args.workers_per_slot, args.pages, None)
            for c in (int(x) for x in args.workers_list.split(","))]
    if not args.no_open:
        ramp = f", entering over {args.ramp:g} s" if args.ramp else ", all entering at once"
        runs.append(Run(f"open loop {args.pace:g} s, {args.open_workers} workers{ramp}",
                        f"bench-open-{args.open_workers}", args.open_workers, args.open_workers, args.open_pages,
                        args.pace, args.ramp))
    # The baseline repeats every run but the crash (its slug carries the pages per worker).
    baseline_runs = [] if args.no_baseline else [
        Run(f"baseline: {run.label}", f"baseline-{k}-{run.pages}", run.concurrency, run.workers, run.pages, run.pace,
            run.ramp, baseline=True) for k, run in enumerate(runs)]
    if not args.no_crash:
        runs.append(Run(f"crash (SIGKILL + restart), {args.crash_workers} workers", "bench-crash",
                        args.crash_workers, args.crash_workers * max(1, args.workers_per_slot), args.pages, None,
                        crash=True))

    created = False
    try:
        manifest = build_demo_stimuli(stimuli_dir, args.scenes, quiet=False)
        create_database(dbname)
        created = True
        print(f"# {os.cpu_count()} CPUs (clients, gunicorn and PostgreSQL share them); database {dbname}; "
              f"stimuli {manifest.parent.parent}; logs {work}", flush=True)
        n_pairs = args.scenes * 78
        for i, run in enumerate(runs):  # a study per run, with votes to spare (quiz trials are gold: not counted)
            create_study(env, work, manifest, run.slug, max(20, -(-2 * votes_needed(run) // n_pairs)), args.seed + i)
        gunicorn_settings = (f"gunicorn -k gthread --workers {args.gunicorn_workers} --threads {args.threads} "
                             f"--keep-alive {KEEP_ALIVE_S}")
        results: list[tuple[Run, SimulationReport, Check, dict]] = []
        # perceptlab's closed-loop runs (and the crash run) and its open-loop run each get a gunicorn of their
        # own: their admission rates differ (see --closed-admission-rate). Each run is followed at once by its
        # baseline run (the servers stay up, idle, between their runs): on a machine whose other load changes by
        # the minute, a run and its baseline then meet about the same load, where all of perceptlab's runs before
        # all of the baseline's would compare figures taken many minutes apart.
        servers: dict[str, Gunicorn] = {}

        def server_for(run: Run) -> Gunicorn:
            app, log, app_env = ((BASELINE_APP, "baseline.log", baseline_env) if run.baseline else
                                 ("server:create_app()", "gunicorn-closed.log", closed_env) if run.pace is None else
                                 ("server:create_app()", "gunicorn-open.log", open_env))
            if log not in servers:
                if run.baseline:
                    from benchmarks.baseline_app import ensure_table

                    ensure_table(dsn)
                started = servers[log] = Gunicorn(app_env, free_port(), args.gunicorn_workers, args.threads,
                                                  work / log, app=app)
                up = started.start()
                booted = started.wait_booted()  # every worker's boot done before a run measures it
                admission = app_env.get("PERCEPTLAB_SERVER_ADMISSION_RATE", "as shipped")
                print(f"# {gunicorn_settings} '{app}' on {started.url} (answered after {up:.1f} s, every worker "
                      f"booted {booted:.1f} s later)"
                      f"{'' if run.baseline else f'; admission rate {admission}'}", flush=True)
            return servers[log]

        baseline_after = {run.label: b for run, b in zip(runs, baseline_runs)}
        order = [r for run in runs for r in (run, baseline_after.get(run.label)) if r is not None]
        try:
            for run in order:
                i = len(results)
                report, check, extra = execute(run, server_for(run), dsn, dbname, args.seed + 1000 * (i + 1),
                                               args.spam, args.crash_after, args.settle_timeout)
                results.append((run, report, check, extra))
                print(f"  {report.acknowledged} votes, {report.per_second():.0f}/s, "
                      f"p99 {report.p99():.1f} ms, errors {dict(report.errors) or 0}, "
                      f"DB check {'ok' if check.ok else check}; load average {extra['load_avg_1min']:.1f}", flush=True)
        finally:
            for started in servers.values():
                started.stop()

        figures = {run.slug: run_figures(run, report, check, extra) for run, report, check, extra in results}
        baseline_of = {run.label: figures[b.slug] for run, b in zip(runs, baseline_runs)}
        for run, *_ in results:
            if not run.baseline:
                base = baseline_of.get(run.label)
                figures[run.slug]["baseline_votes_per_s"] = base["votes_per_s"] if base else None
                figures[run.slug]["baseline_p99_ms"] = base["p99_ms"] if base else None
                figures[run.slug]["fraction_of_baseline"] = (figures[run.slug]["votes_per_s"] / base["votes_per_s"]
                                                             if base and run.pace is None else None)
        header = ["run", "votes saved", "votes/s", "votes/s full load", "p50 ms", "p99 ms", "errors", "duplicates",
                  "lost", "extra/dup in DB", "DB exact", "entries deferred", "admission wait p50/max s",
                  "client CPU", "client ms/vote", "gunicorn ms/vote", "PostgreSQL ms/vote"]

        def row(run: Run, report: SimulationReport, check: Check) -> list:
            f = figures[run.slug]
            return [run.label, report.acknowledged, f"{f['votes_per_s']:.0f}", f"{f['votes_per_s_full_load']:.0f}",
                    f"{f['p50_ms']:.1f}", f"{f['p99_ms']:.1f}", f["errors"], report.duplicates, check.lost,
                    f["duplicated"], "yes" if check.ok else "NO", f["entries_deferred"],
                    f"{f['admission_wait_p50_s']:.1f}/{f['admission_wait_max_s']:.1f}", f"{f['client_cpu_pct']:.0f}%",
                    _ms(f["client_cpu_ms_per_vote"]), _ms(f["server_cpu_ms_per_vote"]), _ms(f["db_cpu_ms_per_vote"])]

        print()
        print("perceptlab (measured now; latency = vote POSTs as the clients saw them, ms):")
        ours = [(run, report, check) for run, report, check, _ in results if not run.baseline]
        print_table(header + ["baseline votes/s", "baseline p99 ms", "fraction", "psiTurk p99 (notes)"],
                    [row(run, report, check) + [
                        _ms(figures[run.slug].get("baseline_votes_per_s"), 0),
                        _ms(figures[run.slug].get("baseline_p99_ms"), 1),
                        _ms(figures[run.slug].get("fraction_of_baseline")),
                        PSITURK["p99"].get(run.concurrency, "-") if run.pace is None and not run.crash else "-"]
                     for run, report, check in ours])
        theirs = [(run, report, check) for run, report, check, _ in results if run.baseline]
        if theirs:
            print()
            print("the stack's limit (benchmarks/baseline_app.py: verify the token, insert one row; same gunicorn, "
                  "database and client):")
            print_table(header, [row(run, report, check) for run, report, check in theirs])
        crash_rows = [[run.label, extra["votes_before_kill"], f"{extra['kill_s'] * 1000:.0f}", f"{extra['down_s']:.2f}",
                       report.retries, report.duplicates, check.lost, check.duplicated, check.unresolved,
                       "yes" if check.ok else "NO"] for run, report, check, extra in results if run.crash]
        if crash_rows:
            print()
            print("crash run:")
            print_table(["run", "stored at kill", "restart issued after ms", "down s", "client retries",
                         "duplicate answers", "lost", "duplicated", "unresolved", "DB exact"], crash_rows)
        if args.json_out is not None:
            import json

            dump = {"cpus": os.cpu_count(), "gunicorn": gunicorn_settings, "fraction_goal": FRACTION_GOAL,
                    "runs": [{**figures[run.slug], "baseline": run.baseline, "crash": run.crash,
                              "extra": {k: v for k, v in extra.items()}, "report": report.to_dict(),
                              "check": {**check.__dict__, "ok": check.ok}}
                             for run, report, check, extra in results]}
            args.json_out.write_text(json.dumps(dump, indent=2, default=float))
            print(f"# figures and full reports: {args.json_out}")
        print()
        print("psiTurk 3.3.1 anchor (quoted from ARCHITECTURE.md, measured there, not re-measured here):")
        print_table(["figure", "psiTurk 3.3.1"],
                    [["saved trials/s (closed loop)", PSITURK["rate"]],
                     ["p99 latency at 50 participants", PSITURK["p99"][50]],
                     ["p99 latency at 200 participants", PSITURK["p99"][200]],
                     ["p99 latency at 500 participants", PSITURK["p99"][500]],
                     ["errors at 500 participants", PSITURK["errors_500"]]])
        print()
        print("votes/s: acknowledged votes over the whole run; full load: until the first client slot ran out of "
              "workers (all N workers busy).")
        print("client CPU: CPU time of the simulating process / run time (100% = one of the machine's cores); "
              "ms/vote: CPU per acknowledged vote of the client, gunicorn (master and workers) and PostgreSQL "
              "(the database's backends).")
        print("errors count every failed attempt (network errors, 5xx, 429 rate_limited, 4xx codes), retries "
              "included; entries deferred are not errors: new workers the server told to come back (429 busy + "
              "Retry-After, [server] admission_rate per gunicorn worker); admission wait: a worker's first "
              "entry request to its admission.")
        print(f"fraction: perceptlab's closed-loop votes/s over the baseline's (goal >= {FRACTION_GOAL:g}).")
        print(f"perceptlab goals (issue 38): closed loop >= {FRACTION_GOAL:g} of the baseline's votes/s and an open-loop "
              "p99 no worse than the baseline's, in the same run; (issue 13): open loop p99 < 50 ms with 0 errors; "
              "closed loop >= 4x the saved votes/s of before (203-222); 0 lost or duplicated in every run.")
    finally:
        if created and not args.keep_db:
            drop_database(dbname)
        elif created:
            print(f"# kept database {dbname}")
        if not args.keep_db:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
