"""Gold pairs (stimuli.gold): pairs of the scene's own candidates, one plainly worse, chosen to look
like the real pairs; images made of candidate errors only where no pair qualifies."""
import json

import numpy as np
import pytest

from stimuli.gold import (
    DEFAULT_MIN_DIFFERENCE,
    DEFAULT_PAIR_MARGIN,
    CandidateGold,
    GoldError,
    check_gold_pair,
    choose_gold_pairs,
    eligible_gold_pairs,
    make_gold_pair,
    make_gold_pairs,
    scale_error,
)
from stimuli.io import read_image, write_png
from stimuli.metrics import gmsd, interpolation_error
from stimuli.prepare import SceneImages, prepare_scene, prepare_study


@pytest.fixture(scope="module")
def demo(demo_stimuli):
    """The demo study (4 scenes x 11 interpolation methods), prepared: a list of (folder, manifest)."""
    out = demo_stimuli / "prepared"
    return [(out / s["scene_id"], json.loads((out / s["manifest"]).read_text()))
            for s in json.loads((out / "manifest.json").read_text())["scenes"]]


def _errors(folder, manifest, kind, item_id):
    """(IE, GMSD) of a candidate's shown image against the reference, recomputed from its file."""
    reference = read_image(folder / manifest["reference"]["path"])
    image = read_image(folder / next(c for c in manifest["candidates"] if c["id"] == item_id)[kind])
    return interpolation_error(reference, image), gmsd(reference, image)


def test_demo_gold_pairs_are_pairs_of_candidates_one_plainly_worse(demo):
    """Each gold pair shows two of the scene's candidates by their own files, and the worse one's
    error is at least 1.5 times the better one's by IE and by GMSD and 8 grey levels above it, as
    given and amplified (the defaults)."""
    for folder, manifest in demo:
        n_gold = len(manifest["gold"])
        assert n_gold >= 6 and [e["id"] for e in manifest["gold"]] == list(range(1, n_gold + 1))
        entries = {c["id"]: c for c in manifest["candidates"]}
        for entry in manifest["gold"]:
            ids = entry["candidates"]
            assert entry["construction"]["method"] == "candidate pair"
            for side in ("better", "worse"):
                files = {k: v for k, v in entries[ids[side]].items() if k not in ("id", "source")}
                assert entry[side] == files, (folder.name, entry["id"], side)  # the candidate's very files
            for kind in ("original", "amplified"):
                (better, better_gmsd), (worse, worse_gmsd) = (_errors(folder, manifest, kind, ids[s])
                                                              for s in ("better", "worse"))
                assert (DEFAULT_PAIR_MARGIN, DEFAULT_MIN_DIFFERENCE) == (1.5, 8.0)
                assert worse >= 1.5 * better and worse - better >= 8.0, (folder.name, entry["id"], kind)
                assert worse_gmsd >= 1.5 * better_gmsd, (folder.name, entry["id"], kind)
                recorded = entry["errors"][kind]
                assert recorded["worse"] == pytest.approx(worse) and recorded["better"] == pytest.approx(better)
                assert entry["errors"][f"gmsd_{kind}"]["worse"] == pytest.approx(worse_gmsd)


def test_demo_gold_pairs_are_distinct_and_made_of_several_candidates(demo):
    for folder, manifest in demo:
        pairs = [frozenset(e["candidates"].values()) for e in manifest["gold"]]
        assert len(set(pairs)) == len(pairs) >= 6, folder.name
        assert len(set().union(*pairs)) >= 5, (folder.name, pairs)
        assert len({e["candidates"]["better"] for e in manifest["gold"]}) >= 2, folder.name


