"""``perceptlab analyze-motion``: the analysis of motion-matching responses (HuPerFlow statistics).

The numerics live in :mod:`analysis.motion_report`, imported inside the command, so ``perceptlab --help`` stays
fast. :mod:`server.cli` imports this module (it imports every ``server/paradigms/<package>/cli.py``) and adds its
:data:`COMMANDS` to the ``perceptlab`` group; the command is a plain click command built with
:mod:`server.command_support`, so the package never imports ``server/cli/``. ``perceptlab results`` of a motion
study runs :func:`run_motion_analysis` (results.py).
"""
from __future__ import annotations

from pathlib import Path

import click

from ...command_support import UserError


def _model_spec(value: str) -> tuple[str | None, Path]:
    """``NAME=preds.csv`` or just ``preds.csv`` (name from the file's model column or stem)."""
    name, sep, path = value.partition("=")
    if not sep:
        return None, Path(value)
    if not name.strip() or not path.strip():
        raise click.BadParameter(f"{value!r}: expected NAME=preds.csv")
    return name.strip(), Path(path)


@click.command("analyze-motion")
@click.argument("motion_csv", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for probes.csv, observers.csv, tables/, epe_by_property.csv, summary.json and plots/.")
@click.option("--clips", type=click.Path(path_type=Path),
              help="Clip manifest (manifest.json or its folder): image gradients and vector fields over the frames.")
@click.option("--model", "models", multiple=True, metavar="NAME=PREDS.CSV",
              help="Model predictions (clip_id,probe_id,pred_u,pred_v[,model]); repeatable.")
@click.option("--machine-observers", is_flag=True,
              help="Run OpenCV Farnebäck and DIS on the clips and add them as models (needs --clips).")
@click.option("--keep-dropped", is_flag=True, help="Keep trials with frame drops (excluded by default).")
@click.option("--frames", "frames_csv", type=click.Path(dir_okay=False, path_type=Path),
              help="frames.csv: frame-drop rate and onset errors over every logged frame.")
@click.option("--bins", type=click.IntRange(min=1), default=6, show_default=True,
              help="Bins for EPE against GT speed and image gradient.")
@click.option("--no-plots", is_flag=True, help="Skip the plots (PNG at 200 dpi, each with a vector PDF beside it).")
def analyze_motion_command(motion_csv, out, clips, models, machine_observers, keep_dropped, frames_csv, bins,
                           no_plots):
    """Analyse motion-matching responses of MOTION_CSV (HuPerFlow statistics: EPE, r, partial r, RCI)."""
    run_motion_analysis(motion_csv, out, clips=clips, models=[_model_spec(m) for m in models],
                        machine_observers=machine_observers, keep_dropped=keep_dropped, frames_csv=frames_csv,
                        bins=bins, plots=not no_plots)


def run_motion_analysis(motion_csv: Path, out: Path, *, clips=None, models=(), machine_observers: bool = False,
                        keep_dropped: bool = False, frames_csv: Path | None = None, bins: int = 6,
                        plots: bool = True) -> None:
    """``analyze-motion``'s work and its printed lines; ``clips`` a manifest path or a built ClipManifest
    (``perceptlab results`` passes the study's stored clips)."""
    from analysis.motion_report import MotionAnalysisError, MotionOptions, run_analyze_motion, summary_lines

    options = MotionOptions(keep_dropped=keep_dropped, bins=bins, machine_observers=machine_observers)
    try:
        result, written = run_analyze_motion(motion_csv, out, clips=clips, models=list(models),
                                             frames_csv=frames_csv, options=options, plots=plots, progress=False)
    except MotionAnalysisError as exc:
        raise UserError(str(exc)) from None
    for line in summary_lines(result):
        click.echo(line)
    click.echo(f"wrote {len(written)} entries to {out}/: " + ", ".join(p.name for p in written))


#: What :mod:`server.cli` adds to the ``perceptlab`` group.
COMMANDS = (analyze_motion_command,)
