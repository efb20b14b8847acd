"""Scaling the votes of several sets: one Thurstone scale per set.

A :class:`SetDesign` fixes, once per set, which items are scaled and which
pair every vote belongs to; fits then only change vote weights (1/0 for the
votes kept by screening, multiplicities for bootstrap resamples), so the pair
structure, the anchors and the warm starts are shared by every fit.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from .formats import Votes
from .thurstone import (DEFAULT_PRIOR_STRENGTH, DENSE_LIMIT, JOD_PER_Z, MLEBatchSetup, add_anchors, check_connected,
                        index_pairs, mle_batch_setup, rescale_to_anchors, thurstone_ls, thurstone_mle,
                        thurstone_mle_batch, thurstone_mle_linearised)

UNITS = ("anchored", "jod", "z")
"""Units of reported scales: see :func:`reported` and :func:`unit_description`."""


@dataclass(frozen=True)
class ScalingOptions:
    """How each set is scaled.

    Attributes
    ----------
    method : "mle" or "ls"
        Maximum likelihood with a weak ridge prior (default) or classical least squares.
    anchors : bool
        Add a virtual worst and best item to every set and rescale so they sit at 0 and 1.
    anchor_votes : float
        Virtual comparisons each real item gets against each anchor (won against
        the worst, lost against the best).
    prior_strength : float
        Ridge of the MLE (precision of a zero-mean Gaussian prior, z units).
    correction : float
        Continuity correction of the LS proportions, ``(w + c) / (n + 2c)``.
    allow_disconnected : bool
        Scale disconnected designs anyway: the ridge (MLE) or a ridge of the
        same strength (LS) ties each component to the common mean of zero.
        Otherwise a disconnected set raises :class:`~analysis.thurstone.DisconnectedDesignError`.
    units : "anchored", "jod", "z" or None
        Unit of the reported scales (:func:`reported`); None: "anchored" with
        anchors, "z" without. Only reporting depends on it, never the fit.
    """

    method: str = "mle"
    anchors: bool = True
    anchor_votes: float = 1.0
    prior_strength: float = DEFAULT_PRIOR_STRENGTH
    correction: float = 0.5
    allow_disconnected: bool = False
    units: str | None = None

    def __post_init__(self):
        if self.method not in ("mle", "ls"):
            raise ValueError(f"method must be 'mle' or 'ls', got {self.method!r}")
        if self.anchor_votes <= 0:
            raise ValueError(f"anchor_votes must be positive, got {self.anchor_votes}")
        if self.prior_strength <= 0:
            raise ValueError(f"prior_strength must be positive, got {self.prior_strength}")
        if self.units is not None and self.units not in UNITS:
            raise ValueError(f"units must be one of {', '.join(UNITS)}, got {self.units!r}")

    @property
    def unit(self) -> str:
        """The reported unit: :attr:`units`, or by default "anchored" with anchors and "z" without."""
        return self.units or ("anchored" if self.anchors else "z")

    def check_units(self) -> None:
        """Raise ValueError when the reported unit cannot be made from the fit (anchored without anchors)."""
        if self.unit == "anchored" and not self.anchors:
            raise ValueError("anchored units need the virtual anchors: drop --no-anchors or choose --units jod or z")

    def without_anchors(self) -> "ScalingOptions":
        return replace(self, anchors=False)


@dataclass(frozen=True)
class SetDesign:
    """The comparisons of one set, indexed once."""

    set_index: int
    set_id: str
    items: np.ndarray       # (n,) global item indices scaled in this set
    votes: np.ndarray       # (V_s,) indices of the set's scaling votes in the Votes
    pairs: np.ndarray       # (P, 2) local item indices, first < second
    vote_pair: np.ndarray   # (V_s,) pair of each vote
    first_won: np.ndarray   # (V_s,) the pair's first item won

    @property
    def n_items(self) -> int:
        return len(self.items)

    def wins(self, weights: np.ndarray | None = None) -> np.ndarray:
        """(P, 2) win counts; ``weights`` are per-vote multiplicities of this set's votes."""
        w = np.ones(len(self.votes)) if weights is None else weights
        P = len(self.pairs)
        return np.column_stack([np.bincount(self.vote_pair, w * self.first_won, P),
                                np.bincount(self.vote_pair, w * ~self.first_won, P)])

    def outcomes(self, unit_of_vote: np.ndarray, n_units: int) -> sp.csr_matrix:
        """(n_units, 2P) sparse counts of the set's votes by resampling unit (``unit_of_vote``: the
        unit of each of the set's votes): column ``2p`` counts pair p's first item winning, ``2p + 1`` its second."""
        outcome = 2 * self.vote_pair + ~self.first_won
        return sp.csr_matrix((np.ones(len(outcome)), (unit_of_vote, outcome)), shape=(n_units, 2 * len(self.pairs)))

    def wins_batch(self, weights: np.ndarray, outcomes: sp.csr_matrix | None = None) -> np.ndarray:
        """(B, P, 2) win counts for a (B, U) batch of unit weights, ``outcomes`` the (U, 2P) votes of
        each unit (:meth:`outcomes`; default: each vote its own unit)."""
        if outcomes is None:
            outcomes = self.outcomes(np.arange(len(self.votes)), len(self.votes))
        return (outcomes.T @ weights.T).T.reshape(len(weights), len(self.pairs), 2)


