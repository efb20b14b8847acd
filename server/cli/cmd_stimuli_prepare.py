"""``perceptlab stimuli prepare`` and ``perceptlab stimuli metrics``."""
from __future__ import annotations

from pathlib import Path

import click

from .base import FINITE_FLOAT, UserError
from .cmd_stimuli import stimuli_group

_FOLDER = click.Path(path_type=Path)  # existence is checked by the command: one-line errors


@stimuli_group.command("prepare")
@click.argument("scene_dirs", nargs=-1, required=True, type=_FOLDER)
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Output folder (one subfolder per scene plus manifest.json); must not exist or be empty.")
@click.option("--alpha", default=1.5, show_default=True, type=FINITE_FLOAT,
              help="Artefact amplification factor (> 1), lowered per pixel where it would leave the value range.")
@click.option("--sigma", default=20.0, show_default=True, type=FINITE_FLOAT,
              help="Gaussian smoothing (pixels) of the average error image before Otsu segmentation.")
@click.option("--zoom", default=1.5, show_default=True, type=FINITE_FLOAT,
              help="Display magnification recorded for the crops.")
@click.option("--top-k", default=3, show_default=True, type=int,
              help="Zoom regions (crops) per scene; 0 = none. A crop that would cover more than half of the image "
                   "is never offered (uniform distortions such as JPEG, blur or noise give none).")
@click.option("--levels", default=2, show_default=True, type=int,
              help="Otsu classes: 2 = Otsu's threshold, 3 or more = multi-Otsu keeping the most degraded class.")
@click.option("--degree", default=6, show_default=True, type=int,
              help="Comparisons per candidate in the random regular pair design (full design for small scenes).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed of the pair designs and of the gold images' rounding.")
# Their defaults live in stimuli.gold (imported only when a command runs: it needs numpy).
@click.option("--gold-margin", default=None, type=FINITE_FLOAT,
              help="A gold pair's worse candidate has at least this times the better one's error, by pixel "
                   "error (IE) and by structure (GMSD), as given and amplified (> 1)  [default: 1.5]")
@click.option("--gold-min-difference", default=None, type=FINITE_FLOAT,
              help="And its IE is at least this many grey levels (8-bit scale) above the better one's  "
                   "[default: 8]")
@click.option("--gold-better-scale", default=0.5, show_default=True, type=FINITE_FLOAT,
              help="Only for a scene with no such pair (synthetic gold): the better gold image is the best "
                   "candidate's error scaled by this (0..0.85].")
@click.option("--gold-pairs", default=None, type=int,
              help="Distinct gold pairs per scene, so a worker need not meet one twice (0 = none: "
                   "then the study needs quiz_size = 0 and gold_rate = 0)  [default: a third of the design's pairs "
                   "when that many qualify, at least 6]")
@click.option("--reference", default=None,
              help="File name of the reference inside each scene folder [default: reference.<ext>].")
# Videos only (their defaults live in stimuli.video.VideoParameters).
@click.option("--crf", default=None, type=int,
              help="Videos: x264's constant rate factor of the first encoding (lower = closer to the source); a "
                   "file whose frames miss --min-psnr is encoded again 6 lower, down to 1  [default: 12]")
@click.option("--preset", default=None,
              help="Videos: x264's preset (speed against size; the fidelity rule holds at any)  [default: medium]")
@click.option("--min-psnr", "min_psnr_db", default=None, type=FINITE_FLOAT,
              help="Videos: every plane of every delivered frame is at least this close to the source's (dB)  "
                   "[default: 45]")
@click.option("--keep-encoding", is_flag=True,
              help="Videos: keep the sources' bitstreams (codec studies) instead of transcoding to H.264; the "
                   "manifest then asks for a decoding check at entry.")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty output folder.")
@click.option("--max-side", type=click.IntRange(min=1), default=None, metavar="PX",
              help="Longest image side taken; a scene with larger images is refused before any work, with the size "
                   "to downscale them to  [default: 2732, what a laptop window shows at the fit policy's smallest "
                   "scale]")
