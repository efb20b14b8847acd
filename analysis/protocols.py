"""``perceptlab compare-protocols``: a paired-comparison study's scales against a rating study's scores of
the same stimuli (StudyMB 2.0's future work: DCR and paired comparison on the same images).

The join
--------
A paired-comparison item is named by its set and item (``scales.csv``: ``set_id``, ``item_id``; in a
prepared study the scene and the method, and neither may contain ``/``, see ``stimuli/prepare.py``); a
rating stimulus by its ``stimulus_id`` (``scores.csv``). They are joined, in this order of preference:

1. with ``--map FILE`` (``stimulus_id,set_id,item_id``): exactly as the file says;
2. ``stimulus_id == set_id + "/" + item_id`` (the rating study names a scene's method ``scene/method``);
3. when no stimulus matched that way and the item IDs of ``scales.csv`` are unique over its sets,
   ``stimulus_id == item_id``.

``summary.json`` says which rule joined the rows and counts the rows of each file left unmatched.

The numbers (ITU-T P.1401 / VQEG practice, the PC scale in the role of the predictor)
------------------------------------------------------------------------------------
- SROCC and PLCC of the joined pairs, with Fisher-z intervals (``tanh(atanh r -/+ z / sqrt(n - 3))``)
  and percentile intervals of a bootstrap over the joined items (seeded);
- a monotonic mapping of the PC scale to the rating score, the 4-parameter logistic of VQEG
  ``f(x) = (b1 - b2) / (1 + exp(-(x - b3) / |b4|)) + b2`` fitted by least squares
  (``scipy.optimize.curve_fit``); when it fails (fewer than 5 pairs, no convergence, or a fit no better
  than a straight line) a linear fit is used, and ``summary.json`` says which and why;
- the RMSE of the scores around the mapping, plain (``/ n``) and as P.1401 defines it
  (``/ (n - d)``, ``d`` the mapping's parameters).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import ndtri

from . import __version__
from .formats import atomic_write_text, json_text, read_csv_table, table_csv

COMPARISON_COLUMNS = ("stimulus_id", "set_id", "item_id", "pc_scale", "pc_ci_low", "pc_ci_high", "score",
                      "ci_low", "ci_high", "mapped_score", "residual")
JOIN_RULES = ("map", "set_id/item_id", "item_id")
MIN_ITEMS = 4


class ProtocolInputError(ValueError):
    """A scales, scores or map file that cannot be used; one line naming the file (and line)."""

    def __init__(self, path: str, line: int | None, message: str):
        super().__init__(f"{path}, line {line}: {message}" if line is not None else f"{path}: {message}")


def _numeric(name: str, rows: list[list[str]], lines: list[int], column: int, label: str,
             optional: bool = False) -> np.ndarray:
    out = np.full(len(rows), np.nan)
    for k, (row, line) in enumerate(zip(rows, lines)):
        text = row[column].strip()
        if optional and text == "":
            continue
        try:
            out[k] = float(text)
        except ValueError:
            raise ProtocolInputError(name, line, f"{label} {text!r} is not a number") from None
        if not np.isfinite(out[k]) and not optional:
            raise ProtocolInputError(name, line, f"{label} {text!r} is not a finite number")
    return out


def _table(path, required, optional) -> tuple[str, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Text columns and numeric columns of a CSV (numbers: every column but the ID columns)."""
    name, wanted, rows, lines = read_csv_table(path, required, optional, ProtocolInputError, strip=True)
    if not rows:
        raise ProtocolInputError(name, None, "no data rows")
    text = {c: np.array([r[k] for r in rows], dtype=object) for k, c in enumerate(wanted)}
    numbers = {c: _numeric(name, rows, lines, k, c, optional=c not in required) for k, c in enumerate(wanted)
               if c not in ("set_id", "item_id", "stimulus_id", "unit")}
    return name, text, numbers


@dataclass(frozen=True)
class Joined:
    stimulus_id: np.ndarray
    set_id: np.ndarray
    item_id: np.ndarray
    pc: dict[str, np.ndarray]       # scale, ci_low, ci_high
    rating: dict[str, np.ndarray]   # score, ci_low, ci_high
    rule: str
    pc_unmatched: int
    ratings_unmatched: int
    pc_unit: str


