"""Fixtures for server tests: demo stimuli, a database per test (SQLite and PostgreSQL), apps, studies,
and a live HTTP server in a thread.

PostgreSQL tests need the server at ``PERCEPTLAB_TEST_POSTGRES`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). Without it they skip with the
reason, except when ``PERCEPTLAB_REQUIRE_POSTGRES=1`` (set by ``.ci/run``): then they fail.
Redis tests (shared limits) likewise: ``PERCEPTLAB_TEST_REDIS``, ``PERCEPTLAB_REQUIRE_REDIS``.
"""
from __future__ import annotations

import collections
import itertools
import os
import queue
import shutil
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import pytest

from server.services import app_services

POSTGRES_URL = os.environ.get("PERCEPTLAB_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TEMPLATE_DB = f"perceptlab_template_{os.getpid()}"
_counter = itertools.count()


def _admin_connection(database: str | None = None):
    import psycopg

    url = POSTGRES_URL if database is None else _database_url(database)
    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True, connect_timeout=3)


# What a test could change in a database besides its rows: the schema (relations, columns and their defaults,
# constraints, indexes, functions, triggers, types, views, rules, grants, sequences' definitions), the database's
# settings, the migration it is at, large objects and prepared transactions. A database whose state string differs
# from a fresh copy's after its test is dropped instead of being used again.
_STATE_SQL = """
SELECT md5(concat_ws(' | ',
  (SELECT string_agg(format('%s.%s:%s:%s', n.nspname, c.relname, c.relkind, c.relacl), ','
                     ORDER BY n.nspname, c.relname)
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(toast|temp)'),
  (SELECT string_agg(format('%s.%s:%s:%s:%s:%s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
                            a.attnotnull, a.attnum, pg_get_expr(d.adbin, d.adrelid)), ',' ORDER BY c.relname, a.attnum)
     FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE n.nspname = 'public' AND a.attnum > 0),
  (SELECT string_agg(format('%s.%s:%s', conrelid::regclass, conname, pg_get_constraintdef(oid)), ',' ORDER BY 1)
     FROM pg_constraint WHERE connamespace = 'public'::regnamespace),
  (SELECT string_agg(indexdef, ',' ORDER BY indexdef) FROM pg_indexes WHERE schemaname = 'public'),
  (SELECT string_agg(format('%s:%s:%s', oid::regprocedure, md5(coalesce(prosrc, '')), proconfig), ',' ORDER BY 1)
     FROM pg_proc WHERE pronamespace = 'public'::regnamespace),
  (SELECT string_agg(pg_get_triggerdef(oid), ',' ORDER BY 1) FROM pg_trigger WHERE NOT tgisinternal),
  (SELECT string_agg(format('%s:%s', enumtypid::regtype, enumlabel), ',' ORDER BY enumtypid, enumsortorder)
     FROM pg_enum),
  (SELECT string_agg(format('%s:%s', viewname, md5(definition)), ',' ORDER BY 1) FROM pg_views
    WHERE schemaname = 'public'),
  (SELECT string_agg(format('%s.%s:%s', tablename, rulename, md5(definition)), ',' ORDER BY 1) FROM pg_rules
    WHERE schemaname = 'public'),
  (SELECT string_agg(format('%s:%s:%s:%s:%s', sequencename, data_type, start_value, increment_by, cycle), ','
                     ORDER BY 1)
     FROM pg_sequences WHERE schemaname = 'public'),
  (SELECT string_agg(nspname, ',' ORDER BY 1) FROM pg_namespace WHERE nspname !~ '^pg_(toast_)?temp'),
  (SELECT string_agg(format('%s:%s', extname, extversion), ',' ORDER BY 1) FROM pg_extension),
  (SELECT string_agg(array_to_string(setconfig, ';'), ',' ORDER BY setrole) FROM pg_db_role_setting
    WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())),
  (SELECT count(*) FROM pg_largeobject_metadata),
  (SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()),
  (SELECT string_agg(version_num, ',' ORDER BY 1) FROM alembic_version)))
"""


