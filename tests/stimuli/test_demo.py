"""Demo dataset builder (stimuli.demo) and ``perceptlab stimuli build-demo``."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from stimuli import demo
from stimuli.flow_io import read_flo
from stimuli.interpolate import interpolate_frame
from stimuli.io import read_image

TINY = dict(n_scenes=2, size=(96, 72), methods="true_flow,zero_flow,dis_ultrafast,farneback_coarse",
            progress=False)


@pytest.fixture(scope="module")
def tiny_demo(tmp_path_factory) -> demo.DemoResult:
    return demo.build_demo(tmp_path_factory.mktemp("built") / "demo", seed=5, **TINY)


def _strip_sources(node):
    if isinstance(node, dict):
        return {k: _strip_sources(v) for k, v in node.items() if k != "source"}
    if isinstance(node, list):
        return [_strip_sources(v) for v in node]
    return node


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_tiny_demo_has_the_expected_layout(tiny_demo):
    out = tiny_demo.path
    methods = ["true_flow", "zero_flow", "dis_ultrafast", "farneback_coarse"]
    assert tiny_demo.methods == methods and len(tiny_demo.scenes) == 2
    assert sorted(p.name for p in out.iterdir()) == ["demo.json", "prepared", "scenes"]
    for name in tiny_demo.scenes:
        scene = out / "scenes" / name
        assert sorted(p.name for p in scene.glob("*.png")) == sorted(["reference.png"] + [f"{m}.png" for m in methods])
        assert sorted(p.name for p in (scene / "source").iterdir()) == [
            "frame_0.png", "frame_1.png", "frame_2.png", "scene.json", "true_flow.flo"]
        reference = read_image(scene / "reference.png")
        assert reference.shape == (72, 96, 3)
        np.testing.assert_array_equal(reference, read_image(scene / "source" / "frame_1.png"))
        assert read_flo(scene / "source" / "true_flow.flo").shape == (72, 96, 2)
        description = json.loads((scene / "source" / "scene.json").read_text())
        assert set(description["methods"]) == set(methods)
        # Real artefacts: the true flow interpolates better than no motion at all.
        assert description["methods"]["true_flow"]["psnr"] > description["methods"]["zero_flow"]["psnr"] + 3
        assert description["methods"]["true_flow"]["epe"] == 0.0

    manifest = json.loads((out / "prepared" / "manifest.json").read_text())
    assert manifest == tiny_demo.manifest
    assert [s["scene_id"] for s in manifest["scenes"]] == tiny_demo.scenes
    for entry in manifest["scenes"]:
        assert entry["n_candidates"] == 4 and entry["n_pairs"] == 6  # full design over 4 methods
        # The manifests name the final folder, not the temporary build folder.
        assert Path(entry["source"]) == out / "scenes" / entry["scene_id"]
        assert (out / "prepared" / entry["manifest"]).is_file()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no leftovers


def test_same_seed_gives_identical_files_and_another_seed_does_not(tmp_path, tiny_demo):
    again = demo.build_demo(tmp_path / "again", seed=5, **TINY).path
    first, second = _files(tiny_demo.path), _files(again)
    assert first.keys() == second.keys()
    for name in first:
        if name.endswith("manifest.json"):  # differ only in the folder they name
            assert _strip_sources(json.loads(first[name])) == _strip_sources(json.loads(second[name]))
        else:
            assert first[name] == second[name], name
    other = demo.build_demo(tmp_path / "other", seed=6, **TINY, prepare=False)
    for mine, theirs in zip(tiny_demo.scenes, other.scenes):
        assert ((other.path / "scenes" / theirs / "reference.png").read_bytes()
                != (tiny_demo.path / "scenes" / mine / "reference.png").read_bytes())


def _integer_motion_scene() -> demo.SceneSpec:
    spec = demo.scene_specs(1, (128, 96), seed=3)[0]
    # Integer, even shifts and no zoom: frame 2 and the middle frame are exact
    # translations of frame 0's layers, so the truth can be checked pixel by pixel.
    return dataclasses.replace(
        spec,
        background_motion=dataclasses.replace(spec.background_motion, shift=(4.0, -2.0), zoom=0.0),
        foreground_motion=dataclasses.replace(spec.foreground_motion, shift=(-10.0, 6.0), zoom=0.0))


def test_true_flow_maps_frame_0_onto_frame_2_exactly():
    scene = demo.render_scene(_integer_motion_scene())
    frame0, middle, frame2 = (f.astype(int) for f in scene.frames)
    ys, xs = np.indices((96, 128))
    for s, frame in ((1.0, frame2), (0.5, middle)):
        tx = xs + (s * scene.true_flow[..., 0]).astype(int)
        ty = ys + (s * scene.true_flow[..., 1]).astype(int)
        inside = (tx >= 0) & (tx < 128) & (ty >= 0) & (ty < 96)
        mask_s = scene.foreground_masks[2 if s == 1.0 else 1]
        # Object points are always visible; background points unless the object covers them.
        visible = inside & (scene.foreground_masks[0] | ~mask_s[ty.clip(0, 95), tx.clip(0, 127)])
        difference = np.abs(frame[ty[visible], tx[visible]] - frame0[visible]).max(axis=-1)
        assert (difference == 0).mean() > 0.999 and difference.max() <= 1
        assert visible.mean() > 0.8
    # The flow is the object's exactly on the object's pixels of frame 0.
    assert (scene.true_flow[scene.foreground_masks[0]] == [-10, 6]).all()
    assert (scene.true_flow[~scene.foreground_masks[0]] == [4, -2]).all()


def test_interpolating_with_the_true_flow_errs_only_near_the_object_edge():
    scene = demo.render_scene(_integer_motion_scene())
    result = interpolate_frame(scene.frames[0], scene.frames[2], scene.true_flow)
    error = np.abs(result.frame.astype(int) - scene.frames[1].astype(int)).max(axis=-1)
    from scipy import ndimage

    edges = np.zeros((96, 128), dtype=bool)
    for mask in scene.foreground_masks:
        edges |= mask ^ ndimage.binary_erosion(mask)
    near_edge = ndimage.binary_dilation(edges, iterations=8)
    near_border = np.ones((96, 128), dtype=bool)
    near_border[6:-6, 6:-6] = False
    assert (error[~near_edge & ~near_border] <= 1).all()
    assert (error > 1).mean() < 0.05


def test_methods_sizes_and_scene_counts_are_checked():
    assert len(demo.resolve_methods(None)) == 11
    assert demo.resolve_methods("all") == list(demo.METHODS)
    with pytest.raises(ValueError, match="unknown nope.*available: true_flow"):
        demo.resolve_methods("true_flow,nope")
    with pytest.raises(ValueError, match="at least 2"):
        demo.resolve_methods(["zero_flow"])
    assert demo.parse_size("320x240") == (320, 240)
    for bad in ("320", "axb", "20x20", "320x240x3"):
        with pytest.raises(ValueError, match="size"):
            demo.parse_size(bad)
    with pytest.raises(ValueError, match="scenes"):
        demo.scene_specs(0, (96, 72), 0)


def test_failed_build_leaves_nothing_and_existing_output_needs_overwrite(tmp_path, monkeypatch):
    out = tmp_path / "demo"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    with pytest.raises(FileExistsError, match="already exists"):
        demo.build_demo(out, **TINY)

    def broken_prepare(*args, **kwargs):
        raise RuntimeError("prepare failed")

    monkeypatch.setattr(demo, "_prepare", broken_prepare)
    with pytest.raises(RuntimeError, match="prepare failed"):
        demo.build_demo(out, overwrite=True, **TINY)
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]  # no half-built folder beside it
    assert [p.name for p in out.iterdir()] == ["keep.txt"]  # the old output untouched
    monkeypatch.undo()

    demo.build_demo(out, overwrite=True, prepare=False, **TINY)
    assert sorted(p.name for p in out.iterdir()) == ["demo.json", "scenes"]
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]


def test_cli_builds_the_demo_and_reports_user_errors(tmp_path):
    from server.cli import cli

    runner = CliRunner()
    out = tmp_path / "cli_demo"
    args = ["stimuli", "build-demo", str(out), "--scenes", "1", "--size", "64x48",
            "--methods", "true_flow,zero_flow,dis_fast", "--seed", "2"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert str(out.resolve()) in result.output
    assert (out / "prepared" / "manifest.json").is_file()
    assert len(list((out / "scenes").iterdir())) == 1

    result = runner.invoke(cli, args)
    assert result.exit_code == 2 and "error:" in result.output and "--overwrite" in result.output
    result = runner.invoke(cli, [*args, "--overwrite", "--size", "64by48"])
    assert result.exit_code == 2 and "error: size" in result.output
    result = runner.invoke(cli, [*args[:3], "--methods", "bogus"])
    assert result.exit_code == 2 and "unknown bogus" in result.output

    help_text = runner.invoke(cli, ["stimuli", "build-demo", "--help"]).output
    for option in ("--scenes", "--size", "--seed", "--methods", "--overwrite", "--no-prepare"):
        assert option in help_text
    from server.cli.cmd_stimuli_demo import _METHOD_NAMES

    assert list(_METHOD_NAMES) == list(demo.METHODS)
    assert list(demo.DEFAULT_METHODS) == list(_METHOD_NAMES[:-2])
