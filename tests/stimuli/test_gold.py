"""Gold pairs made of the scene's own candidate errors (stimuli.gold) and prepared like candidates."""
import json

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter

from stimuli.amplify import amplify
from stimuli.gold import GoldError, check_gold_pair, make_gold_pair, make_gold_pairs, scale_error
from stimuli.io import read_image
from stimuli.metrics import interpolation_error, interpolation_error_map
from stimuli.prepare import SceneImages, prepare_scene


@pytest.fixture(scope="module")
def demo(demo_stimuli):
    """The demo study (4 scenes x 11 interpolation methods), prepared: a list of (folder, manifest)."""
    out = demo_stimuli / "prepared"
    return [(out / s["scene_id"], json.loads((out / s["manifest"]).read_text()))
            for s in json.loads((out / "manifest.json").read_text())["scenes"]]


def _load(folder, manifest, kind="original", entry=None):
    """Reference, candidates and one gold pair (default: the manifest's first) of a prepared scene."""
    entry = entry or manifest["gold"][0]
    reference = read_image(folder / manifest["reference"]["path"])
    candidates = {c["id"]: read_image(folder / c[kind]) for c in manifest["candidates"]}
    gold = {side: read_image(folder / entry[side][kind]) for side in ("better", "worse")}
    return reference, candidates, gold


def test_demo_gold_errors_bracket_every_candidate_by_the_margin(demo):
    for folder, manifest in demo:
        assert len(manifest["gold"]) == 6 and [e["id"] for e in manifest["gold"]] == list(range(1, 7))
        for entry in manifest["gold"]:
            for kind in ("original", "amplified"):
                reference, candidates, gold = _load(folder, manifest, kind, entry)
                errors = [interpolation_error(reference, image) for image in candidates.values()]
                worse, better = (interpolation_error(reference, gold[s]) for s in ("worse", "better"))
                # Shown (amplified) each error grows by a factor in [1, alpha]: the lead is at least margin / alpha.
                margin = 2.0 if kind == "original" else 2.0 / 1.5
                assert worse >= margin * max(errors), (folder.name, entry["id"], kind, worse, max(errors))
                assert 0 < better < min(errors), (folder.name, entry["id"], kind, better, min(errors))
                recorded = entry["errors"][kind]
                assert recorded["worse"] == pytest.approx(worse) and recorded["better"] == pytest.approx(better)
                assert sorted(recorded["candidates"].values()) == pytest.approx(sorted(errors))
            assert entry["construction"]["margin"] >= 2.0


def test_demo_gold_pairs_are_distinct_and_made_of_several_candidates(demo):
    """No gold image of a scene repeats (within or across pairs, as pixels or as files), and the
    pairs do not all come from the same two candidates."""
    for folder, manifest in demo:
        images = [(folder / e[side][kind]).read_bytes() for e in manifest["gold"]
                  for side in ("better", "worse") for kind in ("original", "amplified")]
        assert len(set(images)) == len(images) == 6 * 4, folder.name
        pixels = {read_image(folder / e[side]["original"]).tobytes()
                  for e in manifest["gold"] for side in ("better", "worse")}
        assert len(pixels) == 12, folder.name
        sources = {(e["construction"]["better_from"], e["construction"]["worse_from"]) for e in manifest["gold"]}
        assert len(sources) >= 4, (folder.name, sources)
        assert len({e["construction"]["better_from"] for e in manifest["gold"]}) >= 4, folder.name
        assert len({e["construction"]["seed"] for e in manifest["gold"]}) == 6


