"""Benchmark: can a script tell video check clips (hidden references, degraded gold) from real stimuli?

Synthetic contents (seeded; 160 x 120, 25 frames at 25 fps), each a raw reference and three processed
versions (VP9, MPEG-4 part 2, coarse H.264), are prepared by ``stimuli prepare``'s code
(:func:`stimuli.video.prepare_video_study`). Per content, three check clips are made from the delivered
reference with :func:`stimuli.video.write_check_clip`: a hidden reference and two degraded gold clips
(:func:`stimuli.video.washed_out_blur`), once at the study's CRF alone and once with a file size drawn
from the content's candidates' sizes (:func:`stimuli.check_images.draw_sizes`, as rating studies do for
images). For each, the AUC of every statistic a script can read from a download
(:func:`stimuli.separability.clip_separability`: bytes, bytes over the content's median, bitrate,
duration, frame count, frame rate, size, metadata) is printed, check clips against real candidates
(0.5 = chance, 1 = told apart; the issue's bar is 0.75).

Run: ``.venv/bin/python benchmarks/check_clip_separability.py [--contents 8]``
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stimuli.check_images import draw_sizes  # noqa: E402
from stimuli.separability import clip_separability  # noqa: E402
from stimuli.video import prepare_video_study, washed_out_blur, write_check_clip  # noqa: E402

SOURCES = {"reference.y4m": ("rawvideo", {}), "vp9.webm": ("libvpx-vp9", {}), "mpeg4.avi": ("mpeg4", {"qscale": "6"}),
           "h264.mp4": ("libx264", {"crf": "32"})}


def write_content(folder: Path, width: int, height: int, n: int, seed: int) -> None:
    """A smooth random texture panning by a seeded speed, encoded in every codec of :data:`SOURCES`."""
    import cv2

    from tests.server.video_support import write_clip

    rng = np.random.default_rng(seed)
    speed = int(rng.integers(1, 4))
    texture = cv2.GaussianBlur(rng.integers(0, 256, (height, width + speed * n, 3)).astype(np.uint8), (0, 0),
                               float(rng.uniform(1.0, 3.0)))
    frames = [np.ascontiguousarray(texture[:, speed * k:speed * k + width]) for k in range(n)]
    folder.mkdir(parents=True)
    for name, (codec, options) in SOURCES.items():
        write_clip(folder / name, frames, codec, options, fps=25)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--contents", type=int, default=8)
    parser.add_argument("--width", type=int, default=160)
    parser.add_argument("--height", type=int, default=120)
    parser.add_argument("--frames", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for k in range(args.contents):
            write_content(root / "scenes" / f"content{k}", args.width, args.height, args.frames, args.seed * 1000 + k)
        start = time.perf_counter()
        prepare_video_study([root / "scenes"], root / "out", degree=2, progress=False)
        print(f"{args.contents} contents of {args.width}x{args.height}, {args.frames} frames, 3 candidates each: "
              f"prepared in {time.perf_counter() - start:.1f} s")
        for matched in (False, True):
            contents, hidden_psnr, start = {}, [], time.perf_counter()
            for folder in sorted((root / "out").iterdir()):
                if not folder.is_dir():
                    continue
                real = sorted((folder / "original").glob("*.mp4"))
                targets = (draw_sizes([p.stat().st_size for p in real], [0, 0, 0], rng) if matched
                           else [None, None, None])
                checks = []
                for j, (degrade, target) in enumerate(zip((None, washed_out_blur, washed_out_blur), targets)):
                    dst = root / f"check_{int(matched)}_{folder.name}_{j}.mp4"
                    made = write_check_clip(folder / "reference.mp4", dst, degrade=degrade,
                                            target_bytes=None if target is None else int(target))
                    checks.append(dst)
                    if degrade is None:
                        hidden_psnr.append(made["encoding"]["min_psnr_db"] or float("inf"))
                contents[folder.name] = (real, checks)
            result = clip_separability(contents)
            name, value = result.best
            what = "sizes drawn from the candidates'" if matched else "the study's CRF alone"
            print(f"\ncheck clips at {what} ({result.n_gold} check clips, {result.n_real} real; made in "
                  f"{time.perf_counter() - start:.1f} s): best statistic {name} AUC {value:.3f}")
            print(result.table())
            print(f"  hidden references' lowest frame PSNR to the delivered reference: {min(hidden_psnr):.1f} dB "
                  f"(median over contents {np.median(hidden_psnr):.1f} dB)")


if __name__ == "__main__":
    main()
