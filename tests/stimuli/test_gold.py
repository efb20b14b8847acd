import numpy as np
import pytest

from stimuli.gold import degrade_for_gold
from stimuli.metrics import psnr
from stimuli.prepare import SceneImages, prepare_scene
from stimuli.io import read_image


def textured(shape=(96, 128, 3), seed=0):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:shape[0], :shape[1]]
    base = 128 + 60 * np.sin(x / 3.0)[..., None] * np.cos(y / 4.0)[..., None]
    return np.clip(base + rng.normal(0, 10, shape), 0, 255).astype(np.uint8)


def test_degraded_copy_is_clearly_worse_seeded_and_keeps_dtype():
    ref = textured()
    degraded = degrade_for_gold(ref, seed=3)
    assert degraded.dtype == np.uint8 and degraded.shape == ref.shape
    assert psnr(ref, degraded) < 22  # far worse than any plausible candidate
    assert np.array_equal(degraded, degrade_for_gold(ref, seed=3))
    assert not np.array_equal(degraded, degrade_for_gold(ref, seed=4))
    ref16 = ref.astype(np.uint16) * 257
    assert degrade_for_gold(ref16).dtype == np.uint16
    with pytest.raises(ValueError):
        degrade_for_gold(ref, blur_sigma=0, noise_sd=0)


def test_prepare_writes_gold_images_and_manifest_entry(tmp_path):
    ref = textured()
    rng = np.random.default_rng(1)
    candidates = {f"c{k}": np.clip(ref.astype(int) + rng.integers(-20, 20, ref.shape) * (k + 1) // 4, 0, 255)
                  .astype(np.uint8) for k in range(4)}
    manifest = prepare_scene(SceneImages("s", ref, candidates), tmp_path / "out", sigma=4, top_k=2,
                             degree=2, min_size=(32, 24), progress=False)
    gold = manifest["gold"]
    assert gold["better"] == "reference"
    degraded = read_image(tmp_path / "out" / gold["degraded"])
    assert np.array_equal(degraded, degrade_for_gold(ref, seed=0))
    assert len(gold["crops"]) == len(manifest["crops"]) >= 1
    for entry in gold["crops"]:
        assert (tmp_path / "out" / entry["degraded"]).is_file()
