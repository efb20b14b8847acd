"""``perceptlab stimuli motion-demo | import-sintel | check-clips | machine-flow``: motion-matching clips.

Clip sets are folders with a ``manifest.json`` (:mod:`stimuli.motion_clips`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .base import FINITE_FLOAT, UserError
from .cmd_stimuli import stimuli_group

# Spelled out here so that --help does not import OpenCV; a test keeps it equal to stimuli.machine_flow.MODELS.
_MODEL_NAMES = ("farneback", "dis")


def _progress() -> bool:
    # Progress bars only on a terminal (never in tests or logs).
    return sys.stderr.isatty()


@stimuli_group.command("motion-demo")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Folder to create (must not exist, or be empty).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Random seed; the same seed gives byte-identical clips.")
def motion_demo_command(out: Path, seed: int) -> None:
    """Build the demo clip set for the motion-matching experiment (offline).

    Two 20-frame 768x432 clips with exact flow (textured objects over a static
    background; the same with a panning and zooming camera), 10 probes each,
    and noise.png, the 2048x2048 1/f^2 matching texture.
    """
    from stimuli.motion_clips import load_clip_manifest
    from stimuli.motion_demo import build_motion_demo

    try:
        path = build_motion_demo(out, seed=seed, progress=_progress())
    except (FileExistsError, ValueError) as error:
        raise UserError(str(error)) from None
    manifest = load_clip_manifest(path)
    n_probes = sum(len(c.probes) for c in manifest.clips)
    click.echo(f"motion demo: {len(manifest.clips)} clips, {n_probes} probes -> {path}")


@stimuli_group.command("import-sintel")
@click.argument("root", type=click.Path(path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="Folder to create (must not exist, or be empty); frames and flow are hard-linked or copied.")
@click.option("--pass", "pass_name", default="final", show_default=True, type=click.Choice(["final", "clean"]),
              help="Sintel rendering pass.")
@click.option("--scenes", default=None, metavar="A,B,...", help="Comma-separated scene names [default: all].")
@click.option("--probes-per-clip", default=10, show_default=True, type=click.IntRange(min=1),
              help="Probes drawn per clip (fewer if they do not fit).")
@click.option("--movie-frames", default=15, show_default=True, type=click.Choice(["15", "10"]),
              help="Stimulus frames per movie.")
@click.option("--max-speed", default=20.0, show_default=True, type=FINITE_FLOAT, help="Largest probe speed, px/frame.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the probe positions and noise.")
def import_sintel_command(root: Path, out: Path, pass_name: str, scenes: str | None, probes_per_clip: int,
                          movie_frames: str, max_speed: float, seed: int) -> None:
    """Make a clip set from a Sintel folder ROOT (ROOT/training/{clean,final,flow}/<scene>/)."""
    from stimuli.motion_clips import (
        ClipManifestError,
        import_sintel,
        load_clip_manifest,
    )

    names = None if scenes is None else [s.strip() for s in scenes.split(",") if s.strip()]
    try:
        path = import_sintel(root, out, pass_name=pass_name, scenes=names, probes_per_clip=probes_per_clip,
                             movie_frames=int(movie_frames), max_speed=max_speed, seed=seed, progress=_progress())
    except ClipManifestError as error:
        raise UserError(str(error)) from None
    manifest = load_clip_manifest(path)
    n_probes = sum(len(c.probes) for c in manifest.clips)
    click.echo(f"sintel ({pass_name}): {len(manifest.clips)} clips, {n_probes} probes -> {path}")


def _summary_table(manifest) -> str:
    import math

    header = ("clip_id", "dataset", "size", "frames", "movie", "probes", "probe frame(s)", "GT speed min-max")
    rows = [header]
    for clip in manifest.clips:
        speeds = [math.hypot(p.gt_u, p.gt_v) for p in clip.probes]
        frames = ",".join(str(f) for f in sorted({p.frame for p in clip.probes}))
        rows.append((clip.clip_id, clip.dataset, f"{clip.width}x{clip.height}", str(len(clip.frames)),
                     str(clip.movie_frames), str(len(clip.probes)), frames,
                     f"{min(speeds):.2f}-{max(speeds):.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


@stimuli_group.command("check-clips")
@click.argument("manifest", type=click.Path(path_type=Path))
def check_clips_command(manifest: Path) -> None:
    """Validate a clip manifest (or its folder) and print one line per clip."""
    from stimuli.motion_clips import ClipManifestError, load_clip_manifest

    try:
        loaded = load_clip_manifest(manifest)
    except ClipManifestError as error:
        raise UserError(str(error)) from None
    click.echo(_summary_table(loaded))
    n_probes = sum(len(c.probes) for c in loaded.clips)
    noise = loaded.noise or "none"
    click.echo(f"ok: {len(loaded.clips)} clips, {n_probes} probes, noise texture: {noise}")


@stimuli_group.command("machine-flow")
@click.argument("manifest", type=click.Path(path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Predictions CSV to write (clip_id,probe_id,model,pred_u,pred_v).")
@click.option("--model", "models", multiple=True, type=click.Choice(_MODEL_NAMES),
              help="OpenCV model; repeat for several [default: all].")
def machine_flow_command(manifest: Path, out: Path, models: tuple[str, ...]) -> None:
    """Run OpenCV optical flow (Farneback, DIS) on every probe's frames F -> F+1."""
    from stimuli.machine_flow import machine_predictions, write_predictions_csv
    from stimuli.motion_clips import ClipManifestError, load_clip_manifest

    try:
        rows = machine_predictions(load_clip_manifest(manifest), models=models or _MODEL_NAMES,
                                   progress=_progress())
    except ClipManifestError as error:
        raise UserError(str(error)) from None
    try:
        write_predictions_csv(out, rows)
    except OSError as error:
        raise UserError(f"{out}: cannot write ({error.strerror or error})") from None
    click.echo(f"wrote {len(rows)} predictions ({', '.join(models or _MODEL_NAMES)}) -> {out}")
