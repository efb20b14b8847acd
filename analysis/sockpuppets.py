"""Sock puppets: colluding votes spread over many short-lived identities, found as a group.

The leave-one-out targeted-bias test (:func:`analysis.collusion.targeted_bias`) judges one worker at
a time. An identity that answers one page and meets an item once or twice cannot reach significance
there, however its votes lean; a colluder who spreads the same biased votes over many such
identities bends the item's scale unseen. No test of single identities can tell such an identity
from an honest one-page worker who happened to pick the item, so the test here judges them *as a
group*:

1. Workers are split into *short-lived* identities (at most ``short_votes`` scaling votes, about
   one page) and *established* ones (the rest). Only ``candidates`` (the workers screening kept)
   take part.
2. Each set is fitted from the established workers alone (the MLE of
   :mod:`analysis.collusion`, z units, no anchors). Under that scale an honest observer picks the
   first item of a pair with probability ``Phi(s_first - s_second)`` (the fitted model itself; see
   ``lapse`` in :func:`coordinated_identities`).
3. For every item ID (pooled over sets, as the targeted-bias test pools them), the short-lived
   identities' wins of the item are compared with their expectation under the established scale's
   posterior predictive ``Phi(gap / sqrt(1 + var(gap)))`` (so that an item the established workers
   never saw win is not predicted to never win). The p-value is the larger of two: the exact
   Poisson-binomial tail of the wins (:func:`analysis.collusion.poisson_binomial_tails`; a normal
   approximation would make two honest upsets of a clear loser look like a thousand-to-one event),
   and a normal test whose variance adds the established fit's own uncertainty, shared by all the
   item's predictions (``g' H^-1 g``, ``H`` the fit's information, ``g`` the derivative of the
   expected wins; it matters when the established workers are few). The second is computed only
   for items whose exact p-value is already significant, so the work stays near-linear in the votes.
4. An item whose two-sided p-value is below ``alpha`` divided by the number of item IDs tested
   (Bonferroni) is *coordinated*: every short-lived vote on a pair holding it is set aside (both
   directions, so that honest one-page votes leave no bias of their own), and the remaining
   items are tested again until none is significant (a targeted item's residual spills onto the
   items it was compared with; the most significant item is removed first).

**Entry fingerprints** (workers.csv's ``address_group`` and ``agent_group``: keyed hashes of the network and
the browser a worker entered from, server/fingerprints.py) are evidence, never a verdict: before the pooled
test, the short-lived identities that share a fingerprint (two or more with the same non-empty value) are
tested as a group of their own, item by item, with the same exact tails and one Bonferroni correction over
every (group, item) tested. A puppeteer's identities on one network or browser then meet the target together,
undiluted by the honest one-page crowd, so a weaker lean is caught; honest workers sharing a campus network
are at the same ``alpha`` as any group. A fingerprint alone changes nothing: only a significant lean of the
group's votes sets them aside (as ``set_aside:...`` with ``evidence`` naming the fingerprint), and the
server never refuses an entry for one.

Set-aside votes are left out of the scales; the identities stay in the analysis with their other
votes. workers.csv names each affected identity ``set_aside:favours:ITEM`` (or ``disfavours``):
that is where its votes went, not a verdict on it (an honest one-page worker who met the item is
marked too). Established colluders are the targeted-bias test's.

Cost: one extra fit per set and a few passes over the votes (measured in
``benchmarks/collusion.py --sockpuppets``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg
from scipy.special import ndtr, ndtri  # not scipy.stats: 0.7 s to import, for one quantile

from .collusion import poisson_binomial_tails
from .formats import Votes
from .scaling import ScalingOptions, SetDesign, fit_set, set_designs
from .threads import limits_blas_threads
from .thurstone import information_matrix, vote_derivatives

SHORT_LIVED_VOTES = 30
"""Largest number of scaling votes of a short-lived identity (one page of 20 pairs, with slack)."""
DEFAULT_GROUP_ALPHA = 0.01
"""Family-wise error rate of the per-item group test (Bonferroni over item IDs)."""
FLAG_SET_ASIDE = "set_aside"
"""workers.csv flag prefix: ``set_aside:favours:ITEM`` / ``set_aside:disfavours:ITEM``."""

FINGERPRINT_COLUMNS = ("address_group", "agent_group")
"""workers.csv's entry fingerprints (server/fingerprints.py), the evidence :func:`coordinated_identities` takes."""


