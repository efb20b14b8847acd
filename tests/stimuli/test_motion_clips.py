"""Clip manifests of the motion-matching experiment (stimuli.motion_clips)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from stimuli.flow_io import read_flo, write_flo, write_npy_flow
from stimuli.io import read_image, write_png
from stimuli.motion_clips import (
    FORMAT,
    ClipManifestError,
    bilinear_sample,
    choose_probes,
    import_sintel,
    load_clip_manifest,
    movie_window,
    write_clip_manifest,
)

W, H, N = 40, 30, 16


def _linear_flow(t: int) -> np.ndarray:
    # u = 0.5 x + t, v = -0.25 y + 1: bilinear interpolation of a linear field is exact.
    ys, xs = np.indices((H, W), dtype=np.float64)
    return np.stack([0.5 * xs + t, -0.25 * ys + 1.0], axis=-1).astype(np.float32)


def _clip_dict(root: Path, clip_id: str = "c1", n_frames: int = N, flow_suffix: str = ".flo") -> dict:
    rng = np.random.default_rng(len(clip_id) + n_frames)
    (root / clip_id).mkdir(parents=True, exist_ok=True)
    frames, flows = [], []
    for t in range(n_frames):
        write_png(root / clip_id / f"f{t:02d}.png", rng.integers(0, 256, (H, W, 3)).astype(np.uint8))
        frames.append(f"{clip_id}/f{t:02d}.png")
        if t < n_frames - 1:
            name = f"{clip_id}/flow{t:02d}{flow_suffix}"
            (write_flo if flow_suffix == ".flo" else write_npy_flow)(root / name, _linear_flow(t))
            flows.append(name)
    return {"clip_id": clip_id, "dataset": "test", "frame_rate": 30, "frames": frames, "flow": flows,
            "probes": [{"probe_id": "a", "x": 10.25, "y": 7.5, "frame": 7},
                       {"probe_id": "b", "x": 30.0, "y": 20.0, "frame": 8}]}


def _write(root: Path, clips: list[dict], noise: str | None = None) -> Path:
    return write_clip_manifest(root / "manifest.json", clips, noise)


@pytest.fixture
def clip_set(tmp_path) -> tuple[Path, dict]:
    clip = _clip_dict(tmp_path)
    return tmp_path, clip


def _error(root: Path, clips: list[dict], match: str, **kwargs) -> str:
    with pytest.raises(ClipManifestError, match=match) as info:
        load_clip_manifest(_write(root, clips, **kwargs))
    return str(info.value)


# ---------------------------------------------------------------- movie window and sampling

def test_movie_window_15_and_10_frames():
    assert movie_window(20, 7) == (list(range(15)), 7)
    assert movie_window(20, 10, 15) == (list(range(3, 18)), 7)
    assert movie_window(20, 4, 10) == (list(range(10)), 4)
    assert movie_window(20, 14, 10) == (list(range(10, 20)), 4)


@pytest.mark.parametrize("n, frame, movie", [(20, 6, 15), (20, 13, 15), (14, 7, 15), (20, 3, 10), (20, 15, 10)])
def test_movie_window_out_of_range(n, frame, movie):
    with pytest.raises(ClipManifestError, match=f"probe frame {frame}"):
        movie_window(n, frame, movie)


def test_movie_window_rejects_other_lengths():
    with pytest.raises(ClipManifestError, match="movie_frames"):
        movie_window(30, 10, 12)


def test_bilinear_sample_interpolates_between_pixel_centres():
    field = np.arange(12, dtype=np.float64).reshape(3, 4)  # value = 4 y + x
    assert bilinear_sample(field, 1.5, 0.25) == pytest.approx(4 * 0.25 + 1.5)
    assert bilinear_sample(field, 3.0, 2.0) == pytest.approx(11.0)  # last pixel, no overrun
    with pytest.raises(ValueError, match="outside"):
        bilinear_sample(field, 3.5, 0)


# ---------------------------------------------------------------- loading

@pytest.mark.parametrize("suffix", [".flo", ".npy"])
def test_valid_manifest_loads_with_bilinear_ground_truth(tmp_path, suffix):
    clip = _clip_dict(tmp_path, flow_suffix=suffix)
    write_png(tmp_path / "noise.png", np.full((8, 8, 3), 128, np.uint8))
    manifest = load_clip_manifest(_write(tmp_path, [clip], noise="noise.png"))
    assert manifest.root == tmp_path and manifest.noise == "noise.png"
    (loaded,) = manifest.clips
    assert (loaded.width, loaded.height, len(loaded.frames), loaded.movie_frames) == (W, H, N, 15)
    assert loaded.flow == tuple(clip["flow"])
    a, b = loaded.probes
    assert (a.gt_u, a.gt_v) == pytest.approx((0.5 * 10.25 + 7, -0.25 * 7.5 + 1))
    assert (b.gt_u, b.gt_v) == pytest.approx((0.5 * 30 + 8, -0.25 * 20 + 1))
    assert load_clip_manifest(tmp_path).clips == manifest.clips  # the folder works as well


def test_ten_frame_movie_clips(clip_set):
    root, clip = clip_set
    clip["probes"] = [{"probe_id": "a", "x": 1, "y": 2, "frame": 4}]
    _error(root, [clip], "needs clip frames -3")  # 15-frame movie: F-7 < 0
    clip["movie_frames"] = 10
    assert load_clip_manifest(_write(root, [clip])).clips[0].movie_frames == 10
    clip["movie_frames"] = 12
    _error(root, [clip], "movie_frames")


def test_flow_list_may_cover_every_frame_with_a_null_last_entry(clip_set):
    root, clip = clip_set
    clip["flow"] = clip["flow"] + [None]
    assert load_clip_manifest(_write(root, [clip])).clips[0].flow[-1] is None
    clip["flow"][-1] = clip["flow"][0]
    _error(root, [clip], r"flow\[15\].*must be null")


def test_bad_format_and_top_level(clip_set):
    root, clip = clip_set
    path = root / "manifest.json"
    path.write_text(json.dumps({"format": "other/1", "clips": [clip]}))
    with pytest.raises(ClipManifestError, match="format must be"):
        load_clip_manifest(path)
    path.write_text("{not json")
    with pytest.raises(ClipManifestError, match="not valid JSON"):
        load_clip_manifest(path)
    path.write_text(json.dumps({"format": FORMAT, "clips": []}))
    with pytest.raises(ClipManifestError, match="non-empty"):
        load_clip_manifest(path)
    with pytest.raises(ClipManifestError, match="manifest not found"):
        load_clip_manifest(root / "nothing.json")


@pytest.mark.parametrize("key, value, match", [
    ("frame_rate", "30", "frame_rate: must be a finite number"),
    ("frame_rate", -1, "frame_rate: must be positive"),
    ("dataset", "", "dataset: must be a non-empty string"),
    ("frames", "f.png", "frames: need a list"),
    ("flow", {}, "flow: need a list"),
    ("probes", [], "probes: need a non-empty list"),
    ("colour", "red", "unknown key"),
    ("meta", [1], "meta: must be a JSON object"),
])
def test_clip_key_types(clip_set, key, value, match):
    root, clip = clip_set
    clip[key] = value
    message = _error(root, [clip], match)
    assert str(root / "manifest.json") in message and "'c1'" in message


@pytest.mark.parametrize("key, value, match", [
    ("x", "10", "x: must be a finite number"),
    ("y", float("nan"), "y: must be a finite number"),
    ("frame", 7.0, "frame: must be an integer"),
    ("frame", True, "frame: must be an integer"),
    ("probe_id", 3, "probe_id: must be a non-empty string"),
    ("extra", 1, "unknown key"),
])
def test_probe_key_types(clip_set, key, value, match):
    root, clip = clip_set
    clip["probes"][0][key] = value
    if isinstance(value, float) and math.isnan(value):  # JSON cannot hold NaN: write it by hand
        path = root / "manifest.json"
        path.write_text(json.dumps({"format": FORMAT, "clips": [clip]}))  # json.dumps writes NaN
        with pytest.raises(ClipManifestError, match=match):
            load_clip_manifest(path)
        return
    _error(root, [clip], match)


def test_missing_keys(clip_set):
    root, clip = clip_set
    del clip["probes"][1]["y"]
    _error(root, [clip], "missing key.*y")
    del clip["dataset"]
    _error(root, [clip], "missing key.*dataset")


def test_duplicate_ids(tmp_path):
    one, two = _clip_dict(tmp_path, "c1"), _clip_dict(tmp_path, "c2")
    two["probes"][1]["probe_id"] = "a"
    _error(tmp_path, [one, two], "'c2'.*duplicate probe_id.*a")
    two["probes"][1]["probe_id"] = "b"
    assert len(load_clip_manifest(_write(tmp_path, [one, two])).clips) == 2  # same probe IDs in two clips: fine
    two["clip_id"] = "c1"
    _error(tmp_path, [one, two], "duplicate clip_id.*c1")


def test_paths_must_stay_inside_the_folder(clip_set):
    root, clip = clip_set
    clip["frames"][0] = "../outside.png"
    _error(root, [clip], r"frames\[0\].*relative")


def test_missing_frame_and_flow_files_are_named(clip_set):
    root, clip = clip_set
    (root / clip["frames"][3]).unlink()
    _error(root, [clip], f"{root / clip['frames'][3]}: frame file not found")
    clip = _clip_dict(root)
    (root / clip["flow"][2]).unlink()
    _error(root, [clip], f"{root / clip['flow'][2]}: flow file not found")


def test_too_few_frames(tmp_path):
    clip = _clip_dict(tmp_path, n_frames=12)
    _error(tmp_path, [clip], "at least 15 image paths, got 12")


def test_frames_of_different_sizes(clip_set):
    root, clip = clip_set
    write_png(root / clip["frames"][5], np.zeros((H + 1, W, 3), np.uint8))
    _error(root, [clip], f"frames differ in size.*{W}x{H + 1}")


def test_flow_shape_must_match_frames(clip_set):
    root, clip = clip_set
    write_flo(root / clip["flow"][3], np.zeros((H, W + 2, 2), np.float32))
    _error(root, [clip], rf"flow\[3\].*flow is {W + 2}x{H}, frames are {W}x{H}")


def test_truncated_and_corrupt_files_are_named(clip_set):
    root, clip = clip_set
    flo = root / clip["flow"][7]
    flo.write_bytes(flo.read_bytes()[:-100])
    _error(root, [clip], f"{flo}: .flo file truncated")
    write_flo(flo, _linear_flow(7))
    png = root / clip["frames"][9]
    data = png.read_bytes()
    png.write_bytes(data[: len(data) // 2])
    _error(root, [clip], f"manifest.json: clip 'c1': {png}: truncated")
    png.write_bytes(b"not an image at all")
    _error(root, [clip], f"{png}: not a readable image")
    clip = _clip_dict(root, "c2", flow_suffix=".npy")
    npy = root / clip["flow"][8]
    npy.write_bytes(npy.read_bytes()[:200])
    _error(root, [clip], f"{npy}")


def test_probe_inside_the_frames(clip_set):
    root, clip = clip_set
    clip["probes"][0]["x"] = W - 0.5
    _error(root, [clip], rf"probe #0 'a': probe \({W - 0.5}, 7.5\) is outside the {W}x{H} frames")
    clip["probes"][0]["x"] = -1
    _error(root, [clip], "outside")


def test_probe_needs_a_flow_and_a_full_movie(clip_set):
    root, clip = clip_set
    clip["flow"][8] = None  # probe "b" is on frame 8
    _error(root, [clip], r"clip 'c1' probe #1 'b': frame 8 has no flow")
    clip = _clip_dict(root)
    clip["probes"][0]["frame"] = 9  # 15-frame movie: 2..16, the clip has 0..15
    _error(root, [clip], "needs clip frames 2..16")


def test_unknown_flow_at_a_probe(clip_set):
    root, clip = clip_set
    flow = _linear_flow(7)
    flow[7:9, 10:12] = np.nan  # around probe "a"
    write_flo(root / clip["flow"][7], flow)
    _error(root, [clip], "unknown")


def test_noise_file_is_checked(clip_set):
    root, clip = clip_set
    _error(root, [clip], "noise.png: frame file not found", noise="noise.png")


# ---------------------------------------------------------------- Sintel import

def _fake_sintel(root: Path, scenes: dict[str, int], size=(288, 192)) -> None:
    width, height = size
    rng = np.random.default_rng(0)
    xs = np.indices((height, width), dtype=np.float32)[1]
    for scene_index, (scene, n_frames) in enumerate(scenes.items()):
        for folder in ("clean", "final", "flow"):
            (root / "training" / folder / scene).mkdir(parents=True)
        for t in range(1, n_frames + 1):
            for folder in ("clean", "final"):
                write_png(root / "training" / folder / scene / f"frame_{t:04d}.png",
                          rng.integers(0, 256, (height, width, 3)).astype(np.uint8))
            if t < n_frames:
                # Speed grows left to right from 0 to 30 px/frame: only the middle band is eligible.
                u = 30.0 * xs / (width - 1) + scene_index
                flow = np.stack([u, np.zeros_like(u)], axis=-1)
                write_flo(root / "training" / "flow" / scene / f"frame_{t:04d}.flo", flow)


def test_import_sintel(tmp_path):
    _fake_sintel(tmp_path / "sintel", {"alley_1": 18, "bamboo_2": 16, "no_flow": 0})
    path = import_sintel(tmp_path / "sintel", tmp_path / "out", scenes=["alley_1", "bamboo_2"],
                         probes_per_clip=6, max_speed=20, seed=3)
    manifest = load_clip_manifest(path)
    assert [c.clip_id for c in manifest.clips] == ["sintel_final_alley_1", "sintel_final_bamboo_2"]
    assert manifest.noise == "noise.png" and read_image(tmp_path / "out" / "noise.png").shape == (2048, 2048, 3)
    for clip, n_frames in zip(manifest.clips, (18, 16)):
        assert len(clip.frames) == n_frames and len(clip.flow) == n_frames - 1
        assert (clip.width, clip.height, clip.dataset) == (288, 192, "sintel")
        assert len(clip.probes) == 6 and len({p.frame for p in clip.probes}) == 1
        frame = clip.probes[0].frame
        assert movie_window(n_frames, frame)  # a full 15-frame window
        source_flow = read_flo(manifest.root / clip.flow[frame])
        for probe in clip.probes:
            speed = math.hypot(probe.gt_u, probe.gt_v)
            assert 1 <= speed <= 20
            assert probe.gt_u == pytest.approx(source_flow[int(probe.y), int(probe.x), 0])
            assert 60 <= probe.x <= 288 - 61 and 60 <= probe.y <= 192 - 61  # away from the borders
        # Frames are the source files' content.
        scene = clip.clip_id.split("final_")[1]
        source = tmp_path / "sintel" / "training" / "final" / scene / "frame_0001.png"
        assert (manifest.root / clip.frames[0]).read_bytes() == source.read_bytes()
    again = import_sintel(tmp_path / "sintel", tmp_path / "again", scenes=["alley_1", "bamboo_2"],
                          probes_per_clip=6, max_speed=20, seed=3)
    assert json.loads(again.read_text())["clips"][0]["probes"] == json.loads(path.read_text())["clips"][0]["probes"]


def test_import_sintel_errors(tmp_path):
    _fake_sintel(tmp_path / "sintel", {"short": 10})
    with pytest.raises(ClipManifestError, match="not found"):
        import_sintel(tmp_path / "nowhere", tmp_path / "o1")
    with pytest.raises(ClipManifestError, match="scene.*missing_scene.*not found"):
        import_sintel(tmp_path / "sintel", tmp_path / "o2", scenes=["missing_scene"])
    with pytest.raises(ClipManifestError, match="10 frames, a clip needs at least 15"):
        import_sintel(tmp_path / "sintel", tmp_path / "o3")
    assert not (tmp_path / "o3").exists()  # nothing half-built is left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sintel"]
    with pytest.raises(ClipManifestError, match="pass_name"):
        import_sintel(tmp_path / "sintel", tmp_path / "o4", pass_name="albedo")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(ClipManifestError, match="not an empty folder"):
        import_sintel(tmp_path / "sintel", tmp_path / "busy")


def test_choose_probes_spreads_and_respects_speed():
    flow = np.zeros((200, 300, 2), np.float32)
    flow[:, 150:, 0] = 5.0  # only the right half moves
    positions = choose_probes(flow, 8, np.random.default_rng(1), border=20, min_distance=30)
    assert len(positions) == 8
    assert all(x >= 150 and 20 <= y < 180 and x < 280 for x, y in positions)
    distances = [math.dist(a, b) for i, a in enumerate(positions) for b in positions[i + 1:]]
    assert min(distances) >= 30
    assert choose_probes(np.zeros((100, 100, 2), np.float32), 5, np.random.default_rng(0)) == []
