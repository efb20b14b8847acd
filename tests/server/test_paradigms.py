"""The paradigm registry (server/paradigms): finding a study's paradigm, study files by kind, a third
paradigm added as a plugin, the Stage enum's values, each paradigm's unit of pay, the base class's
neutral defaults, and what the app installs of every paradigm package (templates, admin blueprint)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from server import paradigms
from server.paradigms import (StudyDefinitionError, all_paradigms, paradigm_named, paradigm_of_spec, read_study_file,
                              register, spec_from_config)
from server.paradigms.core import Paradigm, PayUnit, ResultsOptions, StudyExport
from server.paradigms.motion import PARADIGM as MOTION
from server.paradigms.motion.study import MotionSpec
from server.paradigms.paired import PARADIGM as PAIRED
from server.paradigms.paired.study import StudySpec
from server.paradigms.params import MTurkParams, StudyParams, param, parse_spec, study_template
from server.paradigms.stages import TERMINAL_STAGES, Stage
from server.services import app_services

from .conftest import WorkerClient


@dataclass(frozen=True, kw_only=True)
class RatingSpec(StudyParams, MTurkParams):
    """The spec of a toy ACR rating paradigm: enough to be read from a study file and stored."""
    kind: str = param("acr", section="study", choices=("acr",), doc="the paradigm: absolute category rating")
    images: tuple[str, ...] = param(section="study", required=True, doc="the images to rate")
    reward_per_session: str = param("1.00", section="session", money=True, doc="the pay of one session")


class Rating(Paradigm):
    """A third paradigm as a plugin would write it: only what the registry and the study file need."""
    kind = "acr"
    title = "absolute category rating"
    spec_class = RatingSpec
    template = study_template(RatingSpec, header="an ACR study", examples={"images": ["a.png"]})

    def spec_from_toml(self, data, path: Path) -> RatingSpec:
        return parse_spec(RatingSpec, data, path)

    def pay_unit(self, spec: RatingSpec) -> PayUnit:
        return PayUnit("session", Decimal(spec.reward_per_session), Decimal("0.00"), 1, 1)


@pytest.fixture
def rating():
    """The toy paradigm, registered for one test only."""
    paradigm = register(Rating())
    yield paradigm
    paradigms._REGISTERED.pop(paradigm.kind, None)


def test_the_registry_finds_each_paradigm_by_its_stored_kind():
    assert paradigm_named("pc") is PAIRED and paradigm_named("motion") is MOTION
    # Studies stored before kinds existed have none in their config: paired comparison.
    assert paradigms.stored_kind({"slug": "old"}) == "pc" and paradigms.stored_kind({"kind": "motion"}) == "motion"
    assert isinstance(spec_from_config({"slug": "s", "name": "s", "manifests": ["m.json"]}), StudySpec)
    assert isinstance(spec_from_config({"kind": "motion", "slug": "m", "name": "m", "clips": ["c.json"]}), MotionSpec)
    with pytest.raises(KeyError, match="acr"):
        paradigm_named("acr")


def test_a_study_file_names_its_paradigm(tmp_path):
    explicit = tmp_path / "pc.toml"
    explicit.write_text('[study]\nkind = "pc"\nslug = "pc"\nmanifests = ["m.json"]\n')
    spec = read_study_file(explicit)
    assert isinstance(spec, StudySpec) and paradigm_of_spec(spec) is PAIRED
    assert "kind" not in spec.to_config()  # the default kind is not stored: old and new configs agree
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('[study]\nkind = "staircase"\nslug = "x"\n')
    with pytest.raises(StudyDefinitionError, match="study.kind") as caught:
        read_study_file(unknown)
    assert str(unknown) in str(caught.value) and "'motion'" in str(caught.value)


def test_a_third_paradigm_is_one_module_and_one_registration(rating, tmp_path):
    path = tmp_path / "acr.toml"
    path.write_text('[study]\nkind = "acr"\nslug = "acr-1"\nimages = ["a.png", "b.png"]\n')
    spec = read_study_file(path)
    assert isinstance(spec, RatingSpec) and spec.images == ("a.png", "b.png")
    assert paradigm_of_spec(spec) is rating and paradigm_named("acr") is rating
    stored = spec_from_config(json.loads(json.dumps(spec.to_config())))
    assert stored == spec and rating.pay_unit(stored).hit_reward == Decimal("1.00")
    assert "acr" in paradigms.known_kinds()


def test_stages_are_the_strings_the_database_and_the_browser_see():
    assert Stage.PAGE_DONE == "page_done" and f"{Stage.PAGE_DONE}" == "page_done"
    assert json.dumps({"stage": Stage.FULL}) == '{"stage": "full"}'
    assert Stage("trials") is Stage.TRIALS and "completed" in TERMINAL_STAGES
    assert {Stage.QUIZ: 1}["quiz"] == 1  # hashes like its string: plain strings from the database find it


def test_each_paradigm_declares_its_unit_of_pay():
    pages = PAIRED.pay_unit(StudySpec(slug="s", name="s", manifests=("m.json",), min_pages=2, max_pages=5,
                                      reward_per_page="0.50", bonus_per_page="0.40"))
    assert (pages.name, pages.required, pages.most) == ("page", 2, 5)
    assert pages.hit_reward == Decimal("1.00") and pages.bonus == Decimal("0.40")
    assert [pages.extra_units(n) for n in (0, 2, 3, 5, 9)] == [0, 0, 1, 3, 3]
    session = MOTION.pay_unit(MotionSpec(slug="m", name="m", clips=("c.json",), reward_per_session="2.25"))
    assert (session.name, session.hit_reward, session.bonus, session.extra_units(1)) == (
        "session", Decimal("2.25"), Decimal("0.00"), 0)


def test_the_registry_stays_a_leaf():
    """server.paradigms imports no paradigm and no database code, so the models (and anything a paradigm
    imports) may use its Stage without an import circle."""
    import subprocess
    import sys

    code = ("import json, sys, server.paradigms; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('server.'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(loaded) == ["server.paradigms", "server.paradigms.stages", "server.paradigms.studyfile"]


def test_the_base_class_falls_back_to_no_paradigm(rating):
    """A paradigm that declares nothing of its own shows, adds and analyses nothing: no paired-comparison
    fallback is left in the base class or the code that calls it."""
    assert rating.examples(None, None) == {}
    assert rating.dashboard_summary(None, None, b"salt", raw_ids=True) == {}
    assert rating.admin_blueprint() is None and rating.template_folder is None
    assert rating.analyse_results(None, None, StudyExport(files={"votes.csv": "worker_id\n"}), Path("."),
                                  ResultsOptions()) is None
    marked = []
    rating.change_pilots(None, None, [1], True, lambda: marked.append(True))
    assert marked == [True]


def test_the_default_workers_table_lists_what_every_study_knows(app, study):
    from sqlalchemy import select

    from server.models import Study
    from server.worker_records import WORKER_COLUMNS, pseudonym, study_salt

    WorkerClient(app.test_client(), study, worker_id="WDEFAULT01")
    with app_services(app).sessions() as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == study))
        columns, raw = Paradigm.workers_table(PAIRED, session, study_id, salt=None)
        _, hidden = Paradigm.workers_table(PAIRED, session, study_id, salt=study_salt("key", study))
        # The paired paradigm's own table adds its columns (votes, gold, quiz) to the same workers.
        own_columns, own = PAIRED.workers_table(session, study_id, salt=None)
    assert columns == WORKER_COLUMNS and [set(r) for r in raw] == [set(WORKER_COLUMNS)]
    first = raw[0]
    assert (first["worker_id"], first["platform"], first["assignments"], first["pages"]) == (
        "WDEFAULT01", "mturk", 1, 0)
    assert hidden[0]["worker_id"] == pseudonym(study_salt("key", study), "WDEFAULT01")
    assert {"n_votes", "gold_accuracy", "quiz"} <= set(own_columns) and own[0]["worker_id"] == "WDEFAULT01"


def test_every_paradigm_package_s_pages_and_admin_routes_are_installed(app):
    """Each paradigm's templates are found under its kind, and its admin blueprint is registered and
    protected like every experimenter blueprint (CSRF on POST, logged-in views)."""
    from server import auth

    for paradigm in all_paradigms():
        assert paradigm.template_folder is not None
        for name in (paradigm.app_template, paradigm.worker_pages, paradigm.dashboard_template):
            assert name.startswith(f"{paradigm.kind}/"), name
            assert app.jinja_env.get_template(name).filename.startswith(str(paradigm.template_folder))
        blueprint = paradigm.admin_blueprint()
        if blueprint is not None:
            assert app.blueprints[blueprint.name] is blueprint and blueprint.name == f"{paradigm.kind}_admin"
            assert auth.check_csrf in blueprint.before_request_funcs[None]
    # The shared templates stay where they were, ahead of the packages'.
    assert app.jinja_env.get_template("admin_base.html").filename.endswith("experiment_ui/templates/admin_base.html")
