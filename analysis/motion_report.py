"""The pipeline behind ``perceptlab analyze-motion``: read inputs, compute, write outputs.

:func:`analyze_motion` computes everything in memory from a
:class:`~analysis.motion.MotionTrials`; :func:`write_motion_results` writes
the output folder (probes.csv, observer_probes.csv, model_probes.csv, observers.csv, tables/,
epe_by_property.csv, summary.json, plots/) through a staging folder that is
moved into place only once complete; :func:`run_analyze_motion` does both from
file paths and is what the CLI calls. Only this module touches ``stimuli``
(clip manifests, image gradients, machine observers); :mod:`analysis.motion`
stays pure.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import __version__
from .collusion import HUMAN_MOTION_REL_ERROR, superhuman_motion
from .formats import atomic_write_text, json_text, table_csv
from .motion import (ALL_DATASETS, GROUND_TRUTH, TABLE_METRICS, EpeBins, MotionFormatError, MotionTrials, Predictions,
                     ProbeMeans, agreement_stats, direction_deg, direction_r, epe, epe_by_property,
                     inter_observer_correlation, model_table, pooled_uv_r, rci, read_frames_csv, read_motion_csv,
                     read_predictions, speed, speed_r, timing_summary, undefined_reason)

UNSPECIFIED_DATASET = "unspecified"
PROBES_COLUMNS = ("clip_id", "probe_id", "dataset", "x", "y", "frame", "gt_u", "gt_v", "gt_speed", "gt_dir_deg",
                  "mean_u", "mean_v", "sd_u", "sd_v", "mean_speed", "mean_dir_deg", "epe", "n", "n_observers",
                  "image_gradient")
OBSERVER_PROBES_COLUMNS = ("worker_id", "clip_id", "probe_id", "dataset", "gt_u", "gt_v", "mean_u", "mean_v", "sd_u",
                           "sd_v", "n", "epe")
MODEL_PROBES_COLUMNS = ("clip_id", "probe_id", "dataset", "model", "pred_u", "pred_v", "epe_human", "epe_gt", "rci")
OBSERVERS_COLUMNS = ("worker_id", "n_trials", "n_probes", "r_uv_gt", "r_dir_circ_gt", "r_spd_gt", "mean_epe",
                     "excluded_dropped", "median_rel_error", "flags")
FLAG_SUPERHUMAN = "superhuman_precision"  # observers.csv flags: matches finer than a person can (analysis.collusion)
EPE_BINS_COLUMNS = ("property", "source", "bin_low", "bin_high", "mean_value", "n", "mean_epe", "se")
OVERALL_TABLE_COLUMNS = ("model", "n_probes") + tuple(TABLE_METRICS)
DEFINITIONS = {
    "human": "per-probe mean response over all repetitions and observers of the kept trials",
    "r_uv": "Pearson r with u and v of all probes pooled into one sample of length 2n",
    "r_dir_circ": "circular correlation of directions (Jammalamadaka-SenGupta), not Pearson on angles",
    "rho": "partial correlation model vs human controlling for GT (HuPerFlow eq. 2)",
    "rci": "mean over probes of A*B*C (eqs. S1-S3); a probe with R = G or M = G scores 0; NaN for the GT row",
    "epe": "Euclidean distance of vectors (eq. 1), averaged over probes",
    "inter_observer": "pooled-uv r of per-probe means for every observer pair with >= min_common_probes common probes",
    "timing": "all non-practice trials (before excluding dropped ones); without frames.csv onset errors are pooled "
              "with equal weight per trial, with frames.csv over every logged onset",
}


class MotionAnalysisError(ValueError):
    """The inputs cannot be analysed (one line, naming the file where there is one)."""


@dataclass(frozen=True)
class MotionOptions:
    """What ``perceptlab analyze-motion`` can be told."""

    keep_dropped: bool = False        # keep trials with frame_drops > 0
    bins: int = 6                     # equal-width bins for EPE vs flow properties
    gradient_radius: int = 40         # ± px around the probe for the Sobel gradient (§3.2.3)
    min_common_probes: int = 3        # inter-observer pairs need this many common probes
    machine_observers: bool = False   # run Farnebäck and DIS on the clips


@dataclass
class MotionResult:
    probes: list[dict]
    model_probes: list[dict]
    observers: list[dict]
    tables: dict                      # model -> dataset -> metric
    epe_bins: list[EpeBins]           # with .source set via epe_sources
    epe_sources: list[str]
    summary: dict
    plot_data: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- inputs

def load_inputs(motion_csv, *, clips=None, models: list[tuple[str | None, str]] = (), frames_csv=None,
                machine_observers: bool = False, gradient_radius: int = 40, progress: bool = False) -> dict:
    """Read every input file; :class:`MotionAnalysisError` with one line on any problem.

    ``clips`` is a clip manifest's path (or folder), or an already built
    :class:`~stimuli.motion_clips.ClipManifest` (``perceptlab results`` makes one from
    the study's stored clips).

    Returns a dict with ``trials``, ``manifest`` (or None), ``predictions``
    (or None), ``gradients`` (or None) and ``frames`` (or None).
    """
    if machine_observers and clips is None:
        raise MotionAnalysisError("--machine-observers needs --clips (the frames to run the models on)")
    try:
        trials = read_motion_csv(motion_csv)
        parts = [read_predictions(path, model=name) for name, path in models]
        frames = read_frames_csv(frames_csv) if frames_csv is not None else None
    except MotionFormatError as exc:
        raise MotionAnalysisError(str(exc)) from None
    manifest = gradients = None
    if clips is not None:
        from stimuli.machine_flow import machine_predictions, probe_image_gradient
        from stimuli.motion_clips import ClipManifest, ClipManifestError, load_clip_manifest
        try:
            manifest = clips if isinstance(clips, ClipManifest) else load_clip_manifest(clips)
            gradients = probe_image_gradient(manifest, radius=gradient_radius)
        except ClipManifestError as exc:
            raise MotionAnalysisError(str(exc)) from None
        if machine_observers:
            parts.append(Predictions.from_rows(machine_predictions(manifest, progress=progress)))
    predictions = Predictions.concat(parts) if parts else None
    return {"trials": trials, "manifest": manifest, "predictions": predictions, "gradients": gradients,
            "frames": frames}


def _clip_index(manifest) -> dict:
    """(clip_id, probe_id) -> (clip, probe) of a loaded manifest."""
    return {(c.clip_id, p.probe_id): (c, p) for c in manifest.clips for p in c.probes} if manifest else {}


# --------------------------------------------------------------------------- computing

def select_trials(trials: MotionTrials, keep_dropped: bool) -> tuple[MotionTrials, dict]:
    """Drop practice rows and (unless ``keep_dropped``) trials with frame drops; the counts."""
    practice = trials.practice
    dropped = (trials.frame_drops > 0) & ~practice
    keep = ~practice & (keep_dropped | ~dropped)
    counts = {"rows": len(trials), "practice_excluded": int(practice.sum()),
              "dropped_trials": int(dropped.sum()), "dropped_excluded": 0 if keep_dropped else int(dropped.sum()),
              "trials_used": int(keep.sum())}
    if not keep.any():
        reason = "every trial is a practice trial or has frame drops (try --keep-dropped)"
        raise MotionAnalysisError(f"{trials.path}: no trials left to analyse: {reason}")
    return trials.subset(keep), counts


def _fill_datasets(trials: MotionTrials, index: dict) -> MotionTrials:
    """Datasets from the manifest where motion.csv has none; else :data:`UNSPECIFIED_DATASET`."""
    data = np.asarray(trials.dataset, dtype=object).copy()
    for k in np.flatnonzero(data == ""):
        found = index.get((trials.clip_id[k], trials.probe_id[k]))
        data[k] = found[0].dataset if found else UNSPECIFIED_DATASET
    return trials.with_dataset(data)


def _positions(trials: MotionTrials, means: ProbeMeans, index: dict) -> np.ndarray:
    """(n, 3) probe x, y, frame: from the manifest, else motion.csv's probe_x/probe_y/probe_frame, else NaN."""
    pos = np.full((len(means), 3), np.nan)
    first = {}
    for k, key in enumerate(zip(trials.clip_id, trials.probe_id)):
        first.setdefault(key, k)
    for i, key in enumerate(means.keys):
        if key in index:
            p = index[key][1]
            pos[i] = p.x, p.y, p.frame
        else:
            k = first[key]
            pos[i] = [trials.numbers.get(c, np.full(len(trials), np.nan))[k]
                      for c in ("probe_x", "probe_y", "probe_frame")]
    return pos


def _probe_rows(means: ProbeMeans, pos: np.ndarray, gradient: np.ndarray) -> list[dict]:
    gt_speed, mean_speed = speed(means.gt_u, means.gt_v), speed(means.mean_u, means.mean_v)
    gt_dir, mean_dir = direction_deg(means.gt_u, means.gt_v), direction_deg(means.mean_u, means.mean_v)
    e = means.epe
    return [{"clip_id": means.clip_id[i], "probe_id": means.probe_id[i], "dataset": means.dataset[i],
             "x": pos[i, 0], "y": pos[i, 1], "frame": "" if np.isnan(pos[i, 2]) else int(pos[i, 2]),
             "gt_u": means.gt_u[i], "gt_v": means.gt_v[i], "gt_speed": gt_speed[i], "gt_dir_deg": gt_dir[i],
             "mean_u": means.mean_u[i], "mean_v": means.mean_v[i], "sd_u": means.sd_u[i], "sd_v": means.sd_v[i],
             "mean_speed": mean_speed[i], "mean_dir_deg": mean_dir[i], "epe": e[i], "n": int(means.n[i]),
             "n_observers": int(means.n_observers[i]), "image_gradient": gradient[i]} for i in range(len(means))]


def _observer_rows(trials: MotionTrials, all_trials: MotionTrials) -> list[dict]:
    """Per observer: trials, probes, r (uv pooled / dir / spd) of trial responses vs GT, mean trial EPE, the
    median relative end-point error and ``flags`` (:data:`FLAG_SUPERHUMAN`: more precise than a person)."""
    rows = []
    dropped = all_trials.frame_drops > 0
    precision = superhuman_motion(trials.worker_id, trials.gt_u, trials.gt_v, trials.resp_u, trials.resp_v).lookup()
    for w in sorted(set(all_trials.worker_id[~all_trials.practice].tolist())):
        m = trials.worker_id == w
        rel_error, superhuman = precision.get(str(w), (np.nan, False))
        if not m.any():  # every trial of this observer was excluded: still list them
            rows.append({"worker_id": w, "n_trials": 0, "n_probes": 0, "r_uv_gt": np.nan, "r_dir_circ_gt": np.nan,
                         "r_spd_gt": np.nan, "mean_epe": np.nan,
                         "excluded_dropped": int(((all_trials.worker_id == w) & dropped & ~all_trials.practice).sum()),
                         "median_rel_error": np.nan, "flags": ""})
            continue
        gu, gv, ru, rv = trials.gt_u[m], trials.gt_v[m], trials.resp_u[m], trials.resp_v[m]
        probes = set(zip(trials.clip_id[m].tolist(), trials.probe_id[m].tolist()))
        rows.append({"worker_id": w, "n_trials": int(m.sum()), "n_probes": len(probes),
                     "r_uv_gt": pooled_uv_r(ru, rv, gu, gv), "r_dir_circ_gt": direction_r(ru, rv, gu, gv),
                     "r_spd_gt": speed_r(ru, rv, gu, gv), "mean_epe": float(epe(ru, rv, gu, gv).mean()),
                     "excluded_dropped": int(((all_trials.worker_id == w) & dropped & ~all_trials.practice).sum()
                                             - (trials.frame_drops[m] > 0).sum()),
                     "median_rel_error": rel_error, "flags": FLAG_SUPERHUMAN if superhuman else ""})
    return rows


def _human_vs_gt(means: ProbeMeans) -> dict:
    """r (uv, dir, spd), mean EPE and the Fig. S2 numbers of the probe means, overall and per dataset."""
    def block(sel):
        h, g = means.mean[sel], means.gt[sel]
        out = {"n_probes": int(sel.sum()), "r_uv": pooled_uv_r(*h.T, *g.T), "r_dir_circ": direction_r(*h.T, *g.T),
               "r_spd": speed_r(*h.T, *g.T), "mean_epe": float(epe(*h.T, *g.T).mean()),
               "fig_s2": agreement_stats(g, h)}
        # why a correlation is NaN (null in summary.json), so that no reader guesses
        out["undefined"] = {stat: undefined_reason(h, g, kind, ("human", "ground-truth"))
                            for stat, kind in (("r_uv", "uv"), ("r_dir_circ", "dir"), ("r_spd", "spd"))
                            if not np.isfinite(out[stat])}
        return out
    out = {ALL_DATASETS: block(np.ones(len(means), bool))}
    for d in dict.fromkeys(means.dataset.tolist()):
        out[d] = block(means.dataset == d)
    return out


def _epe_bins(means: ProbeMeans, gradient: np.ndarray, models: dict, bins: int) -> tuple[list[EpeBins], list[str]]:
    """EPE vs GT speed (and image gradient when known) for the human means and every model."""
    gt_speed = speed(means.gt_u, means.gt_v)
    properties = [("gt_speed", gt_speed)]
    if np.isfinite(gradient).any():
        properties.append(("image_gradient", gradient))
    sources = {"human": means.epe} | {name: epe(*pred.T, means.gt_u, means.gt_v) for name, pred in models.items()}
    out, labels = [], []
    for prop, values in properties:
        ok = np.isfinite(values)
        edges = (np.linspace(values[ok].min(), values[ok].max() if np.ptp(values[ok]) > 0 else values[ok].min() + 1,
                             bins + 1) if ok.any() else bins)
        for label, err in sources.items():
            out.append(epe_by_property(err, values, bins=edges, name=prop))
            labels.append(label)
    return out, labels


def analyze_motion(trials: MotionTrials, options: MotionOptions = MotionOptions(), *,
                   predictions: Predictions | None = None, manifest=None,
                   gradients: dict[tuple[str, str], float] | None = None, frames: dict | None = None) -> MotionResult:
    """Every statistic of the motion analysis, in memory.

    Parameters
    ----------
    trials : MotionTrials
        All rows of motion.csv (practice and dropped trials are removed here).
    options : MotionOptions
        Exclusion and binning settings.
    predictions : Predictions, optional
        Model predictions (several models allowed); probes they miss are NaN.
    manifest : stimuli.motion_clips.ClipManifest, optional
        Gives datasets, probe positions and frames for plots.
    gradients : dict, optional
        (clip_id, probe_id) -> mean Sobel gradient magnitude near the probe.
    frames : dict, optional
        frames.csv timing columns (:func:`analysis.motion.read_frames_csv`).
    """
    started = time.perf_counter()
    index = _clip_index(manifest)
    used, counts = select_trials(_fill_datasets(trials, index), options.keep_dropped)
    means, per_obs = used.probe_means(), used.probe_means(by_observer=True)
    keys = means.keys
    gradient = np.array([gradients.get(k, np.nan) for k in keys]) if gradients else np.full(len(means), np.nan)
    models = predictions.aligned(keys) if predictions is not None else {}
    tables = model_table(means.mean, means.gt, means.dataset, models)
    inter = inter_observer_correlation(per_obs, options.min_common_probes)
    epe_bins, epe_sources = _epe_bins(means, gradient, models, options.bins)
    non_practice = trials.subset(~trials.practice)
    timing = timing_summary(non_practice.frame_drops, non_practice.numbers.get("onset_err_mean_ms"),
                            non_practice.numbers.get("onset_err_sd_ms"), frames=frames)
    model_rows = _model_probe_rows(means, models)
    positions = _positions(used, means, index)
    summary = {
        "format": "perceptlab-motion-analysis/1", "library_version": __version__, "numpy_version": np.__version__,
        "input": trials.path, "parameters": asdict(options) | {"models": list(models)},
        "counts": counts | {"observers": int(np.unique(used.worker_id.astype(str)).size), "probes": len(means),
                            "clips": len(set(means.clip_id.tolist())),
                            "datasets": list(dict.fromkeys(means.dataset.tolist())),
                            "probes_missing_from_manifest": sum(k not in index for k in keys) if manifest else None,
                            "probes_gt_differs_from_manifest": _gt_mismatches(means, index) if manifest else None},
        "human_vs_gt": _human_vs_gt(means), "inter_observer": inter.summary(), "timing": timing,
        "models": {name: tables[name][ALL_DATASETS] for name in tables if name != GROUND_TRUTH},
        "definitions": DEFINITIONS,
        "seconds": round(time.perf_counter() - started, 3)}
    observers = _observer_rows(used, trials)
    summary["counts"]["superhuman_observers"] = sum(r["flags"] == FLAG_SUPERHUMAN for r in observers)
    return MotionResult(_probe_rows(means, positions, gradient), model_rows, observers, tables,
                        epe_bins, epe_sources, summary,
                        {"means": means, "per_observer": per_obs, "models": models, "index": index,
                         "manifest": manifest, "positions": positions})


def _gt_mismatches(means: ProbeMeans, index: dict, tol: float = 0.01) -> int:
    """Probes whose motion.csv GT differs from the manifest's by more than ``tol`` px/frame."""
    found = [(i, index[k][1]) for i, k in enumerate(means.keys) if k in index]
    return sum(math.hypot(means.gt_u[i] - p.gt_u, means.gt_v[i] - p.gt_v) > tol for i, p in found)


def _observer_probe_rows(per_obs: ProbeMeans) -> list[dict]:
    """One row per observer and probe: the points of Fig. S2."""
    e = per_obs.epe
    return [{"worker_id": per_obs.worker_id[i], "clip_id": per_obs.clip_id[i], "probe_id": per_obs.probe_id[i],
             "dataset": per_obs.dataset[i], "gt_u": per_obs.gt_u[i], "gt_v": per_obs.gt_v[i],
             "mean_u": per_obs.mean_u[i], "mean_v": per_obs.mean_v[i], "sd_u": per_obs.sd_u[i],
             "sd_v": per_obs.sd_v[i], "n": int(per_obs.n[i]), "epe": e[i]} for i in range(len(per_obs))]


def _model_probe_rows(means: ProbeMeans, models: dict) -> list[dict]:
    rows = []
    for name, pred in models.items():
        per_probe, _ = rci(means.mean, pred, means.gt)
        e_h = epe(*pred.T, means.mean_u, means.mean_v)
        e_g = epe(*pred.T, means.gt_u, means.gt_v)
        rows += [{"clip_id": means.clip_id[i], "probe_id": means.probe_id[i], "dataset": means.dataset[i],
                  "model": name, "pred_u": pred[i, 0], "pred_v": pred[i, 1], "epe_human": e_h[i], "epe_gt": e_g[i],
                  "rci": per_probe[i]} for i in range(len(means)) if np.isfinite(pred[i]).all()]
    return rows


# --------------------------------------------------------------------------- writing

def table_name(metric: str) -> str:
    """File name in tables/ of one metric's model x dataset table, e.g. ``rho_uv_by_dataset.csv``.

    Named after what they hold (until 0.1 after HuPerFlow's supplement: ``table_S1_rho_uv.csv``;
    :data:`analysis.motion.TABLE_METRICS` keeps that table number for each metric).
    """
    return f"{metric}_by_dataset.csv"


def table_records(tables: dict, metric: str) -> tuple[tuple[str, ...], list[dict]]:
    """One metric's table: a row per model, a column per dataset plus "All datasets"."""
    datasets = list(next(iter(tables.values())))
    rows = [{"model": name} | {d: tables[name][d][metric] for d in datasets} for name in tables]
    return ("model", *datasets), rows


def _nan_to_none(obj):
    """JSON has no NaN: write null instead."""
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nan_to_none(v) for v in obj]
    if isinstance(obj, (float, np.floating)) and not np.isfinite(obj):
        return None
    return obj