@click.pass_context
def prepare_command(ctx: click.Context, scene_dirs: tuple[Path, ...], out: Path, alpha: float, sigma: float,
                    zoom: float, top_k: int, levels: int, degree: int, seed: int, gold_margin: float | None,
                    gold_min_difference: float | None,
                    gold_better_scale: float, gold_pairs: int | None, reference: str | None, crf: int | None,
                    preset: str | None, min_psnr_db: float | None, keep_encoding: bool, overwrite: bool,
                    max_side: int | None) -> None:
    """Amplify artefacts, cut zoom crops and draw pair designs for SCENE_DIRS.

    A scene folder holds reference.<ext> and two or more candidate images of the
    same size (candidate ID = file stem). A folder of scene folders works too.

    Each scene also gets gold (check) pairs: pairs of its own candidates where one is
    plainly worse (--gold-margin, --gold-min-difference), chosen so that their files'
    sizes and errors look like the real pairs' (several per scene: --gold-pairs). A gold
    trial shows the very files real trials show. The separability printed is the AUC of
    the best single statistic a script could compute from the downloads, gold against
    real pairs (0.5 = chance, 1 = told apart).

    Video folders (reference.<ext> and two or more processed versions of the same
    resolution, frame rate and duration) are transcoded to H.264 yuv420p 8-bit MP4
    with faststart and no identifying metadata, every frame within --min-psnr of its
    source (or kept as encoded: --keep-encoding), and get pair designs; no
    amplification, crops or gold.
    """
    given = {name for name in ctx.params if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT}
    video = {key: value for key, value in (("crf", crf), ("preset", preset), ("min_psnr_db", min_psnr_db),
                                           ("keep_encoding", keep_encoding or None)) if value is not None}
    if _media_kind(list(scene_dirs)) == "video":
        image_only = sorted(given & IMAGE_ONLY_OPTIONS)
        if image_only:
            raise image_only_error(image_only)
        manifest = prepare_scenes(list(scene_dirs), out, reference=reference, overwrite=overwrite, degree=degree,
                                  seed=seed, **video)
        click.echo(f"prepared {prepared_summary(manifest)} -> {out}")
        for line in video_report_lines(manifest, out):
            click.echo(line)
        return
    if video:
        flags = ", ".join("--" + n.replace("_", "-").replace("min-psnr-db", "min-psnr") for n in sorted(video))
        raise UserError(f"{flags}: for video folders only; {', '.join(map(str, scene_dirs))} hold images")
    rules = {key: value for key, value in (("gold_margin", gold_margin), ("gold_min_difference", gold_min_difference),
                                          ("max_side", max_side)) if value is not None}
    manifest = prepare_scenes(list(scene_dirs), out, reference=reference, overwrite=overwrite, alpha=alpha,
                              sigma=sigma, zoom=zoom, top_k=top_k, levels=levels, degree=degree, seed=seed,
                              gold_better_scale=gold_better_scale, gold_pairs=gold_pairs, **rules)
    click.echo(f"prepared {prepared_summary(manifest)} -> {out}")
    echo_gold_report(manifest)

    from .window import prepared_window_lines

    click.echo("the trial page needs (with the study template's other [display] values):")
    for line in prepared_window_lines(out / "manifest.json"):
        click.echo(line)


def echo_gold_report(manifest: dict) -> None:
    """Print how well a script could tell the prepared gold from real trials, and warn (on stderr)
    about scenes whose gold had to be made of candidate errors (the tell-tale kind)."""
    separable = manifest.get("gold_separability")
    if separable:
        figures = ", ".join(f"{kind} {v['auc']:.2f} ({v['statistic']})" for kind, v in separable.items())
        click.echo(f"gold separability (AUC of the best single statistic, 0.5 = chance): {figures}")
    synthetic = [scene["scene_id"] for scene in manifest["scenes"] if scene.get("gold_method") == "synthetic"]
    if synthetic:
        click.echo(f"warning: no candidate pair of {', '.join(synthetic)} is plain enough for gold: their gold "
                   "images are made of candidate errors and easier to tell from real pairs "
                   "(lower --gold-margin or --gold-min-difference, or add candidates)", err=True)


