"""Benchmark: can a script tell gold trials from real ones by what it downloads?

For two studies prepared with ``stimuli prepare`` defaults,

* the demo (``stimuli build-demo``: 4 scenes x 11 interpolation methods, 320 x 240), and
* a generated image-quality study (:mod:`stimuli.distortions`: 4 scikit-image pictures x 10
  JPEG / blur / noise candidates, 320 x 240),

it computes, for every real (design) pair and every gold pair, what a script computes from a
trial's files (both files' sizes and their ratio, which one is larger, dimensions, crop geometry,
errors to the reference and their ratio, on full images and crops: :mod:`stimuli.separability`)
and prints the AUC of each statistic as a gold-vs-real classifier (0.5 = chance, 1 = told apart)
and the best one, for the amplified images (the default) and the originals.

``--synthetic`` prepares the same scenes with gold images made of candidate errors (the worse
image a bad candidate's error scaled to twice the worst candidate's, the better one the best
candidate's error halved): the gold perceptlab made before gold pairs became pairs of candidates,
which is what ``stimuli prepare`` still falls back to for a scene with no plain candidate pair.

It also prints the share of gold trials a script answers right by voting for the smaller full image
(``smaller-file bot``) or the larger one (``larger-file bot``): sizes alone, no decoding
(:func:`stimuli.separability.smaller_file_bot`). 0.5 is chance; the ``chance band`` rows are the 99.9 %
bands of a coin on as many gold trials (bots) and of an AUC of as many gold and real pairs
(:func:`stimuli.separability.chance_bound`, :func:`~stimuli.separability.auc_chance_bound`). The
``shorter-body bot`` votes for the file whose compressed stream is shorter before its padding: it parses
the deflate blocks, a decoding statistic that the padding does not claim to hide.

Measured (``.venv/bin/python benchmarks/gold_separability.py``, load average 14-16 on 2 cores, 3-6 min),
before and after ``stimuli prepare`` gave every side file a size drawn apart from its content and balanced
over the gold pairs (:func:`stimuli.prepare._deliver_sizes`), and took gold pairs outside the pair design
(so that they do not recur across workers more than real pairs)::

                                demo amplified  demo original  generated amplified  generated original
    before  smaller-file bot             1.000          0.833                0.458               0.375
            full_bytes_ratio AUC         0.655          0.618                0.541               0.605
            best statistic AUC           0.690          0.689                0.704               0.709
    after   smaller-file bot             0.500          0.500                0.500               0.500
            full_bytes_ratio AUC         0.521          0.540                0.534               0.516
            largest size AUC             0.553          0.540                0.547               0.614
            best statistic AUC           0.743          0.738                0.740               0.747
            (chance bands: bots 0.5 +- 0.336 on 24 gold trials; AUC 0.5 +- 0.21)

The best statistics are decoding ones (the error ratio to the reference: 0.69-0.71 with gold allowed inside
the design, 0.74-0.75 outside it, the price of recurrence AUC 0.631 instead of 0.791 in
tests/server/test_pair_allocation.py); the shorter-body bot, which parses the streams, still gets 1.000 /
0.875 / 0.417 / 0.333: the pixels' compressibility is not hidden.

Run: ``.venv/bin/python benchmarks/gold_separability.py [--synthetic] [--scenes 4]`` (about 30 s).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stimuli.demo import build_demo  # noqa: E402
from stimuli.distortions import build_distortion_scenes  # noqa: E402
from stimuli.prepare import prepare_study  # noqa: E402
from stimuli.separability import (IMAGE_STATISTICS, PARSED_STATISTICS, STATISTICS,  # noqa: E402
                                  auc_chance_bound, chance_bound, deflate_body, image_separability, separability,
                                  shown_pairs, smaller_file_bot)

NO_CANDIDATE_PAIR = 1e9  # a gold margin no candidate pair reaches: every scene gets synthetic gold


def measure(scene_root: Path, out: Path, synthetic: bool) -> dict:
    """{kind: Separability} of ``scene_root``'s scenes prepared into ``out``."""
    rules = {"gold_margin": NO_CANDIDATE_PAIR} if synthetic else {}
    prepare_study([scene_root], out, progress=False, overwrite=True, **rules)
    return {kind: (separability(pairs), smaller_file_bot(pairs), smaller_file_bot(pairs, deflate_body))
            for kind in ("amplified", "original") for pairs in [shown_pairs(out / "manifest.json", kind)]}