class TemplateCopies:
    """Migrated PostgreSQL databases in the template's state, one per test, made fresh or used again.

    The first tests get copies of the migrated template (``CREATE DATABASE ... TEMPLATE``). Once a test is done
    with its copy, a thread of its own brings the copy back to the template's state while the next tests run, and
    the next test that asks for a database gets it: the connections still open on it are ended, the tables that
    hold rows are emptied (``TRUNCATE``: new empty files, as in a fresh copy, so that rows come back in the order
    they are written) and the sequences that moved are set back. A copy whose schema, settings or migration differ
    from a fresh copy's (:data:`_STATE_SQL`: a test that altered it) is dropped instead. A drop forces a checkpoint
    (every dirty buffer of the server written and synced: 2-4 s of wall on a busy machine, and at the session's end
    the copies still queued made the last test wait); bringing a copy back costs PostgreSQL about as much CPU as a
    copy and a drop (0.05-0.1 s, most of it the TRUNCATE, about 7 ms a table) but no checkpoint.

    A copy's transactions commit without waiting for the WAL flush (``synchronous_commit = off``): a
    crash of the server could lose the last commits of a test database, which nothing keeps; every
    reader still sees every committed row, so no test sees a difference.
    """

    def __init__(self, template: str):
        self.template = template
        self.made: set[str] = set()  # the copies of this process (other databases given to release are dropped)
        self.ready: collections.deque[str] = collections.deque()  # copies in the template's state, oldest first
        self.guard = threading.Lock()
        self.state: str | None = None  # _STATE_SQL of a fresh copy
        self.tables: list[str] = []  # a fresh copy's tables that hold no rows
        self.queue: queue.Queue[str | None] = queue.Queue()
        self.recycler = threading.Thread(target=self._recycle_queued, name="recycle-test-databases", daemon=True)
        self.recycler.start()

    def copy(self) -> str:
        """A database in the template's state: its URL."""
        with self.guard:
            name = self.ready.popleft() if self.ready else None
        if name is None:
            name = f"perceptlab_t{os.getpid()}_{next(_counter)}"
            with _admin_connection() as connection:
                connection.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
                connection.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
            with self.guard:
                self.made.add(name)
                first = self.state is None
            if first:
                self._read_fresh_state(name)
        return _database_url(name)

    def release(self, url: str) -> None:
        """Take back the database at ``url`` (its test is done with it): used again, or dropped, soon."""
        self.queue.put(url.rsplit("/", 1)[1])

    def close(self) -> None:
        """Drop the copies and the template (and the copies a failed thread left queued)."""
        self.queue.put(None)
        self.recycler.join()
        left = list(iter(lambda: None if self.queue.empty() else self.queue.get(), None))  # up to the stop mark
        with _admin_connection() as connection:
            for name in [*left, *self.ready, self.template]:
                connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _read_fresh_state(self, name: str) -> None:
        with _admin_connection(name) as connection:
            state = connection.execute(_STATE_SQL).fetchone()[0]
            tables = [row[0] for row in connection.execute(
                "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname = 'public' "
                "AND tablename <> 'alembic_version' ORDER BY 1")]
            for table in tables:  # assumed below: every table but the migrations' own is empty in the template
                assert connection.execute(f"SELECT NOT EXISTS (SELECT FROM {table})").fetchone()[0], table
        with self.guard:
            self.tables, self.state = tables, state

    def _recycle_queued(self) -> None:
        with _admin_connection() as admin:
            while (name := self.queue.get()) is not None:
                if name in self.made and self._back_to_template_state(admin, name):
                    with self.guard:
                        self.ready.append(name)
                else:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _back_to_template_state(self, admin, name: str) -> bool:
        """End the connections to ``name`` and empty it; False when it is no longer like a fresh copy."""
        deadline = time.monotonic() + 10
        while admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
                            (name,)).fetchone()[0]:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)  # ended backends leave pg_stat_activity when they have exited
        try:
            with _admin_connection(name) as connection:
                if connection.execute(_STATE_SQL).fetchone()[0] != self.state:
                    return False
                probes = ", ".join(f"(SELECT '{table}' WHERE EXISTS (SELECT FROM {table}))" for table in self.tables)
                written = [table for table in connection.execute(f"SELECT ARRAY[{probes}]").fetchone()[0] if table]
                if written:  # CASCADE: the empty tables that refer to them too (PostgreSQL asks for them)
                    connection.execute(f"TRUNCATE {', '.join(written)} RESTART IDENTITY CASCADE")
                # Sequences still moved (of tables that are empty again): back to their start, as in a fresh copy.
                connection.execute("SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, start_value, "
                                   "false) FROM pg_sequences WHERE last_value IS NOT NULL")
        except Exception:  # noqa: BLE001 - any doubt about the copy's state: it is dropped
            return False
        return True