# The options that shape images only (amplification, crops, gold): refused for video folders when given.
IMAGE_ONLY_OPTIONS = frozenset({"alpha", "sigma", "zoom", "top_k", "levels", "gold_margin", "gold_min_difference",
                                "gold_better_scale", "gold_pairs", "max_side"})


def image_only_error(names) -> UserError:
    """The one line that refuses options that shape images only (``names``: their parameter names) for videos."""
    return UserError(f"{', '.join('--' + n.replace('_', '-') for n in names)}: for images only; video folders are "
                     "not amplified, cropped or given gold pairs")


def _media_kind(scene_dirs: list[Path]) -> str:
    """"image" or "video" (:func:`stimuli.prepare.study_media_kind`), bad input as a :class:`UserError`."""
    from stimuli.io import StimulusInputError
    from stimuli.prepare import study_media_kind

    try:
        return study_media_kind(scene_dirs)
    except StimulusInputError as exc:
        raise UserError(str(exc)) from None


def prepare_scenes(scene_dirs: list[Path], out: Path, *, reference: str | None = None, overwrite: bool = False,
                   progress: bool = True, **parameters) -> dict:
    """:func:`stimuli.prepare.prepare_study` (image scenes) or :func:`stimuli.video.prepare_video_study`
    (video contents) with bad input as a one-line :class:`UserError`; returns the top-level manifest."""
    from stimuli.io import StimulusInputError
    from stimuli.prepare import prepare_study
    from stimuli.video import VideoParameters, prepare_video_study

    prepare = prepare_study
    if _media_kind(scene_dirs) == "video":
        prepare = prepare_video_study
        if unknown := sorted(set(parameters) - set(VideoParameters.__dataclass_fields__)):
            raise image_only_error(unknown)
    try:
        return prepare(scene_dirs, out, reference=reference, overwrite=overwrite, progress=progress, **parameters)
    except StimulusInputError as exc:
        raise UserError(str(exc)) from None


def video_report_lines(manifest: dict, out: Path) -> list[str]:
    """What ``stimuli prepare`` says of prepared videos: their delivery format, the lowest PSNR and
    the CRFs the fidelity rule needed, or the decoding check kept encodings ask for."""
    import json

    media = manifest["media"]
    if media.get("entry_decoding_check"):
        return [f"videos kept as encoded ({', '.join(media['codecs'])}) in MP4 without metadata: workers' browsers "
                "must pass a decoding check for these codecs at entry"]
    records = []
    for scene in manifest["scenes"]:
        scene_manifest = json.loads((out / scene["manifest"]).read_text())
        records += [scene_manifest["reference"]["encoding"], *(c["encoding"] for c in scene_manifest["candidates"])]
    psnrs = [r["min_psnr_db"] for r in records if r["min_psnr_db"] is not None]
    lowest = f"{min(psnrs):.1f} dB" if psnrs else "identical frames"
    crfs = sorted({r["crf"] for r in records})
    return [f"videos: H.264 yuv420p 8-bit MP4 (faststart, no metadata); lowest frame PSNR to the source {lowest} "
            f"(bound {manifest['parameters']['min_psnr_db']:g} dB), CRF {', '.join(map(str, crfs))}"]


def prepared_summary(manifest: dict) -> str:
    """"4 scene(s), 44 candidates, 132 pairs, 24 gold pairs" of a top-level manifest."""
    n_candidates = sum(scene["n_candidates"] for scene in manifest["scenes"])
    n_pairs = sum(scene["n_pairs"] for scene in manifest["scenes"])
    n_gold = sum(scene["n_gold_pairs"] for scene in manifest["scenes"])
    if manifest.get("media", {}).get("kind") == "video":
        return f"{len(manifest['scenes'])} video content(s), {n_candidates} candidates, {n_pairs} pairs"
    return f"{len(manifest['scenes'])} scene(s), {n_candidates} candidates, {n_pairs} pairs, {n_gold} gold pairs"