def _write_tables(result: MotionResult, folder: Path) -> list[Path]:
    folder.mkdir()
    written = []
    for metric in TABLE_METRICS:
        columns, rows = table_records(result.tables, metric)
        path = folder / table_name(metric)
        atomic_write_text(path, table_csv(columns, rows))
        written.append(path)
    overall = [{"model": name, "n_probes": by_dataset[ALL_DATASETS]["n_probes"]}
               | {m: by_dataset[ALL_DATASETS][m] for m in TABLE_METRICS} for name, by_dataset in result.tables.items()]
    path = folder / "table_overall.csv"
    atomic_write_text(path, table_csv(OVERALL_TABLE_COLUMNS, overall))
    return written + [path]


def _write_plots(result: MotionResult, folder: Path) -> list[Path]:
    from . import motion_plots

    folder.mkdir()
    data = result.plot_data
    means, per_obs, pos = data["means"], data["per_observer"], data["positions"]
    written = []
    for clip in dict.fromkeys(means.clip_id.tolist()):
        sel = (means.clip_id == clip) & np.isfinite(pos[:, :2]).all(1)
        if not sel.any():
            continue  # no probe positions: neither a manifest nor probe_x/probe_y in motion.csv
        image, size = _probe_frame(data["manifest"], clip, pos[sel, 2])
        path = folder / f"field_{_safe(clip)}.png"
        motion_plots.plot_vector_field(path, pos[sel, 0], pos[sel, 1], means.gt[sel], means.mean[sel], image=image,
                                       size=size, title=f"{clip}: human (green) vs ground truth (red)",
                                       names=means.probe_id[sel])
        written.append(path)
    panels = [{"title": d, "gt": per_obs.gt[per_obs.dataset == d], "human": per_obs.mean[per_obs.dataset == d]}
              for d in dict.fromkeys(per_obs.dataset.tolist())]
    if len(panels) > 1:
        panels.append({"title": ALL_DATASETS, "gt": per_obs.gt, "human": per_obs.mean})
    path = folder / "scatter_uv.png"
    motion_plots.plot_uv_scatter(path, panels)
    written.append(path)
    gradient_label = "image gradient (mean Sobel magnitude, ±40 px)"
    for prop, xlabel in (("gt_speed", "GT speed (px/frame)"), ("image_gradient", gradient_label)):
        series = {src: b for b, src in zip(result.epe_bins, result.epe_sources) if b.property == prop}
        if series:
            path = folder / f"epe_vs_{prop}.png"
            motion_plots.plot_epe_by_property(path, series, xlabel)
            written.append(path)
    return written


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _probe_frame(manifest, clip_id: str, frames: np.ndarray):
    """The image of the clip's (most common) probe frame, or a blank canvas of the clip's size."""
    if manifest is None:
        return None, None
    clip = next((c for c in manifest.clips if c.clip_id == clip_id), None)
    if clip is None:
        return None, None
    valid = frames[np.isfinite(frames)].astype(int)
    frame = int(np.bincount(valid).argmax()) if valid.size else 0
    from stimuli.io import ImageReadError, read_image
    try:
        image = read_image(manifest.root / clip.frames[frame])
        return (image / 65535.0 if image.dtype == np.uint16 else image), None
    except (ImageReadError, OSError, ValueError, IndexError):
        return None, (clip.width, clip.height)


