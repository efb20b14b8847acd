"""Rating study files and creation: ACR, DCR and CCR studies from prepared scenes, their stimuli and
quality checks, stimulus IDs that join a paired study's items, and clear errors for bad files."""
from __future__ import annotations

import json
import tomllib

import pytest
from sqlalchemy import select

from server.models import Study
from server.paradigms import StudyDefinitionError, create_study, read_study_file
from server.paradigms.rating.models import RatingStimulus
from server.paradigms.rating.study import STUDY_TEMPLATE, RatingSpec
from server.services import app_services
from stimuli.io import read_image

from .rating_support import create_rating_study, write_rating_study


def _stimuli(app, slug: str) -> list[RatingStimulus]:
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        rows = list(session.scalars(select(RatingStimulus).where(RatingStimulus.study_id == study.id)))
        session.expunge_all()
        return rows


@pytest.mark.parametrize("method", ["acr", "dcr", "ccr"])
def test_each_method_makes_a_stimulus_per_candidate_and_quality_checks_per_scene(app, rating_manifest, tmp_path,
                                                                                   method):
    slug = create_rating_study(app, rating_manifest, tmp_path, slug=method, rating={"method": method},
                               quality={"gold_per_scene": 2})
    study_manifest = json.loads(rating_manifest.read_text())
    scenes = {}
    for entry in study_manifest["scenes"]:
        scene = json.loads((rating_manifest.parent / entry["manifest"]).read_text())
        scenes[scene["scene_id"]] = (rating_manifest.parent / entry["manifest"]).parent, scene
    rows = _stimuli(app, slug)
    root = rating_manifest.parent
    for scene_id, (folder, manifest) in scenes.items():
        mine = [r for r in rows if r.scene == scene_id]
        tests = {r.item_id: r for r in mine if r.role == "test"}
        reference = read_image(folder / manifest["reference"]["path"])
        # Every candidate, under the candidate's own ID (a paired study's item_id), shown amplified.
        assert set(tests) == {c["id"] for c in manifest["candidates"]}
        for candidate in manifest["candidates"]:
            stored = tests[candidate["id"]]
            # Re-encoded by the one path every image of a study with checks takes: the same pixels.
            shown, shown_reference = root / stored.path, root / stored.reference_path
            assert shown.parent.name == "amplified" and shown.parent.parent.name == "rating"
            assert (read_image(shown) == read_image(folder / candidate["amplified"])).all()
            assert (read_image(shown_reference) == reference).all()
            if method == "acr":  # never shown: the prepared reference
                assert (root / stored.reference_path).resolve() == (folder / manifest["reference"]["path"]).resolve()
            assert (stored.width, stored.height) == (manifest["image_size"]["width"], manifest["image_size"]["height"])
            assert stored.target_ratings == 24 and not stored.is_gold
        checks = sorted((r.role, r.item_id) for r in mine if r.is_gold)
        assert checks == [("gold_low", "__gold_low_1__"), ("gold_low", "__gold_low_2__"),
                          ("hidden_reference", "__reference__")]
        hidden = next(r for r in mine if r.role == "hidden_reference")
        # The reference with one code value of noise in other bytes: another file, another size and URL.
        difference = read_image(root / hidden.path).astype(int) - reference.astype(int)
        assert abs(difference).max() == 1 and (difference != 0).any()
        assert (root / hidden.path).read_bytes() != (folder / manifest["reference"]["path"]).read_bytes()
        for gold in (r for r in mine if r.role == "gold_low"):
            image = read_image(root / gold.path)
            assert image.shape == reference.shape and not (image == reference).all()


def test_original_stimuli_and_no_checks_without_quiz_or_gold(app, rating_manifest, tmp_path):
    slug = create_rating_study(app, rating_manifest, tmp_path, rating={"method": "acr", "stimulus": "original"},
                               quality={"quiz_size": 0, "gold_rate": 0.0})
    rows = _stimuli(app, slug)
    assert rows and all(r.role == "test" for r in rows)
    assert all("/original/" in r.path for r in rows)
    assert not list(rating_manifest.parent.glob("*/rating"))


def test_the_stored_spec_round_trips_and_the_template_parses(app, rating_manifest, tmp_path):
    spec = read_study_file(write_rating_study(tmp_path, rating_manifest, rating={"method": "ccr", "slider": True}))
    assert isinstance(spec, RatingSpec) and spec.method == "ccr" and spec.slider
    assert RatingSpec.from_config(spec.to_config()) == spec
    assert "FIRST and SECOND" in spec.instructions  # the method's own instructions
    template = tomllib.loads(STUDY_TEMPLATE)
    assert template["study"]["kind"] == "rating" and template["rating"]["method"] in ("acr", "dcr", "ccr")


@pytest.mark.parametrize("sections, message", [
    ({"rating": {"method": "mos"}}, "rating.method must be 'acr', 'dcr' or 'ccr', got 'mos'"),
    ({"rating": {"stimulus": "blurred"}}, "rating.stimulus"),
    ({"rating": {"ratings_per_stimulus": 0}}, "rating.ratings_per_stimulus"),
    ({"pages": {"min_pages": 3, "max_pages": 2}}, "max_pages (2) is below"),
    ({"quality": {"gold_rate": 0.95}, "pages": {"ratings_per_page": 4}}, "leaves no real ratings"),
    ({"rating": {"colour": "red"}}, "unknown key rating.colour"),
    ({"likert": {"points": 7}}, "unknown section [likert]"),
])
def test_bad_study_files_name_the_key(rating_manifest, tmp_path, sections, message):
    path = write_rating_study(tmp_path, rating_manifest, **sections)
    with pytest.raises(StudyDefinitionError) as error:
        read_study_file(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_bad_files_give_clear_errors_at_creation(app, rating_manifest, tmp_path):
    def create(path):
        with app_services(app).sessions() as session:
            create_study(session, read_study_file(path))
            session.commit()

    missing = tmp_path / "nowhere" / "manifest.json"
    with pytest.raises(StudyDefinitionError, match="no such manifest"):
        create(write_rating_study(tmp_path, missing, slug="missing"))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(StudyDefinitionError, match="not valid JSON"):
        create(write_rating_study(tmp_path, broken, slug="broken"))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "clips"}))
    with pytest.raises(StudyDefinitionError, match="not a manifest written by"):
        create(write_rating_study(tmp_path, other, slug="other"))
    # A candidate file gone after preparing: named.
    scene = json.loads(rating_manifest.read_text())["scenes"][0]
    scene_manifest = json.loads((rating_manifest.parent / scene["manifest"]).read_text())
    gone = (rating_manifest.parent / scene["manifest"]).parent / scene_manifest["candidates"][0]["amplified"]
    gone.unlink()
    with pytest.raises(StudyDefinitionError, match="but missing"):
        create(write_rating_study(tmp_path, rating_manifest, slug="gone"))
    create_rating_study(app, rating_manifest, tmp_path, slug="taken", rating={"stimulus": "original"})
    with pytest.raises(StudyDefinitionError, match="exists already"):
        create(write_rating_study(tmp_path, rating_manifest, slug="taken", rating={"stimulus": "original"}))
