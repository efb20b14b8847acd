"""Worker screening: gold questions and iterative TPR screening (StudyMB 2.0, Algorithm 2).

A worker's TPR is the fraction of their (non-gold) votes, over all sets, that
agree with the order of the current scale (votes between equally scaled items
count one half). Algorithm 2 scales all votes, selects the workers to keep,
rescales from the kept votes, and selects again *from the full pool* with the
new scale, until the same worker set is selected twice in a row.

Selection rules
---------------
``keep=<fraction>`` (the paper's rule, e.g. 0.6)
    Drop the lowest-TPR workers until the kept votes reach the fraction:
    workers are taken in decreasing TPR until their votes are at least
    ``fraction`` of all votes. Workers with equal TPR are taken together:
    the cut never separates them, so when it falls among tied workers all of
    them are kept (the kept share then exceeds the fraction by at most the
    votes of that tied group). StudyMB 2.0 does not say how it breaks such
    ties; breaking them by vote count or worker ID would make the outcome
    depend on how workers are named. Here it depends only on each worker's
    TPR and vote count: neither the order of the rows nor the worker IDs
    change who is kept.
``min_tpr=<t>``
    Keep the workers whose TPR is at least ``t`` (a TPR equal to ``t`` is kept).
``keep="auto"`` (default)
    Classify each worker by a likelihood-ratio test of *honest Thurstone
    observer* against *guessing*. Under the current scale an honest observer
    picks the winner ``w`` over ``l`` with probability
    ``lapse/2 + (1 - lapse) * Phi(s_w - s_l)`` (a lapse rate keeps one slip on
    an easy pair from condemning a worker); a guesser with 1/2, whatever the
    side it clicks. The fraction of honest workers ``pi`` is estimated by EM
    and a worker is kept when the posterior of being honest is at least 1/2.
    This weighs each vote by the difficulty of the pair it answered (a TPR of
    0.7 means something else on easy than on hard pairs) and by how many
    votes the worker gave, so no target fraction has to be known. The kept
    fraction of votes is reported. A posterior of exactly 1/2 is kept;
    workers with equal answers to the same pairs get equal posteriors and
    share their fate.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from scipy.special import expit, log_ndtr, logit

from .formats import Votes
from .scaling import ScalingOptions, fit_set, global_scale, set_designs

DEFAULT_LAPSE = 0.05
DEFAULT_GOLD_ACCURACY = 0.70


@dataclass
class ScreeningResult:
    """Outcome of worker screening; arrays are indexed like ``votes.worker_ids``."""

    rule: str                       # "auto", "fraction", "min_tpr" or "none"
    kept: np.ndarray                # (W,) bool: worker kept for scaling
    tpr: np.ndarray                 # (W,) TPR against the final scale (NaN: no scaling votes)
    n_votes: np.ndarray             # (W,) scaling (non-gold) votes per worker
    gold_accuracy: np.ndarray       # (W,) accuracy on gold rows (NaN: none answered)
    gold_failed: np.ndarray         # (W,) bool: excluded by the gold rule
    iterations: int
    converged: bool
    threshold_tpr: float            # lowest TPR among kept workers
    kept_vote_fraction: float       # kept scaling votes / all scaling votes
    kept_worker_fraction: float     # kept workers / every worker in the votes (gold-only workers too)
    target_fraction: float | None = None
    honest_posterior: np.ndarray | None = None  # (W,) auto rule only; 0 when gold failed, NaN without scaling votes
    honest_share: float | None = None           # EM estimate of the honest share (auto rule)
    history: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "rule": self.rule, "iterations": self.iterations, "converged": self.converged,
            "threshold_tpr": self.threshold_tpr, "kept_vote_fraction": self.kept_vote_fraction,
            "kept_worker_fraction": self.kept_worker_fraction, "target_fraction": self.target_fraction,
            "kept_workers": int(self.kept.sum()), "workers": int(len(self.kept)),
            "kept_votes": int(self.n_votes[self.kept].sum()), "votes": int(self.n_votes.sum()),
            "gold_failed_workers": int(self.gold_failed.sum()), "honest_share": self.honest_share,
            "history": self.history,
        }


def gold_accuracy(votes: Votes) -> np.ndarray:
    """Per-worker accuracy on gold rows (NaN for workers who answered none)."""
    W = len(votes.worker_ids)
    answered = np.bincount(votes.worker[votes.is_gold], minlength=W).astype(float)
    correct = np.bincount(votes.worker[votes.is_gold], weights=votes.gold_correct[votes.is_gold], minlength=W)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(answered > 0, correct / answered, np.nan)


def _winner_gaps(votes: Votes, scale: np.ndarray, scaling_votes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Worker of each scaling vote and the scale of its winner minus that of its loser."""
    idx = np.flatnonzero(scaling_votes)
    return votes.worker[idx], scale[votes.winner[idx]] - scale[votes.loser[idx]]


