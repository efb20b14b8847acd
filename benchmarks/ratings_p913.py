"""The P.913 clause 12.6 subject model: perceptlab's solver beside Netflix's sureal 0.9.0 on the same ratings.

Two datasets: the public NFLX dataset (79 stimuli x 26 workers, complete; tests/analysis/data/) and a
simulated crowd of 500 stimuli x 200 workers with 24 ratings per stimulus (12 % of the cells). Prints,
for each, the fit time of both solvers (best of --repeats runs, in this one process), their iterations,
and the maximum absolute difference of every estimate (qualities, biases, inconsistencies, their standard
errors and 95 % intervals). sureal's content-oblivious MLE (Newton-type updates of the same likelihood)
is timed beside them on the NFLX dataset (it is slow on the large one: --mle-large to include it), and
perceptlab's content-ambiguity model (analysis/rating_content_model.py) beside sureal's
MaximumLikelihoodEstimationModel on the NFLX dataset's nine contents.

Run: .venv/bin/python benchmarks/ratings_p913.py [--repeats 3] [--mle-large]
(sureal is a test dependency: pip install sureal==0.9.0)
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.rating_content_model import fit_content_model  # noqa: E402
from analysis.rating_models import Z_95, fit_p913, simulate_ratings  # noqa: E402
from analysis.rating_report import content_keys  # noqa: E402
from analysis.ratings import read_ratings  # noqa: E402
from benchmarks._common import ROOT, print_table  # noqa: E402

NFLX = ROOT / "tests" / "analysis" / "data" / "nflx_public_ratings.csv"


def nflx() -> np.ndarray:
    r = read_ratings(NFLX)
    matrix = np.full((len(r.stimulus_ids), len(r.worker_ids)), np.nan)
    matrix[r.stimulus, r.worker] = r.rating
    return matrix


def nflx_contents() -> np.ndarray:
    return np.unique(content_keys(read_ratings(NFLX)), return_inverse=True)[1]


def crowd() -> np.ndarray:
    sim = simulate_ratings(500, 200, 24, seed=0)
    matrix = np.full((500, 200), np.nan)
    matrix[sim.stimulus, sim.worker] = sim.rating
    return matrix[:, ~np.isnan(matrix).all(axis=0)]


def run_sureal(matrix: np.ndarray, model: str, content: np.ndarray | None = None) -> tuple[dict, float]:
    import sureal
    import sureal.subjective_model as models
    from sureal.dataset_reader import RawDatasetReader

    content = np.zeros(len(matrix), dtype=int) if content is None else content
    dataset = SimpleNamespace(dataset_name="bench", yuv_fmt="yuv420p", width=1920, height=1080, ref_score=5.0,
                              ref_videos=[{"content_id": c, "content_name": f"c{c}", "path": f"ref{c}"}
                                          for c in range(int(content.max()) + 1)],
                              dis_videos=[{"asset_id": j, "content_id": int(content[j]), "os": list(row),
                                           "path": f"d{j}"} for j, row in enumerate(matrix)])
    cls = getattr(sureal, model, None) or getattr(models, model)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        started = time.perf_counter()
        result = cls(RawDatasetReader(dataset)).run_modeling()   # includes sureal's own reading of the matrix
        return result, time.perf_counter() - started


def run_ours(matrix: np.ndarray):
    started = time.perf_counter()
    j, i = np.nonzero(~np.isnan(matrix))
    fit = fit_p913(j, i, matrix[j, i], matrix.shape[0], matrix.shape[1])
    return fit, time.perf_counter() - started


def differences(fit, ref) -> dict[str, float]:
    pairs = {"quality": (fit.quality, ref["quality_scores"]),
             "quality_se": (fit.quality_se, ref["quality_scores_std"]),
             "quality_ci95": (Z_95 * fit.quality_se, ref["quality_scores_ci95"][0]),
             "bias": (fit.bias, ref["observer_bias"]), "bias_se": (fit.bias_se, ref["observer_bias_std"]),
             "inconsistency": (fit.inconsistency, ref["observer_inconsistency"]),
             "inconsistency_se": (fit.inconsistency_se, ref["observer_inconsistency_std"]),
             "inconsistency_ci95": (np.concatenate([fit.inconsistency - fit.inconsistency_low,
                                                    fit.inconsistency_high - fit.inconsistency]),
                                    np.concatenate(ref["observer_inconsistency_ci95"]))}
    return {k: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for k, (a, b) in pairs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mle-large", action="store_true", help="time sureal's content-oblivious MLE on the crowd too")
    args = parser.parse_args()
    rows, diffs = [], {}
    for name, matrix, with_mle in (("NFLX public 79 x 26", nflx(), True),
                                   ("crowd 500 x 200, 24/stimulus", crowd(), args.mle_large)):
        ours = [run_ours(matrix) for _ in range(args.repeats)]
        theirs = [run_sureal(matrix, "P910AnnexEModel") for _ in range(args.repeats)]
        fit, ours_s = min(ours, key=lambda r: r[1])
        ref, sureal_s = min(theirs, key=lambda r: r[1])
        rows.append([name, int((~np.isnan(matrix)).sum()), f"{ours_s * 1e3:.1f}", f"{sureal_s * 1e3:.1f}",
                     f"{sureal_s / ours_s:.1f}x", fit.iterations, ref["num_iter"]])
        diffs[name] = differences(fit, ref)
        if with_mle:
            mle, mle_s = run_sureal(matrix, "MaximumLikelihoodEstimationModelContentOblivious")
            rows.append([f"  sureal MLE_CO on {name.split(',')[0]}", "", "", f"{mle_s * 1e3:.1f}", "", "",
                         mle["num_iter"]])
            diffs[f"{name} vs MLE_CO"] = {k: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for k, a, b in (
                ("quality", fit.quality, mle["quality_scores"]), ("bias", fit.bias, mle["observer_bias"]),
                ("inconsistency", fit.inconsistency, mle["observer_inconsistency"]))}
    matrix, content = nflx(), nflx_contents()
    j, i = np.nonzero(~np.isnan(matrix))
    timings = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        fit = fit_content_model(j, i, content, matrix[j, i], *matrix.shape)
        timings.append(time.perf_counter() - started)
    ref, sureal_s = min((run_sureal(matrix, "MaximumLikelihoodEstimationModel", content)
                         for _ in range(args.repeats)), key=lambda r: r[1])
    rows.append(["content model (sureal MLE), NFLX", int(len(j)), f"{min(timings) * 1e3:.1f}", f"{sureal_s * 1e3:.1f}",
                 f"{sureal_s / min(timings):.1f}x", fit.iterations, ref["num_iter"]])
    diffs["content model, NFLX"] = {**differences(fit, ref),
                                    "ambiguity": float(np.max(np.abs(fit.ambiguity - ref["content_ambiguity"])))}
    print("P.913 clause 12.6 subject model, fit time (best of %d), ms" % args.repeats)
    print_table(["dataset", "ratings", "perceptlab ms", "sureal ms", "speed-up", "perceptlab iter", "sureal iter"],
                rows)
    print()
    print("max |perceptlab - sureal| per estimate")
    names = list(diffs["content model, NFLX"])
    print_table(["comparison", *names], [[k, *(f"{v.get(n, float('nan')):.1e}" for n in names)]
                                         for k, v in diffs.items()])


if __name__ == "__main__":
    main()
