"""Study parameters declared once (server/paradigms/params.py): the template, reading and checking a study
file all come from the declarations of a spec class."""
from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
from pathlib import Path
from typing import ClassVar

import pytest

from server.paradigms.params import (MTURK_DEFAULTS, TEXT_PLACEHOLDER, EntryParams, MTurkParams, MTurkSettings,
                                     StudyParams, TextsParams, check_spec, declarations, param, parse_spec,
                                     section_of, sections, study_template)
from server.paradigms.studyfile import StudyDefinitionError

PATH = Path("/lab/studies/Rating Study_2.toml")


@dataclasses.dataclass(frozen=True, kw_only=True)
class RatingSpec(StudyParams, EntryParams, TextsParams, MTurkParams):
    """A toy rating paradigm's spec, written as a paradigm package would."""
    SECTION_DOCS: ClassVar[dict[str, str]] = {"session": "What one participant rates."}
    kind: str = param("rating", section="study", choices=("rating",), doc="the paradigm: rating")
    images: tuple[str, ...] = param(section="study", required=True, example=("images/manifest.json",),
                                    doc="image manifests, relative to this file")
    images_per_session: int = param(40, section="session", low=1, doc="images one session shows")
    scale_points: int = param(5, section="session", choices=(5, 7, 9), doc="points of the rating scale")
    max_rt_s: float = param(30.0, section="session", above=0, high=600, doc="seconds before a trial times out")
    gold_rate: float = param(0.1, section="session", low=0, below=1, doc="share of repeated trials")
    reward_per_session: str = param("2.00", section="session", money=True, doc="the HIT's reward")
    bonus: str = param("0.00", section="session", money=True, doc="bonus for a complete session")
    consent: str = param("Agree?", section="texts", placeholder=TEXT_PLACEHOLDER, doc="shown before the task")
    instructions: str = param("Rate.", section="texts", fallback=lambda values, path: f"Rate {values['scale_points']}.",
                              doc="shown before the first trial (default: says the scale's points)")
    base_dir: str = dataclasses.field(default=".", compare=False)

    def validate(self, fail):
        if self.gold_rate * self.images_per_session > self.images_per_session - 1:
            fail("session.gold_rate leaves no new image in a session")


def minimal(**sections) -> dict:
    return {"study": {"kind": "rating", "images": ["m.json"]}, **sections}


def refused(data: dict) -> str:
    with pytest.raises(StudyDefinitionError) as caught:
        parse_spec(RatingSpec, data, PATH)
    message = str(caught.value)
    assert message.startswith(f"{PATH}: "), message
    return message


# ---------------------------------------------------------------- the template

def test_the_template_reads_back_to_the_defaults_and_examples():
    text = study_template(RatingSpec, header="a rating study\n`perceptlab study create study.toml`")
    assert text.startswith("# a rating study\n# `perceptlab study create study.toml`\n")
    spec = parse_spec(RatingSpec, tomllib.loads(text), PATH)
    for d in declarations(RatingSpec):
        if d.name != "instructions":  # its fallback: checked below
            assert getattr(spec, d.name) == (d.param.example if d.param.example is not None else d.default()), d.name
    assert spec.slug == "study-2026" and spec.images == ("images/manifest.json",) and spec.instructions == "Rate 5."


def test_the_template_documents_every_key_in_its_section():
    text = study_template(RatingSpec, header="h")
    parsed = tomllib.loads(text)
    assert [re.sub(r"^# ", "", line).split()[0] for line in text.splitlines() if re.match(r"(# )?\[", line)] == [
        "[study]", "[session]", "[entry]", "[texts]", "[mturk]"] == [f"[{s}]" for s in sections(RatingSpec)]
    assert "# What one participant rates." in text and "# Who may enter" in text
    for d in declarations(RatingSpec):
        if d.param.table is None:
            line = next(line for line in text.splitlines() if re.match(rf"(# )?{d.name} = ", line))
            left_out = d.param.placeholder is not None or (d.param.fallback is not None and d.param.example is None)
            assert line.startswith("# ") == left_out and (d.name in parsed[d.param.section]) != left_out, d.name
            assert d.param.doc.split()[0] in line, (d.name, line)
    # The [mturk] table: commented out, every key at its default (and what the paradigm's texts change).
    text = study_template(RatingSpec, header="h", examples={"mturk": {"title": "Rate images"}, "slug": "r-1"})
    for key, value in MTURK_DEFAULTS.items():
        assert re.search(rf"^# {key} = ", text, re.M), key
    assert '# title = "Rate images"' in text and "mturk" not in tomllib.loads(text)
    assert tomllib.loads(text)["study"]["slug"] == "r-1"
    assert study_template(RatingSpec, header="h", mturk={"title": "Rate images"}) == study_template(
        RatingSpec, header="h", examples={"mturk": {"title": "Rate images"}})


