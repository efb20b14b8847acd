"""Image I/O, the prepare step and the ``perceptlab stimuli prepare`` / ``metrics`` commands."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from server.cli import cli
from stimuli.amplify import amplify
from stimuli.io import ImageReadError, read_image, write_png
from stimuli.prepare import PrepareError, SceneImages, prepare_scene

# Large enough for a zoom crop (at least 160 x 120) to cover under half of the image: one covering more is
# never offered (stimuli.zoom.MAX_CROP_AREA).
H, W = 180, 240
# The planted artefact of every candidate: 1/16 of the image, so that the candidates' errors keep their
# steps at any image size.
ARTEFACT_ROWS, ARTEFACT_COLS = slice(H * 5 // 12, H * 2 // 3), slice(W * 9 // 16, W * 13 // 16)


def _images(seed: int, n_candidates: int, shape=(H, W, 3)):
    rng = np.random.default_rng(seed)
    reference = rng.integers(20, 236, shape, dtype=np.int64)
    candidates = {}
    for k in range(n_candidates):
        candidate = reference.copy()
        patch = (ARTEFACT_ROWS.stop - ARTEFACT_ROWS.start, ARTEFACT_COLS.stop - ARTEFACT_COLS.start, 3)
        candidate[ARTEFACT_ROWS, ARTEFACT_COLS] += rng.integers(-8 * (k + 1), 8 * (k + 1) + 1, patch)
        candidates[f"method{k}"] = np.clip(candidate, 0, 255).astype(np.uint8)
    return reference.astype(np.uint8), candidates


def _scene_folder(folder: Path, n_candidates: int = 5, seed: int = 0) -> Path:
    folder.mkdir(parents=True)
    reference, candidates = _images(seed, n_candidates)
    write_png(folder / "reference.png", reference)
    for item_id, image in candidates.items():
        write_png(folder / f"{item_id}.png", image)
    return folder


PREPARE = ["stimuli", "prepare", "--sigma", "4", "--top-k", "2", "--degree", "2"]


def _run(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}.") or p.name == name)


# ---------------------------------------------------------------- io

def test_png_round_trip_8_and_16_bit(tmp_path):
    rng = np.random.default_rng(0)
    for dtype in (np.uint8, np.uint16):
        image = rng.integers(0, np.iinfo(dtype).max + 1, (5, 7, 3), dtype=np.int64).astype(dtype)
        path = write_png(tmp_path / f"{np.dtype(dtype).name}.png", image)
        back = read_image(path)
        assert back.dtype == dtype
        np.testing.assert_array_equal(back, image)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["uint16.png", "uint8.png"]  # no temp files left


def test_grey_and_rgba_files_read_as_rgb(tmp_path):
    from PIL import Image

    Image.fromarray(np.arange(12, dtype=np.uint8).reshape(3, 4)).save(tmp_path / "grey.png")
    Image.fromarray(np.full((3, 4, 4), 9, np.uint8)).save(tmp_path / "rgba.png")
    grey = read_image(tmp_path / "grey.png")
    assert grey.shape == (3, 4, 3) and np.all(grey[:, :, 0] == grey[:, :, 2])
    assert read_image(tmp_path / "rgba.png").shape == (3, 4, 3)


def test_truncated_and_garbage_files_are_errors_naming_the_file(tmp_path):
    good = write_png(tmp_path / "good.png", np.random.default_rng(0).integers(0, 256, (64, 64, 3)).astype(np.uint8),
                     compression=0)
    truncated = tmp_path / "cut.png"
    truncated.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    with pytest.raises(ImageReadError, match=r"cut\.png: image file is truncated"):
        read_image(truncated)
    (tmp_path / "junk.png").write_bytes(b"not an image at all")
    with pytest.raises(ImageReadError, match=r"junk\.png"):
        read_image(tmp_path / "junk.png")
    with pytest.raises(ImageReadError, match=r"missing\.png"):
        read_image(tmp_path / "missing.png")


# ---------------------------------------------------------------- prepare (CLI end to end)

def test_prepare_cli_end_to_end(tmp_path):
    scene = _scene_folder(tmp_path / "in" / "dumptruck")
    out = tmp_path / "study"
    # The planted artefacts are small: their errors differ by a few grey levels only.
    result = _run([*PREPARE, str(scene), "--out", str(out), "--gold-min-difference", "2"])
    assert result.exit_code == 0, result.output
    assert "1 scene(s), 5 candidates" in result.stdout and "6 gold pairs" in result.stdout
    top = json.loads((out / "manifest.json").read_text())
    assert top["kind"] == "study" and [s["scene_id"] for s in top["scenes"]] == ["dumptruck"]
    folder = out / "dumptruck"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["schema_version"] == 4 and manifest["scene_id"] == "dumptruck"
    assert manifest["image_size"] == {"width": W, "height": H}
    assert manifest["parameters"]["alpha"] == 1.5 and manifest["parameters"]["top_k"] == 2
    assert (manifest["parameters"]["gold_margin"], manifest["parameters"]["gold_min_difference"]) == (1.5, 2.0)
    ids = [c["id"] for c in manifest["candidates"]]
    assert ids == [f"method{k}" for k in range(5)]

    # amplified files are Algorithm 1 of the originals
    reference = read_image(folder / manifest["reference"]["path"])
    np.testing.assert_array_equal(reference, read_image(scene / "reference.png"))
    for entry in manifest["candidates"]:
        original = read_image(folder / entry["original"])
        np.testing.assert_array_equal(original, read_image(scene / f"{entry['id']}.png"))
        np.testing.assert_array_equal(read_image(folder / entry["amplified"]), amplify(reference, original, 1.5))

    # crops: the best one contains the planted artefact; files match the box
    boxes = manifest["crops"]
    assert 1 <= len(boxes) <= 2 and boxes[0]["rank"] == 1
    best = boxes[0]
    assert best["x"] <= ARTEFACT_COLS.start and best["y"] <= ARTEFACT_ROWS.start
    assert best["x"] + best["width"] >= ARTEFACT_COLS.stop and best["y"] + best["height"] >= ARTEFACT_ROWS.stop
    assert best["display_width"] == round(best["width"] * 1.5)
    reference_crop = read_image(folder / manifest["reference"]["crops"][0])
    np.testing.assert_array_equal(
        reference_crop, reference[best["y"]:best["y"] + best["height"], best["x"]:best["x"] + best["width"]])
    for entry in manifest["candidates"]:
        assert [c["rank"] for c in entry["crops"]] == [b["rank"] for b in boxes]
        for c in entry["crops"]:
            assert read_image(folder / c["amplified"]).shape == reference_crop.shape
    assert read_image(folder / manifest["overview"]).shape == (H, W, 3)

    # design: random 2-regular over the candidate IDs, reproducible from the recorded seed
    design = manifest["design"]
    assert design["kind"] == "random_regular" and design["degree"] == 2
    counts = {i: 0 for i in ids}
    for a, b in design["pairs"]:
        counts[a] += 1
        counts[b] += 1
    assert set(counts.values()) == {2}
    from stimuli.designs import random_regular_design

    expected = [[ids[i], ids[j]] for i, j in random_regular_design(5, 2, design["seed"])]
    assert design["pairs"] == expected

    # gold: pairs of the candidates, one plainly worse, shown by the candidates' own files; 6 are asked
    # for (the default) and 6 of the 10 pairs qualify (artefacts of +-8, 16, ... 40 grey levels on 1/16 of
    # the image: IE about 1.2 k; the others differ by less than 1.5x or less than 2 grey levels of IE)
    assert [g["id"] for g in manifest["gold"]] == [1, 2, 3, 4, 5, 6] and top["scenes"][0]["n_gold_pairs"] == 6
    assert top["scenes"][0]["gold_method"] == "candidates"
    entries = {c["id"]: c for c in manifest["candidates"]}
    for gold in manifest["gold"]:
        ids = gold["candidates"]
        errors = gold["errors"]["original"]
        assert errors["worse"] >= 1.5 * errors["better"] and errors["worse"] - errors["better"] >= 2
        for side in ("better", "worse"):
            assert gold[side]["original"] == entries[ids[side]]["original"] == f"original/{ids[side]}.png"
            assert gold[side]["crops"] == entries[ids[side]]["crops"]
    assert len({frozenset(g["candidates"].values()) for g in manifest["gold"]}) == 6
    assert not (folder / "gold").exists()
    separable = top["gold_separability"]
    assert set(separable) == {"amplified", "original"} and 0.5 <= separable["amplified"]["auc"] <= 1
    assert f"gold separability (AUC of the best single statistic, 0.5 = chance): amplified " \
           f"{separable['amplified']['auc']:.2f}" in result.stdout
    assert not _leftovers(tmp_path, "study")[1:]  # only 'study' itself


def test_prepare_cli_help_shows_the_gold_rules_defaults():
    """The CLI does not import numpy to show them: its help text must agree with stimuli.gold."""
    from stimuli.gold import DEFAULT_MIN_DIFFERENCE, DEFAULT_PAIR_MARGIN

    text = " ".join(_run(["stimuli", "prepare", "--help"]).output.split())
    assert f"[default: {DEFAULT_PAIR_MARGIN:g}]" in text and f"[default: {DEFAULT_MIN_DIFFERENCE:g}]" in text


def test_prepare_cli_warns_when_a_scene_falls_back_to_synthetic_gold(tmp_path):
    """Small planted artefacts: no candidate pair differs by 8 grey levels of IE, so the scene gets
    gold images made of candidate errors, and the command says they are easy to tell apart."""
    scene = _scene_folder(tmp_path / "in" / "faint")
    result = _run([*PREPARE, str(scene), "--out", str(tmp_path / "out"), "--gold-pairs", "2"])
    assert result.exit_code == 0, result.output
    top = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert top["scenes"][0]["gold_method"] == "synthetic" and top["scenes"][0]["n_gold_pairs"] == 2
    assert (tmp_path / "out" / "faint" / "gold" / "2" / "amplified" / "worse.png").is_file()
    assert "warning: no candidate pair of faint is plain enough for gold" in result.stderr
    assert "warning" not in result.stdout


@pytest.mark.parametrize("n_gold", [0, 1])
def test_prepare_cli_gold_pairs_option(tmp_path, n_gold):
    """--gold-pairs 0 makes no gold (even for a scene whose candidates allow none); 1 makes one pair, of
    two candidates: no file of its own."""
    scene = _scene_folder(tmp_path / "in" / "s")
    if n_gold == 0:
        _identical_candidates(scene)
    out = tmp_path / "out"
    result = _run([*PREPARE, str(scene), "--out", str(out), "--gold-pairs", str(n_gold), "--gold-min-difference", "2"])
    assert result.exit_code == 0, result.output
    assert f"{n_gold} gold pairs" in result.stdout
    manifest = json.loads((out / "s" / "manifest.json").read_text())
    assert len(manifest["gold"]) == n_gold and manifest["parameters"]["gold_pairs"] == n_gold
    assert not [p for p in (out / "s").rglob("*.png") if "gold" in p.parts]
    shown = {p.relative_to(out / "s").as_posix() for p in (out / "s").rglob("*.png")}
    for entry in manifest["gold"]:
        for side in ("better", "worse"):
            assert entry[side]["amplified"] == f"amplified/{entry['candidates'][side]}.png"
            assert entry[side]["amplified"] in shown
    assert ("gold separability" in result.stdout) == (n_gold > 0)


def test_prepare_small_scene_gets_full_design_and_folder_of_scenes_works(tmp_path):
    _scene_folder(tmp_path / "in" / "a", n_candidates=3, seed=1)
    _scene_folder(tmp_path / "in" / "b", n_candidates=4, seed=2)
    out = tmp_path / "out"
    result = _run(["stimuli", "prepare", str(tmp_path / "in"), "--out", str(out), "--sigma", "4"])
    assert result.exit_code == 0, result.output
    top = json.loads((out / "manifest.json").read_text())
    assert [s["scene_id"] for s in top["scenes"]] == ["a", "b"]
    design = json.loads((out / "b" / "manifest.json").read_text())["design"]
    assert design["kind"] == "full" and design["requested_degree"] == 6 and design["degree"] == 3
    assert len(design["pairs"]) == 6


def test_prepare_scene_python_api_with_arrays(tmp_path):
    reference, candidates = _images(3, 4)
    manifest = prepare_scene(SceneImages("demo", reference, candidates), tmp_path / "scene",
                             sigma=4, top_k=1, degree=2, seed=7, progress=False)
    assert manifest["scene_id"] == "demo" and manifest["design"]["seed"] == 7
    assert json.loads((tmp_path / "scene" / "manifest.json").read_text()) == manifest
    with pytest.raises(PrepareError, match="not empty"):
        prepare_scene({"reference": reference, "candidates": candidates}, tmp_path / "scene", progress=False)
    again = prepare_scene({"reference": reference, "candidates": candidates}, tmp_path / "scene", sigma=4,
                          alpha=2.0, overwrite=True, progress=False)
    assert again["parameters"]["alpha"] == 2.0 and again["scene_id"] == "scene"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene"]


def test_prepare_scene_16_bit(tmp_path):
    reference, candidates = _images(8, 3)
    scene = SceneImages("deep", reference.astype(np.uint16) * 257,
                        {k: v.astype(np.uint16) * 257 for k, v in candidates.items()})
    manifest = prepare_scene(scene, tmp_path / "out", sigma=4, degree=2, progress=False)
    assert manifest["dtype"] == "uint16"
    entry = manifest["candidates"][0]
    amplified = read_image(tmp_path / "out" / entry["amplified"])
    assert amplified.dtype == np.uint16
    np.testing.assert_array_equal(amplified, amplify(scene.reference, scene.candidates[entry["id"]]))
    assert read_image(tmp_path / "out" / "overview.png").dtype == np.uint8


def test_prepare_overwrite_replaces_existing_output(tmp_path):
    scene = _scene_folder(tmp_path / "s")
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("keep me unless --overwrite")
    refused = _run([*PREPARE, str(scene), "--out", str(out)])
    assert refused.exit_code == 2 and (out / "old.txt").exists()
    assert "not empty" in refused.stderr
    replaced = _run([*PREPARE, str(scene), "--out", str(out), "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert not (out / "old.txt").exists() and (out / "s" / "manifest.json").exists()
    assert _leftovers(tmp_path, "out") == ["out"]


def _bad_size(folder: Path) -> None:
    write_png(folder / "method1.png", np.zeros((H + 2, W, 3), np.uint8))


def _truncated(folder: Path) -> None:
    data = (folder / "method2.png").read_bytes()
    (folder / "method2.png").write_bytes(data[: len(data) // 2])


def _garbage(folder: Path) -> None:
    (folder / "method3.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")


def _one_candidate(folder: Path) -> None:
    for k in range(1, 5):
        (folder / f"method{k}.png").unlink()


def _no_reference(folder: Path) -> None:
    (folder / "reference.png").unlink()


def _identical_candidates(folder: Path) -> None:
    for k in range(5):
        (folder / f"method{k}.png").write_bytes((folder / "reference.png").read_bytes())


@pytest.mark.parametrize("spoil, extra, message", [
    (_bad_size, [], f"method1.png: size {W}x{H + 2} differs"),
    (_truncated, [], "method2.png: image file is truncated"),
    (_garbage, [], "method3.png: not a readable image"),
    (_one_candidate, [], "at least two candidate images"),
    (_no_reference, [], "reference"),
    (None, ["--alpha", "1.0"], "alpha must be > 1"),
    (None, ["--alpha", "0.5"], "alpha must be > 1"),
    (None, ["--degree", "3"], "choose an even degree"),
    (None, ["--gold-margin", "1"], "gold_margin must be > 1"),
    (None, ["--gold-pairs", "-1"], "gold_pairs must be an integer in 0..100"),
    (_identical_candidates, [], "no artefact to build gold pairs from"),
])
def test_prepare_bad_input_exit_2_one_line_nothing_written(tmp_path, spoil, extra, message):
    good = _scene_folder(tmp_path / "in" / "good", seed=4)   # processed first, then the bad scene fails
    bad = _scene_folder(tmp_path / "in" / "zbad", seed=5)
    if spoil is not None:
        spoil(bad)
    out = tmp_path / "deep" / "out"
    result = _run([*PREPARE, str(good), str(bad), "--out", str(out), *extra])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert not (tmp_path / "deep").exists()  # neither the output nor the parent it would have created
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_prepare_missing_scene_folder_and_output_inside_input(tmp_path):
    result = _run([*PREPARE, str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and "not a folder" in result.stderr
    scene = _scene_folder(tmp_path / "s")
    clobber = _run([*PREPARE, str(scene), "--out", str(tmp_path), "--overwrite"])
    assert clobber.exit_code == 2 and "must not be or contain the input" in clobber.stderr
    assert (scene / "reference.png").exists()


# ---------------------------------------------------------------- metrics command

def test_metrics_cli_writes_csv_and_srocc_table(tmp_path):
    _scene_folder(tmp_path / "in" / "s1", seed=6)
    _scene_folder(tmp_path / "in" / "s2", seed=7)
    scales = tmp_path / "scales.csv"
    lines = ["set_id,item_id,scale,ci_low,ci_high,rank,n_votes"]
    for scene in ("s1", "s2"):
        lines += [f"{scene},method{k},{-k + (0.1 if k == 2 else 0)},0,0,{k + 1},10" for k in range(5)]
    scales.write_text("\n".join(lines) + "\n")
    out = tmp_path / "metrics.csv"
    result = _run(["stimuli", "metrics", str(tmp_path / "in"), "--subjective", str(scales), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = out.read_text().splitlines()
    assert rows[0] == "set_id,item_id,rmse,psnr,ssim,ms_ssim,gmsd,ie,ne,wae"
    assert len(rows) == 11 and rows[1].startswith("s1,method0,")
    table = result.stdout.splitlines()
    average = next(line for line in table if line.startswith("Average")).split()
    rmse_column = table[[i for i, line in enumerate(table) if line.startswith("set")][0]].split().index("rmse")
    assert float(average[rmse_column]) == pytest.approx(1.0)  # artefact strength grows with k, scale falls


def test_metrics_cli_bad_subjective_file(tmp_path):
    scene = _scene_folder(tmp_path / "s")
    bad = tmp_path / "scales.csv"
    bad.write_text("set_id,item,score\n")
    result = _run(["stimuli", "metrics", str(scene), "--subjective", str(bad)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "missing columns" in result.stderr
