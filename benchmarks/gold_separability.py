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
(``smaller-file bot``; the larger-file bot gets one minus it): sizes alone, no decoding
(:func:`stimuli.separability.smaller_file_bot`). 0.5 is chance.

For rating studies (kind ``rating``) over the same prepared scenes it writes each scene's images as a
study with checks delivers them (candidates, hidden reference, strongly degraded images, all out of one
encoder path: server/paradigms/rating/study.py ``write_scene_images``) and prints the AUC of what a script
computes from one downloaded image (its size, its size against the scene's median, dimensions, PNG header
fields, chunk layout, whether it re-encodes byte for byte at zlib level 3, whether its stream ends in an
empty block: :func:`stimuli.separability.image_separability`), the checks against the real candidates;
then, marked as parsing the stream, the padding blocks' count and the compressed body's length (the
pixels' compressibility, a decoder's work), which the checks do not claim to hide.

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
                                  image_separability, separability, shown_pairs, smaller_file_bot)

NO_CANDIDATE_PAIR = 1e9  # a gold margin no candidate pair reaches: every scene gets synthetic gold


def measure(scene_root: Path, out: Path, synthetic: bool) -> dict:
    """{kind: Separability} of ``scene_root``'s scenes prepared into ``out``."""
    rules = {"gold_margin": NO_CANDIDATE_PAIR} if synthetic else {}
    prepare_study([scene_root], out, progress=False, overwrite=True, **rules)
    return {kind: (separability(pairs), smaller_file_bot(pairs))
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
    print(f"{'smaller-file bot':<22}" + "".join(f"{studies[study][kind][1]:>20.3f}" for study, kind in columns))
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
