"""Active vs random pair sampling on simulated Thurstone studies, and the selection time per batch.

Each study has ``n`` items with true scores drawn from N(0, spread^2) z units (perceptlab's
simulated crowds have an SD of 1) and honest Thurstone Case V observers. A strategy picks pairs
in batches of ``n - 1`` among all pairs (ASAP's spanning-tree batch size); at every budget, in
standard trials (``n (n - 1) / 2`` comparisons each), the votes so far are scaled by perceptlab's
MLE and compared with the truth (SROCC, RMSE in z units). The same replay engine as
``perceptlab replay-active`` (``analysis/active_replay.py``), with simulated outcomes.

ASAP (gfxdisp/asap) is run beside them if an ``asap_cpu`` module with its ``ASAP`` class can be
imported; it is not on the package registry, so usually its published figures are printed instead.

The 20-item table also shows the best *oracle* band design: every item compared equally often with
its K nearest items in the true order (K = 1..8, best K per budget), which knows the answer and
bounds what any design of that kind can reach.

Run: .venv/bin/python benchmarks/active_sampling.py [--repeats-small 100] [--repeats-large 10] [--timing-only]
(about 2 minutes on 2 cores)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.special import ndtr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.active import plan_batch  # noqa: E402
from analysis.active_replay import ThurstoneOutcomes, replay_study, standard_trial  # noqa: E402
from analysis.correlation import srocc  # noqa: E402
from analysis.threads import limited_blas_threads  # noqa: E402
from analysis.thurstone import aggregate_pairs, thurstone_mle  # noqa: E402
from benchmarks._common import print_table  # noqa: E402

ASAP_PUBLISHED = {  # Mikhailiuk et al., ICPR 2020: 20 conditions, simulated; SROCC
    "budgets": [0.5, 1, 2], "asap": [0.887, 0.916, 0.944], "random": [0.774, 0.906, 0.959],
    "seconds_per_batch": 6.6,
}


def all_pairs(n: int) -> np.ndarray:
    i, j = np.triu_indices(n, 1)
    return np.column_stack([i, j])


def simulate(n: int, budgets: list[float], repeats: int, spread: float, seed: int) -> dict:
    """Mean and standard error of SROCC and RMSE per strategy and budget, and active's batch times."""
    pairs = all_pairs(n)
    out, seconds = {}, []
    for t, strategy in enumerate(("random", "active")):
        rows = []
        for r in range(repeats):
            truth = np.random.default_rng([seed, n, r]).normal(0.0, spread, n)
            rng = np.random.default_rng([seed, n, r, t + 1])
            study = replay_study(n, ThurstoneOutcomes(pairs, truth), truth, budgets, strategy, rng)
            rows.append(np.stack([study.srocc, study.rmse]))
            seconds += study.selection_seconds
        rows = np.array(rows)
        out[strategy] = (rows.mean(axis=0), rows.std(axis=0, ddof=1) / np.sqrt(repeats))
    out["ms_per_batch"] = 1000 * float(np.mean(seconds))
    return out


def oracle_band(n: int, budgets: list[float], repeats: int, spread: float, seed: int) -> list[float]:
    """Best mean SROCC over K of a band design in the true order (K nearest neighbours, equal shares)."""
    best = np.zeros(len(budgets))
    for k in range(1, 9):
        scores = []
        for r in range(repeats):
            rng = np.random.default_rng([seed, n, r, 99])
            truth = np.random.default_rng([seed, n, r]).normal(0.0, spread, n)
            order = np.argsort(truth)
            band = np.array([(order[a], order[a + d]) for d in range(1, k + 1) for a in range(n - d)])
            row = []
            for b in budgets:
                m = round(b * standard_trial(n))
                chosen = band[np.arange(m) % len(band)]
                first_won = rng.random(m) < ndtr(truth[chosen[:, 0]] - truth[chosen[:, 1]])
                w, l = np.where(first_won, chosen[:, 0], chosen[:, 1]), np.where(first_won, chosen[:, 1], chosen[:, 0])
                p, wins = aggregate_pairs(w, l, np.ones(m, dtype=bool))
                row.append(srocc(thurstone_mle(p, wins, n), truth))
            scores.append(row)
        best = np.maximum(best, np.mean(scores, axis=0))
    return best.tolist()


def try_asap(n: int, budgets: list[float], repeats: int, spread: float, seed: int):
    """ASAP's SROCC per budget if its Python code can be imported, else None."""
    try:
        from asap_cpu import ASAP  # noqa: F401  (gfxdisp/asap's python/asap_cpu.py)
    except ImportError:
        return None
    scores, seconds = [], []
    for r in range(repeats):
        truth = np.random.default_rng([seed, n, r]).normal(0.0, spread, n)
        rng = np.random.default_rng([seed, n, r, 7])
        counts = np.zeros((n, n), dtype=int)
        row, done = [], 0
        for b in budgets:
            target = round(b * standard_trial(n))
            while done < target:
                start = time.perf_counter()
                batch = ASAP(n).run_asap(counts.copy(), mst_mode=True)
                seconds.append(time.perf_counter() - start)
                for i, j in batch[:target - done]:
                    if rng.random() < ndtr(truth[i] - truth[j]):
                        counts[i, j] += 1
                    else:
                        counts[j, i] += 1
                    done += 1
            w, l = np.nonzero(counts)
            reps = counts[w, l]
            p, wins = aggregate_pairs(np.repeat(w, reps), np.repeat(l, reps), np.ones(reps.sum(), dtype=bool))
            row.append(srocc(thurstone_mle(p, wins, n), truth))
        scores.append(row)
    return np.mean(scores, axis=0).tolist(), float(np.mean(seconds))


