"""OpenCV machine observers and the image-gradient probe property (stimuli.machine_flow)."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from stimuli.flow_io import write_flo
from stimuli.io import write_png
from stimuli.machine_flow import (
    machine_predictions,
    probe_image_gradient,
    write_predictions_csv,
)
from stimuli.motion_clips import load_clip_manifest, write_clip_manifest
from stimuli.noise import brownian_noise

W, H, N = 160, 120, 16
# Per-frame global shifts (u, v): frame t+1 is frame t moved by SHIFTS[t].
SHIFTS = {7: (2.0, 1.0), 8: (-1.0, 3.0)}


def _shifted_clip(root: Path) -> Path:
    texture = np.repeat(brownian_noise(256, rng=5)[:, :, None], 3, axis=2)
    offset = np.zeros(2, dtype=int)
    frames, flows = [], []
    (root / "c").mkdir(parents=True)
    for t in range(N):
        # np.roll of the periodic noise: an exact translation of the whole image.
        image = np.roll(texture, (offset[1], offset[0]), axis=(0, 1))[:H, :W]
        write_png(root / "c" / f"f{t:02d}.png", np.ascontiguousarray(image))
        frames.append(f"c/f{t:02d}.png")
        shift = SHIFTS.get(t, (1.0, 0.0))
        if t < N - 1:
            write_flo(root / "c" / f"w{t:02d}.flo", np.broadcast_to(np.array(shift, np.float32), (H, W, 2)))
            flows.append(f"c/w{t:02d}.flo")
        offset += np.array(shift, dtype=int)
    probes = [{"probe_id": "a", "x": 80.0, "y": 60.0, "frame": 7}, {"probe_id": "b", "x": 70.5, "y": 50.0, "frame": 8}]
    clip = {"clip_id": "shift", "dataset": "test", "frame_rate": 30, "frames": frames, "flow": flows, "probes": probes}
    return write_clip_manifest(root / "manifest.json", [clip], None)


def test_models_recover_known_translations_per_probe_frame(tmp_path):
    manifest = load_clip_manifest(_shifted_clip(tmp_path))
    rows = machine_predictions(manifest)
    assert [(r["probe_id"], r["model"]) for r in rows] == [("a", "farneback"), ("a", "dis"),
                                                           ("b", "farneback"), ("b", "dis")]
    for row in rows:
        expected = SHIFTS[7] if row["probe_id"] == "a" else SHIFTS[8]
        assert (row["pred_u"], row["pred_v"]) == pytest.approx(expected, abs=0.3), row
    only_dis = machine_predictions(manifest, models=["dis"])
    assert [r["model"] for r in only_dis] == ["dis", "dis"]
    with pytest.raises(ValueError, match="unknown"):
        machine_predictions(manifest, models=["raft"])


@pytest.fixture(scope="module")
def demo_manifest(motion_clips):
    return load_clip_manifest(motion_clips)  # the session's motion demo (seed 0), built once for every package


def _angle(a: tuple[float, float], b: tuple[float, float]) -> float:
    difference = math.degrees(math.atan2(a[1], a[0]) - math.atan2(b[1], b[0]))
    return abs((difference + 180) % 360 - 180)


@pytest.mark.parametrize("model", ["farneback", "dis"])
def test_models_get_demo_probes_mostly_right(demo_manifest, model):
    gt = {(c.clip_id, p.probe_id): (p.gt_u, p.gt_v) for c in demo_manifest.clips for p in c.probes}
    rows = machine_predictions(demo_manifest, models=[model])
    assert len(rows) == len(gt) == 20
    epe = [math.dist((r["pred_u"], r["pred_v"]), gt[r["clip_id"], r["probe_id"]]) for r in rows]
    speeds = [math.hypot(*v) for v in gt.values()]
    assert np.median(epe) < 0.25 * np.median(speeds)
    good_direction = [_angle((r["pred_u"], r["pred_v"]), gt[r["clip_id"], r["probe_id"]]) < 30 for r in rows]
    assert np.mean(good_direction) >= 0.8
    # Guessing "no motion" or the wrong sign of v would fail the same test.
    flipped = [math.dist((r["pred_u"], -r["pred_v"]), gt[r["clip_id"], r["probe_id"]]) for r in rows]
    assert np.median(flipped) > 4 * np.median(epe)


def test_predictions_csv(tmp_path):
    rows = [{"clip_id": "c", "probe_id": "p1", "model": "dis", "pred_u": 1.0 / 3, "pred_v": -2.5}]
    path = write_predictions_csv(tmp_path / "pred.csv", rows)
    with open(path, newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row == {"clip_id": "c", "probe_id": "p1", "model": "dis", "pred_u": "0.333333", "pred_v": "-2.5"}


def _ramp_clip(root: Path, slope: float) -> Path:
    xs = np.arange(W, dtype=np.float64)
    image = np.repeat(np.repeat((20 + slope * xs)[None, :, None], H, axis=0), 3, axis=2).astype(np.uint8)
    (root / "r").mkdir(parents=True)
    for t in range(N):
        write_png(root / "r" / f"f{t:02d}.png", image)
    write_flo(root / "r" / "w.flo", np.ones((H, W, 2), np.float32))
    probes = [{"probe_id": "mid", "x": 80.0, "y": 60.0, "frame": 7},
              {"probe_id": "corner", "x": 0.0, "y": 0.0, "frame": 7},
              {"probe_id": "edge", "x": 159.0, "y": 60.4, "frame": 8}]
    flow = [None] * 7 + ["r/w.flo", "r/w.flo"] + [None] * (N - 10)
    clip = {"clip_id": "ramp", "dataset": "test", "frame_rate": 30, "frames": [f"r/f{t:02d}.png" for t in range(N)],
            "flow": flow, "probes": probes}
    return write_clip_manifest(root / "manifest.json", [clip], None)


def test_probe_image_gradient_is_the_windowed_sobel_mean(tmp_path):
    slope = 1.0  # grey levels per pixel: the 3x3 Sobel kernel gives 8 x slope
    manifest = load_clip_manifest(_ramp_clip(tmp_path, slope))
    gradient = probe_image_gradient(manifest, radius=3)
    assert gradient[("ramp", "mid")] == pytest.approx(8 * slope)
    # Clipped window: 4 x 4 pixels at the corner; the border column (mirrored) has no gradient.
    assert gradient[("ramp", "corner")] == pytest.approx(8 * slope * 3 / 4)
    assert gradient[("ramp", "edge")] == pytest.approx(8 * slope * 3 / 4)
    wide = probe_image_gradient(manifest, radius=40)
    assert wide[("ramp", "mid")] == pytest.approx(8 * slope)
    with pytest.raises(ValueError, match="radius"):
        probe_image_gradient(manifest, radius=-1)


def test_demo_probes_are_on_textured_parts(demo_manifest):
    gradient = probe_image_gradient(demo_manifest)
    assert len(gradient) == 20 and min(gradient.values()) > 5