def test_every_declared_key_is_documented_and_every_paradigm_declares_its_file():
    from server.paradigms import known_kinds, paradigm_named

    with pytest.raises(TypeError, match="documentation"):
        param(1, section="x", doc=" ")
    with pytest.raises(TypeError, match="default"):
        param(section="x", doc="no default, not required, no fallback")
    for spec_class in [RatingSpec, MTurkSettings] + [paradigm_named(kind).spec_class for kind in known_kinds()]:
        for d in declarations(spec_class):
            assert len(d.param.doc.split()) >= 2, (spec_class.__name__, d.name)


def test_section_of_each_key():
    where = section_of(RatingSpec)
    assert where["slug"] == "study" and where["scale_points"] == "session" and where["recruiter"] == "entry"
    assert where["mturk"] == "mturk" and "base_dir" not in where


# ---------------------------------------------------------------- reading

def test_missing_keys_take_defaults_and_fallbacks():
    spec = parse_spec(RatingSpec, minimal(session={"scale_points": 7}), PATH)
    assert spec.slug == "rating-study-2" and spec.name == "rating-study-2"  # from the file's name, then the slug
    assert spec.instructions == "Rate 7." and spec.consent == "Agree?" and spec.images_per_session == 40
    assert spec.base_dir == str(PATH.parent.resolve()) and spec.mturk == {}
    assert parse_spec(RatingSpec, minimal(texts={"instructions": "Mine."}), PATH).instructions == "Mine."


def test_values_take_their_declared_types():
    spec = parse_spec(RatingSpec, minimal(session={"max_rt_s": 45, "reward_per_session": 2.5, "bonus": 1}), PATH)
    assert spec.max_rt_s == 45.0 and isinstance(spec.max_rt_s, float)
    # Money stays text: no binary fraction reaches a payment.
    assert spec.reward_per_session == "2.5" and spec.bonus == "1"
    assert isinstance(spec.images, tuple)
    for section, key, value, words in [("session", "images_per_session", "40", "must be int"),
                                       ("session", "images_per_session", 40.0, "must be int"),
                                       ("session", "images_per_session", True, "must be int"),
                                       ("session", "max_rt_s", False, "must be float"),
                                       ("texts", "consent", 5, "must be str"),
                                       ("entry", "signed_links", "yes", "must be bool"),
                                       ("study", "images", "m.json", "must be a list of strs"),
                                       ("study", "images", [1], "must be a list of strs"),
                                       ("study", "images", [""], "must be a list of strs")]:
        data = minimal()
        data.setdefault(section, {})[key] = value
        message = refused(data)
        assert f"{section}.{key} {words}" in message, message


def test_unknown_sections_and_keys_are_refused():
    assert "unknown section [pages] (known: study, session, entry, texts, mturk)" in refused(minimal(pages={"x": 1}))
    assert "unknown key session.scale" in refused(minimal(session={"scale": 5}))
    assert "unknown key texts.scale_points" in refused(minimal(texts={"scale_points": 5}))  # the wrong section
    assert "[session] must be a table" in refused({**minimal(), "session": 3})
    assert "unknown key study.base_dir" in refused(minimal(study={"images": ["m"], "base_dir": "/"}))


def test_required_keys():
    assert "study.images is required (image manifests" in refused({"study": {"kind": "rating"}})
    assert "study.images is required" in refused({"study": {"images": []}})