def selection_times(n: int, n_votes: list[int], seed: int, tries: int = 3) -> list[list]:
    """Median time of plan_batch (batch n - 1) on random Thurstone votes: cold and warm-started."""
    rows = []
    rng = np.random.default_rng(seed)
    truth = rng.normal(0.0, 1.0, n)
    for v in n_votes:
        a = rng.integers(n, size=v)
        b = (a + 1 + rng.integers(n - 1, size=v)) % n
        first_won = rng.random(v) < ndtr(truth[a] - truth[b])
        winners, losers = np.where(first_won, a, b), np.where(first_won, b, a)
        cold, warm = [], []
        for _ in range(tries):
            start = time.perf_counter()
            planned = plan_batch(n, winners, losers, n - 1, rng=rng, with_gain=False)
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            plan_batch(n, winners, losers, n - 1, rng=rng, with_gain=False, init=planned.posterior.mean)
            warm.append(time.perf_counter() - start)
        rows.append([n, v, f"{v / standard_trial(n):.3g}", f"{1000 * np.median(cold):.0f}",
                     f"{1000 * np.median(warm):.0f}"])
    return rows


def table(result: dict, budgets: list[float], extra: dict | None = None) -> None:
    header = ["standard trials", "random SROCC", "active SROCC", "random RMSE", "active RMSE"]
    header += list(extra or {})
    rows = []
    for k, b in enumerate(budgets):
        (rm, rs), (am, as_) = result["random"], result["active"]
        row = [f"{b:g}", f"{rm[0, k]:.4f} ± {rs[0, k]:.4f}", f"{am[0, k]:.4f} ± {as_[0, k]:.4f}",
               f"{rm[1, k]:.3f}", f"{am[1, k]:.3f}"]
        row += [f"{v[k]:.4f}" if v[k] is not None else "" for v in (extra or {}).values()]
        rows.append(row)
    print_table(header, rows)


def half_budget_check(result: dict, budgets: list[float]) -> None:
    if 2.5 in budgets and 5 in budgets:
        active = result["active"][0][0, budgets.index(2.5)]
        random = result["random"][0][0, budgets.index(5)]
        verdict = "reached" if active >= random else "not reached"
        print(f"half the comparisons: active at 2.5 standard trials {active:.4f} vs random at 5 {random:.4f}: "
              f"{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="0.5,1,2,2.5,3,5")
    parser.add_argument("--repeats-small", type=int, default=100, help="Studies of 20 items per strategy.")
    parser.add_argument("--repeats-large", type=int, default=10, help="Studies of 155 items per strategy.")
    parser.add_argument("--spread", type=float, default=1.0, help="SD of the true scores, z units.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-timing", action="store_true", help="Skip the selection times at 155 and 2,000 items.")
    parser.add_argument("--timing-only", action="store_true", help="Only the selection times.")
    args = parser.parse_args()
    budgets = sorted(float(b) for b in args.budgets.split(","))
    with limited_blas_threads():
        for n, repeats in () if args.timing_only else ((20, args.repeats_small), (155, args.repeats_large)):
            start = time.perf_counter()
            result = simulate(n, budgets, repeats, args.spread, args.seed)
            extra = {}
            if n == 20:
                extra["oracle band SROCC"] = oracle_band(n, budgets, min(repeats, 100), args.spread, args.seed)
                asap = try_asap(n, budgets, repeats, args.spread, args.seed)
                if asap is not None:
                    extra["ASAP SROCC"] = asap[0]
            print(f"\n{n} items, true scores N(0, {args.spread:g}^2), {repeats} studies per strategy "
                  f"(mean ± standard error; RMSE in z units), {time.perf_counter() - start:.0f} s")
            table(result, budgets, extra)
            half_budget_check(result, budgets)
            print(f"active selection: {result['ms_per_batch']:.1f} ms per batch of {n - 1}")
            if n == 20 and asap is None:
                p = ASAP_PUBLISHED
                print("ASAP: no asap_cpu module installed (gfxdisp/asap is not on the package registry); its "
                      f"published figures (its own simulation, 20 conditions): SROCC {p['asap'][0]} / {p['asap'][1]} / "
                      f"{p['asap'][2]} at 0.5 / 1 / 2 standard trials (random there: {p['random'][0]} / "
                      f"{p['random'][1]} / {p['random'][2]}), {p['seconds_per_batch']} s per batch")
            elif n == 20:
                print(f"ASAP: {1000 * asap[1]:.0f} ms per batch")
        if not args.no_timing:
            print("\nselection time per batch (n - 1 pairs), median of 3, ms: cold = fitted from the votes alone, "
                  "warm = previous mean as init")
            rows = selection_times(155, [0, 5_000, 24_000], args.seed)
            rows += selection_times(2000, [0, 40_000, 400_000], args.seed)
            print_table(["items", "votes", "standard trials", "cold ms", "warm ms"], rows)


if __name__ == "__main__":
    main()
