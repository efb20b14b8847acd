"""``perceptlab stimuli motion-demo | import-sintel | check-clips | machine-flow``."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from server.cli import cli
from server.cli.cmd_stimuli_motion import _MODEL_NAMES
from stimuli.flow_io import write_flo
from stimuli.io import write_png
from stimuli.machine_flow import MODELS
from stimuli.motion_clips import load_clip_manifest


def _run(args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "clips"
    result = _run(["stimuli", "motion-demo", "--out", out, "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"motion demo: 2 clips, 20 probes -> {out.absolute() / 'manifest.json'}"
    return out


def test_motion_demo_refuses_a_non_empty_folder(demo_dir):
    _one_line_error(_run(["stimuli", "motion-demo", "--out", demo_dir]), str(demo_dir), "not an empty folder")


def test_check_clips_prints_a_summary(demo_dir):
    result = _run(["stimuli", "check-clips", demo_dir / "manifest.json"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:3] == ["clip_id", "dataset", "size"]
    manifest = load_clip_manifest(demo_dir)
    for line, clip in zip(lines[1:3], manifest.clips):
        speeds = [math.hypot(p.gt_u, p.gt_v) for p in clip.probes]
        assert line.split() == [clip.clip_id, "demo", "768x432", "20", "15", "10", "10",
                                f"{min(speeds):.2f}-{max(speeds):.2f}"]
    assert lines[-1] == "ok: 2 clips, 20 probes, noise texture: noise.png"


def test_check_clips_reports_problems_in_one_line(demo_dir, tmp_path):
    _one_line_error(_run(["stimuli", "check-clips", tmp_path / "missing.json"]), "manifest not found")
    broken = json.loads((demo_dir / "manifest.json").read_text())
    broken["clips"][1]["probes"][3]["x"] = 5000
    (demo_dir / "broken.json").write_text(json.dumps(broken))
    try:
        _one_line_error(_run(["stimuli", "check-clips", demo_dir / "broken.json"]),
                        str(demo_dir / "broken.json"), "'demo_camera' probe #3 'p03'", "outside")
    finally:
        (demo_dir / "broken.json").unlink()


def test_machine_flow_writes_the_model_csv(demo_dir, tmp_path):
    out = tmp_path / "pred.csv"
    result = _run(["stimuli", "machine-flow", demo_dir / "manifest.json", "--out", out])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"wrote 40 predictions (farneback, dis) -> {out}"
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == ["clip_id", "probe_id", "model", "pred_u", "pred_v"]
    gt = {(c.clip_id, p.probe_id): (p.gt_u, p.gt_v) for c in load_clip_manifest(demo_dir).clips for p in c.probes}
    assert {(r["clip_id"], r["probe_id"]) for r in rows} == set(gt)
    epe = [math.dist((float(r["pred_u"]), float(r["pred_v"])), gt[r["clip_id"], r["probe_id"]]) for r in rows]
    assert np.median(epe) < 1.0
    result = _run(["stimuli", "machine-flow", demo_dir, "--out", out, "--model", "dis"])
    assert result.exit_code == 0 and "wrote 20 predictions (dis)" in result.output
    assert _run(["stimuli", "machine-flow", demo_dir, "--out", out, "--model", "raft"]).exit_code == 2
    _one_line_error(_run(["stimuli", "machine-flow", tmp_path, "--out", out]), "manifest not found")


def _fake_sintel(root: Path, scene: str, n_frames: int) -> None:
    rng = np.random.default_rng(2)
    for folder in ("clean", "final", "flow"):
        (root / "training" / folder / scene).mkdir(parents=True)
    for t in range(1, n_frames + 1):
        write_png(root / "training" / "clean" / scene / f"frame_{t:04d}.png",
                  rng.integers(0, 256, (180, 240, 3)).astype(np.uint8))
        if t < n_frames:
            flow = np.zeros((180, 240, 2), np.float32)
            flow[..., 1] = -4.0
            write_flo(root / "training" / "flow" / scene / f"frame_{t:04d}.flo", flow)


def test_import_sintel_command(tmp_path):
    _fake_sintel(tmp_path / "sintel", "cave_2", 12)
    out = tmp_path / "clips"
    result = _run(["stimuli", "import-sintel", tmp_path / "sintel", "--out", out, "--pass", "clean",
                   "--probes-per-clip", "3", "--movie-frames", "10", "--seed", "4"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"sintel (clean): 1 clips, 3 probes -> {out / 'manifest.json'}"
    (clip,) = load_clip_manifest(out).clips
    assert clip.clip_id == "sintel_clean_cave_2" and clip.movie_frames == 10
    assert all((p.gt_u, p.gt_v) == (0.0, -4.0) for p in clip.probes)
    _one_line_error(_run(["stimuli", "import-sintel", tmp_path / "sintel", "--out", tmp_path / "o2",
                          "--pass", "clean"]),
                    "12 frames, a clip needs at least 15")  # default 15-frame movies
    _one_line_error(_run(["stimuli", "import-sintel", tmp_path / "sintel", "--out", tmp_path / "o3",
                          "--scenes", "cave_2,nope"]), "nope")


def test_model_names_match_the_library():
    assert _MODEL_NAMES == MODELS