def join_studies(scales_path, scores_path, map_path=None) -> Joined:
    """Join scales.csv and scores.csv by the rules of the module docstring.

    Raises
    ------
    ProtocolInputError
        A file is unreadable or malformed, a map names a stimulus twice, or fewer than 4 rows join.
    """
    pc_name, pc_text, pc_num = _table(scales_path, ("set_id", "item_id", "scale"), ("ci_low", "ci_high", "unit"))
    r_name, r_text, r_num = _table(scores_path, ("stimulus_id", "score"), ("ci_low", "ci_high"))
    pc_key = {(s, i): k for k, (s, i) in enumerate(zip(pc_text["set_id"], pc_text["item_id"]))}
    stimulus_ids = r_text["stimulus_id"]
    if map_path is not None:
        m_name, m_text, _ = _table(map_path, ("stimulus_id", "set_id", "item_id"), ())
        seen = {}
        for k, stimulus in enumerate(m_text["stimulus_id"]):
            if stimulus in seen:
                raise ProtocolInputError(m_name, None, f"stimulus_id {stimulus!r} is mapped twice")
            seen[stimulus] = (m_text["set_id"][k], m_text["item_id"][k])
        target = [pc_key.get(seen[s], -1) if s in seen else -1 for s in stimulus_ids]
        rule = "map"
    else:
        target = [pc_key.get(tuple(str(s).split("/", 1)), -1) if "/" in str(s) else -1 for s in stimulus_ids]
        rule = "set_id/item_id"
        items = pc_text["item_id"]
        if all(t < 0 for t in target) and len(set(items)) == len(items):
            by_item = {i: k for k, i in enumerate(items)}
            target = [by_item.get(s, -1) for s in stimulus_ids]
            rule = "item_id"
    target = np.asarray(target, dtype=np.int64)
    hit = np.flatnonzero(target >= 0)
    pc_rows = target[hit]
    if len(np.unique(pc_rows)) != len(pc_rows):
        raise ProtocolInputError(r_name, None, "two stimuli join the same paired-comparison item (check --map)")
    if len(hit) < MIN_ITEMS:
        raise ProtocolInputError(r_name, None, f"only {len(hit)} of its {len(stimulus_ids)} stimuli join an item of "
                                 f"{pc_name} (rule {rule}; at least {MIN_ITEMS} needed): name the pairs with --map "
                                 "stimulus_id,set_id,item_id")
    nan = np.full(len(pc_text["set_id"]), np.nan)
    units = sorted({u for u in pc_text.get("unit", []) if u})
    return Joined(stimulus_id=stimulus_ids[hit].astype(str), set_id=pc_text["set_id"][pc_rows].astype(str),
                  item_id=pc_text["item_id"][pc_rows].astype(str),
                  pc={"scale": pc_num["scale"][pc_rows], "ci_low": pc_num.get("ci_low", nan)[pc_rows],
                      "ci_high": pc_num.get("ci_high", nan)[pc_rows]},
                  rating={"score": r_num["score"][hit], "ci_low": r_num.get("ci_low", np.full(len(stimulus_ids),
                                                                                             np.nan))[hit],
                          "ci_high": r_num.get("ci_high", np.full(len(stimulus_ids), np.nan))[hit]},
                  rule=rule, pc_unmatched=len(pc_text["set_id"]) - len(hit),
                  ratings_unmatched=len(stimulus_ids) - len(hit), pc_unit=", ".join(units) or "scale")


# --------------------------------------------------------------------------- mapping and correlations

def logistic4(x: np.ndarray, b1: float, b2: float, b3: float, b4: float) -> np.ndarray:
    """VQEG's 4-parameter logistic ``(b1 - b2) / (1 + exp(-(x - b3) / |b4|)) + b2``."""
    with np.errstate(over="ignore"):
        return (b1 - b2) / (1.0 + np.exp(-(x - b3) / np.abs(b4))) + b2


