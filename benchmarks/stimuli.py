"""Benchmark: artefact amplification + zoom crops at Middlebury scale (StudyMB 2.0).

8 scenes x 155 candidates at 640 x 480 (synthetic, seeded), computed in memory:
average error, Otsu regions and crop boxes per scene, Algorithm 1 for every
candidate, and the crops of the reference and of every candidate (plain and
amplified). Target: under 10 s in total on a 2-core machine.

The same Algorithm 1 written as a plain per-pixel Python loop runs on a strip
of rows of a few candidates; its time is extrapolated per pixel to the full
workload (the script says how many pixels it timed). PNG writing is timed
separately on one scene and extrapolated.

Run: ``.venv/bin/python benchmarks/stimuli.py [--scenes 8 --candidates 155]``
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stimuli.amplify import amplify, amplify_with_alpha  # noqa: E402
from stimuli.io import write_png  # noqa: E402
from stimuli.zoom import average_error, crop, find_crop_boxes  # noqa: E402


def synthetic_scene(rng: np.random.Generator, n_candidates: int, height: int, width: int):
    """A textured reference and candidates with interpolation-like local errors.

    Each candidate has displaced patches (content shifted by some pixels, as a
    wrong flow would do) around three scene-specific 'hard' areas, plus mild noise.
    """
    import cv2

    small = rng.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8)
    reference = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
    reference = cv2.addWeighted(reference, 0.8, rng.integers(0, 50, reference.shape, dtype=np.uint8), 1.0, 0)
    noise_bank = rng.integers(-3, 4, (height + 64, width, 3), dtype=np.int16)
    hard_areas = [(int(rng.integers(0, width - 128)), int(rng.integers(0, height - 128))) for _ in range(3)]
    candidates = []
    for _ in range(n_candidates):
        offset = int(rng.integers(0, 64))
        candidate = reference + noise_bank[offset:offset + height]
        for hard_x, hard_y in hard_areas:
            w, h = (int(v) for v in rng.integers(16, 64, 2))
            x = int(np.clip(hard_x + rng.integers(0, 64), 0, width - w))
            y = int(np.clip(hard_y + rng.integers(0, 64), 0, height - h))
            dx, dy = (int(v) for v in rng.integers(-6, 7, 2))
            src_x, src_y = np.clip(x + dx, 0, width - w), np.clip(y + dy, 0, height - h)
            candidate[y:y + h, x:x + w] = reference[src_y:src_y + h, src_x:src_x + w]
        candidates.append(np.clip(candidate, 0, 255).astype(np.uint8))
    return reference, candidates


def naive_amplify(reference: np.ndarray, candidate: np.ndarray, alpha: float = 1.5) -> np.ndarray:
    """Algorithm 1, one pixel and one channel at a time in pure Python (the baseline)."""
    height, width, _ = reference.shape
    out = np.empty_like(reference)
    ref, cand = reference.tolist(), candidate.tolist()
    for y in range(height):
        for x in range(width):
            v, v_hat = ref[y][x], cand[y][x]
            a = alpha
            for c in range(3):
                d = v_hat[c] - v[c]
                if d > 0:
                    a = min(a, (255 - v[c]) / d)
                elif d < 0:
                    a = min(a, v[c] / -d)
            for c in range(3):
                scaled = a * (v_hat[c] - v[c])
                rounded = int(abs(scaled) + 0.5) * (1 if scaled >= 0 else -1)
                out[y, x, c] = v[c] + rounded
    return out


def process_scene(reference: np.ndarray, candidates: list[np.ndarray], top_k: int = 3) -> dict:
    """The timed work for one scene; returns the per-step times in seconds."""
    times = {}
    start = time.perf_counter()
    boxes = find_crop_boxes(average_error(reference, candidates), sigma=20, top_k=top_k)
    times["crop boxes (avg error, Otsu, boxes)"] = time.perf_counter() - start
    start = time.perf_counter()
    amplified = [amplify_with_alpha(reference, c, 1.5)[0] for c in candidates]
    times["amplification (Algorithm 1)"] = time.perf_counter() - start
    start = time.perf_counter()
    crops = [crop(reference, b) for b in boxes]
    for original, boosted in zip(candidates, amplified):
        crops += [crop(original, b) for b in boxes] + [crop(boosted, b) for b in boxes]
    times["crops (reference, plain, amplified)"] = time.perf_counter() - start
    times["_n_boxes"] = len(boxes)
    process_scene.last = (boxes, amplified)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", type=int, default=8)
    parser.add_argument("--candidates", type=int, default=155)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--naive-candidates", type=int, default=2, help="candidates the naive loop runs on")
    parser.add_argument("--naive-rows", type=int, default=48, help="rows of each of those candidates")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

    totals: dict[str, float] = {}
    generation, n_boxes, sample = 0.0, [], None
    png_seconds, png_files = None, 0
    for scene in range(args.scenes):
        start = time.perf_counter()
        reference, candidates = synthetic_scene(rng, args.candidates, args.height, args.width)
        generation += time.perf_counter() - start
        times = process_scene(reference, candidates)
        n_boxes.append(times.pop("_n_boxes"))
        for step, seconds in times.items():
            totals[step] = totals.get(step, 0.0) + seconds
        if scene == 0:
            sample = (reference, candidates[:args.naive_candidates])
            boxes, amplified = process_scene.last
            with tempfile.TemporaryDirectory() as folder:  # PNG writing, one scene, timed apart
                start = time.perf_counter()
                for k, (original, boosted) in enumerate(zip(candidates, amplified)):
                    write_png(Path(folder) / f"{k}.png", original)
                    write_png(Path(folder) / f"{k}_amp.png", boosted)
                    for b in boxes:
                        write_png(Path(folder) / f"{k}_{b.rank}.png", crop(original, b))
                        write_png(Path(folder) / f"{k}_{b.rank}_amp.png", crop(boosted, b))
                png_seconds = time.perf_counter() - start
                png_files = len(list(Path(folder).iterdir()))
        del candidates

    n_images = args.scenes * args.candidates
    vectorised_total = sum(totals.values())
    amplification = totals["amplification (Algorithm 1)"]

    reference, few = sample
    rows = min(args.naive_rows, args.height)
    start = time.perf_counter()
    for candidate in few:
        naive = naive_amplify(reference[:rows], candidate[:rows])
        np.testing.assert_array_equal(naive, amplify(reference[:rows], candidate[:rows]))  # same result
    naive_seconds = time.perf_counter() - start
    naive_pixels = len(few) * rows * args.width
    naive_full = naive_seconds / naive_pixels * (n_images * args.height * args.width)

    print(f"Artefact amplification + zoom crops: {args.scenes} scenes x {args.candidates} candidates, "
          f"{args.width}x{args.height} RGB uint8 (synthetic, seed {args.seed}); scene generation "
          f"{generation:.1f} s not counted; crop boxes found per scene: {n_boxes}")
    print()
    print(f"{'step':<42} {'seconds':>9} {'ms / image':>11}")
    for step, seconds in totals.items():
        print(f"{step:<42} {seconds:>9.2f} {1000 * seconds / n_images:>11.2f}")
    print(f"{'total (in memory)':<42} {vectorised_total:>9.2f} {1000 * vectorised_total / n_images:>11.2f}"
          f"   target < 10 s: {'met' if vectorised_total < 10 else 'MISSED'}")
    if png_seconds is not None:
        per_scene = png_seconds
        print(f"{'PNG writing, 1 scene (' + str(png_files) + ' files)':<42} {per_scene:>9.2f}"
              f" {1000 * per_scene / args.candidates:>11.2f}   extrapolated to all scenes: "
              f"{per_scene * args.scenes:.1f} s")
    print()
    print(f"naive per-pixel Python Algorithm 1: timed on {len(few)} candidates x {rows} rows "
          f"({naive_pixels} pixels) = {naive_seconds:.2f} s, identical output to the vectorised code")
    print(f"  extrapolated to all {n_images} images: {naive_full:.0f} s "
          f"({naive_full / 60:.1f} min); vectorised amplification {amplification:.2f} s "
          f"-> speed-up x{naive_full / amplification:.0f} (amplification only), "
          f"x{naive_full / vectorised_total:.0f} vs. the whole in-memory pipeline")


if __name__ == "__main__":
    main()
