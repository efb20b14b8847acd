"""Quality-check images of a rating study cannot be told from real candidates by a script reading their
downloads: byte size (absolute and within the scene), dimensions and PNG header fields separate them no
better than an honest random split of the real candidates does (stimuli/separability.py's AUC), and the
padded files decode to the pixels they were made of (stimuli/check_images.py)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from server.paradigms import read_study_file
from server.paradigms.rating.study import scene_manifests, write_check_images
from stimuli.check_images import IDAT_SIZE, PngSizeError, draw_sizes, pad_png, png_chunks, unpadded_size
from stimuli.io import encode_png, read_image
from stimuli.separability import IMAGE_STATISTICS, auc, image_separability, image_statistics

from .rating_support import write_rating_study

SPLITS = 400  # random splits of the real candidates: the AUCs an honest split reaches


def _check_files(manifest, folder, method: str, stimulus: str):
    folder.mkdir(parents=True, exist_ok=True)
    spec = read_study_file(write_rating_study(folder, manifest, rating={"method": method, "stimulus": stimulus}))
    scenes = {}
    for scene_folder, scene in scene_manifests(spec):
        hidden, degraded = write_check_images(spec, scene_folder, scene)
        scenes[scene["scene_id"]] = ([scene_folder / c[stimulus] for c in scene["candidates"]], [hidden, *degraded])
    return scenes


def _honest_tolerance(scenes, rng: np.random.Generator) -> float:
    """The 99th percentile of the folded AUC of ``bytes_in_scene`` when as many real candidates as there
    are checks, drawn at random in each scene, play the checks."""
    values = []
    for _ in range(SPLITS):
        gold, real = [], []
        for candidates, checks in scenes.values():
            median = float(np.median([p.stat().st_size for p in candidates]))
            picked = set(rng.choice(len(candidates), size=len(checks), replace=False).tolist())
            for k, path in enumerate(candidates):
                (gold if k in picked else real).append(image_statistics(path, median)["bytes_in_scene"])
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
    for candidates, checks in scenes.values():
        sizes = [p.stat().st_size for p in candidates]
        assert all(min(sizes) - 4 <= p.stat().st_size <= max(sizes) for p in checks)


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