def read_fingerprints(path) -> dict[str, dict[str, str]]:
    """``{column: {worker_id: value}}`` of the :data:`FINGERPRINT_COLUMNS` a workers.csv has (an older export
    without them gives an empty mapping)."""
    import csv

    from .formats import dict_rows

    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        if "worker_id" not in fields:
            raise ValueError(f"{path}: missing column worker_id")
        columns = [c for c in FINGERPRINT_COLUMNS if c in fields]
        rows = list(dict_rows(reader))
    return {c: {r["worker_id"]: r[c] for r in rows} for c in columns}


@dataclass(frozen=True)
class CoordinatedItems:
    """Outcome of :func:`coordinated_identities`."""

    short_lived: np.ndarray    # (W,) bool: candidates with at most short_votes scaling votes
    established: np.ndarray    # (W,) bool: the other candidates
    items: list[dict]          # per coordinated item ID: item_id, direction, z, p_value, votes, excess_wins
    set_aside: np.ndarray      # (V,) bool: votes left out of the scales
    flags: list[list[str]]     # (W,) set_aside:favours:ITEM / set_aside:disfavours:ITEM
    tested_items: int          # item IDs with short-lived votes (the Bonferroni family)
    reason: str = ""           # why nothing was tested ("" when the test ran)

    def summary(self) -> dict:
        return {"short_lived_identities": int(self.short_lived.sum()),
                "established_identities": int(self.established.sum()),
                "tested_items": self.tested_items,
                "coordinated_items": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in item.items()}
                                      for item in self.items],
                "set_aside_votes": int(self.set_aside.sum()),
                "identities_with_votes_set_aside": int(sum(bool(f) for f in self.flags)),
                "not_tested": self.reason or None}


def scaling_vote_counts(votes: Votes, designs: list[SetDesign]) -> np.ndarray:
    """(W,) number of each worker's votes inside the designs (no gold rows)."""
    inside = np.concatenate([d.votes for d in designs]) if designs else np.zeros(0, dtype=np.int64)
    return np.bincount(votes.worker[inside], minlength=len(votes.worker_ids))


@dataclass(frozen=True)
class _SetFit:
    """The established fit of one set, and the short-lived votes' predictions under it."""

    design: SetDesign
    hessian: object            # information of the established votes (dense array or sparse matrix)
    short: np.ndarray          # indices into design.votes of the short-lived votes
    first: np.ndarray          # their pair's first local item
    second: np.ndarray
    probability: np.ndarray    # P(first wins)
    residual: np.ndarray       # first_won - P(first wins)
    variance: np.ndarray       # P (1 - P)
    slope: np.ndarray          # dP / d(s_first - s_second)
    cache: dict = field(default_factory=dict)   # the Hessian's factorisation, made at its first use

    def solve(self, g: np.ndarray) -> np.ndarray:
        """``H^-1 g`` (only sets holding a suspect item get here; a dense ``H`` is factorised once)."""
        if "solve" not in self.cache:
            if sp.issparse(self.hessian):
                # Conjugate gradients with a Jacobi preconditioner: a sparse LU of a random design's
                # information fills in (1.9 s at 2,000 items), one CG solve per suspect item costs
                # a few sparse products.
                h = self.hessian.tocsr()
                jacobi = sp.diags(1.0 / h.diagonal())
                self.cache["solve"] = lambda b: scipy.sparse.linalg.cg(h, b, rtol=1e-8, M=jacobi,
                                                                       maxiter=10 * h.shape[0])[0]
            else:
                factor = scipy.linalg.cho_factor(self.hessian)
                self.cache["solve"] = lambda b: scipy.linalg.cho_solve(factor, b)
        return self.cache["solve"](g)