def test_demo_gold_files_are_their_own_and_prepared_like_candidates(demo):
    for folder, manifest in demo:
        reference = read_image(folder / manifest["reference"]["path"])
        shown = {folder / manifest["reference"]["path"]} | {
            folder / c[kind] for c in manifest["candidates"] for kind in ("original", "amplified")}
        shown = {path: (path.read_bytes(), read_image(path)) for path in shown}  # each file read once
        for entry, side in ((e, side) for e in manifest["gold"] for side in ("better", "worse")):
            entry = entry[side]
            original, amplified = read_image(folder / entry["original"]), read_image(folder / entry["amplified"])
            assert original.shape == amplified.shape == reference.shape and amplified.dtype == reference.dtype
            np.testing.assert_array_equal(amplified, amplify(reference, original, manifest["parameters"]["alpha"]))
            gold_bytes = (folder / entry["amplified"]).read_bytes()
            for path, (data, pixels) in shown.items():  # neither bytes nor pixels equal the reference or any candidate
                assert gold_bytes != data, path
                assert not np.array_equal(amplified, pixels) and not np.array_equal(original, pixels), path
            assert [c["rank"] for c in entry["crops"]] == [b["rank"] for b in manifest["crops"]]
            for crop, box in zip(entry["crops"], manifest["crops"]):
                rows, cols = slice(box["y"], box["y"] + box["height"]), slice(box["x"], box["x"] + box["width"])
                np.testing.assert_array_equal(read_image(folder / crop["amplified"]), amplified[rows, cols])
                np.testing.assert_array_equal(read_image(folder / crop["original"]), original[rows, cols])


def _error_location_correlation(reference, image, average_error):
    smooth = gaussian_filter(interpolation_error_map(reference, image), 4)
    return float(np.corrcoef(smooth.ravel(), gaussian_filter(average_error, 4).ravel())[0, 1])


def test_demo_gold_errors_look_like_candidate_errors_not_blur_and_noise(demo):
    """Blur plus noise (the old gold) changes every pixel and puts its error where the texture is;
    candidate errors lie at motion boundaries. The gold images' errors lie where the candidates' do."""
    for folder, manifest in demo:
        reference, candidates, _ = _load(folder, manifest)
        errors = np.array([interpolation_error_map(reference, image) for image in candidates.values()])
        untouched = np.all(errors == 0, axis=0)  # pixels no candidate changed
        assert untouched.any()
        average = errors.mean(axis=0)
        lowest = min(_error_location_correlation(reference, image, average) for image in candidates.values())
        for entry in manifest["gold"]:
            for side, image in _load(folder, manifest, entry=entry)[2].items():
                assert np.array_equal(image[untouched], reference[untouched]), (folder.name, entry["id"], side)
                assert _error_location_correlation(reference, image, average) >= lowest - 0.05, \
                    (folder.name, entry["id"], side)


def _scene(seed=0, shape=(40, 56, 3)):
    rng = np.random.default_rng(seed)
    reference = rng.integers(30, 226, shape).astype(np.uint8)
    candidates = {}
    for k, size in enumerate((1, 6, 14)):  # one tiny (+-1) error, two larger local ones
        candidate = reference.astype(int)
        candidate[10:22, 12:30] += rng.integers(-size, size + 1, (12, 18, 3))
        candidates[f"m{k}"] = np.clip(candidate, 0, 255).astype(np.uint8)
    return reference, candidates


def test_make_gold_pair_is_seeded_and_distinct_even_for_a_plus_minus_one_candidate():
    reference, candidates = _scene()
    pair = make_gold_pair(reference, candidates, seed=3)
    again = make_gold_pair(reference, candidates, seed=3)
    assert np.array_equal(pair.better, again.better) and np.array_equal(pair.worse, again.worse)
    assert not np.array_equal(pair.better, make_gold_pair(reference, candidates, seed=4).better)
    assert pair.construction["better_from"] == "m0" and pair.construction["worse_from"] == "m2"
    # Rounding 0.5 x (+-1) half away from zero would give the candidate back; stochastic rounding does not.
    for image in (reference, *candidates.values()):
        assert not np.array_equal(pair.better, image) and not np.array_equal(pair.worse, image)
    changed = np.any(pair.worse != reference, axis=2)
    assert not changed[:10].any() and not changed[22:].any()  # only where the candidate's error is
    assert pair.errors["worse"] >= 2 * max(pair.errors["candidates"].values())
    assert 0 < pair.errors["better"] < min(pair.errors["candidates"].values())


