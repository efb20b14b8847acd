"""Server CPU per stored vote, measured in-process: the vote request through the whole Flask app.

Builds demo stimuli and one study per paradigm and database (a SQLite file and a fresh
PostgreSQL database on 127.0.0.1:5432): a paired-comparison study, whose votes are
``POST /api/v1/assignments/<id>/votes``, and a rating study (DCR), whose votes are
``POST /api/v1/assignments/<id>/ratings`` (``--paradigm pc,rating``). It enters simulated workers
through the JSON API and sends their votes straight into the WSGI application (no HTTP, no server
process), so that what is timed is the app's own work for one vote: routing, token check, JSON
parsing, the assignment lock, the vote transaction, the response, the teardown. The request environ
is built before the clock starts. On PostgreSQL both take the one-statement path (the
functions perceptlab_paired_vote and perceptlab_rating_response); on SQLite the regular path.

For each stored vote it records

* the CPU time of the request (``time.thread_time``: this thread only; the database server's
  work is in another process, reported separately for PostgreSQL as its backends' CPU over
  the measured votes, read from ``/proc``),
* the wall time of the request (CPU plus waiting for the database),
* the SQL statements sent (SQLAlchemy's ``before_cursor_execute``; PostgreSQL's one-statement vote,
  sent on the driver's connection, counts as one statement and one commit) and the commits.

Workers answer round-robin, so consecutive votes touch different assignments and pages as on
a live server; each answers ``--pages-per-worker`` pages and finishes, and a new worker enters.
The other requests of the workers (entry, actions, environment, state: the calls
:mod:`server.simulate_client` makes) go through Flask's test client; their CPU is reported
per kind and summed per vote, as what a vote costs beyond its own request. Gold trials are
answered correctly (their answer is read from the database outside any timed call), so hidden
gold checks run but nobody is stopped.

A second pass profiles the same kind of votes (cProfile, or pyinstrument with
``--profiler pyinstrument``) and prints the top entries by cumulative time, a breakdown of the
self time by area (Flask/Werkzeug, SQLAlchemy, the driver, perceptlab, ...) and the statements
of one vote. Profiled votes are not part of the timing figures.

Target (issue 13): median CPU <= 1 ms per stored vote.

Run: .venv/bin/python benchmarks/vote_cpu.py [--paradigm pc,rating] [--db sqlite,postgresql] [--votes 2000]
     [--json-out FILE]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks._common import build_demo_stimuli, print_table  # noqa: E402
from server.services import app_services  # noqa: E402

VENV_BIN = Path(sys.executable).parent
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
TARGET_CPU_MS = 1.0
WINDOW = {"width": 1366, "height": 768, "dpr": 1}
CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- set-up


def create_study(url: str, folder: Path, manifest: Path, slug: str, *, pairs_per_page: int, gold_rate: float,
                 votes_per_pair: int) -> None:
    """A paired-comparison study over the demo stimuli, made by ``perceptlab study create``."""
    toml = folder / f"{slug}.toml"
    toml.write_text(
        f'[study]\nslug = "{slug}"\nname = "vote CPU benchmark"\nmanifests = ["{manifest.as_posix()}"]\nseed = 0\n\n'
        f'[design]\ndegree = 12\nvotes_per_pair = {votes_per_pair}\n\n'
        f'[pages]\npairs_per_page = {pairs_per_page}\nmin_pages = 1\nmax_pages = 1000\n\n'
        f'[quality]\nquiz_size = 0\ngold_rate = {gold_rate}\n\n'
        '[texts]\nresearcher = "the vote CPU benchmark"\ncontact = "bench@perceptlab.invalid"\n\n'
        "[entry]\nexternal_hits = true\n")  # its workers enter as MTurk workers of an unposted HIT
    subprocess.run([str(VENV_BIN / "perceptlab"), "study", "create", str(toml), "--database-url", url], check=True,
                   cwd=ROOT, stdout=subprocess.DEVNULL)


def create_rating_study(url: str, folder: Path, manifest: Path, slug: str, *, ratings_per_page: int,
                        gold_rate: float, ratings_per_stimulus: int) -> None:
    """A DCR rating study over the demo stimuli, made by ``perceptlab study create``."""
    toml = folder / f"{slug}.toml"
    toml.write_text(
        f'[study]\nkind = "rating"\nslug = "{slug}"\nname = "vote CPU benchmark (ratings)"\n'
        f'manifests = ["{manifest.as_posix()}"]\nseed = 0\n\n'
        f'[rating]\nmethod = "dcr"\nratings_per_stimulus = {ratings_per_stimulus}\n\n'
        f'[pages]\nratings_per_page = {ratings_per_page}\nmin_pages = 1\nmax_pages = 1000\n\n'
        f'[quality]\nquiz_size = 0\ngold_rate = {gold_rate}\n\n'
        '[texts]\nresearcher = "the vote CPU benchmark"\ncontact = "bench@perceptlab.invalid"\n\n'
        "[entry]\nexternal_hits = true\n")
    subprocess.run([str(VENV_BIN / "perceptlab"), "study", "create", str(toml), "--database-url", url], check=True,
                   cwd=ROOT, stdout=subprocess.DEVNULL)


def pg_admin(statement: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(statement)


def pg_backend_cpu_s(dbname: str) -> float:
    """CPU seconds (user + system) used so far by the PostgreSQL backends connected to ``dbname``."""
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        pids = [row[0] for row in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (dbname,))]
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the backend ended, or another machine runs the database
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total * CLOCK_TICK_S


# ----------------------------------------------------------------------------- the driver

@dataclass
class SimWorker:
    """One simulated worker: its token and the open trials of its current page."""

    assignment_id: str
    token: str
    open_trials: deque = field(default_factory=deque)  # (trial_id, side to choose, is gold)
    pages_done: int = 0


@dataclass
class VoteSample:
    cpu_ms: float
    wall_ms: float
    statements: int
    commits: int
    kind: str  # "plain", "gold" or "page end" (the vote that completes a page, and brings the new State)


class Driver:
    """Workers of one study on one app; votes go straight into the WSGI app, the rest through the test client."""

    def __init__(self, app, slug: str, active_workers: int, pages_per_worker: int, seed: int = 0,
                 paradigm: str = "pc"):
        from sqlalchemy import event

        self.paradigm = paradigm  # "pc": votes; "rating": ratings
        self.app = app
        self.client = app.test_client()
        self.slug = slug
        self.rng = np.random.default_rng(seed)
        self.active: deque[SimWorker] = deque()
        self.active_workers = active_workers
        self.pages_per_worker = pages_per_worker
        self.counting = False
        self.statements = 0
        self.commits = 0
        self.captured: list[str] | None = None
        self.recording = False  # keep the CPU of the other API calls (during the timed pass)
        self.other_cpu_ms: dict[str, list[float]] = {}
        engine = app_services(app).engine
        event.listen(engine, "before_cursor_execute", self._on_statement)
        event.listen(engine, "commit", self._on_commit)
        self._count_one_statement_votes()

    # -- statement counting (only while a timed vote runs)
    def _on_statement(self, _conn, _cursor, statement, _parameters, _context, _many) -> None:
        if self.counting:
            self.statements += 1
            if self.captured is not None:
                self.captured.append(" ".join(statement.split()))

    def _count_one_statement_votes(self) -> None:
        """PostgreSQL's one-statement vote runs on the driver's connection, which SQLAlchemy's events do
        not see: count each use as one statement that is its own transaction (autocommit)."""
        from contextlib import contextmanager

        from server.paradigms import core

        plain = core.autocommit_driver_connection

        @contextmanager
        def counted(engine):
            with plain(engine) as connection:
                if self.counting:
                    self.statements += 1
                    self.commits += 1
                    if self.captured is not None:
                        self.captured.append("SELECT ... FROM perceptlab_paired_vote(...)  -- autocommit")
                yield connection

        core.autocommit_driver_connection = counted

    def _on_commit(self, _conn) -> None:
        if self.counting:
            self.commits += 1
            if self.captured is not None:
                self.captured.append("COMMIT")

    # -- the other API calls, in the order server/simulate_client.py makes them (CPU kept per kind)
    def _api(self, kind: str, method: str, path: str, worker: SimWorker | None = None, body=None) -> dict | None:
        headers = {"Authorization": f"Bearer {worker.token}"} if worker else {}
        cpu0 = time.thread_time()
        response = self.client.open(path, method=method, headers=headers, json=body)
        cpu = time.thread_time() - cpu0
        if self.recording:
            self.other_cpu_ms.setdefault(kind, []).append(cpu * 1000.0)
        if response.status_code not in (200, 201, 204):
            raise RuntimeError(f"{method} {path}: HTTP {response.status_code} {response.get_data(as_text=True)[:300]}")
        # Plain json, not the app's strict provider: the driver's own parsing is not the server's work.
        return json.loads(response.get_data()) if response.status_code != 204 else None

    def _action(self, worker: SimWorker, action: str) -> dict:
        return self._api(f"action {action}", "POST", f"/api/v1/assignments/{worker.assignment_id}/actions", worker,
                         {"action": action})

    def _state(self, worker: SimWorker) -> dict:
        return self._api("state", "GET", f"/api/v1/assignments/{worker.assignment_id}/state", worker)

    def new_worker(self) -> SimWorker:
        hexid = uuid.uuid4().hex[:12].upper()
        entry = self._api("entry", "POST", f"/api/v1/studies/{self.slug}/assignments", body={
            "platform": "mturk", "worker_id": f"BENCHW{hexid}", "assignment_id": f"BENCHA{hexid}",
            "hit_id": "BENCHHIT", "turk_submit_to": "https://workersandbox.mturk.com"})
        worker = SimWorker(entry["assignment_id"], entry["token"])
        self._action(worker, "consent")
        self._action(worker, "instructions_done")
        self._api("environment", "POST", f"/api/v1/assignments/{worker.assignment_id}/environment", worker,
                  {"window": WINDOW, "screen": {"width": 1366, "height": 768}, "user_agent": "perceptlab-bench"})
        state = self._state(worker)
        if state["stage"] != "trials":
            raise RuntimeError(f"a new worker is at stage {state['stage']!r}, not trials (is the study full?)")
        self._load_page(worker, state)
        return worker

    def _load_page(self, worker: SimWorker, state: dict) -> None:
        trials = [t for t in sorted(state["page"]["trials"], key=lambda t: t["position"]) if not t["answered"]]
        if self.paradigm == "rating":
            gold = self._rating_gold_answers([t["id"] for t in trials])
            # Real stimuli get answers from the whole scale (a page of one answer would be straight-lined).
            worker.open_trials = deque((t["id"], gold.get(t["id"], int(self.rng.integers(1, 6))), t["id"] in gold)
                                       for t in trials)
            return
        gold = self._gold_answers([int(t["trial_id"]) for t in trials])
        worker.open_trials = deque(
            (t["trial_id"], gold.get(int(t["trial_id"])) or ("left" if self.rng.random() < 0.5 else "right"),
             int(t["trial_id"]) in gold) for t in trials)

    def _gold_answers(self, trial_ids: list[int]) -> dict[int, str]:
        """The correct side of each gold trial among ``trial_ids`` (read as the server judges it)."""
        from sqlalchemy import bindparam, text

        query = text("SELECT t.id, t.left_is_a, p.gold_winner_id = p.stimulus_a_id AS a_wins FROM trial t "
                     "JOIN pair p ON p.id = t.pair_id WHERE t.is_gold AND t.id IN :ids"
                     ).bindparams(bindparam("ids", expanding=True))
        # Ended by a COMMIT, not the ROLLBACK of connect(): psycopg forgets a connection's prepared
        # statements at every ROLLBACK, and this pooled connection is the app's too.
        with app_services(self.app).engine.begin() as conn:
            rows = conn.execute(query, {"ids": trial_ids}).all() if trial_ids else []
        return {row.id: "left" if bool(row.a_wins) == bool(row.left_is_a) else "right" for row in rows}

    def _rating_gold_answers(self, trial_ids: list[int]) -> dict[int, int]:
        """An answer in the known range of each quality check among ``trial_ids`` (read as the server judges it)."""
        from sqlalchemy import bindparam, text

        from server.paradigms.rating.quality import known_range

        query = text("SELECT t.id, s.role FROM rating_trial t JOIN rating_stimulus s ON s.id = t.stimulus_id "
                     "WHERE t.is_gold AND t.id IN :ids").bindparams(bindparam("ids", expanding=True))
        with app_services(self.app).engine.begin() as conn:
            rows = conn.execute(query, {"ids": trial_ids}).all() if trial_ids else []
        return {row.id: int(known_range("dcr", row.role)[1]) for row in rows}

    def _next_page(self, worker: SimWorker, state: dict | None) -> bool:
        """After a complete page (``state``: the State its last vote brought, as a browser gets it; None:
        ask for it): the next page, or finish (False) after ``pages_per_worker`` pages."""
        if (state or self._state(worker))["stage"] != "page_done":
            raise RuntimeError("a complete page did not lead to stage page_done")
        worker.pages_done += 1
        if worker.pages_done >= self.pages_per_worker:
            if self._action(worker, "finish")["stage"] != "completed":
                raise RuntimeError("finish did not complete the assignment")
            return False
        state = self._action(worker, "continue")
        if state["stage"] != "trials":
            raise RuntimeError(f"continue led to stage {state['stage']!r}")
        self._load_page(worker, state)
        return True

    # -- the timed vote
    def _vote_environ(self, worker: SimWorker, trial_id, choice) -> dict:
        from werkzeug.test import EnvironBuilder

        rt_ms = round(float(self.rng.lognormal(7.6, 0.5)), 1)
        if self.paradigm == "rating":  # the body rating_trial.js sends
            body = {"rating_id": str(uuid.uuid4()), "trial_id": trial_id, "rating": choice, "rt_ms": rt_ms}
            kind = "ratings"
        else:
            body = {"vote_id": str(uuid.uuid4()), "trial_id": trial_id, "choice": choice, "rt_ms": rt_ms,
                    "input": "mouse", "client_time": "2026-11-21T10:00:00.000Z", "window": WINDOW}
            kind = "votes"
        builder = EnvironBuilder(path=f"/api/v1/assignments/{worker.assignment_id}/{kind}", method="POST",
                                 headers={"Authorization": f"Bearer {worker.token}",
                                          "User-Agent": "perceptlab-bench"},
                                 data=json.dumps(body), content_type="application/json")
        try:
            return builder.get_environ()
        finally:
            builder.close()

    def vote(self, profiler=None) -> VoteSample:
        """Send the next worker's next vote through the app; return what it cost."""
        while len(self.active) < self.active_workers:
            self.active.append(self.new_worker())
        worker = self.active.popleft()
        trial_id, choice, is_gold = worker.open_trials.popleft()
        environ = self._vote_environ(worker, trial_id, choice)
        status_box: list[str] = []

        def start_response(status, _headers, _exc_info=None):
            status_box.append(status)

        self.statements = self.commits = 0
        self.counting = True
        if profiler is not None:
            profiler.enable()
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        result = self.app(environ, start_response)
        try:
            payload = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        wall1, cpu1 = time.perf_counter(), time.thread_time()
        if profiler is not None:
            profiler.disable()
        self.counting = False
        if not status_box or not status_box[0].startswith("201"):
            raise RuntimeError(f"vote not stored: {status_box} {payload[:300]!r}")
        answer = json.loads(payload)
        kind = "page end" if answer.get("page_complete") else "gold" if is_gold else "plain"
        if answer["stage"] == "page_done":
            if self._next_page(worker, answer.get("state")):
                self.active.append(worker)  # a finished worker is replaced by a new one at the next vote
        elif answer["stage"] == "trials":
            self.active.append(worker)
        else:
            raise RuntimeError(f"a vote led to stage {answer['stage']!r}")
        return VoteSample((cpu1 - cpu0) * 1000.0, (wall1 - wall0) * 1000.0, self.statements, self.commits, kind)


