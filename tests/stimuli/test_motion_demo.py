"""Demo clips with exact flow for the motion-matching experiment (stimuli.motion_demo)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from stimuli import motion_demo
from stimuli.flow_io import read_flo
from stimuli.io import read_image
from stimuli.motion_clips import load_clip_manifest, movie_window


@pytest.fixture(scope="module")
def built(motion_clips) -> Path:
    """The demo clip set (seed 0) as the test run builds it once for every package (tests/conftest.py):
    building it here too cost a second build per run. Its build time is benchmarks' business."""
    return motion_clips


# Written beside the demo's clips by other tests' use of the shared build, not by build_motion_demo: the
# conftest's four-clip manifest, and the noise texture a study over that manifest generates.
NOT_BUILT = ("four.json", "_perceptlab")


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] not in NOT_BUILT}


def test_layout_and_manifest(built):
    path = built
    manifest = load_clip_manifest(path)
    assert [c.clip_id for c in manifest.clips] == ["demo_objects", "demo_camera"]
    assert manifest.noise == "noise.png"
    noise = read_image(manifest.root / "noise.png")
    assert noise.shape == (2048, 2048, 3) and np.array_equal(noise[..., 0], noise[..., 2])
    for clip in manifest.clips:
        assert (clip.width, clip.height) == (768, 432) and clip.dataset == "demo" and clip.frame_rate == 30
        assert len(clip.frames) == 20 and len(clip.flow) == 20 and clip.flow[-1] is None
        assert len(clip.probes) == 10 and {p.frame for p in clip.probes} == {motion_demo.PROBE_FRAME}
        for probe in clip.probes:
            assert 1 <= math.hypot(probe.gt_u, probe.gt_v) <= 20
            assert 60 <= probe.x <= 768 - 61 and 60 <= probe.y <= 432 - 61
            movie_window(len(clip.frames), probe.frame, 15)
            movie_window(len(clip.frames), probe.frame, 10)
        positions = [(p.x, p.y) for p in clip.probes]
        assert min(math.dist(a, b) for i, a in enumerate(positions) for b in positions[i + 1:]) >= 32


def test_probes_cover_objects_and_camera_background(built):
    path = built
    clips = {c["clip_id"]: c for c in json.loads(path.read_text())["clips"]}
    objects_layers = set(clips["demo_objects"]["meta"]["probe_layers"].values())
    camera_layers = set(clips["demo_camera"]["meta"]["probe_layers"].values())
    assert objects_layers == {"object0", "object1", "object2"}  # static background: no probe there
    assert camera_layers == {"background", "object0", "object1", "object2"}


def _expected_flow(meta: dict, layer: str, x: float, y: float) -> tuple[float, float]:
    """Flow at the reference frame derived by hand from the recorded motion parameters."""
    camera = meta["camera"]
    zoom, pan, centre = camera["zoom"], np.array(camera["pan"]), np.array(camera["centre"])
    point = np.array([x, y])
    world = point  # camera is the identity at the reference frame
    if layer != "background":
        obj = next(o for o in meta["objects"] if o["name"] == layer)
        angle = math.radians(obj["spin_deg_per_frame"])
        rotation = obj["growth_per_frame"] * np.array([[math.cos(angle), -math.sin(angle)],
                                                       [math.sin(angle), math.cos(angle)]])
        position = np.array(obj["position_at_ref"])
        world = position + np.array(obj["velocity"]) + rotation @ (point - position)
    moved = centre + zoom * (world - centre) + pan
    return tuple(moved - point)


def test_probe_ground_truth_is_the_rendered_motion(built):
    path = built
    manifest = load_clip_manifest(path)
    raw = {c["clip_id"]: c for c in json.loads(path.read_text())["clips"]}
    for clip in manifest.clips:
        meta = raw[clip.clip_id]["meta"]
        assert meta["camera"]["ref_frame"] == motion_demo.PROBE_FRAME
        for probe in clip.probes:
            layer = meta["probe_layers"][probe.probe_id]
            assert (probe.gt_u, probe.gt_v) == pytest.approx(_expected_flow(meta, layer, probe.x, probe.y), abs=1e-3)
    # The purely translating object over the static background moves by exactly its velocity.
    meta = raw["demo_objects"]["meta"]
    velocity = next(o["velocity"] for o in meta["objects"] if o["name"] == "object0")
    on_object0 = [p for p in manifest.clip("demo_objects").probes if meta["probe_layers"][p.probe_id] == "object0"]
    assert on_object0
    for probe in on_object0:
        assert (probe.gt_u, probe.gt_v) == pytest.approx(velocity, abs=1e-4)