def test_make_gold_pairs_are_seeded_distinct_and_each_meets_the_rule():
    reference, candidates = _scene()
    pairs = make_gold_pairs(reference, candidates, 6, seed=3)
    again = make_gold_pairs(reference, candidates, 6, seed=3)
    other = make_gold_pairs(reference, candidates, 6, seed=4)
    assert len(pairs) == 6
    for pair, same, different in zip(pairs, again, other):
        assert np.array_equal(pair.better, same.better) and np.array_equal(pair.worse, same.worse)
        assert pair.construction == same.construction
        assert not np.array_equal(pair.better, different.better)
        check_gold_pair(pair, reference, candidates, 2.0)  # raises unless the rule holds
        assert pair.construction["margin"] >= 2.0 and pair.construction["seed"] is not None
    images = [image.tobytes() for pair in pairs for image in (pair.better, pair.worse)]
    assert len(set(images)) == 12  # no gold image twice, not even across pairs
    first = pairs[0].construction  # the worst and best candidates at the nominal factors
    assert (first["worse_from"], first["better_from"]) == ("m2", "m0")
    assert (first["margin"], first["better_factor"]) == (2.0, 0.5)
    # The better half of three candidates is m0 and m1: the better images come from both.
    assert {p.construction["better_from"] for p in pairs} == {"m0", "m1"}
    assert make_gold_pairs(reference, candidates, 0) == []
    with pytest.raises(GoldError, match=">= 0"):
        make_gold_pairs(reference, candidates, -1)
    with pytest.raises(GoldError, match="every candidate equals the reference"):
        make_gold_pairs(reference, {"a": reference.copy(), "b": reference.copy()}, 2)


def test_make_gold_pair_works_on_16_bit_images():
    reference, candidates = _scene(1)
    pair = make_gold_pair(reference.astype(np.uint16) * 257, {k: v.astype(np.uint16) * 257
                                                              for k, v in candidates.items()}, seed=0)
    assert pair.better.dtype == pair.worse.dtype == np.uint16


def test_scale_error_keeps_the_range_without_clamping_the_direction():
    reference = np.full((1, 2, 3), 200, np.uint8)
    candidate = np.array([[[250, 225, 200], [150, 150, 150]]], np.uint8)
    scaled = scale_error(reference, candidate, 4.0, np.random.default_rng(0))
    # Pixel 0 can grow by 55 / 50 only (red hits 255), keeping R:G = 2:1; pixel 1 by 200 / 50 = 4.
    assert scaled[0, 0, 0] == 255 and abs(int(scaled[0, 0, 1]) - 227.5) <= 0.5 and scaled[0, 0, 2] == 200
    np.testing.assert_array_equal(scaled[0, 1], [0, 0, 0])


def test_gold_errors_name_the_problem():
    reference, candidates = _scene()
    with pytest.raises(GoldError, match="every candidate equals the reference"):
        make_gold_pair(reference, {"a": reference.copy(), "b": reference.copy()})
    with pytest.raises(GoldError, match="margin must be > 1"):
        make_gold_pair(reference, candidates, margin=1.0)
    with pytest.raises(GoldError, match="better_scale"):
        make_gold_pair(reference, candidates, better_scale=0.9)
    bright = np.full((8, 8, 3), 250, np.uint8)  # errors point at the top of the range: no room to double
    with pytest.raises(GoldError, match="cannot be scaled"):
        make_gold_pair(bright, {"a": np.full_like(bright, 255), "b": np.full_like(bright, 253)})


def test_prepare_scene_refuses_a_scene_without_artefacts_and_writes_nothing(tmp_path):
    reference, _ = _scene()
    with pytest.raises(GoldError, match="no artefact"):
        prepare_scene(SceneImages("s", reference, {"a": reference.copy(), "b": reference.copy()}),
                      tmp_path / "out", sigma=4, top_k=1, degree=2, min_size=(16, 12), progress=False)
    assert not (tmp_path / "out").exists()