def test_eligible_gold_pairs_need_the_margin_the_difference_and_agreement():
    errors = {"original": {"a": 4.0, "b": 8.0, "c": 10.0, "d": 1.0, "e": 1.8},
              "amplified": {"a": 6.0, "b": 12.0, "c": 15.0, "d": 1.5, "e": 2.7}}
    pairs = eligible_gold_pairs(errors, margin=1.6, min_difference=3.0)
    found = {(p.better, p.worse) for p in pairs}
    # a-b: ratio 2, difference 4; a-c: 2.5; d-*: ratio >= 4 but d-e differs by only 0.8; b-c: ratio 1.25.
    assert found == {("a", "b"), ("a", "c"), ("d", "a"), ("d", "b"), ("d", "c"), ("e", "b"), ("e", "c")}
    assert pairs[0].errors["original"] == {"better": 4.0, "worse": 8.0}
    # A structural measure that ranks b below a (unlike artefacts) removes the pair a-b.
    gmsd_values = {"a": 0.02, "b": 0.015, "c": 0.05, "d": 0.004, "e": 0.008}
    agreeing = eligible_gold_pairs(errors, margin=1.6, min_difference=3.0, agreeing={"gmsd": gmsd_values})
    assert {(p.better, p.worse) for p in agreeing} == found - {("a", "b")}
    assert eligible_gold_pairs(errors, margin=3.0, min_difference=0) and not eligible_gold_pairs(
        {"original": {"a": 4.0, "b": 5.0}}, margin=1.6)
    with pytest.raises(GoldError, match="margin must be > 1"):
        eligible_gold_pairs(errors, margin=1.0)
    with pytest.raises(GoldError, match="min difference"):
        eligible_gold_pairs(errors, min_difference=-1)


def test_choose_gold_pairs_picks_the_pairs_that_look_like_real_ones_and_is_seeded():
    """Ten eligible pairs, five with a statistic far above every real pair's: the five that lie
    among the real pairs are chosen, whatever the seed; all are returned when no more are eligible."""
    eligible = [CandidateGold(f"b{i}", f"w{i}", {"original": {"better": 1.0, "worse": 2.0}}) for i in range(10)]
    real = [frozenset((f"r{i}", f"s{i}")) for i in range(20)]
    values = {frozenset((p.better, p.worse)): {"size": 100.0 + (1000 if i % 2 else i)} for i, p in enumerate(eligible)}
    values.update({pair: {"size": 95.0 + i} for i, pair in enumerate(real)})
    for seed in (0, 1):
        chosen = choose_gold_pairs(eligible, {"amplified": values}, real, 5, seed=seed)
        assert [p.better for p in chosen] == ["b0", "b2", "b4", "b6", "b8"]
    assert choose_gold_pairs(eligible, {"amplified": values}, real, 10) == eligible
    assert choose_gold_pairs(eligible, {"amplified": values}, real, 0) == []


def test_a_scene_without_a_plain_candidate_pair_falls_back_to_synthetic_gold(tmp_path):
    """Candidates too alike for a gold pair (errors within 1.6x): gold images made of their errors,
    files of their own, and the study's manifest says so."""
    rng = np.random.default_rng(5)
    reference = rng.integers(30, 226, (48, 64, 3)).astype(np.uint8)
    folder = tmp_path / "scenes" / "alike"
    folder.mkdir(parents=True)
    write_png(folder / "reference.png", reference)
    for k, size in enumerate((10, 12, 13)):
        candidate = reference.astype(int)
        candidate[10:30, 12:40] += rng.integers(-size, size + 1, (20, 28, 3))
        write_png(folder / f"m{k}.png", np.clip(candidate, 0, 255).astype(np.uint8))
    top = prepare_study([tmp_path / "scenes"], tmp_path / "out", sigma=4, top_k=1, degree=2, min_size=(16, 12),
                        gold_pairs=2, progress=False)
    assert top["scenes"][0]["gold_method"] == "synthetic" and top["scenes"][0]["n_gold_pairs"] == 2
    manifest = json.loads((tmp_path / "out" / "alike" / "manifest.json").read_text())
    assert all(e["construction"]["method"] == "scaled candidate error" for e in manifest["gold"])
    assert manifest["gold"][0]["worse"]["original"] == "gold/1/original/worse.png"
    assert top["gold_separability"]["amplified"]["auc"] > 0.75  # such gold is told apart, as warned


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
