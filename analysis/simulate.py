"""Synthetic crowd studies with a known truth, for demos, tests and benchmarks.

Each set compares the same item IDs (methods across scenes, as in StudyMB):
the true scale of item ``k`` in a set is ``method_effect[k] + scene_effect``,
both Gaussian. Pairs come from a random ``degree``-regular design; each pair
gets ``votes_per_pair`` votes from distinct workers, drawn with per-worker
activity weights so that some workers answer much more than others.

Worker types
------------
honest
    Thurstone Case V observer: picks ``a`` with probability ``Phi(s_a - s_b)``.
random
    Clicks either side with probability 1/2.
left
    Always clicks the left image; the left/right placement of ``item_a`` is
    randomised per trial (``position_a``), as the server does.
favour, disfavour
    Colluders: answer like ``colluder_style`` (honest observers or machine observers) except on
    pairs holding the target item (``target_item``, the same ID in every set), whose scale they
    see shifted by ``collusion_bias`` z units up (favour) or down (disfavour); ``inf``: they always
    (never) pick it.
machine
    A machine observer: picks the image closer to the reference, i.e. the lower of the two errors in
    ``SimulatedStudy.errors`` (the true scale, reversed, plus per-item noise of SD ``metric_noise``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import ndtr

from stimuli.designs import random_regular_design

from .formats import Votes, atomic_write_text, build_votes, table_csv, write_votes


@dataclass(frozen=True)
class SimulatedStudy:
    votes: Votes
    truth: dict[str, np.ndarray]   # set_id -> true scale per item, ordered like item_ids
    item_ids: np.ndarray           # item IDs shared by every set
    worker_ids: np.ndarray
    worker_type: np.ndarray        # "honest", "random", "left", "favour", "disfavour" or "machine" per worker
    errors: dict[tuple[str, str], float] | None = None  # (set_id, item_id) -> error of a machine observer

    @property
    def honest_mask(self) -> np.ndarray:
        """(W,) mask over ``votes.worker_ids`` of honest workers."""
        lookup = dict(zip(self.worker_ids, self.worker_type))
        return np.array([lookup[w] == "honest" for w in self.votes.worker_ids])


def simulate_study(n_sets: int = 8, n_items: int = 155, degree: int = 6, votes_per_pair: int = 20,
                   n_workers: int = 300, random_clickers: float = 0.25, left_clickers: float = 0.05,
                   method_sd: float = 0.8, scene_sd: float = 0.6, activity_sd: float = 0.5,
                   seed: int | np.random.Generator | None = 0, *, colluders: float = 0.0,
                   collusion_bias: float = np.inf, collusion_direction: int = 1, target_item: int = 0,
                   colluder_style: str = "honest", machine_observers: float = 0.0,
                   metric_noise: float = 0.5) -> SimulatedStudy:
    """Simulate a paired-comparison crowd study.

    Parameters
    ----------
    n_sets, n_items, degree, votes_per_pair
        Study size: ``n_sets * n_items * degree / 2`` pairs, each voted ``votes_per_pair`` times.
    n_workers : int
        Crowd size; must be at least ``votes_per_pair`` (a pair's votes come from distinct workers).
    random_clickers, left_clickers : float
        Shares of workers of each bad type (rounded to whole workers); the rest are honest.
    method_sd, scene_sd : float
        SD of the item effect shared across sets and of its per-set deviation (z units).
    activity_sd : float
        SD of the log activity weight of workers (0: everyone answers about equally often).
    colluders : float
        Share of workers biased for (``collusion_direction`` 1) or against (-1) item ``target_item``
        by ``collusion_bias`` z units (``inf``: always, never); otherwise they answer as
        ``colluder_style`` ("honest" or "machine") workers do.
    machine_observers : float
        Share of machine observers (they pick the lower error; errors are the reversed true scale
        plus noise of SD ``metric_noise``, returned in ``SimulatedStudy.errors``).
    """
    if n_workers < votes_per_pair:
        raise ValueError(f"n_workers ({n_workers}) must be at least votes_per_pair ({votes_per_pair})")
    if not 0 <= random_clickers + left_clickers + colluders + machine_observers <= 1:
        raise ValueError("the shares of random, left, colluding and machine workers must add up to at most 1")
    if colluder_style not in ("honest", "machine") or collusion_direction not in (1, -1):
        raise ValueError("colluder_style must be 'honest' or 'machine', collusion_direction 1 or -1")
    if not 0 <= target_item < n_items:
        raise ValueError(f"target_item must be an item index below {n_items}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n_random, n_left = round(n_workers * random_clickers), round(n_workers * left_clickers)
    n_colluding, n_machine = round(n_workers * colluders), round(n_workers * machine_observers)
    colluding = "favour" if collusion_direction > 0 else "disfavour"
    worker_type = np.array(["random"] * n_random + ["left"] * n_left + [colluding] * n_colluding
                           + ["machine"] * n_machine
                           + ["honest"] * (n_workers - n_random - n_left - n_colluding - n_machine))
    needs_errors = n_machine > 0 or (n_colluding > 0 and colluder_style == "machine")
    errors: dict[tuple[str, str], float] | None = {} if needs_errors else None
    worker_type = worker_type[rng.permutation(n_workers)]
    worker_ids = np.array([f"W{k:05d}" for k in range(n_workers)])
    log_activity = rng.normal(0.0, activity_sd, n_workers)
    item_ids = np.array([f"m{k:03d}" for k in range(n_items)])
    method_effect = rng.normal(0.0, method_sd, n_items)

    truth, columns = {}, {k: [] for k in ("worker", "set", "a", "b", "a_won", "left")}
    for s in range(n_sets):
        set_id = f"set{s + 1:02d}"
        true_scale = method_effect + rng.normal(0.0, scene_sd, n_items)
        truth[set_id] = true_scale
        pairs = random_regular_design(n_items, degree, rng)
        # Weighted sampling of distinct workers per pair (Gumbel top-k).
        keys = log_activity + rng.gumbel(size=(len(pairs), n_workers))
        workers = np.argpartition(-keys, votes_per_pair - 1, axis=1)[:, :votes_per_pair].ravel()
        a = np.repeat(pairs[:, 0], votes_per_pair)
        b = np.repeat(pairs[:, 1], votes_per_pair)
        swap = rng.random(len(a)) < 0.5  # which item is item_a is arbitrary in a votes file
        a, b = np.where(swap, b, a), np.where(swap, a, b)
        a_left = rng.random(len(a)) < 0.5
        kind = worker_type[workers]
        gap = true_scale[a] - true_scale[b]
        p_a = np.select([kind == "honest", kind == "random"], [ndtr(gap), np.full(len(a), 0.5)], default=np.nan)
        if errors is not None:  # drawn only when used, so that studies without them keep their random stream
            error = -true_scale + rng.normal(0.0, metric_noise, n_items)
            errors.update({(set_id, str(i)): float(e) for i, e in zip(item_ids, error)})
            machine_gap = np.where(error[a] < error[b], np.inf, -np.inf)
            p_a = np.where(kind == "machine", ndtr(machine_gap), p_a)
        if n_colluding:
            base = machine_gap if colluder_style == "machine" else gap
            toward = (a == target_item).astype(float) - (b == target_item)
            bias = np.zeros(len(a))
            bias[toward != 0] = collusion_direction * collusion_bias * toward[toward != 0]
            with np.errstate(invalid="ignore"):  # inf - inf where the bias overrules a machine's answer
                shifted = np.where(np.isinf(bias), bias, base + bias)
            p_a = np.where(kind == colluding, ndtr(shifted), p_a)
        a_won = np.where(kind == "left", a_left, rng.random(len(a)) < p_a)
        for key, value in zip(columns, (workers, np.full(len(a), s), a, b, a_won, a_left)):
            columns[key].append(value)
    c = {k: np.concatenate(v) for k, v in columns.items()}
    order = rng.permutation(len(c["worker"]))  # votes arrive interleaved, not set by set
    c = {k: v[order] for k, v in c.items()}
    set_ids = np.array(list(truth))
    votes = build_votes(worker_ids[c["worker"]], set_ids[c["set"]], item_ids[c["a"]], item_ids[c["b"]],
                        np.where(c["a_won"], item_ids[c["a"]], item_ids[c["b"]]),
                        extra={"position_a": np.where(c["left"], "left", "right")}, path="simulation")
    return SimulatedStudy(votes, truth, item_ids, worker_ids, worker_type, errors)


def write_study(study: SimulatedStudy, out: str | Path) -> dict[str, Path]:
    """Write votes.csv, truth.csv (``set_id,item_id,true_scale``) and workers_truth.csv."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"votes": out / "votes.csv", "truth": out / "truth.csv", "workers": out / "workers_truth.csv"}
    write_votes(paths["votes"], study.votes)
    truth_rows = [{"set_id": s, "item_id": i, "true_scale": v}
                  for s, values in study.truth.items() for i, v in zip(study.item_ids, values)]
    atomic_write_text(paths["truth"], table_csv(("set_id", "item_id", "true_scale"), truth_rows))
    worker_rows = [{"worker_id": w, "type": t} for w, t in zip(study.worker_ids, study.worker_type)]
    atomic_write_text(paths["workers"], table_csv(("worker_id", "type"), worker_rows))
    return paths


def add_one_page_identities(study: SimulatedStudy, share: float, page: int = 20, *, target_item: int = 0,
                            collusion_bias: float = np.inf, collusion_direction: int = 1, colluding: bool = True,
                            seed: int | np.random.Generator | None = 0) -> SimulatedStudy:
    """Add identities that each answer one page of ``page`` votes: sock puppets, or honest one-page workers.

    The new votes are ``share`` of the returned study's votes. Each identity's page is ``page``
    distinct pairs drawn uniformly from the study's pairs (all sets), as an assignment would give
    them, so a puppet meets the target item only as often as its pairs happen to hold it.
    ``colluding`` puppets (types "favour"/"disfavour") see ``item_ids[target_item]`` shifted as
    :func:`simulate_study`'s colluders do; otherwise the identities are honest observers.
    """
    if not 0 < share < 1 or page < 1:
        raise ValueError("share must be in (0, 1) and page at least 1")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    v = study.votes
    set_of = v.item_set[v.item_a]
    pairs = np.unique(np.column_stack([set_of, np.minimum(v.item_a, v.item_b), np.maximum(v.item_a, v.item_b)]),
                      axis=0)
    page = min(page, len(pairs))
    n_ids = max(1, int(np.ceil(share / (1 - share) * len(v) / page)))
    prefix = "P" if colluding else "H"
    new_ids = np.array([f"{prefix}{k:05d}" for k in range(n_ids)])
    if np.isin(new_ids, study.worker_ids).any():
        raise ValueError("the study already holds one-page identities of this kind")
    chosen = np.concatenate([rng.choice(len(pairs), page, replace=False) for _ in range(n_ids)])
    s, a, b = pairs[chosen, 0], pairs[chosen, 1], pairs[chosen, 2]
    swap = rng.random(len(a)) < 0.5
    a, b = np.where(swap, b, a), np.where(swap, a, b)
    position = {str(k): i for i, k in enumerate(study.item_ids)}
    local = np.array([position[str(i)] for i in v.item_ids])  # global item index -> index in the truth arrays
    truth = np.array([study.truth[str(set_id)] for set_id in v.set_ids])  # (sets, items)
    true = truth[s, local[a]] - truth[s, local[b]]
    if colluding:
        toward = (local[a] == target_item).astype(float) - (local[b] == target_item)
        on = toward != 0
        bias = collusion_direction * collusion_bias * toward[on]
        true[on] = bias if np.isinf(collusion_bias) else true[on] + bias
    a_won = rng.random(len(a)) < ndtr(true)
    kind = ("favour" if collusion_direction > 0 else "disfavour") if colluding else "honest"
    old_a, old_b = v.item_ids[v.item_a], v.item_ids[v.item_b]
    votes = build_votes(np.concatenate([v.worker_ids[v.worker], np.repeat(new_ids, page)]),
                        np.concatenate([v.set_ids[set_of], v.set_ids[s]]),
                        np.concatenate([old_a, v.item_ids[a]]), np.concatenate([old_b, v.item_ids[b]]),
                        np.concatenate([v.item_ids[v.winner], np.where(a_won, v.item_ids[a], v.item_ids[b])]),
                        extra={"position_a": np.concatenate([v.extra["position_a"],
                                                             np.where(rng.random(len(a)) < 0.5, "left", "right")])},
                        path="simulation")
    return SimulatedStudy(votes, study.truth, study.item_ids, np.concatenate([study.worker_ids, new_ids]),
                          np.concatenate([study.worker_type, np.full(n_ids, kind)]), study.errors)