def test_kind_of_a_spec_without_a_kind_field():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Plain(StudyParams):
        size: int = param(3, section="study", low=1, doc="how many of them")

    assert parse_spec(Plain, {"study": {"kind": "plain", "size": 4}}, PATH, kind="plain").size == 4
    with pytest.raises(StudyDefinitionError, match="study.kind must be 'plain' here, got 'other'"):
        parse_spec(Plain, {"study": {"kind": "other"}}, PATH, kind="plain")
    with pytest.raises(StudyDefinitionError, match="unknown key study.kind"):
        parse_spec(Plain, {"study": {"kind": "plain"}}, PATH)


# ---------------------------------------------------------------- checking

@pytest.mark.parametrize("section, key, value, message", [
    ("session", "scale_points", 4, "session.scale_points must be 5, 7 or 9, got 4"),
    ("study", "kind", "acr", "study.kind must be 'rating', got 'acr'"),
    ("session", "images_per_session", 0, "session.images_per_session must be at least 1, got 0"),
    ("session", "max_rt_s", 0.0, "session.max_rt_s must be in (0, 600], got 0.0"),
    ("session", "max_rt_s", 601, "session.max_rt_s must be in (0, 600], got 601.0"),
    ("session", "max_rt_s", math.nan, "session.max_rt_s must be in (0, 600], got nan"),
    ("session", "gold_rate", 1.0, "session.gold_rate must be in [0, 1), got 1.0"),
    ("session", "reward_per_session", "0.505", 'session.reward_per_session must be a dollar amount like "0.50"'),
    ("session", "bonus", "-1", "session.bonus must be a dollar amount"),
    ("session", "bonus", "fifty cents", "session.bonus must be a dollar amount"),
    ("study", "slug", "My Study", "study.slug must be 1-64 lowercase letters, digits or '-'"),
    ("study", "slug", "a" * 65, "study.slug must be 1-64"),
    ("study", "seed", -1, "study.seed must be at least 0, got -1"),
    ("entry", "access_key", "short", "entry.access_key must be 8-200 letters"),
    ("entry", "recruiter", "mturkk", "entry.recruiter must be 'link', 'prolific' or 'redirect', got 'mturkk'"),
    ("entry", "entry_limit", -2, "entry.entry_limit must be at least -1"),
])
def test_bounds_choices_patterns_and_money_name_file_and_key(section, key, value, message):
    data = minimal()
    data.setdefault(section, {})[key] = value
    assert message in refused(data)


def test_rules_between_keys_run_for_the_spec_and_every_mixin():
    assert "session.gold_rate leaves no new image" in refused(minimal(session={"images_per_session": 1}))
    assert "entry.allow_anonymous contradicts entry.signed_links" in refused(
        minimal(entry={"allow_anonymous": True, "signed_links": True}))
    assert "needs entry.completion_code" in refused(minimal(entry={"recruiter": "prolific"}))
    # Specs built in code are checked the same way.
    spec = RatingSpec(slug="ok", name="ok", images=("m",))
    check_spec(spec)
    with pytest.raises(StudyDefinitionError, match="^here: session.scale_points must be"):
        check_spec(dataclasses.replace(spec, scale_points=3), "here")


# ---------------------------------------------------------------- the [mturk] table

def test_the_mturk_table_keeps_the_keys_a_file_gives():
    spec = parse_spec(RatingSpec, minimal(mturk={"title": "Rate", "locales": [], "masters": True}), PATH)
    assert spec.mturk == {"title": "Rate", "locales": [], "masters": True}
    assert set(MTURK_DEFAULTS) == {d.name for d in declarations(MTurkSettings)}
    assert MTURK_DEFAULTS["took_part_scope"] == "lab" and MTURK_DEFAULTS["locales"] == ["US"]
    for table, message in [({"titel": "x"}, "unknown key mturk.titel (known: title, description"),
                           ({"min_approval_rate": "98"}, "mturk.min_approval_rate must be int"),
                           ({"locales": [1]}, "mturk.locales must be a list of strs"),
                           ({"took_part_scope": "world"}, "mturk.took_part_scope must be 'lab' or 'study'"),
                           ({"min_approval_rate": 101}, "mturk.min_approval_rate must be in [0, 100]")]:
        assert message in refused(minimal(mturk=table)), table


# ---------------------------------------------------------------- stored configs