def set_designs(votes: Votes, scaling_votes: np.ndarray | None = None) -> list[SetDesign]:
    """Index the scaling votes (default: every non-gold vote) of each set.

    The items of a set are those that appear in its scaling votes; items seen
    only in gold rows are not scaled.
    """
    use = ~votes.is_gold if scaling_votes is None else np.asarray(scaling_votes, dtype=bool)
    vote_set = votes.vote_set
    designs = []
    n_items = len(votes.item_ids)
    for s, set_id in enumerate(votes.set_ids):
        idx = np.flatnonzero(use & (vote_set == s))
        a, b = votes.item_a[idx], votes.item_b[idx]
        # The items present and their local indices by counting (item indices are below n_items),
        # as np.unique would give them but without sorting two entries per vote.
        present = np.bincount(a, minlength=n_items) + np.bincount(b, minlength=n_items) > 0
        items = np.flatnonzero(present)
        local_of = np.cumsum(present) - 1
        local = np.concatenate([local_of[a], local_of[b]])
        pairs, vote_pair, first_won = index_pairs(local[:len(idx)], local[len(idx):], votes.a_won[idx])
        designs.append(SetDesign(s, str(set_id), items, idx, pairs, vote_pair, first_won))
    return designs


def _prepare(design: SetDesign, wins: np.ndarray, options: ScalingOptions, check: bool, item_ids=None):
    pairs, n = design.pairs, design.n_items
    if check:
        present = wins.reshape(-1, len(pairs), 2).sum(axis=(0, 2)) > 0
        if not options.allow_disconnected:
            check_connected(pairs[present], n, item_ids, design.set_id)
    if options.anchors:
        pairs, wins = add_anchors(pairs, wins, n, options.anchor_votes)
        n += 2
    return pairs, wins, n


def fit_set(design: SetDesign, options: ScalingOptions, weights: np.ndarray | None = None,
            init: np.ndarray | None = None, item_ids=None, links: np.ndarray | None = None) -> np.ndarray:
    """Raw scale of one set (z units), anchors appended last when ``options.anchors``.

    ``weights`` are per-vote multiplicities (0 drops a vote). Checks the
    comparison graph of the votes with positive weight (of ``links``, per-vote,
    when given: soft screening checks the kept workers' votes, not every vote
    of small weight) unless disconnected designs are allowed.
    """
    if len(design.votes) == 0:
        raise ValueError(f"set {design.set_id!r} has no votes to scale")
    if links is not None and not options.allow_disconnected:
        _prepare(design, design.wins(links), options, check=True, item_ids=item_ids)
    pairs, wins, n = _prepare(design, design.wins(weights), options, check=links is None, item_ids=item_ids)
    if options.method == "mle":
        return thurstone_mle(pairs, wins, n, options.prior_strength, init=init)
    ridge = options.prior_strength if options.allow_disconnected else 0.0
    return thurstone_ls(pairs, wins, n, options.correction, ridge=ridge)


