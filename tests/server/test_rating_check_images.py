"""Quality-check images of a rating study cannot be told from real candidates by a script reading their
downloads: byte size (absolute and within the scene), dimensions, PNG header fields, re-encoding the pixels
and the stream's end separate them no better than an honest random split of the real candidates does
(stimuli/separability.py's AUC), and the padded files decode to the pixels they were made of
(stimuli/check_images.py). The hidden reference is not pixel-identical to the reference, and in CCR no
reference URL comes back within a worker's trials (issue 38 item 4)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from server.paradigms import read_study_file
from server.paradigms.rating.study import scene_manifests, write_scene_images
from stimuli.check_images import IDAT_SIZE, PngSizeError, common_sizes, draw_sizes, pad_png, png_chunks, unpadded_size
from stimuli.io import encode_png, read_image
from stimuli.separability import IMAGE_STATISTICS, auc, image_separability, stream_statistics

from .rating_support import write_rating_study

SPLITS = 400  # random splits of the real candidates: the AUCs an honest split reaches


def _scene_images(manifest, folder, method: str, stimulus: str):
    """{scene: (SceneImages, its scene folder, its manifest)} of a rating study with checks."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = read_study_file(write_rating_study(folder, manifest, rating={"method": method, "stimulus": stimulus}))
    return {scene["scene_id"]: (write_scene_images(spec, scene_folder, scene), scene_folder, scene)
            for scene_folder, scene in scene_manifests(spec)}


def _check_files(manifest, folder, method: str, stimulus: str):
    """{scene: (the candidates' files as delivered, the checks' files)}."""
    return {scene: (list(images.candidates.values()), images.checks)
            for scene, (images, _, _) in _scene_images(manifest, folder, method, stimulus).items()}


def _honest_tolerance(scenes, rng: np.random.Generator) -> float:
    """The 99th percentile of the folded AUC of ``bytes_in_scene`` when as many real candidates as there
    are checks, drawn at random in each scene, play the checks."""
    values = []
    for _ in range(SPLITS):
        gold, real = [], []
        for candidates, checks in scenes.values():
            median = float(np.median([p.stat().st_size for p in candidates]))
            picked = set(rng.choice(len(candidates), size=len(checks), replace=False).tolist())
            for k, path in enumerate(candidates):  # image_statistics' bytes_in_scene
                (gold if k in picked else real).append(path.stat().st_size / median)
        value = auc(gold, real)
        values.append(max(value, 1 - value))
    return float(np.quantile(values, 0.99))


@pytest.mark.parametrize("method, stimulus", [("dcr", "amplified"), ("acr", "original")])
def test_check_images_are_not_separable_from_real_candidates(rating_manifest, tmp_path, method, stimulus):
    scenes = _check_files(rating_manifest, tmp_path, method, stimulus)
    result = image_separability(scenes)
    tolerance = _honest_tolerance(scenes, np.random.default_rng(7))
    assert result.n_gold == 3 * len(scenes)  # the hidden reference and two degraded images per scene
    for name in ("bytes", "bytes_in_scene"):
        assert result.aucs[name] <= tolerance, (name, result.aucs[name], tolerance)
    for name in set(IMAGE_STATISTICS) - {"bytes", "bytes_in_scene"}:
        assert result.aucs[name] == 0.5, name  # every check has the candidates' header and chunk layout
    for candidates, checks in scenes.values():  # one distribution for all: within 15 % of the smallest
        sizes = [p.stat().st_size for p in [*candidates, *checks]]
        assert max(sizes) <= 1.15 * (min(sizes) + 4) + 1


def test_the_same_study_writes_the_same_check_files(rating_manifest, tmp_path):
    first = {scene: [p.read_bytes() for p in checks] for scene, (_, checks) in
             _check_files(rating_manifest, tmp_path / "a", "dcr", "amplified").items()}
    second = {scene: [p.read_bytes() for p in checks] for scene, (_, checks) in
              _check_files(rating_manifest, tmp_path / "b", "dcr", "amplified").items()}
    assert first == second


def test_padding_keeps_pixels_header_and_chunk_layout(rating_manifest):
    reference = read_image(rating_manifest.parent / "scene_01_chelsea" / "reference.png")
    data = encode_png(reference, 3)
    smallest = unpadded_size(data)
    for size in (smallest, smallest + 1, smallest + 4321, smallest + 3 * IDAT_SIZE + 7):
        padded = pad_png(data, size)
        assert size - 4 <= len(padded) <= size
        chunks = png_chunks(padded)
        assert [k for k, _ in chunks if k != b"IDAT"] == [b"IHDR", b"IEND"] and chunks[0][1] == png_chunks(data)[0][1]
        assert all(len(p) == IDAT_SIZE for k, p in chunks[1:-2]) and chunks[-2][0] == b"IDAT"
        np.testing.assert_array_equal(read_image_bytes(padded), reference)
        idat = b"".join(p for k, p in chunks if k == b"IDAT")
        assert zlib.decompress(idat) == zlib.decompress(b"".join(p for k, p in png_chunks(data) if k == b"IDAT"))
    assert len(pad_png(data, 10)) == smallest  # never below what the pixels take
    with pytest.raises(PngSizeError):
        png_chunks(b"GIF89a")


