"""The Alembic migrations build exactly the models' schema, on SQLite and PostgreSQL, and SQLite runs in WAL mode."""
from __future__ import annotations

import json

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Integer, MetaData, Table, inspect, text

from server.db import alembic_config, at_newest_revision, make_engine, sqlite_path, upgrade
from server.models import Base
from server.paradigms import all_paradigms, load_models

# Every paradigm package's tables (its models.py) join Base.metadata, as in Alembic's environment.
PARADIGM_MODELS = load_models()
from server.services import app_services


def _url(url: str) -> str:
    return "postgresql+psycopg://" + url[len("postgresql://"):] if url.startswith("postgresql://") else url


def _differences(engine, metadata=Base.metadata) -> list:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True,
                                                               "compare_server_default": True})
        return compare_metadata(context, metadata)


def _revision(engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def test_every_paradigm_package_s_tables_are_in_the_compared_metadata():
    """The comparison below covers each paradigm's own tables (its package's models.py), not just the shared ones."""
    assert PARADIGM_MODELS == [f"{p.package}.models" for p in all_paradigms()
                               if f"{p.package}.models" in PARADIGM_MODELS]
    assert {"server.paradigms.paired.models", "server.paradigms.motion.models"} <= set(PARADIGM_MODELS)
    mapped = {mapper.class_.__module__: mapper.local_table.name for mapper in Base.registry.mappers}
    for module in PARADIGM_MODELS:
        assert module in mapped and mapped[module] in Base.metadata.tables, module


def test_migrations_build_the_models_schema_and_go_down_and_up_again(database_url):
    url = _url(database_url)
    upgrade(url)  # SQLite: a new file; PostgreSQL: the migrated template copy (a no-op)
    engine = make_engine(url)
    try:
        head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
        assert _revision(engine) == head
        assert _differences(engine) == []
        tables = set(Base.metadata.tables)
        assert tables <= set(inspect(engine).get_table_names())

        # The comparison does see a difference when there is one.
        extra = MetaData()
        for table in Base.metadata.sorted_tables:
            table.to_metadata(extra)
        Table("not_migrated", extra, Column("id", Integer, primary_key=True))
        assert [d[0] for d in _differences(engine, extra)] == ["add_table"]

        command.downgrade(alembic_config(url), "base")
        assert _revision(engine) is None
        assert set(inspect(engine).get_table_names()) - {"alembic_version"} == set()
        upgrade(url)
        assert _revision(engine) == head
        assert _differences(engine) == []
        assert tables <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_database_at_the_newest_revision_is_left_alone_and_any_other_is_upgraded(empty_sqlite_url):
    """upgrade()'s one-query shortcut (every process the app factory starts calls it) answers True only at the
    newest revision: a missing file (not made by asking), one revision down, and a broken version table all
    answer False, and upgrade() then migrates."""
    assert not at_newest_revision(empty_sqlite_url)
    assert not sqlite_path(empty_sqlite_url).exists()
    upgrade(empty_sqlite_url)
    assert at_newest_revision(empty_sqlite_url)
    command.downgrade(alembic_config(empty_sqlite_url), "-1")
    assert not at_newest_revision(empty_sqlite_url)
    upgrade(empty_sqlite_url)
    assert at_newest_revision(empty_sqlite_url)
    engine = make_engine(empty_sqlite_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = 'not-a-revision'"))
        assert not at_newest_revision(empty_sqlite_url)
    finally:
        engine.dispose()


def test_sqlite_runs_in_wal_mode_with_foreign_keys(empty_sqlite_url):
    upgrade(empty_sqlite_url)
    engine = make_engine(empty_sqlite_url)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() >= 1000
        # Foreign keys are enforced, not just declared.
        with engine.connect() as connection:
            from sqlalchemy.exc import IntegrityError

            try:
                connection.execute(text("INSERT INTO study_set (study_id, name, reference, crops, image_width, "
                                        "image_height) VALUES (999, 's', '{}', '{}', 1, 1)"))
            except IntegrityError:
                pass
            else:
                raise AssertionError("a study_set row without its study was accepted")
            connection.rollback()
    finally:
        engine.dispose()



def _row_counts(engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {table: connection.scalar(text(f"SELECT count(*) FROM {table}"))
                for table in ("study", "pair", "worker", "assignment", "page", "trial", "vote", "gold_result")}


def test_sqlite_migrations_that_copy_tables_keep_every_row(empty_sqlite_url, demo_stimuli, tmp_path):
    """Batch mode copies a table and drops the old one; with foreign keys on, SQLite's DROP TABLE
    would first delete its rows and cascade (copying ``trial`` deleted every vote, copying ``page``
    every trial). Going down past the migrations that copy ``page``, ``trial`` and ``vote`` and up
    again keeps every row, and the foreign keys are on again afterwards."""
    from tests.server.conftest import SMALL_STUDY, WorkerClient, create_test_study, make_test_app

    app = make_test_app(empty_sqlite_url, tmp_path / "instance")
    try:
        slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
        worker = WorkerClient(app.test_client(), slug)
        worker.start()
        worker.answer_page(worker.correct_side)  # the quiz: gold results
        assert worker.action("continue").status_code in (200, 409)
        worker.answer_page(worker.correct_side)  # a page of trials: votes on pairs
    finally:
        app_services(app).engine.dispose()
    engine = make_engine(empty_sqlite_url)
    try:
        before = _row_counts(engine)
        assert before["vote"] >= 6 and before["gold_result"] >= 3 and before["trial"] >= 9
        command.downgrade(alembic_config(empty_sqlite_url), "0007_blind_spot")
        assert _row_counts(engine) == before
        upgrade(empty_sqlite_url)
        assert _row_counts(engine) == before
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert connection.exec_driver_sql("PRAGMA foreign_key_check").all() == []
    finally:
        engine.dispose()


def test_paired_stopping_targets_stored_before_units_keep_their_anchored_meaning(empty_sqlite_url, demo_stimuli,
                                                                                  tmp_path):
    """0020: a paired study stored with a half-width target but no ``[stopping] units`` (the key did not exist;
    its target was anchored) gets ``units = "anchored"``; a paired study without a target and a rating-kind
    config are left as they were. The spec read back then measures the target in the unit it was launched with."""
    from server.paradigms import spec_from_config
    from tests.server.conftest import SMALL_STUDY, create_test_study, make_test_app

    app = make_test_app(empty_sqlite_url, tmp_path / "instance")
    try:
        for slug, stop in (("targeted", {"halfwidth": 0.2}), ("plain", {}), ("rated", {"halfwidth": 0.5})):
            create_test_study(app, demo_stimuli, tmp_path, slug=slug, stopping=stop, **SMALL_STUDY)
    finally:
        app_services(app).engine.dispose()
    engine = make_engine(empty_sqlite_url)

    def configs() -> dict[str, dict]:
        with engine.connect() as connection:
            return {slug: json.loads(config) if isinstance(config, str) else config
                    for slug, config in connection.execute(text("SELECT slug, config FROM study")).all()}

    try:
        command.downgrade(alembic_config(empty_sqlite_url), "0019_shared_page_sql")
        stored = configs()
        with engine.begin() as connection:  # as stored before 0020: no units key ("rated" stands for a rating study)
            for slug, config in stored.items():
                config = {k: v for k, v in config.items() if k != "units"}
                if slug == "rated":
                    config["kind"] = "rating"
                connection.execute(text("UPDATE study SET config = :c WHERE slug = :s"),
                                   {"c": json.dumps(config), "s": slug})
        before = configs()
        upgrade(empty_sqlite_url)
        after = configs()
        assert after["targeted"] == {**before["targeted"], "units": "anchored"}
        assert spec_from_config(after["targeted"]).units == "anchored"
        assert after["plain"] == before["plain"] and "units" not in after["plain"]
        assert spec_from_config(after["plain"]).units == "jod"
        assert after["rated"] == before["rated"]
    finally:
        engine.dispose()