METRIC_COLUMNS = ("rmse", "psnr", "ssim", "ms_ssim", "gmsd", "ie", "ne", "wae")


@stimuli_group.command("metrics")
@click.argument("scene_dir", type=_FOLDER)
@click.option("--subjective", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="scales.csv (set_id,item_id,scale,...) to correlate with: prints the SROCC table per scene.")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the per-candidate metrics to this CSV instead of printing them.")
@click.option("--reference", default=None,
              help="File name of the reference inside each scene folder [default: reference.<ext>].")
def metrics_command(scene_dir: Path, subjective: Path | None, out: Path | None, reference: str | None) -> None:
    """Full-reference metrics of every candidate against its reference.

    SCENE_DIR is a scene folder or a folder of scene folders. Columns: RMSE, PSNR,
    SSIM, MS-SSIM (NaN below 176 px), GMSD, IE and NE (Middlebury), WAE-IQA
    (StudyMB 2.0's Fig. 20 parameters).
    """
    from stimuli.io import StimulusInputError

    try:
        rows = _scene_metrics(scene_dir, reference)
        table = _srocc_rows(rows, subjective) if subjective is not None else None
    except StimulusInputError as exc:
        raise UserError(str(exc)) from None
    text = _csv_text(rows)
    if out is not None:
        from stimuli.io import write_bytes_atomic

        try:
            write_bytes_atomic(out, text.encode())
        except OSError as exc:
            raise UserError(f"{out}: cannot write ({exc.strerror or exc})") from None
        click.echo(f"wrote metrics of {len(rows)} candidates -> {out}")
    else:
        click.echo(text, nl=False)
    if table is not None:
        from stimuli.metrics import format_srocc_table

        click.echo("SROCC between metrics and subjective scale values:")
        click.echo(format_srocc_table(table))


def _scene_metrics(scene_dir: Path, reference: str | None) -> list[dict]:
    from stimuli.metrics import compare_images
    from stimuli.prepare import load_scene, scene_folders

    rows = []
    for folder in scene_folders(scene_dir):
        scene = load_scene(folder, reference)
        for item_id in sorted(scene.candidates):
            values = compare_images(scene.reference, scene.candidates[item_id])
            rows.append({"set_id": scene.scene_id, "item_id": item_id, **values})
    return rows


def _csv_text(rows: list[dict]) -> str:
    from stimuli.csv_safety import dict_csv_text

    return dict_csv_text(["set_id", "item_id", *METRIC_COLUMNS],
                         [{k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()} for row in rows])


def _read_scales(path: Path) -> dict[tuple[str, str], float]:
    import csv

    from stimuli.csv_safety import dict_rows
    from stimuli.io import StimulusInputError

    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = {"set_id", "item_id", "scale"} - set(reader.fieldnames or [])
            if missing:
                raise StimulusInputError(f"{path}: missing columns {sorted(missing)} (need set_id,item_id,scale)")
            scales = {}
            for line, row in enumerate(dict_rows(reader), start=2):
                try:
                    scales[(row["set_id"], row["item_id"])] = float(row["scale"])
                except (TypeError, ValueError):
                    raise StimulusInputError(f"{path}:{line}: scale {row['scale']!r} is not a number") from None
    except OSError as exc:
        raise StimulusInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return scales


def _srocc_rows(rows: list[dict], subjective: Path) -> list[dict]:
    import numpy as np

    from stimuli.io import StimulusInputError
    from stimuli.metrics import metric_srocc_table

    scales = _read_scales(subjective)
    matched = [row for row in rows if (row["set_id"], row["item_id"]) in scales]
    sets = list(dict.fromkeys(row["set_id"] for row in matched))
    if not sets:
        raise StimulusInputError(f"{subjective}: no (set_id, item_id) matches the scenes' candidates")
    scale = {s: np.array([scales[(r["set_id"], r["item_id"])] for r in matched if r["set_id"] == s]) for s in sets}
    values = {m: {s: np.array([r[m] for r in matched if r["set_id"] == s]) for s in sets} for m in METRIC_COLUMNS}
    return metric_srocc_table(values, scale)