@pytest.fixture(scope="session")
def postgres_template() -> TemplateCopies:
    """A migrated template database and the databases in its state that tests take (:class:`TemplateCopies`)."""
    try:
        connection = _admin_connection()
    except Exception as exc:  # noqa: BLE001 - any failure to connect means "no PostgreSQL here"
        message = f"PostgreSQL not reachable at {POSTGRES_URL}: {exc}"
        if os.environ.get("PERCEPTLAB_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (PERCEPTLAB_REQUIRE_POSTGRES=1)")
        pytest.skip(message)
    from server.db import upgrade

    with connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}"')
        connection.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
    upgrade(_database_url(TEMPLATE_DB))
    copies = TemplateCopies(TEMPLATE_DB)
    yield copies
    copies.close()


def _database_url(name: str) -> str:
    return POSTGRES_URL.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def postgres_url(postgres_template):
    """This test's migrated PostgreSQL database, in the state of :func:`postgres_template`."""
    url = postgres_template.copy()
    yield url
    postgres_template.release(url)


@pytest.fixture
def two_postgres_urls(postgres_template):
    """Two migrated databases in the template's state (same sequences, same rows)."""
    urls = [postgres_template.copy(), postgres_template.copy()]
    yield urls
    for url in urls:
        postgres_template.release(url)


REDIS_URL = os.environ.get("PERCEPTLAB_TEST_REDIS", "redis://127.0.0.1:6379/0")


@pytest.fixture
def redis_prefix():
    """A Redis key prefix of this test alone (``[server] redis_prefix``) on the real Redis at
    ``PERCEPTLAB_TEST_REDIS`` (default 127.0.0.1:6379); its keys are deleted afterwards. Without a
    Redis the test skips with the reason, except when ``PERCEPTLAB_REQUIRE_REDIS=1`` (set by
    ``.ci/run``): then it fails."""
    import redis

    connection = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
    try:
        connection.ping()
    except redis.RedisError as exc:
        message = f"Redis not reachable at {REDIS_URL}: {exc}"
        if os.environ.get("PERCEPTLAB_REQUIRE_REDIS") == "1":
            pytest.fail(message + " (PERCEPTLAB_REQUIRE_REDIS=1)")
        pytest.skip(message)
    prefix = f"perceptlab-test:{uuid.uuid4().hex}:"
    yield prefix
    keys = list(connection.scan_iter(match=prefix + "*", count=1000))
    if keys:
        connection.delete(*keys)
    connection.close()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> Path:
    """A migrated SQLite database file; each test copies it (migrating a new file takes 0.3-0.5 s of
    CPU, copying it about a millisecond)."""
    from server.db import upgrade

    path = tmp_path_factory.mktemp("sqlite-template") / "perceptlab.db"
    upgrade(f"sqlite:///{path}")
    with sqlite3.connect(path) as connection:  # everything into the main file: a copy needs no -wal
        busy, _, _ = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    assert not busy, "the SQLite template is still in use: its copies would miss the last migrations"
    return path


@pytest.fixture
def empty_sqlite_url(tmp_path) -> str:
    """A SQLite database that does not exist yet (tests of the migrations themselves)."""
    return f"sqlite:///{tmp_path / 'perceptlab.db'}"


