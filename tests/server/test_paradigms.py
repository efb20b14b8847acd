"""The paradigm registry (server/paradigms): finding a study's paradigm, study files by kind, a third
paradigm added as a plugin, the Stage enum's values, and each paradigm's unit of pay."""
from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from server import paradigms
from server.paradigms import (StudyDefinitionError, paradigm_named, paradigm_of_spec, read_study_file, register,
                              spec_from_config)
from server.paradigms.core import Paradigm, PayUnit
from server.paradigms.motion import PARADIGM as MOTION
from server.paradigms.motion.study import MotionSpec
from server.paradigms.paired import PARADIGM as PAIRED
from server.paradigms.paired.study import StudySpec
from server.paradigms.params import MTurkParams, StudyParams, param, parse_spec, study_template
from server.paradigms.stages import TERMINAL_STAGES, Stage


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
