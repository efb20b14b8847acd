"""Offline evaluation of active pair sampling: replay a study under another sampling strategy.

A densely compared set's votes stand in for its observers. For each strategy and repeat the
replay runs a study from scratch: the strategy picks pairs in batches, the outcome of each
chosen comparison is drawn at random, with replacement, from the recorded votes of that pair,
and at every budget (in *standard trials*: one comparison of every pair of the set, ``n (n - 1)
/ 2`` comparisons) the votes sampled so far are scaled and compared with the reference, the
scale of all the set's votes: SROCC and RMSE (z units). Strategies:

``random``
    Each comparison is a pair drawn uniformly from the set's observed pairs.
``active``
    :func:`analysis.active.plan_batch` over the observed pairs, refitted from the sampled votes
    before every batch (as a server would), warm-started from the previous batch's mean. A pair is
    not chosen more often than it was recorded (while other pairs are left): beyond that a replay
    can only redraw the same few votes, which a real study would not, and an active strategy
    that returns to the same close pairs would be scored on copies of their recorded noise
    (``pair_limit=False`` / ``--no-pair-limit`` lifts the rule).

Batches hold ``n - 1`` comparisons (the size of ASAP's spanning-tree batches) unless told
otherwise. Studies of one budget list are nested: a repeat runs to the largest budget and is
scored at each smaller one on the way. ``benchmarks/active_sampling.py`` runs the same replay on
simulated Thurstone observers (:class:`ThurstoneOutcomes`) instead of recorded votes.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtr
from tqdm.auto import tqdm

from .active import plan_batch
from .correlation import srocc
from .formats import Votes
from .thurstone import DEFAULT_PRIOR_STRENGTH, aggregate_pairs, check_connected, index_pairs, thurstone_mle

STRATEGIES = ("random", "active")
DEFAULT_MIN_COVERAGE = 0.5


class ReplayInputError(ValueError):
    """Votes that cannot be replayed (a sparse or too small set); ``str()`` is one line."""


# --------------------------------------------------------------------------- outcome sources

@dataclass(frozen=True)
class RecordedOutcomes:
    """The recorded votes of each observed pair, to draw outcomes from (with replacement).

    ``pairs`` is ``(P, 2)`` with ``i < j``; the votes of pair ``p`` are
    ``low_won[offsets[p]:offsets[p + 1]]`` (True where the pair's first item won).
    """

    pairs: np.ndarray
    offsets: np.ndarray
    low_won: np.ndarray

    @property
    def recorded(self) -> np.ndarray:
        """Recorded votes of each pair."""
        return np.diff(self.offsets)

    @classmethod
    def from_votes(cls, first: np.ndarray, second: np.ndarray, first_won: np.ndarray) -> "RecordedOutcomes":
        pairs, vote_pair, low_won = index_pairs(first, second, first_won)
        order = np.argsort(vote_pair, kind="stable")
        offsets = np.concatenate([[0], np.cumsum(np.bincount(vote_pair, minlength=len(pairs)))])
        return cls(pairs, offsets, low_won[order])

    def draw(self, pair_index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One outcome per entry of ``pair_index`` (indices into ``pairs``): True if the first item won."""
        start, stop = self.offsets[pair_index], self.offsets[pair_index + 1]
        return self.low_won[start + (rng.random(len(pair_index)) * (stop - start)).astype(np.int64)]


@dataclass(frozen=True)
class ThurstoneOutcomes:
    """Simulated Thurstone Case V observers with true scores ``truth`` (z units) on ``pairs``."""

    pairs: np.ndarray
    truth: np.ndarray

    def draw(self, pair_index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        p = self.pairs[pair_index]
        return rng.random(len(p)) < ndtr(self.truth[p[:, 0]] - self.truth[p[:, 1]])


# --------------------------------------------------------------------------- one study

@dataclass
class StudyReplay:
    """Scores of one replayed study at each budget, and the time spent choosing its batches."""

    srocc: np.ndarray
    rmse: np.ndarray
    selection_seconds: list[float] = field(default_factory=list)
    asked: np.ndarray | None = None  # comparisons of each of the outcome source's pairs, at the end


def standard_trial(n_items: int) -> int:
    """Comparisons in one standard trial of a set: every pair once."""
    return n_items * (n_items - 1) // 2


def replay_study(n_items: int, outcomes: RecordedOutcomes | ThurstoneOutcomes, reference: np.ndarray,
                 budgets: Sequence[float], strategy: str, rng: np.random.Generator, *,
                 batch_size: int | None = None, scale_prior: float = DEFAULT_PRIOR_STRENGTH,
                 on_batch: Callable[[int], None] | None = None, select_options: dict | None = None,
                 pair_limit: bool = True) -> StudyReplay:
    """Run one study of ``strategy`` up to the largest budget and score it at every budget.

    Parameters
    ----------
    n_items : int
    outcomes : RecordedOutcomes or ThurstoneOutcomes
        Its ``pairs`` are the pairs a strategy may choose; ``draw`` gives their outcomes.
    reference : (n_items,) array
        The scale the sampled votes are compared with (z units).
    budgets : increasing sequence of float
        In standard trials.
    strategy : "random" or "active"
    batch_size : int, optional
        Comparisons per batch (default ``n_items - 1``).
    scale_prior : float
        Ridge of the MLE that scales the sampled votes (``perceptlab analyze``'s default).
    on_batch : callable, optional
        Called with the number of comparisons of each batch (progress bars).
    select_options : dict, optional
        Passed on to :func:`analysis.active.plan_batch` (``prior_strength``, ``uniform_weight``).
    pair_limit : bool
        With recorded outcomes, ``active`` chooses a pair at most as often as it was recorded
        while other pairs remain (see the module docstring).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    pairs = outcomes.pairs
    all_pairs = len(pairs) == standard_trial(n_items)
    batch = max(1, n_items - 1 if batch_size is None else int(batch_size))
    targets = [max(1, round(b * standard_trial(n_items))) for b in budgets]
    winners, losers = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    result = StudyReplay(np.empty(len(budgets)), np.empty(len(budgets)))
    mean = None
    recorded = getattr(outcomes, "recorded", None) if pair_limit else None
    asked = np.zeros(len(pairs), dtype=np.int64)
    for slot, target in enumerate(targets):
        while len(winners) < target:
            k = min(batch, target - len(winners))
            if strategy == "random":
                chosen = rng.integers(len(pairs), size=k)
            else:
                start = time.perf_counter()
                exclude = None
                if recorded is not None:
                    spent = asked >= recorded
                    if spent.any() and not spent.all():
                        exclude = pairs[spent]
                planned = plan_batch(n_items, winners, losers, k, rng=rng, init=mean, with_gain=False,
                                     candidates=None if all_pairs else pairs, exclude=exclude,
                                     **(select_options or {}))
                result.selection_seconds.append(time.perf_counter() - start)
                chosen = _pair_index(pairs, planned.pairs, n_items)
                mean = planned.posterior.mean  # warm start of the next batch's fit, as a server would keep it
            asked += np.bincount(chosen, minlength=len(pairs))
            low_won = outcomes.draw(chosen, rng)
            first, second = pairs[chosen, 0], pairs[chosen, 1]
            winners = np.concatenate([winners, np.where(low_won, first, second)])
            losers = np.concatenate([losers, np.where(low_won, second, first)])
            if on_batch is not None:
                on_batch(len(chosen))
        agg_pairs, wins = aggregate_pairs(winners, losers, np.ones(len(winners), dtype=bool))
        scale = thurstone_mle(agg_pairs, wins, n_items, scale_prior)
        result.asked = asked
        result.srocc[slot] = srocc(scale, reference)
        result.rmse[slot] = float(np.sqrt(np.mean((scale - scale.mean() - reference + reference.mean()) ** 2)))
    return result


def _pair_index(pairs: np.ndarray, picked: np.ndarray, n: int) -> np.ndarray:
    """Rows of ``pairs`` (sorted, ``i < j``) of each picked pair."""
    keys = pairs[:, 0] * n + pairs[:, 1]
    return np.searchsorted(keys, picked[:, 0] * n + picked[:, 1])


# --------------------------------------------------------------------------- a votes file

@dataclass
class ReplayResult:
    """Mean SROCC and RMSE over sets and repeats, per strategy and budget."""

    budgets: list[float]
    srocc: dict[str, list[float]]
    rmse: dict[str, list[float]]
    selection_ms_per_batch: float
    sets: list[str]
    repeats: int
    batches: int
    votes_per_pair: list[float]  # median recorded votes per observed pair, per set

    def to_json(self) -> dict:
        """``{"budgets": [...], "random": {"srocc": [...], "rmse": [...]}, "active": {...}, ...}``."""
        out: dict = {"budgets": self.budgets}
        for strategy in self.srocc:
            out[strategy] = {"srocc": self.srocc[strategy], "rmse": self.rmse[strategy]}
        out["selection_ms_per_batch"] = self.selection_ms_per_batch
        out["sets"] = self.sets
        out["repeats"] = self.repeats
        return out

    def resampled_sets(self) -> list[str]:
        """Sets whose largest budget exceeds half their median recorded votes per pair: there the
        replay mostly redraws the reference's own votes, which favours random sampling."""
        return [s for s, v in zip(self.sets, self.votes_per_pair) if self.budgets[-1] > v / 2]


@dataclass(frozen=True)
class _SetData:
    set_id: str
    n_items: int
    outcomes: RecordedOutcomes
    reference: np.ndarray


def check_budgets(budgets: Sequence[float]) -> list[float]:
    """Budgets as a sorted list of distinct positive floats; ValueError otherwise."""
    values = sorted({float(b) for b in budgets})
    if not values:
        raise ValueError("no budgets given")
    if not all(np.isfinite(values)) or values[0] <= 0:
        raise ValueError(f"budgets must be positive numbers of standard trials, got {budgets}")
    return values


def prepare_sets(votes: Votes, *, min_coverage: float = DEFAULT_MIN_COVERAGE,
                 scale_prior: float = DEFAULT_PRIOR_STRENGTH) -> list[_SetData]:
    """Index every set's non-gold votes and scale them all (the reference).

    Raises
    ------
    ReplayInputError
        A set has fewer than 3 items, or fewer than ``min_coverage`` of its pairs were compared.
    DisconnectedDesignError
        A set's comparison graph falls apart.
    """
    use = ~votes.is_gold
    vote_set = votes.vote_set
    sets = []
    for s, set_id in enumerate(votes.set_ids):
        idx = np.flatnonzero(use & (vote_set == s))
        items, local = np.unique(np.concatenate([votes.item_a[idx], votes.item_b[idx]]), return_inverse=True)
        n = len(items)
        if n < 3:
            raise ReplayInputError(f"set {set_id!r}: {n} items with non-gold votes; a replay needs at least 3")
        outcomes = RecordedOutcomes.from_votes(local[:len(idx)], local[len(idx):], votes.a_won[idx])
        coverage = len(outcomes.pairs) / standard_trial(n)
        if coverage < min_coverage:
            raise ReplayInputError(
                f"set {set_id!r} is not densely compared: {len(outcomes.pairs)} of {standard_trial(n)} pairs "
                f"({100 * coverage:.1f}%) have votes, the replay needs at least {100 * min_coverage:.0f}% "
                "(each pair's outcomes are drawn from its recorded votes; see --min-coverage)")
        check_connected(outcomes.pairs, n, votes.item_ids[items], set_id)
        wins = np.column_stack([np.bincount(np.repeat(np.arange(len(outcomes.pairs)), np.diff(outcomes.offsets)),
                                            weights=outcomes.low_won, minlength=len(outcomes.pairs)),
                                np.diff(outcomes.offsets)])
        wins[:, 1] -= wins[:, 0]
        reference = thurstone_mle(outcomes.pairs, wins, n, scale_prior)
        sets.append(_SetData(str(set_id), n, outcomes, reference))
    return sets


def replay_votes(votes: Votes, budgets: Sequence[float], repeats: int, seed: int, *,
                 batch_size: int | None = None, min_coverage: float = DEFAULT_MIN_COVERAGE,
                 scale_prior: float = DEFAULT_PRIOR_STRENGTH, strategies: Sequence[str] = STRATEGIES,
                 pair_limit: bool = True, progress: bool | None = False) -> ReplayResult:
    """Replay every set of ``votes`` ``repeats`` times per strategy; see the module docstring.

    Parameters
    ----------
    budgets : sequence of float
        Standard trials at which each study is scored (sorted; repeats removed).
    repeats : int
        Studies per set and strategy.
    seed : int
        Seeds everything: repeat ``r`` of set ``s`` under strategy ``t`` draws from
        ``SeedSequence(seed, spawn_key=(s, r, t))``, so results do not depend on what else runs.
    progress : bool or None
        Show a progress bar (None: only on a terminal).
    """
    budgets = check_budgets(budgets)
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    sets = prepare_sets(votes, min_coverage=min_coverage, scale_prior=scale_prior)
    total = sum(max(1, round(budgets[-1] * standard_trial(d.n_items))) for d in sets) * repeats * len(strategies)
    scores = {t: ([], []) for t in strategies}
    seconds: list[float] = []
    with tqdm(total=total, desc="replay", unit="cmp", unit_scale=True, leave=False,
              disable=None if progress is None else not progress) as bar:
        for s, data in enumerate(sets):
            for r in range(repeats):
                for t, strategy in enumerate(strategies):
                    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(s, r, t)))
                    study = replay_study(data.n_items, data.outcomes, data.reference, budgets, strategy, rng,
                                         batch_size=batch_size, scale_prior=scale_prior, on_batch=bar.update,
                                         pair_limit=pair_limit)
                    scores[strategy][0].append(study.srocc)
                    scores[strategy][1].append(study.rmse)
                    seconds += study.selection_seconds
    mean = lambda rows: [float(x) for x in np.mean(rows, axis=0)]  # noqa: E731
    return ReplayResult(budgets, {t: mean(v[0]) for t, v in scores.items()}, {t: mean(v[1]) for t, v in scores.items()},
                        1000.0 * float(np.mean(seconds)) if seconds else 0.0, [d.set_id for d in sets], repeats,
                        len(seconds), [float(np.median(np.diff(d.outcomes.offsets))) for d in sets])