def measure_rating(prepared: Path, folder: Path, stimulus: str):
    """The separability of a rating study's quality-check images over ``prepared``'s scenes."""
    from server.paradigms import read_study_file
    from server.paradigms.rating.study import scene_manifests, write_scene_images

    folder.mkdir(parents=True, exist_ok=True)
    study = folder / f"rating-{stimulus}.toml"
    study.write_text(f'[study]\nkind = "rating"\nslug = "sep-{stimulus}"\nname = "separability"\n'
                     f'manifests = ["{(prepared / "manifest.json").as_posix()}"]\n'
                     f'[rating]\nmethod = "ccr"\nstimulus = "{stimulus}"\n')
    spec = read_study_file(study)
    scenes = {}
    for scene_folder, scene in scene_manifests(spec):
        images = write_scene_images(spec, scene_folder, scene)
        scenes[scene["scene_id"]] = (list(images.candidates.values()), images.checks)
    return image_separability(scenes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", type=int, default=4, help="scenes per study (1..4)")
    parser.add_argument("--synthetic", action="store_true", help="gold images made of candidate errors (the old gold)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gold-separability-") as tmp:
        root = Path(tmp)
        build_demo(root / "demo", n_scenes=args.scenes, progress=False, prepare=False)
        build_distortion_scenes(root / "distorted", n_scenes=args.scenes)
        studies = {"demo": measure(root / "demo" / "scenes", root / "demo_prepared", args.synthetic),
                   "generated": measure(root / "distorted", root / "distorted_prepared", args.synthetic)}
        ratings = {(study, kind): measure_rating(root / f"{folder}_prepared", root / "rating", kind)
                   for study, folder in (("demo", "demo"), ("generated", "distorted"))
                   for kind in ("amplified", "original")}
    gold = "synthetic (scaled candidate errors)" if args.synthetic else "pairs of candidates (default)"
    print(f"gold: {gold}; AUC of each statistic, gold against real pairs (0.5 = chance, 1 = told apart)")
    columns = [(study, kind) for study in studies for kind in ("amplified", "original")]
    print(f"{'statistic':<22}" + "".join(f"{f'{study} {kind}':>20}" for study, kind in columns))
    for name in STATISTICS:
        print(f"{name:<22}" + "".join(f"{studies[study][kind][0].aucs[name]:>20.3f}" for study, kind in columns))
    print(f"{'chance band (AUC)':<22}" + "".join(
        f"{f'0.5 +- {auc_chance_bound(studies[s][k][0].n_gold, studies[s][k][0].n_real):.3f}':>20}"
        for s, k in columns))
    print("bots answering gold trials from sizes alone (share right; 0.5 = chance):")
    print(f"{'smaller-file bot':<22}" + "".join(f"{studies[study][kind][1]:>20.3f}" for study, kind in columns))
    print(f"{'larger-file bot':<22}" + "".join(f"{1 - studies[study][kind][1]:>20.3f}" for study, kind in columns))
    print(f"{'chance band (bots)':<22}" + "".join(
        f"{f'0.5 +- {chance_bound(studies[s][k][0].n_gold):.3f}':>20}" for s, k in columns))
    print("parsing the stream (a decoding statistic; not hidden):")
    print(f"{'shorter-body bot':<22}" + "".join(f"{studies[study][kind][2]:>20.3f}" for study, kind in columns))
    print()
    for study, kind in columns:
        result = studies[study][kind][0]
        name, value = result.best
        print(f"{study:>9} {kind:<9}: best single statistic AUC {value:.3f} ({name}); "
              f"{result.n_gold} gold and {result.n_real} real pairs")
    print()
    print("rating studies: AUC of each statistic of one image, quality checks (hidden references, degraded "
          "images) against real candidates")
    print(f"{'statistic':<22}" + "".join(f"{f'{study} {kind}':>20}" for study, kind in ratings))
    for name in IMAGE_STATISTICS:
        print(f"{name:<22}" + "".join(f"{result.aucs[name]:>20.3f}" for result in ratings.values()))
    print("parsing the stream (the pixels' compressibility; not hidden):")
    for name in PARSED_STATISTICS:
        print(f"{name:<22}" + "".join(f"{result.aucs[name]:>20.3f}" for result in ratings.values()))
    for (study, kind), result in ratings.items():
        name, value = max(((n, result.aucs[n]) for n in IMAGE_STATISTICS), key=lambda kv: kv[1])
        print(f"rating {study:>9} {kind:<9}: best single statistic AUC {value:.3f} ({name}); "
              f"{result.n_gold} checks and {result.n_real} real candidates")


if __name__ == "__main__":
    main()