@pytest.fixture
def sqlite_url(sqlite_template, tmp_path) -> str:
    """This test's migrated SQLite database (a copy of :func:`sqlite_template`)."""
    shutil.copyfile(sqlite_template, tmp_path / "perceptlab.db")
    return f"sqlite:///{tmp_path / 'perceptlab.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request) -> str:
    """Each test using this runs twice: on SQLite (WAL) and on PostgreSQL (but see :func:`pytest_generate_tests`)."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc):
    """Tests marked ``one_database`` that take ``database_url`` run on SQLite alone: what they check (a page, a
    form, a message) does not depend on where the rows are kept, and the rest of their modules' paths are checked
    on both databases by other tests. A test that names its databases itself keeps them. (A parametrize mark,
    added before pytest's own hooks read the marks and the fixtures' parameters.)"""
    named = any("database_url" in str(marker.args[0]) for marker in metafunc.definition.iter_markers("parametrize"))
    if "database_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker("one_database") and not named:
        metafunc.definition.add_marker(pytest.mark.parametrize("database_url", ["sqlite"], indirect=True))


def make_test_app(database_url: str, instance_path: Path, **overrides):
    from server import create_app

    # API tests create many workers from one address (the test client's); the tests of the entry
    # rate limit (test_fair_allocation.py) set ``entry_limit`` themselves.
    overrides.setdefault("entry_limit", 0)
    # ... and the admission rate (tests of the waiting room set ``admission_rate``: test_admission.py).
    overrides.setdefault("admission_rate", 0)
    # ... and the per-assignment request rates: the injected clock stands still while a browser test walks
    # through a whole session, so no rate ever refills (test_shared_limits.py sets them).
    overrides.setdefault("state_requests_per_minute", 0)
    overrides.setdefault("environment_posts_per_minute", 0)
    # Running scale estimates are computed in the asking thread: tests replace parts of the computation
    # in this process (test_live_scales.py runs the child process on purpose).
    overrides.setdefault("live_scales_process", False)
    # ... and so are [stopping] forecasts (test_forecast_jobs.py runs the child process on purpose).
    overrides.setdefault("forecast_process", False)

    return create_app(database_url=database_url, instance_path=str(instance_path), secret_key="test-secret",
                      testing=True, **overrides)


class ManualClock:
    """An injected clock (``create_app(clock=...)``) that stands still until a test moves it: page
    reservations and the entry rate limit then lapse exactly when the test says, without sleeping."""

    def __init__(self):
        import datetime as dt

        self.now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)

    def __call__(self):
        return self.now

    def advance(self, **delta) -> None:
        """Move time forward by ``datetime.timedelta(**delta)``, e.g. ``advance(minutes=6)``."""
        import datetime as dt

        self.now += dt.timedelta(**delta)


@pytest.fixture
def instance(tmp_path, monkeypatch) -> Path:
    """An instance folder of the test's own for the CLI (``PERCEPTLAB_INSTANCE``), no other PERCEPTLAB_ or AWS_
    variable set."""
    for name in [n for n in os.environ if n.startswith("PERCEPTLAB_") or n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PERCEPTLAB_INSTANCE", str(tmp_path / "lab"))
    return tmp_path / "lab"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def app(database_url, tmp_path, clock):
    app = make_test_app(database_url, tmp_path / "instance", clock=clock)
    yield app
    app_services(app).engine.dispose()


def write_study_file(folder: Path, demo_stimuli: Path, slug: str = "demo", **sections) -> Path:
    """A study.toml over the demo stimuli; ``sections`` like ``pages={"pairs_per_page": 6}``.

    Test studies take MTurk entries without posted HITs (``[entry] external_hits = true``: the HIT1 of
    :class:`WorkerClient`) unless ``entry`` says otherwise."""
    sections["entry"] = {"external_hits": True, **sections.get("entry", {})}
    lines = ["[study]", f'slug = "{slug}"', 'name = "Test study"',
             f'manifests = ["{(demo_stimuli / "prepared" / "manifest.json").as_posix()}"]']
    for section, values in sections.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            if isinstance(value, bool):
                lines.append(f"{key} = {str(value).lower()}")  # TOML booleans are lowercase
            else:
                lines.append(f"{key} = {value!r}" if not isinstance(value, str) else f'{key} = "{value}"')
    path = folder / f"{slug}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def create_test_study(app, demo_stimuli: Path, folder: Path, slug: str = "demo", **sections):
    from server.paradigms import create_study, read_study_file

    spec = read_study_file(write_study_file(folder, demo_stimuli, slug, **sections))
    with app_services(app).sessions() as session:
        study = create_study(session, spec)
        session.commit()
        return study.slug


# Small pages so a test can walk through several quickly.
# Its pay is set here (the template's defaults meet the wage floor for 20 comparisons a page): the tests
# of pay and time count in these round figures.
SMALL_STUDY = {"pages": {"pairs_per_page": 6, "min_pages": 1, "max_pages": 3, "reward_per_page": "0.50",
                         "bonus_per_page": "0.40"},
               "quality": {"quiz_size": 3, "gold_rate": 0.2, "gold_min_answered": 2}}


@pytest.fixture
def study(app, demo_stimuli, tmp_path) -> str:
    """Slug of a small demo study in the test database."""
    return create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)


@pytest.fixture
def user(app) -> str:
    """The experimenter account "alice" (password :data:`tests.server.admin_support.PASSWORD`)."""
    from server import auth

    from .admin_support import PASSWORD

    with app_services(app).sessions() as session:
        auth.create_user(session, "alice", PASSWORD)
        session.commit()
    return "alice"


@pytest.fixture
def admin(app, user):
    """A test client logged in as an experimenter."""
    from .admin_support import log_in

    client = app.test_client()
    assert log_in(client).status_code == 303
    return client


@pytest.fixture
def motion_study(app, motion_clips, tmp_path) -> str:
    """A small motion study (:data:`tests.server.motion_support.SMALL` blocks): its slug."""
    from .motion_support import SMALL, create_motion_study

    return create_motion_study(app, motion_clips, tmp_path, **SMALL)


def gold_side(app, trial: dict) -> str | None:
    """The side ("left"/"right") showing a gold trial's better image, None for a real pair.

    Read from the database, as the server judges votes: nothing a worker receives tells gold
    from real pairs, nor which gold image is the better one (neither is the reference's file).
    """
    trial_id = int(trial["trial_id"])
    return gold_sides(app, [trial_id])[trial_id]


def gold_sides(app, trial_ids) -> dict[int, str | None]:
    """:func:`gold_side` of each of ``trial_ids`` (from one query): a trial missing from the database is
    missing from the answer."""
    from sqlalchemy import select

    from server.paradigms.paired.models import Pair, Trial

    with app_services(app).sessions() as session:
        rows = session.execute(select(Trial.id, Trial.left_is_a, Trial.is_gold, Pair.gold_winner_id,
                                      Pair.stimulus_a_id)
                               .join(Pair, Trial.pair_id == Pair.id).where(Trial.id.in_(list(trial_ids)))).all()
    # The trial's flag: a design pair chosen as gold is also shown as a real trial.
    return {row.id: None if not row.is_gold else
            "left" if (row.gold_winner_id == row.stimulus_a_id) == row.left_is_a else "right" for row in rows}


def held_count_problems(app) -> list[str]:
    """Pairs whose ``n_held`` is not the number of their unanswered real trials on held pages (the
    counter that pair allocation reads instead of counting open trials; server/paradigms/paired/allocation.py)."""
    from sqlalchemy import func, select

    from server.models import Page
    from server.paradigms.paired.models import Pair, Trial

    with app_services(app).sessions() as session:
        # A real pair's gold trials are held too (a design pair chosen as gold); a gold-only pair's never.
        held = dict(session.execute(select(Trial.pair_id, func.count()).join(Page, Trial.page_id == Page.id)
                                    .join(Pair, Trial.pair_id == Pair.id)
                                    .where(Page.held, ~Trial.answered, ~Pair.is_gold).group_by(Trial.pair_id)).all())
        return [f"pair {pair_id}: n_held {n_held}, {held.get(pair_id, 0)} unanswered trials on held pages"
                for pair_id, n_held in session.execute(select(Pair.id, Pair.n_held)).all()
                if n_held != held.get(pair_id, 0)]


def _flask_app(client):
    """The Flask app behind a test client (or behind a wrapper of one with a ``client`` attribute)."""
    return client.application if hasattr(client, "application") else _flask_app(client.client)


class WorkerClient:
    """A simulated worker over the Flask test client, for API tests."""

    # The trials of the page being answered (answer_page): the first question about the gold side of one of
    # them reads the sides of all of them, in one query instead of one a trial.
    page_trials: list[dict] = []

    def __init__(self, client, slug: str, worker_id: str | None = None, platform: str = "mturk"):
        self.client = client
        worker_id = worker_id or f"W{uuid.uuid4().hex[:10].upper()}"
        body = {"platform": platform, "worker_id": worker_id}
        if platform == "mturk":
            body.update(assignment_id=f"A{uuid.uuid4().hex[:12].upper()}", hit_id="HIT1",
                        turk_submit_to="https://workersandbox.mturk.com")
        response = client.post(f"/api/v1/studies/{slug}/assignments", json=body)
        assert response.status_code == 201, response.json
        self.entry = response.json
        self.assignment_id = response.json["assignment_id"]
        self.token = response.json["token"]
        self.worker_id = worker_id

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def state(self) -> dict:
        response = self.client.get(f"/api/v1/assignments/{self.assignment_id}/state", headers=self.headers)
        assert response.status_code == 200, response.json
        return response.json

    def action(self, action: str):
        return self.client.post(f"/api/v1/assignments/{self.assignment_id}/actions", headers=self.headers,
                                json={"action": action})

    def vote(self, trial_id: str, choice: str, vote_id: str | None = None, **extra):
        body = {"vote_id": vote_id or str(uuid.uuid4()), "trial_id": trial_id, "choice": choice, "rt_ms": 1234.5,
                "input": "mouse", "client_time": "2026-11-21T10:00:00Z",
                "window": {"width": 1366, "height": 768, "dpr": 1}, **extra}
        return self.client.post(f"/api/v1/assignments/{self.assignment_id}/votes", headers=self.headers, json=body)

    def start(self) -> dict:
        """Consent and instructions: returns the state at the quiz."""
        assert self.action("consent").status_code == 200
        response = self.action("instructions_done")
        assert response.status_code == 200, response.json
        return response.json

    def gold_side(self, trial: dict) -> str | None:
        """The side of a gold trial's better image; None for a real pair (see :func:`gold_side`). The first
        question about a trial of the page being answered reads the sides of all its trials."""
        trial_id = int(trial["trial_id"])
        # A trial's gold side never changes, so it is kept. Made here, not in __init__: some tests build a
        # WorkerClient with __new__ for an existing assignment (test_pilot, test_vote_rules).
        known = self.__dict__.setdefault("known_gold_sides", {})
        if trial_id not in known:
            page = {int(other["trial_id"]) for other in self.page_trials}
            known.update(gold_sides(_flask_app(self.client), ({trial_id} | page) - set(known)))
        return known[trial_id]

    def correct_side(self, trial: dict) -> str:
        """The right answer of a gold trial, else "left" (real pairs have no right answer)."""
        return self.gold_side(trial) or "left"

    def wrong_side(self, trial: dict) -> str:
        """The wrong answer of a gold trial, else "left"."""
        side = self.gold_side(trial)
        return "left" if side is None else ("right" if side == "left" else "left")

    def answer_page(self, choose) -> dict:
        """Answer every open trial of the current page with ``choose(trial) -> side``; return the last body."""
        body = {}
        self.page_trials = self.state()["page"]["trials"]
        for trial in self.page_trials:
            if not trial["answered"]:
                response = self.vote(trial["trial_id"], choose(trial))
                assert response.status_code == 201, response.json
                body = response.json
        return body


@pytest.fixture
def live_server(app):
    """The app served over real HTTP by a threaded werkzeug server on a free loopback port."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)


@pytest.fixture
def client():
    """A real boto3 MTurk client (dummy credentials) under a botocore Stubber: every call the test
    expects must be queued on ``client.stubber``, and none may be left over."""
    from botocore.stub import Stubber

    from server.mturk import make_client

    mturk = make_client(aws_access_key_id="AKIDTEST", aws_secret_access_key="secret")
    with Stubber(mturk) as stubber:
        mturk.stubber = stubber
        yield mturk
        stubber.assert_no_pending_responses()


def make_noisy_scenes(root: Path, seed: int) -> Path:
    """Two 160x120 scenes of four candidates each under ``root``: a reference and copies noisier over the
    right two thirds of the frame (prepared in about 3 s)."""
    import numpy as np

    from stimuli.io import write_png

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:120, 0:160]
    for s in range(2):
        folder = root / f"scene_{s}"
        folder.mkdir(parents=True)
        reference = np.stack([x * 1.6, y * 2.1, ((x + y + 20 * s) % 64) * 4.0], axis=-1)
        reference += rng.normal(0, 10, reference.shape)
        write_png(folder / "reference.png", np.clip(reference, 0, 255).astype(np.uint8))
        for c in range(4):
            noisy = reference + rng.normal(0, 5 + 10 * c, reference.shape) * (x[..., None] > 53)
            write_png(folder / f"method_{c}.png", np.clip(noisy, 0, 255).astype(np.uint8))
    return root


def add_hit(app, slug: str, hit_id: str) -> None:
    """Record a HIT of study ``slug`` as ``perceptlab mturk launch`` does (MTurk entries must name one)."""
    from sqlalchemy import select

    from server.models import MTurkHit, Study

    with app_services(app).sessions() as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        session.add(MTurkHit(study_id=study_id, hit_id=hit_id, hit_type_id="T1", unique_request_token=uuid.uuid4().hex,
                             launch_id="L1", batch_index=0, max_assignments=9, reward="0.50", status="Assignable",
                             sandbox=True))
        session.commit()


@pytest.fixture
def rating_manifest(demo_stimuli, tmp_path) -> Path:
    """The demo's prepared scenes copied for one test (a rating study writes its quality checks' images into
    its stimulus folder): the study manifest."""
    from .rating_support import copy_prepared

    return copy_prepared(demo_stimuli, tmp_path / "stimuli")


@pytest.fixture
def rating_study(app, rating_manifest, tmp_path) -> str:
    """Slug of a small DCR study (:data:`tests.server.rating_support.SMALL`) in the test database."""
    from .rating_support import SMALL, create_rating_study

    return create_rating_study(app, rating_manifest, tmp_path, **SMALL)