def read_image_bytes(data: bytes) -> np.ndarray:
    import cv2

    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)[:, :, ::-1]


def test_drawn_sizes_stay_within_the_real_range_and_above_their_floors():
    rng = np.random.default_rng(3)
    sizes = [120_000, 125_000, 131_000, 150_000]
    drawn = np.array([draw_sizes(sizes, [100_000, 140_000, 90_000], rng) for _ in range(300)])
    assert drawn.min() >= 90_000 and drawn.max() <= 150_000 and len(set(drawn.ravel().tolist())) > 300
    assert (drawn[:, 1] >= 140_000).all() and (drawn[:, [0, 2]] >= 120_000).all()
    assert draw_sizes(sizes, [160_000, 100_000], rng)[0] == 160_000  # beyond every real size: the floor


@pytest.mark.parametrize("method", ["acr", "dcr", "ccr"])
def test_every_delivered_image_has_one_stream_structure(rating_manifest, tmp_path, method):
    """Issue 38: every check's stream ended in an empty block (`03 00`) and no check re-encoded at level 3,
    while every real file did. Now candidates, checks and the reference's copies come out of one path."""
    for images, folder, scene in _scene_images(rating_manifest, tmp_path, method, "amplified").values():
        prepared = [folder / c["amplified"] for c in scene["candidates"]]
        # stimuli prepare pads its side files too now (their sizes answer no paired gold pair): one structure
        assert all(stream_statistics(p.read_bytes())["final_empty_block"] == 1.0 for p in prepared)
        delivered = [*images.candidates.values(), *images.checks, *images.references.values()]
        assert len(images.references) == (0 if method == "acr" else len(images.candidates) + len(images.checks))
        for path in delivered:
            stats = stream_statistics(path.read_bytes())
            assert stats["reencodes"] == 0.0 and stats["final_empty_block"] == 1.0, path.name
        for item, path in images.candidates.items():  # the same pixels as prepared
            original = next(folder / c["amplified"] for c in scene["candidates"] if c["id"] == item)
            np.testing.assert_array_equal(read_image(path), read_image(original))


def test_hidden_reference_is_an_imperceptible_copy_and_each_stimulus_has_its_own_reference(rating_manifest,
                                                                                             tmp_path):
    for images, folder, scene in _scene_images(rating_manifest, tmp_path, "ccr", "amplified").values():
        reference = read_image(folder / scene["reference"]["path"]).astype(int)
        hidden = read_image(images.hidden).astype(int)
        assert np.abs(hidden - reference).max() == 1 and (hidden != reference).mean() > 0.5
        copies = list(images.references.values())
        assert len({p.name for p in copies}) == len(copies)  # one URL per stimulus: none repeats in a scene
        for path in copies:
            np.testing.assert_array_equal(read_image(path).astype(int), reference)


def test_ccr_reference_urls_never_repeat_within_a_workers_trials(app, rating_manifest, tmp_path):
    """Issue 38: the CCR reference's URL repeated across a scene's trials, giving its side in 216/216."""
    from .rating_support import SMALL, RatingWorker, create_rating_study

    sections = {**SMALL, "rating": {**SMALL["rating"], "method": "ccr"}}
    slug = create_rating_study(app, rating_manifest, tmp_path, **sections)
    worker = RatingWorker(app.test_client(), slug)
    state = worker.pass_training()
    seen: list[str] = []
    for _ in range(2):
        trials = state["page"]["trials"]
        seen += [image["url"] for trial in trials for image in trial["images"]]
        worker.answer_page(worker.honest)
        worker.action("continue")
        state = worker.state()
        if state["stage"] != "trials":
            break
    assert len(seen) >= 32 and len(set(seen)) == len(seen)


def test_common_sizes_are_drawn_alike_for_every_image():
    rng = np.random.default_rng(5)
    drawn = np.array([common_sizes([1000, 5000, 3000], rng) for _ in range(2000)])
    assert drawn.min() >= 5000 and drawn.max() <= 5750
    means = drawn.mean(axis=0)  # the floors do not move an image's size: all three alike
    assert np.ptp(means) < 30