def _warp_errors(frame0: np.ndarray, frame1: np.ndarray, flow: np.ndarray, valid: np.ndarray
                 ) -> tuple[float, float]:
    import cv2

    height, width = flow.shape[:2]
    ys, xs = np.indices((height, width), dtype=np.float32)
    warped = cv2.remap(frame1.astype(np.float32), xs + flow[..., 0], ys + flow[..., 1], cv2.INTER_LINEAR)
    error = np.abs(warped - frame0.astype(np.float32)).mean(axis=-1)[valid]
    still = np.abs(frame1.astype(np.float32) - frame0.astype(np.float32)).mean(axis=-1)[valid]
    return float(error.mean()), float(still.mean())


@pytest.mark.parametrize("clip_id", ["demo_objects", "demo_camera"])
def test_flow_warps_each_frame_onto_the_next(built, clip_id):
    path = built
    manifest = load_clip_manifest(path)
    clip = manifest.clip(clip_id)
    spec = next(s for s in motion_demo.clip_specs(0) if s.clip_id == clip_id)
    for t in (0, motion_demo.PROBE_FRAME, len(clip.frames) - 2):
        frame0 = read_image(manifest.root / clip.frames[t])
        frame1 = read_image(manifest.root / clip.frames[t + 1])
        flow = read_flo(manifest.root / clip.flow[t])
        _, layers0 = motion_demo.render_frame(spec, t)
        _, layers1 = motion_demo.render_frame(spec, t + 1)
        height, width = layers0.shape
        ys, xs = np.indices((height, width))
        tx = np.rint(xs + flow[..., 0]).astype(int)
        ty = np.rint(ys + flow[..., 1]).astype(int)
        inside = (tx >= 2) & (tx < width - 2) & (ty >= 2) & (ty < height - 2)
        # Away from occlusions: the point lands on its own layer, and not next to an edge.
        same = inside & (layers1[np.clip(ty, 0, height - 1), np.clip(tx, 0, width - 1)] == layers0)
        edges = np.zeros_like(same)
        for dy in (-2, 0, 2):
            for dx in (-2, 0, 2):
                edges |= np.roll(layers0, (dy, dx), axis=(0, 1)) != layers0
        valid = same & ~edges
        assert valid.mean() > 0.8
        error, still = _warp_errors(frame0, frame1, flow, valid)
        off_by_half, _ = _warp_errors(frame0, frame1, flow + np.float32(0.5), valid)
        assert error < 2.0, (t, error)
        assert still > 2.5 * error, (t, error, still)  # the frames do differ: the flow explains it
        assert off_by_half > 1.5 * error, (t, error, off_by_half)  # sub-pixel exact, not just roughly right


def test_same_seed_same_bytes_other_seed_other_scene(built, tmp_path):
    path = built
    (tmp_path / "again").mkdir()  # an existing empty folder is built into (no build of its own for that)
    again = motion_demo.build_motion_demo(tmp_path / "again", seed=0)
    assert again.parent == tmp_path / "again"
    assert _files(again.parent) == _files(path.parent)
    one, other = motion_demo.clip_specs(0), motion_demo.clip_specs(1)
    assert [o.velocity for o in one[0].objects] != [o.velocity for o in other[0].objects]


def test_existing_folder_is_not_overwritten(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError):
        motion_demo.build_motion_demo(tmp_path / "busy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]  # no staging folder left
    assert (tmp_path / "busy" / "keep.txt").read_text() == "x"
    # An existing empty folder is used: test_same_seed_same_bytes_other_seed_other_scene builds into one.


def test_layer_flow_matches_rendered_layer_motion():
    # Layer matrices: the object point seen at p in frame t is at p + flow in frame t + 1.
    spec = motion_demo.clip_specs(3)[1]
    for layer in range(len(spec.objects) + 1):
        x, y = np.array([100.0, 400.0]), np.array([50.0, 300.0])
        u, v = spec.layer_flow(layer, 4, x, y)
        before = np.linalg.inv(spec.layer_matrix(layer, 4)) @ np.array([x, y, [1, 1]])
        after = np.linalg.inv(spec.layer_matrix(layer, 5)) @ np.array([x + u, y + v, [1, 1]])
        np.testing.assert_allclose(after, before, atol=1e-9)