def fit_set_batch(design: SetDesign, options: ScalingOptions, wins: np.ndarray,
                  init: np.ndarray, setup: MLEBatchSetup | None = None) -> np.ndarray:
    """Raw scales for a (B, P, 2) batch of win counts (:meth:`SetDesign.wins_batch`), warm-started at ``init``.

    Resamples are not checked for connectivity: the ridge keeps a component
    that lost all its links in one resample finite, and the spread this adds is
    part of the interval. ``setup`` (:func:`fit_set_batch_setup`): the MLE's preconditioner, shared by
    batches of the same set.
    """
    pairs, wins, n = _prepare(design, wins, options, check=False)
    if options.method == "mle":
        return thurstone_mle_batch(pairs, wins, n, options.prior_strength, init=init, setup=setup)
    ridge = options.prior_strength
    return np.stack([thurstone_ls(pairs, wins[b], n, options.correction, ridge=ridge if
                                  options.allow_disconnected else 0.0) for b in range(len(wins))])


def fit_set_batch_setup(design: SetDesign, options: ScalingOptions, reference: np.ndarray,
                        init: np.ndarray) -> MLEBatchSetup | None:
    """What every :func:`fit_set_batch` of the set's resamples may share (:func:`~analysis.thurstone.mle_batch_setup`:
    the Hessian at ``init``, the raw fit of the ``reference`` counts ((P, 2)), inverted once); None where the fits
    use none (least squares, sets above :data:`~analysis.thurstone.DENSE_LIMIT` items)."""
    pairs, reference, n = _prepare(design, reference, options, check=False)
    if options.method != "mle" or n > DENSE_LIMIT:
        return None
    return mle_batch_setup(pairs, reference, n, init, options.prior_strength)


def fit_set_linearised(design: SetDesign, options: ScalingOptions, at: np.ndarray, reference: np.ndarray):
    """A function of a (B, P, 2) batch of win counts giving their raw scales to first order around ``at``, the
    raw fit of the ``reference`` counts ((P, 2)): one Newton step each (:func:`~analysis.thurstone.thurstone_mle_linearised`)
    for the MLE of sets up to :data:`~analysis.thurstone.DENSE_LIMIT` items; otherwise the exact fits of
    :func:`fit_set_batch`, warm-started at ``at``."""
    pairs, reference, n = _prepare(design, reference, options, check=False)
    if options.method == "mle" and n <= DENSE_LIMIT:
        solve = thurstone_mle_linearised(pairs, n, at, reference, options.prior_strength)
        return lambda wins: solve(_prepare(design, wins, options, check=False)[1])
    return lambda wins: fit_set_batch(design, options, wins, init=at)


def reported(raw: np.ndarray, design: SetDesign, options: ScalingOptions) -> np.ndarray:
    """Reported scale values of a raw fit (``(n [+ 2],)`` or a ``(B, n [+ 2])`` batch) in ``options.unit``.

    * ``"anchored"``: linearly mapped so the worst virtual anchor is 0 and the best is 1;
    * ``"z"``: Thurstone Case V z units, ``P(i preferred to j) = Phi(s_i - s_j)``;
    * ``"jod"``: z times :data:`~analysis.thurstone.JOD_PER_Z`, so that a difference of
      1 JOD means 75 % preference (pwcmp's unit).

    z and JOD values are centred on the mean of the set's items (the anchors, when
    fitted, are dropped and not counted). Every unit is a linear map of the raw
    fit, applied to each bootstrap resample alike, so intervals convert with the values.
    """
    unit = options.unit
    n = design.n_items
    if unit == "anchored":
        options.check_units()
        return rescale_to_anchors(raw, n)
    values = raw[..., :n]
    values = values - values.mean(axis=-1, keepdims=True)
    return values * JOD_PER_Z if unit == "jod" else values


def unit_description(unit: str) -> str:
    """One line saying what a scale value in ``unit`` means (summary.json, plots)."""
    return {"anchored": "anchored: each set's virtual worst anchor = 0, best anchor = 1 (no unit)",
            "jod": "JOD: a difference of 1 means 75 % of observers prefer the higher item "
                   "(pwcmp's unit, z x 1.4826); each set's items have mean 0",
            "z": "z: Thurstone Case V, P(i preferred to j) = Phi(s_i - s_j); each set's items have mean 0"}[unit]


def global_scale(designs: list[SetDesign], raws: list[np.ndarray], n_items: int) -> np.ndarray:
    """Concatenate per-set raw scales (anchors dropped) into one vector over all global items.

    Items that are not scaled (seen only in gold rows) are NaN.
    """
    out = np.full(n_items, np.nan)
    for design, raw in zip(designs, raws):
        out[design.items] = raw[:design.n_items]
    return out