def test_a_spec_reads_back_from_its_stored_config():
    spec = parse_spec(RatingSpec, minimal(mturk={"title": "Rate"}, session={"reward_per_session": "2.50"}), PATH)
    config = spec.to_config()
    assert config["images"] == ("m.json",) and config["reward_per_session"] == "2.50"
    stored = {**config, "images": list(config["images"]), "salt": "ignored"}  # as JSON gives it back
    assert RatingSpec.from_config(stored) == spec


# ---------------------------------------------------------------- the paradigms' specs

FILLED_IN_AT_CREATION = {"base_dir", "noise"}  # not keys of a study file


@pytest.mark.parametrize("kind", ["pc", "motion"])
def test_each_paradigm_declares_every_key_once_and_its_template_reads_back(kind, tmp_path):
    from click.testing import CliRunner

    from server.cli import cli
    from server.paradigms import paradigm_named

    paradigm = paradigm_named(kind)
    spec_class = paradigm.spec_class
    declared = {d.name for d in declarations(spec_class)}
    assert {f.name for f in dataclasses.fields(spec_class)} - declared <= FILLED_IN_AT_CREATION
    printed = CliRunner().invoke(cli, ["study", "template", "--kind", kind], catch_exceptions=False).output
    assert printed == paradigm.template
    (tmp_path / "study.toml").write_text(printed)
    spec = paradigm.spec_from_toml(tomllib.loads(printed), tmp_path / "study.toml")
    shown = {"slug", "name", "manifests", "clips", "mturk"}  # examples in the template; [mturk] commented out
    for d in declarations(spec_class):
        if d.name not in shown:
            assert getattr(spec, d.name) == d.default(), d.name
    assert spec.mturk == {} and spec_class.from_config(json.loads(json.dumps(spec.to_config()))) == spec


def test_pages_quality_and_display_are_declared_once_and_each_paradigm_keeps_its_defaults():
    from server.paradigms.paired.study import StudySpec
    from server.paradigms.params import redeclare
    from server.paradigms.rating.study import RatingSpec
    from server.paradigms.sections import DisplayParams, PagesParams, QualityParams

    shared = {d.name: d for mixin in (PagesParams, QualityParams, DisplayParams) for d in declarations(mixin)}
    for spec_class in (StudySpec, RatingSpec):
        assert issubclass(spec_class, (PagesParams, QualityParams, DisplayParams))
        own = {d.name: d for d in declarations(spec_class)}
        for name, mixin_key in shared.items():
            # Same section and checks; only the default and the wording may be the paradigm's own.
            keep = ("section", "low", "high", "above", "below", "choices", "money")
            assert [getattr(own[name].param, k) for k in keep] == [getattr(mixin_key.param, k) for k in keep], name
        # The shared sections follow the paradigm's own, before [entry]: the template reads as before ([viewing]:
        # the display monitor's keys, server/paradigms/display_monitor.py).
        assert sections(spec_class)[-9:-5] == ["pages", "quality", "display", "viewing"]
    paired, rating = (cls(slug="x", name="x", manifests=()) for cls in (StudySpec, RatingSpec))
    assert (paired.quiz_size, rating.quiz_size) == (5, 4)
    assert (paired.reward_per_page, rating.reward_per_page) == ("1.50", "0.90")
    # The rule between [pages] keys is the mixin's, for both.
    for cls in (StudySpec, RatingSpec):
        with pytest.raises(StudyDefinitionError, match=r"pages.max_pages \(1\) is below pages.min_pages \(2\)"):
            check_spec(cls(slug="x", name="x", manifests=("m.json",), min_pages=2, max_pages=1))

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Shorter(StudyParams, QualityParams):
        kind: str = param("short", section="study", doc="a paradigm")
        quiz_size: int = redeclare(QualityParams, "quiz_size", 2)

    names = [d.name for d in declarations(Shorter) if d.param.section == "quality"]
    assert names == [d.name for d in declarations(QualityParams)]  # redeclared in place
    assert parse_spec(Shorter, {"quality": {"gold_rate": 0.2}}, PATH).quiz_size == 2
    with pytest.raises(StudyDefinitionError, match="quality.quiz_size must be at least 0"):
        parse_spec(Shorter, {"quality": {"quiz_size": -1}}, PATH)
