"""Scaling speed and accuracy: perceptlab vs choix and crowd-kit on the same votes.

Honest Thurstone Case V observers, true scales N(0, 1), a random 6-regular
design and 20 votes per pair, at 155 / 2,000 / 20,000 items. Prints fit time
and SROCC against the truth for every estimator, all in this one process.

Each fit runs in a forked child of this process (same votes in memory, timed
inside the child) so that a peer slower than --time-limit seconds can be
stopped and reported as "> N s" instead of stalling the run.

Run: .venv/bin/python benchmarks/scaling.py [--sizes 155,2000,20000] [--time-limit 150]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.special import ndtr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.correlation import srocc  # noqa: E402
from analysis.thurstone import aggregate_pairs, thurstone_ls, thurstone_mle  # noqa: E402
from benchmarks._common import print_table, timer  # noqa: E402
from stimuli.designs import random_regular_design  # noqa: E402

VOTES_PER_PAIR = 20


def make_votes(n_items: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    truth = rng.normal(0, 1, n_items)
    pairs = random_regular_design(n_items, 6, rng)
    a = np.repeat(pairs[:, 0], VOTES_PER_PAIR)
    b = np.repeat(pairs[:, 1], VOTES_PER_PAIR)
    a_won = rng.random(len(a)) < ndtr(truth[a] - truth[b])
    workers = rng.integers(0, max(50, n_items // 10), len(a))
    return truth, a, b, a_won, workers


def perceptlab_mle(n, a, b, a_won, workers):
    pairs, wins = aggregate_pairs(a, b, a_won)
    return thurstone_mle(pairs, wins, n)


def perceptlab_ls(n, a, b, a_won, workers):
    pairs, wins = aggregate_pairs(a, b, a_won)
    return thurstone_ls(pairs, wins, n)


def choix_ilsr(n, a, b, a_won, workers):
    import choix
    data = np.column_stack([np.where(a_won, a, b), np.where(a_won, b, a)])
    return choix.ilsr_pairwise(n, data, alpha=0.01)


def choix_opt(n, a, b, a_won, workers):
    import choix
    data = np.column_stack([np.where(a_won, a, b), np.where(a_won, b, a)])
    return choix.opt_pairwise(n, data, alpha=0.01)


def crowdkit_bt(n, a, b, a_won, workers):
    import pandas as pd
    from crowdkit.aggregation import BradleyTerry
    frame = pd.DataFrame({"worker": workers, "left": a, "right": b, "label": np.where(a_won, a, b)})
    scores = BradleyTerry(n_iter=100).fit(frame).scores_
    out = np.full(n, np.nan)
    out[scores.index.to_numpy(dtype=int)] = scores.to_numpy()
    return out


ESTIMATORS = {
    "perceptlab MLE": perceptlab_mle,
    "perceptlab LS": perceptlab_ls,
    "choix ilsr_pairwise": choix_ilsr,
    "choix opt_pairwise": choix_opt,
    "crowd-kit BradleyTerry": crowdkit_bt,
}


def _child(queue, fit, n, votes, truth):
    with timer() as t:
        scale = fit(n, *votes)
    queue.put((t["seconds"], srocc(scale, truth)))


def timed_fit(fit, n, votes, truth, limit: float):
    """(seconds, SROCC) of one fit in a forked child, or None after ``limit`` seconds."""
    context = mp.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue, fit, n, votes, truth))
    child.start()
    try:
        return queue.get(timeout=limit)
    except Exception:  # queue.Empty: over the limit (or the child died)
        return None
    finally:
        child.kill()
        child.join()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="155,2000,20000", help="comma-separated item counts")
    parser.add_argument("--time-limit", type=float, default=150.0, help="seconds allowed per fit")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    warm = make_votes(50)
    for fit in ESTIMATORS.values():  # imports and first-call set-up are not part of a fit
        fit(50, *warm[1:])
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        truth, *votes = make_votes(n)
        pairs = len(votes[0]) // VOTES_PER_PAIR
        print(f"# {n} items, {pairs} pairs, {len(votes[0])} votes", flush=True)
        for name, fit in ESTIMATORS.items():
            result = timed_fit(fit, n, votes, truth, args.time_limit)
            if result is None:
                rows.append([n, pairs, name, f"> {args.time_limit:.0f}", "-"])
            else:
                rows.append([n, pairs, name, f"{result[0]:.3f}", f"{result[1]:.4f}"])
            print(f"  {name}: {rows[-1][3]} s", flush=True)
    print()
    print_table(["items", "pairs", "estimator", "fit seconds", "SROCC vs truth"], rows)


if __name__ == "__main__":
    main()
