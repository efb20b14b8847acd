"""study.toml -> Study rows, and the ``perceptlab study`` commands (SQLite file databases)."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tomllib
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from server.models import Study
from server.paradigms.paired.models import Pair, Stimulus, StudySet
from server.paradigms import StudyDefinitionError, create_study, read_study_file
from server.paradigms.paired.study import STUDY_TEMPLATE, StudySpec
from server.paradigms.params import declarations

N_SCENES, N_CANDIDATES, N_MANIFEST_PAIRS, MIN_GOLD = 4, 11, 33, 6


def _demo_gold(stimuli: Path) -> int:
    """The gold pairs of every scene under ``stimuli``/prepared (stimuli prepare: a third of each design when that
    many qualify, at least MIN_GOLD)."""
    prepared = stimuli / "prepared"
    return sum(len(json.loads((prepared / entry["manifest"]).read_text())["gold"])
               for entry in json.loads((prepared / "manifest.json").read_text())["scenes"])


@pytest.fixture
def database(tmp_path):
    """A migrated SQLite file: ``(url, session factory)``."""
    from server.db import make_engine, make_session_factory, upgrade

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield url, make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def study_dir(tmp_path, demo_stimuli) -> Path:
    """A folder with ``prepared/`` (the demo's prepared stimuli) beside where study files go."""
    folder = tmp_path / "studies"
    folder.mkdir()
    (folder / "prepared").symlink_to(demo_stimuli / "prepared", target_is_directory=True)
    return folder


def write(folder: Path, text: str, name: str = "study.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


# The default consent's {researcher} and {contact}, which `perceptlab study create` requires.
TEXTS = '[texts]\nresearcher = "Dr A. Lee, University of X"\ncontact = "a.lee@x.example"\n'


def minimal(slug: str = "s1", extra: str = "") -> str:
    return f'[study]\nslug = "{slug}"\nmanifests = ["prepared/manifest.json"]\n{extra}'


def store(sessions, spec: StudySpec) -> Study:
    with sessions() as session:
        study = create_study(session, spec)
        session.commit()
        return study


def count(sessions, model, *where) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(model).where(*where))


# ---------------------------------------------------------------- the template and parsing

def test_template_documents_every_key_at_its_default(study_dir, database):
    path = write(study_dir, STUDY_TEMPLATE)
    spec = read_study_file(path)
    defaults = StudySpec(slug="x", name="x", manifests=())
    for field in dataclasses.fields(StudySpec):
        if field.name not in ("slug", "name", "manifests", "base_dir"):
            assert getattr(spec, field.name) == getattr(defaults, field.name), field.name
    assert spec.slug == "interp-2026" and spec.manifests == ("prepared/manifest.json",)
    assert spec.base_dir == str(study_dir.resolve())
    # Every key the parser knows appears in its section of the template (the texts and [mturk] commented out).
    parsed = tomllib.loads(STUDY_TEMPLATE)
    for d in declarations(StudySpec):
        section, key = d.param.section, d.name
        assert re.search(rf"^(# )?\[{section}\]", STUDY_TEMPLATE, re.M), section
        if d.param.table is None:
            assert key in parsed.get(section, {}) or re.search(rf"^# {key} = ", STUDY_TEMPLATE, re.M), (section, key)
    # ... and the template's study can be created from the demo stimuli.
    _, sessions = database
    study = store(sessions, spec)
    assert count(sessions, StudySet) == N_SCENES
    assert count(sessions, Pair, ~Pair.is_gold) == N_SCENES * N_MANIFEST_PAIRS
    # The demo's gold pairs are pairs of its design (stimuli prepare takes them there first): those very pairs,
    # with a known answer; no gold-only pair and no gold stimulus of its own.
    assert count(sessions, Pair, ~Pair.is_gold, Pair.gold_winner_id.is_not(None)) == _demo_gold(study_dir) >= \
        N_SCENES * MIN_GOLD
    assert count(sessions, Pair, Pair.is_gold) == 0
    assert count(sessions, Stimulus) == N_SCENES * N_CANDIDATES
    with sessions() as session:
        assert set(session.scalars(select(Pair.target_votes).where(~Pair.is_gold))) == {20}
        assert session.get(Study, study.id).config["quiz_size"] == 5


def test_every_key_is_read(study_dir):
    text = '''
[study]
slug = "all-keys"
name = "All keys"
manifests = ["prepared/manifest.json"]
languages = ["en", "de"]
default_language = "de"
seed = 7
[design]
degree = 4
votes_per_pair = 9
stimulus = "original"
sampling = "active"
warmup_votes_per_pair = 2
[pages]
pairs_per_page = 12
min_pages = 2
max_pages = 4
reward_per_page = "1.25"
bonus_per_page = 0.5
[quality]
quiz_size = 2
gold_rate = 0
accuracy_threshold = 0.8
gold_min_answered = 5
assignment_timeout_minutes = 15
reservation_minutes = 3
[display]
policy = "pixel_exact"
min_window_width = 800
min_window_height = 500
min_image_scale = 0.75
[entry]
signed_links = true
access_key = "k3y-for-all"
external_hits = true
entry_limit = 40
recruiter = "redirect"
completion_code = "END-2026"
redirect_url = "https://example.org/end?c={code}&p={participant}"
[texts]
consent = "Agree?"
instructions = """Click.

Twice."""
researcher = "Dr A. Lee"
contact = "a.lee@x.example"
[texts.translations.de]
consent = "Einverstanden?"
[stopping]
halfwidth = 0.05
units = "anchored"
quantile = 0.9
resolve = ["a|b"]
min_workers = 8
max_votes = 5000
max_participants = 200
max_cost = 300
notify_only = true
[mturk]
title = "Compare frames"
[media]
replays = 1
max_stall_ms = 400
max_extra_playing_ms = 2000
max_dropped_share = 0.1
unfaithful = "exclude"
max_repeats = 1
reference_position = "before"
min_mbps = 2.5
[viewing]
checks = ["brightness", "colour", "distance", "acuity"]
when = "after_instructions"
distance_cm = 55
distance_tolerance = 0.2
brightness_delta = 6
brightness_errors = 1
colour_plates = 3
colour_errors = 1
acuity_logmar = 0.2
acuity_trials = 6
acuity_errors = 2
max_display_changes = 4
[questionnaire]
pre = ["demographics"]
[[questionnaire.items]]
name = "noticed"
type = "text"
label = "Noticed anything?"
'''
    spec = read_study_file(write(study_dir, text))
    assert dataclasses.asdict(spec) == {
        "slug": "all-keys", "name": "All keys", "manifests": ("prepared/manifest.json",), "seed": 7, "degree": 4,
        "votes_per_pair": 9, "stimulus": "original", "sampling": "active", "warmup_votes_per_pair": 2,
        "pairs_per_page": 12, "min_pages": 2, "max_pages": 4,
        "reward_per_page": "1.25", "bonus_per_page": "0.5", "quiz_size": 2, "gold_rate": 0.0,
        "accuracy_threshold": 0.8, "gold_min_answered": 5, "assignment_timeout_minutes": 15,
        "reservation_minutes": 3, "allow_anonymous": False, "signed_links": True, "access_key": "k3y-for-all",
        "external_hits": True, "entry_limit": 40, "recruiter": "redirect", "completion_code": "END-2026",
        "redirect_url": "https://example.org/end?c={code}&p={participant}",
        "min_window_width": 800, "min_window_height": 500, "min_image_scale": 0.75, "policy": "pixel_exact",
        "consent": "Agree?", "instructions": "Click.\n\nTwice.",
        "researcher": "Dr A. Lee", "contact": "a.lee@x.example",
        "halfwidth": 0.05, "units": "anchored", "quantile": 0.9, "resolve": ("a|b",), "min_workers": 8, "max_votes": 5000,
        "max_participants": 200, "max_cost": "300", "notify_only": True,
        "mturk": {"title": "Compare frames"}, "replays": 1, "max_stall_ms": 400.0, "max_extra_playing_ms": 2000.0,
        "max_dropped_share": 0.1, "unfaithful": "exclude", "max_repeats": 1, "min_mbps": 2.5, "reference_position": "before",
        "checks": ("brightness", "colour", "distance", "acuity"), "when": "after_instructions", "distance_cm": 55.0,
        "distance_tolerance": 0.2, "brightness_delta": 6, "brightness_errors": 1, "colour_plates": 3, "colour_errors": 1,
        "acuity_logmar": 0.2, "acuity_trials": 6, "acuity_errors": 2, "max_display_changes": 4,
        "languages": ("en", "de"), "default_language": "de", "translations": {"de": {"consent": "Einverstanden?"}},
        "questionnaire": {"pre": ("demographics",),
                          "items": ({"name": "noticed", "type": "text", "label": "Noticed anything?"},)},
        "base_dir": str(study_dir.resolve())}
    assert StudySpec.from_config(spec.to_config()) == spec


def test_defaults_slug_from_file_name(study_dir):
    spec = read_study_file(write(study_dir, '[study]\nmanifests = ["prepared/manifest.json"]\n', "My Study_1.toml"))
    assert spec.slug == "my-study-1" and spec.name == "my-study-1"


BAD_FILES = [
    # (label, study.toml text, words the error must contain besides the file name)
    ("unknown section", minimal(extra="[payment]\nreward = 1\n"), ["[payment]"]),
    ("unknown key", minimal(extra="[pages]\npairs_per_pages = 3\n"), ["pages.pairs_per_pages"]),
    ("key in the wrong section", minimal(extra="[quality]\nvotes_per_pair = 3\n"), ["quality.votes_per_pair"]),
    ("section not a table", "design = 3\n" + minimal(), ["[design]", "table"]),
    ("int as a string", minimal(extra='[design]\nvotes_per_pair = "20"\n'), ["design.votes_per_pair", "int"]),
    ("int as a float", minimal(extra="[pages]\npairs_per_page = 20.0\n"), ["pages.pairs_per_page"]),
    ("bool for an int", minimal(extra="[pages]\nmax_pages = true\n"), ["pages.max_pages"]),
    ("bool for a float", minimal(extra="[quality]\ngold_rate = false\n"), ["quality.gold_rate"]),
    ("string as a number", minimal(extra="[texts]\nconsent = 5\n"), ["texts.consent"]),
    ("manifests not a list", '[study]\nmanifests = "prepared/manifest.json"\n', ["study.manifests"]),
    ("manifests of numbers", '[study]\nmanifests = [1, 2]\n', ["study.manifests"]),
    ("no manifests", '[study]\nslug = "x"\n', ["study.manifests"]),
    ("empty manifests", '[study]\nmanifests = []\n', ["study.manifests"]),
    ("bad slug: capitals", minimal(slug="My Study"), ["study.slug"]),
    ("bad slug: too long", minimal(slug="a" * 65), ["study.slug"]),
    ("bad slug: leading dash", minimal(slug="-x"), ["study.slug"]),
    ("unknown stimulus", minimal(extra='[design]\nstimulus = "raw"\n'), ["design.stimulus"]),
    ("zero votes", minimal(extra="[design]\nvotes_per_pair = 0\n"), ["votes_per_pair"]),
    ("negative degree", minimal(extra="[design]\ndegree = -2\n"), ["degree"]),
    ("max below min", minimal(extra="[pages]\nmin_pages = 3\nmax_pages = 2\n"), ["max_pages", "min_pages"]),
    ("gold rate 1", minimal(extra="[quality]\ngold_rate = 1.0\n"), ["gold_rate"]),
    ("all gold", minimal(extra="[pages]\npairs_per_page = 1\n[quality]\ngold_rate = 0.1\n"), ["gold_rate"]),
    ("threshold 0", minimal(extra="[quality]\naccuracy_threshold = 0\n"), ["accuracy_threshold"]),
    ("image scale above 1", minimal(extra="[display]\nmin_image_scale = 1.5\n"), ["min_image_scale"]),
    ("image scale nan", minimal(extra="[display]\nmin_image_scale = nan\n"), ["min_image_scale"]),
    ("unknown display policy", minimal(extra='[display]\npolicy = "stretch"\n'), ["display.policy", "pixel_exact"]),
    ("reward with mills", minimal(extra='[pages]\nreward_per_page = "0.505"\n'), ["reward_per_page"]),
    ("negative bonus", minimal(extra='[pages]\nbonus_per_page = "-1"\n'), ["bonus_per_page"]),
    ("reward not a number", minimal(extra='[pages]\nreward_per_page = "fifty cents"\n'), ["reward_per_page"]),
    ("not TOML", "[study\nslug = 1\n", ["TOML"]),
    ("unknown mturk key", minimal(extra='[mturk]\ntitel = "x"\n'), ["mturk.titel"]),
    ("mturk int as a string", minimal(extra='[mturk]\nmin_approval_rate = "98"\n'), ["mturk.min_approval_rate"]),
    ("mturk locales of numbers", minimal(extra="[mturk]\nlocales = [1]\n"), ["mturk.locales"]),
    ("mturk scope", minimal(extra='[mturk]\ntook_part_scope = "world"\n'), ["mturk.took_part_scope"]),
]


@pytest.mark.parametrize("label,text,words", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_study_files_name_file_and_key(study_dir, label, text, words):
    path = write(study_dir, text)
    with pytest.raises(StudyDefinitionError) as caught:
        # Parsing finds most problems; reading the manifests finds the rest: both are study-file errors.
        spec = read_study_file(path)
        from server.paradigms.paired.study import _scene_manifests

        _scene_manifests(spec)
    message = str(caught.value)
    assert str(path) in message, message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_missing_study_file(tmp_path):
    with pytest.raises(StudyDefinitionError, match="no such file"):
        read_study_file(tmp_path / "nope.toml")


# ---------------------------------------------------------------- manifests and stimuli

def test_missing_manifest(study_dir, database):
    _, sessions = database
    spec = read_study_file(write(study_dir, '[study]\nmanifests = ["prepared/nothing.json"]\n'))
    with sessions() as session, pytest.raises(StudyDefinitionError, match=r"nothing\.json.*no such manifest"):
        create_study(session, spec)
    assert count(sessions, Study) == 0


def _scene_copy(demo_stimuli: Path, tmp_path: Path, scene: str = "scene_01_chelsea") -> Path:
    """A copy of one prepared scene made of symbolic links (cheap; files can be removed from it)."""
    target = tmp_path / "copy" / scene
    shutil.copytree(demo_stimuli / "prepared" / scene, target, copy_function=os.symlink)
    return target


def test_manifest_listing_a_missing_image_stores_nothing(study_dir, demo_stimuli, tmp_path, database):
    _, sessions = database
    scene = _scene_copy(demo_stimuli, tmp_path)
    missing = scene / "amplified" / "farneback_fast.png"
    if not missing.exists():
        missing = sorted((scene / "amplified").iterdir())[-1]
    missing.unlink()
    text = f'[study]\nslug = "broken"\nmanifests = ["{(scene / "manifest.json").as_posix()}"]\n'
    spec = read_study_file(write(study_dir, text))
    with sessions() as session:
        with pytest.raises(StudyDefinitionError) as caught:
            create_study(session, spec)
        session.rollback()
    assert str(missing) in str(caught.value) and "missing" in str(caught.value)
    for model in (Study, StudySet, Stimulus, Pair):
        assert count(sessions, model) == 0, model


def test_a_single_scene_manifest_and_duplicate_scenes(study_dir, demo_stimuli, database):
    _, sessions = database
    scene = (demo_stimuli / "prepared" / "scene_02_immunohistochemistry" / "manifest.json").as_posix()
    spec = read_study_file(write(study_dir, f'[study]\nslug = "one"\nmanifests = ["{scene}"]\n'))
    store(sessions, spec)
    assert count(sessions, StudySet) == 1 and count(sessions, Pair, ~Pair.is_gold) == N_MANIFEST_PAIRS
    with sessions() as session:
        study_set = session.scalar(select(StudySet))
        assert study_set.name == "scene_02_immunohistochemistry"
        assert (Path(session.scalar(select(Study.stimulus_root))) / study_set.reference["full"]).is_file()
    twice = read_study_file(write(study_dir, f'[study]\nslug = "two"\nmanifests = ["{scene}", "{scene}"]\n'))
    with sessions() as session, pytest.raises(StudyDefinitionError, match="scene_02_immunohistochemistry"):
        create_study(session, twice)


@pytest.mark.parametrize("shown", ["amplified", "original"])
def test_gold_pairs_show_candidates_files_never_the_reference(study_dir, demo_stimuli, database, shown):
    """A gold pair's two stimuli are two of the set's candidates' files (a gold trial shows what real
    trials show), never the reference's; the pairs differ. A gold pair of the study's design is that very
    pair with a known answer (its gold trials are trials of it); one outside the design (here: the design
    redrawn at degree 2) is a gold-only pair of stimuli of its own that show the candidates' files."""
    import json

    from server.paradigms.paired.study import gold_item_ids

    _, sessions = database
    scene = demo_stimuli / "prepared" / "scene_03_astronaut"
    manifest = json.loads((scene / "manifest.json").read_text())
    inside = {}
    for slug, design in (("gold", ""), ("gold-d2", "degree = 2\n")):
        text = f'[study]\nslug = "{slug}"\nmanifests = ["{(scene / "manifest.json").as_posix()}"]\n' \
               f'[design]\nstimulus = "{shown}"\n{design}'
        store(sessions, read_study_file(write(study_dir, text, f"{slug}.toml")))
        with sessions() as session:
            study = session.scalar(select(Study).where(Study.slug == slug))
            root = Path(study.stimulus_root)
            study_set = session.scalar(select(StudySet).where(StudySet.study_id == study.id))
            stimuli = {s.item_id: s for s in session.scalars(select(Stimulus).where(Stimulus.set_id == study_set.id))}
            pairs = {frozenset((p.stimulus_a_id, p.stimulus_b_id)): p
                     for p in session.scalars(select(Pair).where(Pair.set_id == study_set.id))}
        assert sum(p.gold_winner_id is not None for p in pairs.values()) == len(manifest["gold"]) >= MIN_GOLD
        sides = []
        for k, entries in enumerate(manifest["gold"], start=1):
            candidates = {side: stimuli[entries["candidates"][side]] for side in ("better", "worse")}
            own = pairs.get(frozenset((candidates["better"].id, candidates["worse"].id)))
            if own is not None:  # a pair of the design
                inside[slug] = inside.get(slug, 0) + 1
                assert own.gold_winner_id == candidates["better"].id and not own.is_gold and own.target_votes == 20
                better, worse = candidates["better"], candidates["worse"]
            else:
                better, worse = (stimuli[item_id] for item_id in gold_item_ids(k))
                assert (better.item_id, worse.item_id) == (f"__gold_better_{k}__", f"__gold_worse_{k}__")
                assert (better.kind, worse.kind) == ("gold_good", "gold_bad")
                pair = pairs[frozenset((better.id, worse.id))]
                assert pair.is_gold and pair.stimulus_a_id == pair.gold_winner_id == better.id
                assert pair.target_votes == 0
            sides.append((better, worse))
            for stimulus, side in ((better, "better"), (worse, "worse")):
                entry = entries[side]
                assert root / stimulus.full == scene.resolve() / entry[shown]
                assert [root / p for p in stimulus.crops["paths"]] == [scene.resolve() / c[shown]
                                                                       for c in entry["crops"]]
                # Not the reference's file, nor the same bytes under another name.
                assert stimulus.full != study_set.reference["full"]
                assert (root / stimulus.full).read_bytes() != (root / study_set.reference["full"]).read_bytes()
                assert not set(stimulus.crops["paths"]) & set(study_set.reference["crops"])
                candidate = candidates[side]
                assert (stimulus.full, stimulus.crops) == (candidate.full, candidate.crops)
        assert len({frozenset((better.full, worse.full)) for better, worse in sides}) == len(manifest["gold"])
    # stimuli prepare took the demo's gold pairs inside its design; a design redrawn keeps only some of them.
    assert inside["gold"] == len(manifest["gold"]) and inside.get("gold-d2", 0) < len(manifest["gold"])


def test_manifest_with_the_old_blurred_gold_is_refused(study_dir, demo_stimuli, tmp_path, database):
    import json

    _, sessions = database
    scene = _scene_copy(demo_stimuli, tmp_path)
    manifest = json.loads((scene / "manifest.json").read_text())
    manifest["gold"] = {"degraded": "reference.png", "better": "reference", "crops": []}  # schema 1's entry
    (scene / "manifest.json").unlink()
    (scene / "manifest.json").write_text(json.dumps(manifest))
    text = f'[study]\nslug = "old"\nmanifests = ["{(scene / "manifest.json").as_posix()}"]\n'
    with sessions() as session, pytest.raises(StudyDefinitionError, match="older perceptlab.*stimuli prepare"):
        create_study(session, read_study_file(write(study_dir, text)))
    assert count(sessions, Study) == 0


def _rewrite_gold(scene: Path, gold) -> str:
    """Replace the (linked) manifest of a scene copy by one whose ``gold`` is ``gold``; its path for TOML."""
    import json

    manifest = json.loads((scene / "manifest.json").read_text())
    manifest["gold"] = gold(manifest["gold"]) if callable(gold) else gold
    (scene / "manifest.json").unlink()
    (scene / "manifest.json").write_text(json.dumps(manifest))
    return (scene / "manifest.json").as_posix()


def test_schema_2_single_gold_pair_is_read_as_one(study_dir, demo_stimuli, tmp_path, database):
    import json

    _, sessions = database
    scene = _scene_copy(demo_stimuli, tmp_path)
    third = json.loads((scene / "manifest.json").read_text())["gold"][2]
    path = _rewrite_gold(scene, lambda pairs: {k: v for k, v in pairs[2].items() if k != "id"})
    store(sessions, read_study_file(write(study_dir, f'[study]\nslug = "v2"\nmanifests = ["{path}"]\n')))
    with sessions() as session:
        pair = session.scalar(select(Pair).where(Pair.gold_winner_id.is_not(None)))
        better = session.get(Stimulus, pair.gold_winner_id)
    assert count(sessions, Pair, Pair.gold_winner_id.is_not(None)) == 1
    assert better.full.endswith(third["better"]["amplified"])


def test_stimuli_without_gold_need_a_study_without_quiz_and_hidden_gold(study_dir, demo_stimuli, tmp_path, database):
    _, sessions = database
    path = _rewrite_gold(_scene_copy(demo_stimuli, tmp_path), [])  # prepared with --gold-pairs 0
    for quality in ("", "[quality]\nquiz_size = 0\n", "[quality]\ngold_rate = 0.0\n"):
        text = f'[study]\nslug = "nogold"\nmanifests = ["{path}"]\n{quality}'
        with sessions() as session, pytest.raises(StudyDefinitionError, match="no gold pairs.*quiz_size = 0"):
            create_study(session, read_study_file(write(study_dir, text)))
    assert count(sessions, Study) == 0
    text = f'[study]\nslug = "nogold"\nmanifests = ["{path}"]\n[quality]\nquiz_size = 0\ngold_rate = 0.0\n'
    store(sessions, read_study_file(write(study_dir, text)))
    assert count(sessions, Pair, Pair.is_gold) == 0 and count(sessions, Pair) == N_MANIFEST_PAIRS


def test_duplicate_slug(study_dir, database):
    _, sessions = database
    spec = read_study_file(write(study_dir, minimal("dup")))
    store(sessions, spec)
    with sessions() as session, pytest.raises(StudyDefinitionError, match="'dup' exists already"):
        create_study(session, spec)
    assert count(sessions, Study) == 1


def test_original_stimuli(study_dir, database):
    _, sessions = database
    store(sessions, read_study_file(write(study_dir, minimal("orig", '[design]\nstimulus = "original"\n'))))
    with sessions() as session:
        candidates = session.scalars(select(Stimulus).where(Stimulus.kind == "candidate")).all()
        root = Path(session.scalar(select(Study.stimulus_root)))
    assert all("/original/" in f"/{c.full}" for c in candidates)
    assert all((root / c.full).is_file() and all((root / p).is_file() for p in c.crops["paths"]) for c in candidates)


# ---------------------------------------------------------------- designs

def _design(sessions, slug: str) -> dict[str, set[frozenset[str]]]:
    with sessions() as session:
        rows = session.execute(
            select(StudySet.name, Pair.stimulus_a_id, Pair.stimulus_b_id).join(Pair, Pair.set_id == StudySet.id)
            .join(Study).where(Study.slug == slug, ~Pair.is_gold)).all()
        names = dict(session.execute(select(Stimulus.id, Stimulus.item_id)).all())
    design: dict[str, set[frozenset[str]]] = {}
    for scene, a, b in rows:
        design.setdefault(scene, set()).add(frozenset((names[a], names[b])))
    return design


def test_degree_redraws_the_designs(study_dir, demo_stimuli, database):
    import json

    _, sessions = database
    store(sessions, read_study_file(write(study_dir, minimal("manifest-design"))))
    store(sessions, read_study_file(write(study_dir, minimal("d2", "[design]\ndegree = 2\n"))))
    store(sessions, read_study_file(write(study_dir, minimal("d2-again", "[design]\ndegree = 2\n"), "again.toml")))
    store(sessions, read_study_file(write(study_dir, minimal("d2-seed", "seed = 5\n[design]\ndegree = 2\n"),
                                          "seed.toml")))
    store(sessions, read_study_file(write(study_dir, minimal("d4", "[design]\ndegree = 4\n"), "d4.toml")))
    manifest_design = _design(sessions, "manifest-design")
    for scene, pairs in manifest_design.items():
        stored = json.loads((demo_stimuli / "prepared" / scene / "manifest.json").read_text())["design"]["pairs"]
        assert pairs == {frozenset(p) for p in stored}
    for slug, degree in (("d2", 2), ("d4", 4)):
        design = _design(sessions, slug)
        assert set(design) == set(manifest_design)
        for scene, pairs in design.items():
            assert len(pairs) == N_CANDIDATES * degree // 2
            assert set(Counter(item for pair in pairs for item in pair).values()) == {degree}, (slug, scene)
            assert pairs != manifest_design[scene]
    assert _design(sessions, "d2") == _design(sessions, "d2-again")  # the study seed makes it reproducible
    assert _design(sessions, "d2") != _design(sessions, "d2-seed")
    # Every gold pair is one whatever the design (a pair of the design itself when it is one).
    assert count(sessions, Pair, Pair.gold_winner_id.is_not(None)) == 5 * _demo_gold(demo_stimuli)


def test_odd_degree_is_an_error_naming_the_scene(study_dir, database):
    _, sessions = database
    spec = read_study_file(write(study_dir, minimal("odd", "[design]\ndegree = 3\n")))
    with sessions() as session, pytest.raises(StudyDefinitionError, match=r"scene_\w+:.*odd"):
        create_study(session, spec)


# ---------------------------------------------------------------- the CLI

def _cli(*args: str):
    from server.cli import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_cli_create_list_show_pause_resume_template(study_dir, tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    result = _cli("study", "template")
    assert result.exit_code == 0 and result.output == STUDY_TEMPLATE

    result = _cli("study", "list", "--database-url", url)  # read-only: no database is made
    assert result.exit_code == 2 and f"no perceptlab database at {tmp_path / 'cli.db'} (from --database-url)" \
        in result.output
    assert not (tmp_path / "cli.db").exists()

    path = write(study_dir, minimal("cli-study", 'name = "CLI study"\n[design]\nvotes_per_pair = 3\n' + TEXTS))
    result = _cli("study", "create", str(path), "--database-url", url)
    assert result.exit_code == 0, result.output
    assert "created study 'cli-study'" in result.output
    assert f"4 sets, {N_SCENES * N_MANIFEST_PAIRS} pairs, 0/{3 * N_SCENES * N_MANIFEST_PAIRS} votes" in result.output
    assert "/s/cli-study" in result.output

    result = _cli("study", "list", "--database-url", url)
    assert result.exit_code == 0 and re.search(r"^cli-study\s+active\s+4 sets.*CLI study$", result.output, re.M)

    result = _cli("study", "show", "cli-study", "--database-url", url)
    assert result.exit_code == 0
    assert result.output.startswith("cli-study: CLI study (active)")
    assert "votes_per_pair = 3" in result.output and "consent =" not in result.output

    assert _cli("study", "pause", "cli-study", "--database-url", url).output.strip() == "cli-study: paused"
    assert re.search(r"^cli-study\s+paused", _cli("study", "list", "--database-url", url).output, re.M)
    assert "(paused)" in _cli("study", "show", "cli-study", "--database-url", url).output
    assert _cli("study", "resume", "cli-study", "--database-url", url).output.strip() == "cli-study: active"
    assert re.search(r"^cli-study\s+active", _cli("study", "list", "--database-url", url).output, re.M)

    # Errors: one line, exit code 2, the database unchanged.
    result = _cli("study", "create", str(path), "--database-url", url)
    assert result.exit_code == 2 and "exists already" in result.output
    for command in ("show", "pause", "resume"):
        result = _cli("study", command, "nope", "--database-url", url)
        assert result.exit_code == 2 and "no study 'nope' (known: cli-study)" in result.output, command
    bad = write(study_dir, minimal("bad", "[pages]\nmax_page = 3\n"), "bad.toml")
    result = _cli("study", "create", str(bad), "--database-url", url)
    assert result.exit_code == 2 and str(bad) in result.output and "pages.max_page" in result.output
    assert "Traceback" not in result.output
    result = _cli("study", "list", "--database-url", url)
    assert len(result.output.strip().splitlines()) == 1


def test_cli_create_with_a_missing_image_stores_nothing(study_dir, demo_stimuli, tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    scene = _scene_copy(demo_stimuli, tmp_path)
    (scene / "reference.png").unlink()
    path = write(study_dir, f'[study]\nslug = "broken"\nmanifests = ["{(scene / "manifest.json").as_posix()}"]\n'
                 + TEXTS)
    result = _cli("study", "create", str(path), "--database-url", url)
    assert result.exit_code == 2 and "reference.png" in result.output and "missing" in result.output
    assert "no studies yet" in _cli("study", "list", "--database-url", url).output


def test_mturk_table_reaches_the_hit_settings(study_dir, database):
    from server.mturk import study_settings

    path = write(study_dir, minimal(extra='[mturk]\ntitle = "Which frame is better?"\nlocales = ["US", "GB"]\n'
                                          'min_approval_rate = 95\nmasters = true\n'))
    spec = read_study_file(path)
    assert spec.mturk == {"title": "Which frame is better?", "locales": ["US", "GB"], "min_approval_rate": 95,
                          "masters": True}
    _, sessions = database
    study = store(sessions, spec)
    with sessions() as session:
        settings = study_settings(session.get(Study, study.id))
    assert settings["title"] == "Which frame is better?" and settings["locales"] == ["US", "GB"]
    assert settings["min_approval_rate"] == 95 and settings["masters"] is True
    assert settings["min_approved_hits"] == 1000  # the defaults fill in the rest