# ----------------------------------------------------------------------------- profiling

AREAS = (  # (label, substring of the code's file path); the first match wins
    ("perceptlab", "/server/"), ("sqlalchemy", "/sqlalchemy/"), ("psycopg", "/psycopg"),
    ("sqlite3", "sqlite3"), ("flask", "/flask/"), ("werkzeug", "/werkzeug/"), ("itsdangerous", "/itsdangerous/"),
    ("json", "/json/"), ("numpy", "/numpy/"), ("re", "/re/"),
)


def area_of(filename: str, function: str) -> str:
    for label, needle in AREAS:
        if needle in filename:
            return label
    if filename == "~":  # built-ins: attribute them by name where it tells
        if "sqlite3" in function:
            return "sqlite3"
        if "psycopg" in function or "pq" in function:
            return "psycopg"
        return "built-ins"
    return "other"


# Parts of a vote request, found in the profile by (function name, a substring of its file); each part's
# figure is the largest cumulative time among its matches (nested matches are not added twice).
PHASES = (
    ("request JSON (strict parse)", (("json_object_body", "validation"), ("loads_strict", "validation"))),
    ("token check", (("read_token", "tokens"),)),
    ("assignment lock", (("lock_assignment", "server"), ("lock_assignment_row", "server"))),
    ("vote function (record_vote, record_rating)", (("record_vote", "server"), ("record_rating", "server"))),
    # PostgreSQL: the common vote in one statement (migration 0009), lock and commit included.
    ("one-statement vote (PostgreSQL)", (("record_in_one_statement", "server"),)),
    ("commit", (("commit", "orm/session.py"),)),
    ("response JSON", (("jsonify", "flask"), ("dumps", "validation"))),
    ("session close (teardown)", (("close_request_session", "server"), ("_close_session", "server"))),
)


