"""Benchmark: preparing one 10 s 1080p clip for delivery, beside a bare PyAV transcode of the same clip.

The source is synthetic and seeded: a smooth random texture panning across the frame with fresh
grain in every frame (so the encoder has real work), 1920 x 1080 at 25 fps for 10 s, written as
high-quality H.264 (CRF 16). Then, in one run and on the same file:

* **bare**: PyAV decodes it and encodes it with libx264 (the same CRF and preset as ``prepare``'s
  first attempt) into an MP4 with faststart: what a script with no checks does;
* **prepare**: what ``stimuli prepare`` does for each file: probe it (demux and count frames), transcode
  it through the delivery path (SEI removed, fixed metadata), decode it back and measure every
  frame's PSNR against the source's (the fidelity rule: encode again at a lower CRF if needed), check
  its bytes and metadata, probe the result.

The ratio prepare / bare is the price of the rule and the checks (mostly the second decode and
the PSNR of every plane). Run: ``.venv/bin/python benchmarks/video_prepare.py [--seconds 10]``
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stimuli.media import probe_video  # noqa: E402
from stimuli.video import VideoParameters, deliver  # noqa: E402


def make_source(path: Path, width: int, height: int, seconds: float, fps: int, seed: int) -> Path:
    """Write the synthetic source clip (see the module docstring)."""
    import cv2

    from tests.server.video_support import write_clip

    rng = np.random.default_rng(seed)
    n = int(round(seconds * fps))
    texture = rng.integers(0, 256, (height, width + 4 * n, 3)).astype(np.uint8)
    texture = cv2.GaussianBlur(texture, (0, 0), 3)

    def frames():  # one at a time: 250 frames of 1080p held at once would take 1.5 GB
        for k in range(n):
            grain = rng.integers(-4, 5, (height, width, 1), dtype=np.int16)
            yield np.clip(texture[:, 4 * k:4 * k + width].astype(np.int16) + grain, 0, 255).astype(np.uint8)

    return write_clip(path, frames(), "libx264", {"crf": "16", "preset": "ultrafast"}, fps=fps)


def bare_transcode(src: Path, dst: Path, crf: int, preset: str) -> None:
    """Decode and encode with PyAV alone: H.264 yuv420p in MP4 with faststart, no checks."""
    import av

    with av.open(str(src)) as source, av.open(str(dst), "w", options={"movflags": "+faststart"}) as out:
        in_stream = source.streams.video[0]
        in_stream.thread_type = "AUTO"
        stream = out.add_stream("libx264", rate=in_stream.average_rate)
        stream.width, stream.height, stream.pix_fmt = in_stream.width, in_stream.height, "yuv420p"
        stream.options = {"crf": str(crf), "preset": preset}
        for k, frame in enumerate(source.decode(in_stream)):
            frame.pts, frame.time_base = k, Fraction(1) / in_stream.average_rate
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--width", type=int, default=1920)
    parser.add_argument("--height", type=int, default=1080)
    parser.add_argument("--fps", type=int, default=25)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    params = VideoParameters()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        source = make_source(tmp / "source.mp4", args.width, args.height, args.seconds, args.fps, args.seed)
        made = time.perf_counter() - start
        size = source.stat().st_size
        print(f"source: {args.width}x{args.height}, {args.seconds:g} s at {args.fps} fps, H.264 CRF 16, "
              f"{size / 1e6:.1f} MB (made in {made:.1f} s)", flush=True)
        # Wall time and this process's CPU time (all its threads: x264's, FFmpeg's decoders'): on a shared
        # machine the CPU seconds are the figure other jobs do not change.
        start, cpu = time.perf_counter(), time.process_time()
        bare_transcode(source, tmp / "bare.mp4", params.crf, params.preset)
        bare, bare_cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"bare PyAV transcode (libx264 CRF {params.crf}, {params.preset}): {bare:.1f} s wall, "
              f"{bare_cpu:.1f} s CPU, {(tmp / 'bare.mp4').stat().st_size / 1e6:.1f} MB", flush=True)
        start, cpu = time.perf_counter(), time.process_time()
        info = probe_video(source)
        fields = deliver(source, tmp / "prepared.mp4", info, params)
        prepared, prepared_cpu = time.perf_counter() - start, time.process_time() - cpu
        encoding = fields["encoding"]
        print(f"stimuli prepare of the clip (probe, transcode, PSNR check, metadata check): {prepared:.1f} s wall, "
              f"{prepared_cpu:.1f} s CPU, {fields['media']['bytes'] / 1e6:.1f} MB, CRF {encoding['crf']}, lowest "
              f"frame PSNR {encoding['min_psnr_db']} dB")
        print(f"prepare / bare: {prepared / bare:.2f} (wall), {prepared_cpu / bare_cpu:.2f} (CPU)")


if __name__ == "__main__":
    main()