def write_motion_results(result: MotionResult, out: str | os.PathLike, plots: bool = True) -> list[Path]:
    """Write every output file into ``out`` (created; existing files of the same names are replaced).

    Outputs are built in a staging folder beside ``out`` and moved in only
    when all of them exist, so a failure leaves no half-written analysis.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".motion-", dir=out))
    try:
        files = {"probes.csv": table_csv(PROBES_COLUMNS, result.probes),
                 "observer_probes.csv": table_csv(OBSERVER_PROBES_COLUMNS, _observer_probe_rows(
                     result.plot_data["per_observer"])),
                 "model_probes.csv": table_csv(MODEL_PROBES_COLUMNS, result.model_probes),
                 "observers.csv": table_csv(OBSERVERS_COLUMNS, result.observers),
                 "epe_by_property.csv": table_csv(EPE_BINS_COLUMNS, [
                     r | {"source": src} for b, src in zip(result.epe_bins, result.epe_sources) for r in b.rows()]),
                 "summary.json": json_text(_nan_to_none(result.summary))}
        for name, text in files.items():
            atomic_write_text(stage / name, text)
        _write_tables(result, stage / "tables")
        if plots:
            _write_plots(result, stage / "plots")
        written = []
        for item in sorted(stage.iterdir()):
            target = out / item.name
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(item, target)
            written.append(target)
        return written
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def run_analyze_motion(motion_csv, out, *, clips=None, models: list[tuple[str | None, str]] = (),
                       frames_csv=None, options: MotionOptions = MotionOptions(), plots: bool = True,
                       progress: bool = False) -> tuple[MotionResult, list[Path]]:
    """Read the inputs, analyse, write ``out``: the whole ``perceptlab analyze-motion``."""
    inputs = load_inputs(motion_csv, clips=clips, models=list(models), frames_csv=frames_csv,
                         machine_observers=options.machine_observers, gradient_radius=options.gradient_radius,
                         progress=progress)
    result = analyze_motion(inputs["trials"], options, predictions=inputs["predictions"],
                            manifest=inputs["manifest"], gradients=inputs["gradients"], frames=inputs["frames"])
    return result, write_motion_results(result, out, plots=plots)


def _stat(block: dict, name: str) -> str:
    """A correlation of a human_vs_gt block to 3 decimals, or "undefined (why)"."""
    value = block[name]
    if value is not None and np.isfinite(value):
        return f"{value:.3f}"
    return f"undefined ({block.get('undefined', {}).get(name, 'no reason recorded')})"


def summary_lines(result: MotionResult) -> list[str]:
    """A short readable summary for the terminal."""
    s = result.summary
    c, h, io, t = s["counts"], s["human_vs_gt"][ALL_DATASETS], s["inter_observer"], s["timing"]
    lines = [(f"{c['trials_used']} trials ({c['practice_excluded']} practice and {c['dropped_excluded']} with frame "
              f"drops excluded), {c['observers']} observers, {c['probes']} probes in {c['clips']} clips, "
              f"datasets: {', '.join(c['datasets'])}"),
             (f"human vs GT (probe means): r_uv {_stat(h, 'r_uv')}, r_dir(circ) {_stat(h, 'r_dir_circ')}, "
              f"r_spd {_stat(h, 'r_spd')}, mean EPE {h['mean_epe']:.2f} px/frame"),
             (f"inter-observer r_uv: mean {io['mean']:.3f} (SD {io['sd']:.3f}, {io['min']:.3f}..{io['max']:.3f}, "
              f"{io['n_pairs']} pairs)"),
             f"timing: {t['trials_with_drops']}/{t['trials']} trials with frame drops"
             + (f", drop rate {100 * t['frame_drop_rate']:.3f}%" if "frame_drop_rate" in t else "")
             + f", onset error {t['onset_err_mean_ms']:.3f} ± {t['onset_err_sd_ms']:.3f} ms"]
    if c.get("superhuman_observers"):
        lines.append(f"{c['superhuman_observers']} observer(s) match the motion more precisely than a person can "
                     f"(median relative error below {HUMAN_MOTION_REL_ERROR:.0%}; observers.csv, column flags)")
    for name, m in s["models"].items():
        lines.append(f"model {name}: rho_uv {m['rho_uv']:.3f}, RCI {m['rci']:.3f}, r_uv vs human "
                     f"{m['r_human_uv']:.3f}, EPE vs human {m['epe_human']:.2f}, r_uv vs GT {m['r_gt_uv']:.3f}, "
                     f"EPE vs GT {m['epe_gt']:.2f} ({m['n_probes']} probes)")
    return lines