def phase_report(stats: pstats.Stats, votes: int) -> list[tuple[str, float, float]]:
    """(part, µs per vote, share of the whole request) for each of :data:`PHASES`, and the rest."""
    def cumulative(name: str, where: str) -> float:
        return max((cum for (filename, _line, function), (_cc, _nc, _tt, cum, _callers) in stats.stats.items()
                    if function == name and where in filename), default=0.0)

    total = cumulative("__call__", "flask")  # Flask.__call__: the whole WSGI call, the fast lane's too
    rows = []
    for label, matches in PHASES:
        rows.append((label, max(cumulative(name, where) for name, where in matches)))
    rows.append(("Flask, Werkzeug, the fast lane, rest", total - sum(t for _, t in rows)))
    return [(label, 1e6 * t / votes, t / total if total else 0.0) for label, t in rows]


def cprofile_report(profiler: cProfile.Profile, votes: int, top: int) -> tuple[str, dict[str, float], float]:
    """The top entries by cumulative time (µs per vote), the self time per area (µs per vote) and the
    Python-level function calls per vote (a count that, unlike times, does not change with the machine's load)."""
    stats = pstats.Stats(profiler)
    rows = []
    areas: Counter = Counter()
    for (filename, line, function), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():
        areas[area_of(filename, function)] += tottime
        where = f"{Path(filename).parent.name}/{Path(filename).name}:{line}" if filename != "~" else "~"
        rows.append((cumtime, tottime, ncalls, f"{function} ({where})"))
    rows.sort(reverse=True)
    out = io.StringIO()
    out.write(f"{'cum us/vote':>11}  {'self us/vote':>12}  {'calls/vote':>10}  function\n")
    for cumtime, tottime, ncalls, name in rows[:top]:
        out.write(f"{1e6 * cumtime / votes:11.0f}  {1e6 * tottime / votes:12.0f}  {ncalls / votes:10.1f}  {name}\n")
    out.write("\nparts of the request (cumulative, us/vote profiled; share of the request):\n")
    for label, us, share in phase_report(stats, votes):
        out.write(f"  {label:32s} {us:8.0f}  {100 * share:5.1f}%\n")
    return out.getvalue(), {k: 1e6 * v / votes for k, v in areas.most_common()}, stats.total_calls / votes