def worker_tpr(votes: Votes, scale: np.ndarray, scaling_votes: np.ndarray) -> np.ndarray:
    """TPR of every worker over the ``scaling_votes`` mask, against a global item scale."""
    worker, diff = _winner_gaps(votes, scale, scaling_votes)
    agree = np.where(diff > 0, 1.0, np.where(diff == 0, 0.5, 0.0))
    agree[np.isnan(diff)] = 0.5
    W = len(votes.worker_ids)
    n = np.bincount(worker, minlength=W)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, np.bincount(worker, agree, W) / n, np.nan)


def honest_log_likelihood_ratio(votes: Votes, scale: np.ndarray, scaling_votes: np.ndarray,
                                lapse: float = DEFAULT_LAPSE) -> np.ndarray:
    """Per-worker log-likelihood ratio of honest Thurstone observer vs guessing."""
    worker, diff = _winner_gaps(votes, scale, scaling_votes)
    p_honest = lapse / 2 + (1 - lapse) * np.exp(log_ndtr(np.nan_to_num(diff)))
    terms = np.log(2 * p_honest)
    # Summed in a canonical order (by worker, then by value): workers with equal answers get bit-equal
    # sums, and neither the row order nor the worker IDs can move a worker across the cut by rounding.
    order = np.lexsort((terms, worker))
    return np.bincount(worker[order], terms[order], len(votes.worker_ids))


def _select_auto(llr: np.ndarray, has_votes: np.ndarray, iterations: int = 200):
    """EM over the honest share; returns (kept, posterior, share)."""
    share = 0.5
    for _ in range(iterations):
        posterior = expit(llr + logit(share))
        new = float(np.clip(posterior[has_votes].mean(), 1e-3, 1 - 1e-3))
        if abs(new - share) < 1e-10:
            break
        share = new
    posterior = expit(llr + logit(share))
    return (posterior >= 0.5) & has_votes, posterior, share


def _select_fraction(tpr: np.ndarray, n_votes: np.ndarray, eligible: np.ndarray, fraction: float) -> np.ndarray:
    """Keep workers in decreasing TPR until their votes reach ``fraction`` of the eligible votes.

    Tied workers (equal TPR) are kept or dropped together: whole TPR levels are
    taken, highest first, until their votes reach the target, so the result
    does not depend on the order or the IDs of the workers.
    """
    candidates = np.flatnonzero(eligible)
    if not len(candidates):
        return np.zeros(len(tpr), dtype=bool)
    # Distinct TPR levels, highest first, and the votes of the workers at each level.
    levels, level_of = np.unique(-tpr[candidates], return_inverse=True)
    cumulative = np.cumsum(np.bincount(level_of, weights=n_votes[candidates], minlength=len(levels)))
    target = fraction * cumulative[-1]
    last = min(int(np.searchsorted(cumulative, target - 1e-9)), len(levels) - 1)
    kept = np.zeros(len(tpr), dtype=bool)
    kept[candidates[level_of <= last]] = True
    return kept


