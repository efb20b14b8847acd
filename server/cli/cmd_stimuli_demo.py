"""``perceptlab stimuli build-demo``: a ready-to-run demo stimulus set (:mod:`stimuli.demo`)."""
from __future__ import annotations

from pathlib import Path

import click

from .base import FINITE_FLOAT, UserError
from .cmd_stimuli import stimuli_group

# Spelled out here so that --help does not import numpy/OpenCV; a test keeps
# this list equal to stimuli.demo.METHODS.
_METHOD_NAMES = ("true_flow", "zero_flow", "farneback_coarse", "farneback_default", "farneback_wide",
                 "dis_ultrafast", "dis_ultrafast_refined", "dis_fast", "dis_fast_unrefined", "dis_medium",
                 "dis_medium_unrefined", "true_flow_smoothed", "background_motion")


@stimuli_group.command("build-demo")
@click.argument("out", type=click.Path(file_okay=True, dir_okay=True, path_type=Path))
@click.option("--scenes", default=4, show_default=True, type=click.IntRange(min=1),
              help="Number of synthetic scenes (each: 3 frames with known motion).")
@click.option("--size", default="320x240", show_default=True, metavar="WxH",
              help="Frame size in pixels, width x height (each side 48..4096).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Random seed; the same seed gives byte-identical stimuli.")
@click.option("--methods", default=None, metavar="NAMES",
              help="Comma-separated flow methods, or 'all' [default: all but the last two]. Names: "
                   + ", ".join(_METHOD_NAMES) + ".")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it already exists.")
@click.option("--no-prepare", is_flag=True,
              help="Only write the scene folders; skip amplification, zoom crops and pair design.")
def build_demo_command(out: Path, scenes: int, size: str, seed: int, methods: str | None,
                       overwrite: bool, no_prepare: bool) -> None:
    """Build a demo study folder OUT from images bundled with scikit-image (offline).

    Each scene renders a background under camera motion and a textured object
    moving in front of it; OpenCV flow methods estimate the motion and the
    Middlebury baseline interpolates the middle frame from each. OUT gets
    scenes/<scene>/ (reference.png, <method>.png, source/ with the three frames
    and the true flow), prepared/ (amplified images, zoom crops, pair designs,
    manifest.json) and demo.json. OUT appears only once everything is built.
    """
    from stimuli.demo import build_demo, parse_size, resolve_methods

    try:
        frame_size = parse_size(size)
        method_names = resolve_methods(methods)
    except ValueError as error:
        raise UserError(str(error)) from error
    if out.exists() and not overwrite:
        raise UserError(f"{out}: already exists (use --overwrite to replace it)")
    try:
        result = build_demo(out, n_scenes=scenes, size=frame_size, seed=seed, methods=method_names,
                            overwrite=overwrite, prepare=not no_prepare)
    except (ValueError, FileExistsError) as error:
        raise UserError(str(error)) from error
    click.echo(f"demo: {len(result.scenes)} scenes x {len(result.methods)} methods "
               f"({frame_size[0]}x{frame_size[1]}) in {result.seconds:.1f} s -> {result.path.resolve()}")


@stimuli_group.command("build-demo-video")
@click.argument("out", type=click.Path(file_okay=True, dir_okay=True, path_type=Path))
@click.option("--contents", default=2, show_default=True, type=click.IntRange(1, 6),
              help="Number of contents (each a camera pan across a different scikit-image picture).")
@click.option("--size", default="320x180", show_default=True, metavar="WxH",
              help="Frame size in pixels, width x height (even, 64..1920 each).")
@click.option("--fps", default=25, show_default=True, type=click.IntRange(1, 60), help="Frame rate.")
@click.option("--seconds", default=2.0, show_default=True, type=FINITE_FLOAT,
              help="Length of every clip, 0.2 to 20.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the noisy versions' noise.")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it already exists.")
def build_demo_video_command(out: Path, contents: int, size: str, fps: int, seconds: float, seed: int,
                             overwrite: bool) -> None:
    """Build demo video contents in OUT from pictures bundled with scikit-image (offline).

    Each content is a slow camera pan across one picture, OUT/<content>/reference.y4m (lossless), and
    three processed versions, compressed.mp4 (H.264 at CRF 40), blurred.mp4 and noisy.mp4: the folder
    `launch` and `stimuli prepare` take for a video study.
    """
    from stimuli.video_demo import build_video_demo

    try:
        frame_size = tuple(int(side) for side in size.lower().split("x"))
        if len(frame_size) != 2:
            raise ValueError
    except ValueError:
        raise UserError(f"--size: expected WIDTHxHEIGHT such as 320x180, got {size!r}") from None
    try:
        demo = build_video_demo(out, contents=contents, size=frame_size, fps=fps, seconds=seconds, seed=seed,
                                overwrite=overwrite)
    except (ValueError, FileExistsError) as error:
        raise UserError(str(error)) from error
    click.echo(f"video demo: {len(demo.contents)} contents ({', '.join(demo.contents)}) x 4 clips, "
               f"{demo.width}x{demo.height} at {demo.fps} fps, {demo.frames} frames -> {demo.path.resolve()}")