# ----------------------------------------------------------------------------- one backend

def measure(backend: str, url: str, dbname: str | None, work: Path, manifest: Path, args,
            paradigm: str = "pc") -> dict:
    from server import create_app

    slug = f"votecpu-{paradigm}-{backend}"
    total_votes = args.warmup + args.votes + args.profile_votes
    if paradigm == "rating":
        n_stimuli = args.scenes * 13  # 13 methods per scene, one stimulus each
        create_rating_study(url, work, manifest, slug, ratings_per_page=args.pairs_per_page, gold_rate=args.gold_rate,
                            ratings_per_stimulus=max(24, -(-3 * total_votes // n_stimuli)))
    else:
        n_pairs = args.scenes * 78  # 13 methods per scene: 78 pairs (design degree 12 of 13 items)
        votes_per_pair = max(20, -(-3 * total_votes // n_pairs))  # the study never fills during the run
        create_study(url, work, manifest, slug, pairs_per_page=args.pairs_per_page, gold_rate=args.gold_rate,
                     votes_per_pair=votes_per_pair)
    app = create_app(database_url=url, instance_path=str(work / f"instance-{backend}"),
                     secret_key="bench-" + uuid.uuid4().hex, entry_limit=0, admission_rate=0,
                     live_scales_interval=0)
    driver = Driver(app, slug, args.active_workers, args.pages_per_worker, paradigm=paradigm)
    try:
        for _ in range(args.warmup):
            driver.vote()
        pg0 = pg_backend_cpu_s(dbname) if dbname else None
        driver.recording = True
        samples = [driver.vote() for _ in range(args.votes)]
        driver.recording = False
        pg_cpu_ms = (pg_backend_cpu_s(dbname) - pg0) * 1000.0 / args.votes if dbname else None
        profile_text, areas, pyinstrument_text, calls = "", {}, "", None
        if args.profile_votes:
            if args.profiler == "pyinstrument":
                from pyinstrument import Profiler

                profiler = Profiler(interval=0.0001)

                class _Toggle:  # pyinstrument starts and stops where cProfile enables and disables
                    def enable(self):
                        profiler.start()

                    def disable(self):
                        profiler.stop()

                for _ in range(args.profile_votes):
                    driver.vote(_Toggle())
                pyinstrument_text = profiler.output_text(unicode=False, color=False, show_all=False)
            else:
                # A CPU clock by default: waits for the database would otherwise count as the driver's time.
                profiler = cProfile.Profile(time.thread_time) if args.profile_clock == "cpu" else cProfile.Profile()
                for _ in range(args.profile_votes):
                    driver.vote(profiler)
                profile_text, areas, calls = cprofile_report(profiler, args.profile_votes, args.top)
        driver.captured = []
        driver.vote()
        one_vote_sql = driver.captured
        driver.captured = None
    finally:
        app_services(app).engine.dispose()

    cpu = np.array([s.cpu_ms for s in samples])
    wall = np.array([s.wall_ms for s in samples])
    statements = np.array([s.statements for s in samples])
    by_kind = {}
    for kind in ("plain", "gold", "page end"):
        chosen = [s for s in samples if s.kind == kind]
        if chosen:
            by_kind[kind] = {"votes": len(chosen), "cpu_ms_median": float(np.median([s.cpu_ms for s in chosen])),
                             "statements_median": float(np.median([s.statements for s in chosen]))}
    return {
        "paradigm": paradigm, "backend": backend, "votes": len(samples), "active_workers": args.active_workers,
        "pairs_per_page": args.pairs_per_page, "gold_rate": args.gold_rate,
        "cpu_ms_median": float(np.median(cpu)), "cpu_ms_p90": float(np.percentile(cpu, 90)),
        "cpu_ms_mean": float(cpu.mean()), "wall_ms_median": float(np.median(wall)),
        "wall_ms_p90": float(np.percentile(wall, 90)),
        "statements_median": float(np.median(statements)), "statements_max": int(statements.max()),
        "commits_median": float(np.median([s.commits for s in samples])),
        "database_cpu_ms_per_vote": pg_cpu_ms, "by_kind": by_kind,
        # Through the test client (its own work included), per call and summed over the timed votes.
        "other_requests": {kind: {"calls": len(cpus), "cpu_ms_median": float(np.median(cpus)),
                                  "cpu_ms_per_vote": float(np.sum(cpus)) / len(samples)}
                           for kind, cpus in sorted(driver.other_cpu_ms.items())},
        "target_cpu_ms": TARGET_CPU_MS, "meets_target": bool(np.median(cpu) <= TARGET_CPU_MS),
        "function_calls_per_vote": calls, "profile_top": profile_text, "profile_self_us_by_area": areas, "pyinstrument": pyinstrument_text,
        "one_vote_sql": one_vote_sql,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    parser.add_argument("--paradigm", default="pc,rating",
                        help="comma-separated: pc (paired votes), rating (DCR ratings)")
    parser.add_argument("--votes", type=int, default=2000, help="timed votes per database")
    parser.add_argument("--warmup", type=int, default=200, help="untimed votes first (caches, pool, JIT-free warm-up)")
    parser.add_argument("--profile-votes", type=int, default=500, help="votes of the profiling pass (0 = none)")
    parser.add_argument("--profiler", choices=("cprofile", "pyinstrument"), default="cprofile")
    parser.add_argument("--profile-clock", choices=("cpu", "wall"), default="cpu",
                        help="cProfile's clock: this thread's CPU time (default) or wall time")
    parser.add_argument("--top", type=int, default=15, help="profile entries to print")
    parser.add_argument("--active-workers", type=int, default=50, help="workers voting round-robin")
    parser.add_argument("--pairs-per-page", type=int, default=20, help="trials per page (pairs or ratings)")
    parser.add_argument("--pages-per-worker", type=int, default=2,
                        help="pages each worker answers before finishing (then a new worker enters)")
    parser.add_argument("--gold-rate", type=float, default=0.1, help="hidden gold trials per page (fraction)")
    parser.add_argument("--scenes", type=int, default=8, help="demo scenes (78 pairs each)")
    parser.add_argument("--stimuli", type=Path, default=None, help="demo stimulus folder, built if missing")
    parser.add_argument("--postgres-url", default="postgresql+psycopg://postgres@127.0.0.1:5432",
                        help="PostgreSQL server (a fresh database is created there and dropped at the end)")
    parser.add_argument("--show-sql", action="store_true", help="print the statements of one stored vote")
    parser.add_argument("--json-out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="perceptlab_votecpu_"))
    results = []
    try:
        manifest = build_demo_stimuli(args.stimuli or work / "stimuli", args.scenes)
        paradigms = [p.strip() for p in args.paradigm.split(",") if p.strip()]
        if any(p not in ("pc", "rating") for p in paradigms):
            parser.error(f"unknown paradigm in {args.paradigm!r} (pc, rating)")
        for paradigm in paradigms:
            for backend in (b.strip() for b in args.db.split(",") if b.strip()):
                dbname = None
                if backend == "sqlite":
                    url = f"sqlite:///{work / f'votecpu-{paradigm}.db'}"
                elif backend == "postgresql":
                    dbname = f"perceptlab_votecpu_{paradigm}_{os.getpid()}"
                    pg_admin(f'CREATE DATABASE "{dbname}"')
                    url = f"{args.postgres_url.rstrip('/')}/{dbname}"
                else:
                    parser.error(f"unknown database {backend!r}")
                try:
                    print(f"# {paradigm} on {backend}: {args.warmup} warm-up + {args.votes} timed + "
                          f"{args.profile_votes} profiled votes, {args.active_workers} workers round-robin", flush=True)
                    results.append(measure(backend, url, dbname, work, manifest, args, paradigm))
                finally:
                    if dbname:
                        pg_admin(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"server CPU per stored vote, in-process (WSGI call, no HTTP); target: median <= {TARGET_CPU_MS:g} ms")
    print_table(["paradigm", "database", "votes", "CPU p50 ms", "CPU p90 ms", "CPU mean ms", "wall p50 ms", "wall p90 ms",
                 "SQL/vote p50", "SQL max", "DB CPU ms/vote", "calls/vote", "target"],
                [[r["paradigm"], r["backend"], r["votes"], f"{r['cpu_ms_median']:.3f}", f"{r['cpu_ms_p90']:.3f}",
                  f"{r['cpu_ms_mean']:.3f}", f"{r['wall_ms_median']:.3f}", f"{r['wall_ms_p90']:.3f}",
                  f"{r['statements_median']:g}", r["statements_max"],
                  "-" if r["database_cpu_ms_per_vote"] is None else f"{r['database_cpu_ms_per_vote']:.3f}",
                  "-" if r["function_calls_per_vote"] is None else f"{r['function_calls_per_vote']:.0f}",
                  "met" if r["meets_target"] else "NOT met"] for r in results])
    for r in results:
        kinds = ", ".join(f"{k}: {v['votes']} votes, CPU p50 {v['cpu_ms_median']:.3f} ms, "
                          f"{v['statements_median']:g} statements" for k, v in r["by_kind"].items())
        print(f"  {r['paradigm']} {r['backend']}: {kinds}")
        others = r["other_requests"]
        print(f"  {r['paradigm']} {r['backend']}: other requests of the same workers (test client), CPU per vote in all "
              f"{sum(o['cpu_ms_per_vote'] for o in others.values()):.3f} ms: " + ", ".join(
                  f"{kind} {o['calls']}x p50 {o['cpu_ms_median']:.2f} ms" for kind, o in others.items()))
    for r in results:
        if r["profile_top"]:
            print(f"\n{r['paradigm']} {r['backend']}: top {args.top} by cumulative time ({args.profile_votes} profiled votes; "
                  f"{args.profile_clock} clock; cProfile inflates times, compare entries with each other):")
            print(r["profile_top"], end="")
            total = sum(r["profile_self_us_by_area"].values())
            print("self time by area (us/vote, profiled): " + ", ".join(
                f"{k} {v:.0f} ({100 * v / total:.0f}%)" for k, v in r["profile_self_us_by_area"].items()))
        if r["pyinstrument"]:
            print(f"\n{r['paradigm']} {r['backend']}: pyinstrument ({args.profile_votes} profiled votes):")
            print(r["pyinstrument"])
        if args.show_sql:
            print(f"\n{r['paradigm']} {r['backend']}: the statements of one stored vote:")
            for statement in r["one_vote_sql"]:
                print(f"  {statement[:200]}")
    print("\nCPU: time.thread_time of the request (the app only); DB CPU: PostgreSQL backends' user+system CPU "
          "over the timed votes / votes (another process, not in the CPU column); calls/vote: Python function "
          "calls per vote in the profiled pass (independent of the machine's load: compare versions with it).")
    if args.json_out is not None:
        args.json_out.write_text(json.dumps({"target_cpu_ms": TARGET_CPU_MS, "results": results}, indent=2))
        print(f"# figures: {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