@limits_blas_threads
def coordinated_identities(votes: Votes, options: ScalingOptions, candidates: np.ndarray,
                           short_votes: int = SHORT_LIVED_VOTES, alpha: float = DEFAULT_GROUP_ALPHA,
                           lapse: float = 0.0, designs: list[SetDesign] | None = None,
                           max_items: int = 20, fingerprints: Mapping[str, Sequence[str]] | None = None
                           ) -> CoordinatedItems:
    """Find items that short-lived identities, as a group, favour or disfavour beyond the scale.

    Parameters
    ----------
    votes : Votes
    options : ScalingOptions
        Method options; the fit is the MLE in z units without anchors (as the targeted-bias test's).
    candidates : (W,) bool array
        Workers taking part (those screening kept); the others are neither tested nor used.
    short_votes : int
        Largest number of scaling votes of a short-lived identity.
    alpha : float
        Family-wise error rate over the item IDs tested.
    lapse : float
        Lapse rate of the honest observer. 0 by default: the established fit is a plain Thurstone fit,
        whose scale already absorbs its workers' slips, and the group's wins are predicted with the
        model that was fitted (a lapse on top would pull every prediction toward 1/2 and make the
        clearest items look favoured or disfavoured). The leave-one-out test needs one so that a single
        slip of one worker is not evidence; a sum over many identities does not.
    designs : list of SetDesign, optional
        :func:`~analysis.scaling.set_designs` of ``votes``.
    max_items : int
        Most items declared coordinated (a bound on the rounds).
    fingerprints : mapping, optional
        ``{name: (W,) values}``, e.g. workers.csv's ``address_group`` and ``agent_group`` in the order of
        ``votes.worker_ids`` (``""``: unknown). Short-lived identities sharing a value are tested as a
        group first (:func:`fingerprint_groups`).

    Returns
    -------
    CoordinatedItems
    """
    if not 0 < alpha < 1:
        raise ValueError(f"the group test's alpha must be in (0, 1), got {alpha}")
    if short_votes < 1:
        raise ValueError(f"short_votes must be at least 1, got {short_votes}")
    designs = set_designs(votes) if designs is None else designs
    W, V = len(votes.worker_ids), len(votes)
    candidates = np.asarray(candidates, dtype=bool)
    n = scaling_vote_counts(votes, designs)
    short = candidates & (n > 0) & (n <= short_votes)
    established = candidates & (n > short_votes)

    def empty(reason: str, tested: int = 0) -> CoordinatedItems:
        return CoordinatedItems(short, established, [], np.zeros(V, dtype=bool), [[] for _ in range(W)], tested,
                                reason)

    if not short.any():
        return empty("no short-lived identities")
    if not established.any():
        return empty("no established workers to fit the scale without the short-lived identities")
    fits = [f for d in designs if (f := _fit_without_short(votes, d, options, short, established, lapse))]
    if not fits:
        return empty("no set has votes of both short-lived and established workers")

    labels, label_of_item = np.unique(votes.item_ids.astype(str), return_inverse=True)
    L = len(labels)
    # Per short-lived vote (concatenated over sets): the item ID of each side, the residual of the first.
    side_first = np.concatenate([label_of_item[f.design.items[f.first]] for f in fits])
    side_second = np.concatenate([label_of_item[f.design.items[f.second]] for f in fits])
    residual = np.concatenate([f.residual for f in fits])
    variance = np.concatenate([f.variance for f in fits])
    prob = np.concatenate([f.probability for f in fits])
    won = np.concatenate([f.design.first_won[f.short] for f in fits])
    active = np.ones(len(residual), dtype=bool)
    met = np.bincount(side_first, minlength=L) + np.bincount(side_second, minlength=L)
    tested = int((met > 0).sum())
    voter = votes.worker[np.concatenate([f.design.votes[f.short] for f in fits])]
    found = _fingerprint_items(fingerprint_groups(fingerprints or {}, short), voter, side_first, side_second,
                               prob, won, active, labels, alpha, max_items)
    level = alpha / max(tested, 1)   # Bonferroni over the item IDs tested
    for _ in range(max_items - len(found)):
        use = np.flatnonzero(active)
        a = active.astype(float)
        total = np.bincount(side_first, a * residual, L) - np.bincount(side_second, a * residual, L)
        var = np.bincount(side_first, a * variance, L) + np.bincount(side_second, a * variance, L)
        # Exact tails of each item's wins (a sum of Bernoulli trials with the predicted probabilities):
        # where the item is a clear loser, a normal approximation would make two honest upsets
        # against an expectation of 0.05 look like a thousand-to-one event.
        wins = (np.bincount(side_first[use], won[use], L) + np.bincount(side_second[use], ~won[use], L))
        upper, lower = poisson_binomial_tails(np.concatenate([prob[use], 1.0 - prob[use]]),
                                              np.concatenate([side_first[use], side_second[use]]),
                                              np.rint(wins).astype(np.int64), L)
        exact = np.minimum(1.0, 2 * np.minimum(upper, lower))
        done = {item["label"] for item in found if "evidence" not in item}
        suspects = [k for k in np.argsort(exact, kind="stable") if exact[k] < level and k not in done]
        best, best_p, best_z = None, 1.0, 0.0
        for k in suspects:
            if exact[k] >= best_p:
                break  # later suspects cannot beat it: their p-value is at least the exact one
            # The established fit's own uncertainty, shared by all the item's predictions (delta method).
            z_k = total[k] / np.sqrt(var[k] + _prediction_variance(fits, k, active, side_first, side_second))
            p_k = max(float(exact[k]), float(2 * ndtr(-abs(z_k))))
            if p_k < level and p_k < best_p:
                best, best_p, best_z = k, p_k, z_k
        if best is None:
            break
        holding = active & ((side_first == best) | (side_second == best))
        found.append({"label": best, "item_id": str(labels[best]), "direction": "favours" if best_z > 0 else
                      "disfavours", "z": float(best_z), "p_value": best_p,
                      "votes": int(holding.sum()), "excess_wins": float(total[best]), "mask": holding})
        active &= ~holding

    set_aside = np.zeros(V, dtype=bool)
    global_vote = np.concatenate([f.design.votes[f.short] for f in fits])
    flags: list[list[str]] = [[] for _ in range(W)]
    for item in found:
        index = global_vote[item.pop("mask")]
        set_aside[index] = True
        label = f"{FLAG_SET_ASIDE}:{item['direction']}:{item['item_id']}"
        for w in np.unique(votes.worker[index]):
            flags[w].append(label)
        item.pop("label")
    return CoordinatedItems(short, established, found, set_aside, flags, tested)