@dataclass(frozen=True)
class Mapping:
    kind: str                 # "logistic4" or "linear"
    parameters: dict[str, float]
    reason: str | None        # why the logistic was not used (None when it was)

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        p = self.parameters
        if self.kind == "logistic4":
            return logistic4(x, p["b1"], p["b2"], p["b3"], p["b4"])
        return p["slope"] * x + p["intercept"]

    @property
    def n_parameters(self) -> int:
        return len(self.parameters)


def fit_mapping(x: np.ndarray, y: np.ndarray) -> Mapping:
    """The 4-parameter logistic of ``y`` on ``x``, or a straight line when it fails (module docstring)."""
    from scipy.optimize import curve_fit

    x, y = np.asarray(x, float), np.asarray(y, float)
    slope, intercept = np.polyfit(x, y, 1)
    linear = Mapping("linear", {"slope": float(slope), "intercept": float(intercept)}, None)
    if len(x) < 5:
        return Mapping("linear", linear.parameters, f"{len(x)} pairs: the logistic needs at least 5")
    rising = slope >= 0
    spread = float(np.std(x)) or 1.0
    start = (y.max() if rising else y.min(), y.min() if rising else y.max(), float(np.median(x)), spread / 2)
    try:
        parameters, _ = curve_fit(logistic4, x, y, p0=start, maxfev=20000)
    except (RuntimeError, ValueError) as exc:
        return Mapping("linear", linear.parameters, f"the logistic fit failed: {str(exc).splitlines()[0]}")
    if not np.isfinite(parameters).all():
        return Mapping("linear", linear.parameters, "the logistic fit gave non-finite parameters")
    fitted = Mapping("logistic4", dict(zip(("b1", "b2", "b3", "b4"), map(float, parameters))), None)
    if np.sum((y - fitted(x)) ** 2) > np.sum((y - linear(x)) ** 2) + 1e-12:
        return Mapping("linear", linear.parameters, "the logistic fit was no better than a straight line")
    return fitted


def _rank_rows(a: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata
    return rankdata(a, axis=1)


def _pearson_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))


def fisher_interval(r: float, n: int, confidence: float) -> tuple[float, float]:
    z = np.arctanh(np.clip(r, -1 + 1e-15, 1 - 1e-15))
    half = ndtri(0.5 + confidence / 2) / np.sqrt(n - 3)
    return float(np.tanh(z - half)), float(np.tanh(z + half))