def screen_workers(votes: Votes, options: ScalingOptions, keep: str | float = "auto",
                   min_tpr: float | None = None, gold_threshold: float | None = DEFAULT_GOLD_ACCURACY,
                   lapse: float = DEFAULT_LAPSE, max_iterations: int = 50) -> ScreeningResult:
    """Gold screening, then iterative TPR screening (Algorithm 2) over all sets at once.

    Parameters
    ----------
    votes : Votes
    options : ScalingOptions
        How sets are scaled while screening (anchors are not used here: TPR
        only needs each set's order, and the auto rule needs z units).
    keep : "auto", a fraction in (0, 1], or "none"
        Selection rule (see the module docstring). ``1.0`` or ``"none"`` keeps everyone.
    min_tpr : float, optional
        Use the minimum-TPR rule instead of ``keep``.
    gold_threshold : float or None
        Workers whose accuracy on gold rows is below this are excluded before
        TPR screening (StudyMB 1.0: 70 %). Needs a ``gold_winner`` column;
        None disables it.
    """
    if min_tpr is not None:
        rule = "min_tpr"
    elif keep == "auto":
        rule = "auto"
    elif keep in ("none", None) or float(keep) >= 1.0:
        rule = "none"
    else:
        rule = "fraction"
        keep = float(keep)
        if not 0 < keep < 1:
            raise ValueError(f"keep must be 'auto' or a fraction in (0, 1], got {keep}")
    scaling_votes = ~votes.is_gold
    W = len(votes.worker_ids)
    n_votes = np.bincount(votes.worker[scaling_votes], minlength=W)
    accuracy = gold_accuracy(votes)
    gold_failed = np.zeros(W, dtype=bool)
    if gold_threshold is not None and votes.has_gold_answers:
        gold_failed = np.nan_to_num(accuracy, nan=1.0) < gold_threshold
    eligible = (n_votes > 0) & ~gold_failed
    designs = set_designs(votes, scaling_votes)
    # Screening fits may lose links when workers are dropped: the ridge keeps them finite.
    fit_options = replace(options, anchors=False, allow_disconnected=True)
    n_items = len(votes.item_ids)

    def scale_from(workers: np.ndarray) -> np.ndarray:
        keep_vote = workers[votes.worker]
        raws = [fit_set(d, fit_options, weights=keep_vote[d.votes].astype(float)) for d in designs]
        return global_scale(designs, raws, n_items)

    kept = eligible.copy()
    scale = scale_from(kept)
    history, seen, posterior, share = [], [], None, None
    converged, iterations = rule == "none", 0
    for iterations in range(1, max_iterations + 1 if rule != "none" else 1):
        tpr = worker_tpr(votes, scale, scaling_votes)
        if rule == "auto":
            llr = honest_log_likelihood_ratio(votes, scale, scaling_votes, lapse)
            selected, posterior, share = _select_auto(llr, eligible)
        elif rule == "fraction":
            selected = _select_fraction(np.nan_to_num(tpr), n_votes, eligible, keep)
        else:
            selected = eligible & (np.nan_to_num(tpr) >= min_tpr)
        history.append({"iteration": iterations, "kept_workers": int(selected.sum()),
                        "kept_votes": int(n_votes[selected].sum()),
                        "threshold_tpr": float(np.min(tpr[selected])) if selected.any() else float("nan")})
        if not selected.any():
            raise ValueError("screening would drop every worker; relax the rule (e.g. a lower --min-tpr)")
        if np.array_equal(selected, kept) and iterations > 1:
            converged = True
            break
        if any(np.array_equal(selected, s) for s in seen):
            kept = selected  # a cycle between a few sets: stop, report non-convergence
            break
        seen.append(selected)
        kept = selected
        scale = scale_from(kept)
    tpr = worker_tpr(votes, scale, scaling_votes)
    kept_votes = n_votes[kept].sum()
    if posterior is not None:
        # The EM saw only eligible workers; a gold-failed worker's likelihood ratio says nothing about
        # the failure that excluded them, and a worker without scaling votes has no ratio at all.
        posterior = np.where(gold_failed, 0.0, np.where(n_votes > 0, posterior, np.nan))
    return ScreeningResult(
        rule=rule, kept=kept, tpr=tpr, n_votes=n_votes, gold_accuracy=accuracy, gold_failed=gold_failed,
        iterations=iterations, converged=converged,
        threshold_tpr=float(np.nanmin(tpr[kept])) if kept.any() else float("nan"),
        kept_vote_fraction=float(kept_votes / max(n_votes.sum(), 1)),
        kept_worker_fraction=float(kept.sum() / max(W, 1)),  # of every worker in the file, as in workers.csv
        target_fraction=keep if rule == "fraction" else None,
        honest_posterior=posterior, honest_share=share, history=history,
    )