def fingerprint_groups(fingerprints: Mapping[str, Sequence[str]], short: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The groups of short-lived identities sharing a fingerprint: ``(name, (W,) bool members)`` for every
    non-empty value of each fingerprint that at least two of the ``short`` identities carry."""
    groups = []
    for name, values in fingerprints.items():
        values = np.asarray(values, dtype=str)
        if values.shape != short.shape:
            raise ValueError(f"fingerprint {name!r} has {values.size} values for {short.size} workers")
        codes, inverse, counts = np.unique(values[short], return_inverse=True, return_counts=True)
        for k in np.flatnonzero((counts >= 2) & (codes != "")):
            members = np.zeros(short.shape, dtype=bool)
            members[np.flatnonzero(short)[inverse == k]] = True
            groups.append((name, members))
    return groups


def _fingerprint_items(groups: list[tuple[str, np.ndarray]], voter: np.ndarray, side_first: np.ndarray,
                       side_second: np.ndarray, prob: np.ndarray, won: np.ndarray, active: np.ndarray,
                       labels: np.ndarray, alpha: float, max_items: int) -> list[dict]:
    """The items each fingerprint group's short-lived votes favour or disfavour beyond the scale.

    Every (group, item) the group's votes meet is one test of the family (Bonferroni at ``alpha``); the
    two-sided exact tail of the group's wins of the item decides, the most significant first, and a
    found (group, item)'s votes (on pairs holding the item) leave ``active`` before the next round.
    Returns the found items as :func:`coordinated_identities` lists them, with ``evidence`` (the
    fingerprint's name) and ``identities`` (the group's size).
    """
    L = len(labels)
    member_votes = [(name, members, np.flatnonzero(members[voter])) for name, members in groups]
    member_votes = [(name, members, rows) for name, members, rows in member_votes if len(rows)]
    tested = sum(int(np.count_nonzero(np.bincount(np.concatenate([side_first[r], side_second[r]]), minlength=L)))
                 for _, _, r in member_votes)
    level = alpha / max(tested, 1)
    found: list[dict] = []
    while member_votes and len(found) < max_items:
        best = None
        for g, (name, members, rows) in enumerate(member_votes):
            use = rows[active[rows]]
            if not len(use):
                continue
            wins = np.bincount(side_first[use], won[use], L) + np.bincount(side_second[use], ~won[use], L)
            upper, lower = poisson_binomial_tails(np.concatenate([prob[use], 1.0 - prob[use]]),
                                                  np.concatenate([side_first[use], side_second[use]]),
                                                  np.rint(wins).astype(np.int64), L)
            exact = np.minimum(1.0, 2 * np.minimum(upper, lower))
            k = int(np.argmin(exact))
            if exact[k] < level and (best is None or exact[k] < best[0]):
                best = (float(exact[k]), g, k, upper[k] < lower[k])
        if best is None:
            break
        p_value, g, k, favours = best
        name, members, rows = member_votes[g]
        holding = np.zeros(len(active), dtype=bool)
        holding[rows] = active[rows] & ((side_first[rows] == k) | (side_second[rows] == k))
        # The item's wins beyond expectation: first_won - P where it is first, the opposite where second.
        residual = won[holding].astype(float) - prob[holding]
        excess = float(np.sum(np.where(side_first[holding] == k, residual, -residual)))
        found.append({"label": k, "item_id": str(labels[k]), "direction": "favours" if favours else "disfavours",
                      "z": float(np.sign(excess) * -ndtri(max(p_value, 1e-300) / 2)),
                      "p_value": p_value, "votes": int(holding.sum()), "excess_wins": excess, "mask": holding,
                      "evidence": name, "identities": int(members.sum())})
        active &= ~holding
    return found


def _fit_without_short(votes: Votes, d: SetDesign, options: ScalingOptions, short: np.ndarray,
                       established: np.ndarray, lapse: float) -> _SetFit | None:
    """Fit set ``d`` from the established workers and predict its short-lived votes (None: nothing to test)."""
    voter = votes.worker[d.votes]
    weight = established[voter]
    short_votes = np.flatnonzero(short[voter])
    if not len(short_votes) or not weight.any():
        return None
    fit_options = replace(options, method="mle", anchors=False, allow_disconnected=True)
    s = fit_set(d, fit_options, weights=weight.astype(float))
    first, second = d.pairs[d.vote_pair, 0], d.pairs[d.vote_pair, 1]
    diff = s[first] - s[second]
    _, curv = vote_derivatives(diff[weight], d.first_won[weight])
    hessian = information_matrix(np.column_stack([first[weight], second[weight]]), curv, d.n_items,
                                 fit_options.prior_strength)
    f1, f2 = first[short_votes], second[short_votes]
    # The posterior predictive of a probit vote, Phi(gap / sqrt(1 + var(gap))), not Phi(gap): an item
    # that won or lost every established vote has a fitted gap that only the weak prior bounds, and
    # the plug-in prediction would make one honest upset look like a coordinated vote. var(gap) is the
    # Laplace approximation's (H^-1); above DENSE_LIMIT items its diagonal is taken as 1 / H_ii
    # (a lower bound) and the covariance of the two items is left out (in sparse designs it is small).
    if sp.issparse(hessian):
        inverse_diagonal = 1.0 / hessian.diagonal()
        spread = inverse_diagonal[f1] + inverse_diagonal[f2]
    else:
        cov = scipy.linalg.cho_solve(scipy.linalg.cho_factor(hessian), np.eye(d.n_items))
        spread = cov[f1, f1] + cov[f2, f2] - 2 * cov[f1, f2]
    scale = np.sqrt(1.0 + np.maximum(spread, 0.0))
    z = diff[short_votes] / scale
    p = lapse / 2 + (1 - lapse) * ndtr(z)
    slope = (1 - lapse) * np.exp(-0.5 * z ** 2) / np.sqrt(2 * np.pi) / scale
    return _SetFit(d, hessian, short_votes, f1, f2, p, d.first_won[short_votes] - p, p * (1 - p), slope)


def _prediction_variance(fits: list[_SetFit], label: int, active: np.ndarray,
                         side_first: np.ndarray, side_second: np.ndarray) -> float:
    """Variance of the expected wins of item ID ``label`` that comes from the established fit's uncertainty.

    The expected wins are a sum of ``P(first wins)`` terms; their gradient ``g`` with respect to the
    set's scale, through the inverse information ``H^-1``, gives ``g' H^-1 g`` per set (sets are
    fitted independently, so their terms add).
    """
    total, offset = 0.0, 0
    for f in fits:
        m = len(f.short)
        act = active[offset:offset + m]
        is_first = (side_first[offset:offset + m] == label) & act
        is_second = (side_second[offset:offset + m] == label) & act
        offset += m
        if not (is_first.any() or is_second.any()):
            continue
        # Expected wins of the item: P for votes where it is first, 1 - P where it is second.
        sign = np.where(is_first, 1.0, 0.0) - np.where(is_second, 1.0, 0.0)
        c = sign * f.slope
        g = (np.bincount(f.first, c, f.design.n_items) - np.bincount(f.second, c, f.design.n_items))
        total += float(g @ f.solve(g))
    return total