def correlations(x: np.ndarray, y: np.ndarray, n_boot: int = 1000, confidence: float = 0.95,
                 seed: int | np.random.Generator | None = 0) -> dict:
    """SROCC and PLCC with Fisher-z and item-bootstrap percentile intervals.

    Returns
    -------
    dict
        ``{"srocc": {...}, "plcc": {...}}``, each with ``r``, ``fisher_low``, ``fisher_high``,
        ``bootstrap_low``, ``bootstrap_high`` (None without resamples).
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = len(x)
    srocc = float(_pearson_rows(_rank_rows(x[None]), _rank_rows(y[None]))[0])
    plcc = float(_pearson_rows(x[None], y[None])[0])
    out = {}
    boot = {"srocc": None, "plcc": None}
    if n_boot > 0:
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        idx = rng.integers(0, n, size=(n_boot, n))
        boot["plcc"] = _pearson_rows(x[idx], y[idx])
        boot["srocc"] = _pearson_rows(_rank_rows(x[idx]), _rank_rows(y[idx]))
    alpha = (1 - confidence) / 2
    for name, r in (("srocc", srocc), ("plcc", plcc)):
        low, high = fisher_interval(r, n, confidence)
        entry = {"r": r, "fisher_low": low, "fisher_high": high, "bootstrap_low": None, "bootstrap_high": None}
        if boot[name] is not None:
            values = boot[name][np.isfinite(boot[name])]  # a resample of one repeated item has no correlation
            if values.size:
                entry["bootstrap_low"], entry["bootstrap_high"] = map(float, np.quantile(values, [alpha, 1 - alpha]))
        out[name] = entry
    return out


@dataclass
class ProtocolComparison:
    rows: list[dict]
    summary: dict
    joined: Joined
    mapping: Mapping


def compare_protocols(joined: Joined, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0) -> ProtocolComparison:
    """Correlations, the mapping and its RMSE for joined studies (module docstring)."""
    x, y = joined.pc["scale"], joined.rating["score"]
    finite = np.isfinite(x) & np.isfinite(y)
    if finite.sum() < MIN_ITEMS:
        raise ValueError(f"only {int(finite.sum())} joined rows have both a scale and a score "
                         f"(at least {MIN_ITEMS} needed)")
    xs, ys = x[finite], y[finite]
    for name, values in (("paired-comparison scale", xs), ("rating score", ys)):
        if np.ptp(values) == 0:
            raise ValueError(f"every joined {name} is {values[0]:g}: nothing to correlate")
    stats = correlations(xs, ys, n_boot, confidence, seed)
    mapping = fit_mapping(xs, ys)
    mapped = mapping(x)
    residual = y - mapped
    n = int(finite.sum())
    sse = float(np.sum(residual[finite] ** 2))
    rows = [{"stimulus_id": joined.stimulus_id[k], "set_id": joined.set_id[k], "item_id": joined.item_id[k],
             "pc_scale": float(x[k]), "pc_ci_low": float(joined.pc["ci_low"][k]),
             "pc_ci_high": float(joined.pc["ci_high"][k]), "score": float(y[k]),
             "ci_low": float(joined.rating["ci_low"][k]), "ci_high": float(joined.rating["ci_high"][k]),
             "mapped_score": float(mapped[k]), "residual": float(residual[k])} for k in np.argsort(x, kind="stable")]
    d = mapping.n_parameters
    summary = {
        "library": "perceptlab", "version": __version__,
        "n": n, "join": {"rule": joined.rule, "pc_items_unmatched": joined.pc_unmatched,
                         "stimuli_unmatched": joined.ratings_unmatched},
        "pc_unit": joined.pc_unit,
        "srocc": stats["srocc"], "plcc": stats["plcc"],
        "mapping": {"kind": mapping.kind, "parameters": mapping.parameters, "fallback_reason": mapping.reason,
                    "direction": "rating score = f(paired-comparison scale)"},
        "rmse": float(np.sqrt(sse / n)),
        "rmse_p1401": float(np.sqrt(sse / (n - d))) if n > d else None,
        "parameters": {"n_boot": n_boot, "confidence": confidence, "seed": seed, "bootstrap_unit": "item"},
    }
    return ProtocolComparison(rows, summary, joined, mapping)


def write_comparison(result: ProtocolComparison, out: str | os.PathLike, plots: bool = True) -> list[Path]:
    """Write comparison.csv, summary.json and the plot into ``out``; all of them or none."""
    out = Path(out)
    parent = out.parent if out.parent.exists() else Path.cwd()
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    try:
        atomic_write_text(staging / "comparison.csv", table_csv(COMPARISON_COLUMNS, result.rows))
        atomic_write_text(staging / "summary.json", json_text(result.summary))
        if plots:
            from .rating_plots import plot_protocols
            x = np.array([r["pc_scale"] for r in result.rows])
            y = np.array([r["score"] for r in result.rows])
            column = lambda name: np.array([r[name] for r in result.rows], float)  # noqa: E731
            grid = np.linspace(np.nanmin(x), np.nanmax(x), 200)
            s = result.summary
            plot_protocols(x, y, (grid, result.mapping(grid)), staging / "comparison.png", pc_unit=s["pc_unit"],
                           score_name="rating score (scores.csv)",
                           title=f"n {s['n']}; SROCC {s['srocc']['r']:.3f}, PLCC {s['plcc']['r']:.3f}; "
                                 f"{s['mapping']['kind']} mapping, RMSE {s['rmse']:.3f}",
                           pc_interval=(column("pc_ci_low"), column("pc_ci_high")),
                           score_interval=(column("ci_low"), column("ci_high")))
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for path in sorted(staging.iterdir()):
            os.replace(path, out / path.name)
            written.append(out / path.name)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)
