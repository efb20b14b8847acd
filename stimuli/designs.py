"""Pair designs: which items of a set are compared with which.

Every function takes a seed or a :class:`numpy.random.Generator` and returns an
``(n_pairs, 2)`` integer array of item indices with ``i < j`` in each row,
sorted lexicographically, with no repeated pair. :func:`gold_pairs` works on
item IDs instead and returns pairs with a known correct answer.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

SeedLike = int | np.random.Generator | None


def _as_generator(seed: SeedLike) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _canonical(pairs: np.ndarray) -> np.ndarray:
    pairs = np.sort(np.asarray(pairs, dtype=np.int64), axis=1)
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    return pairs[order]


def is_connected(pairs: np.ndarray, n_items: int) -> bool:
    """True when the comparison graph of ``pairs`` over ``n_items`` items is connected."""
    if n_items <= 1:
        return True
    pairs = np.asarray(pairs)
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n_items, n_items))
    n_components, _ = connected_components(graph, directed=False)
    return n_components == 1


def full_design(n_items: int) -> np.ndarray:
    """All ``n_items * (n_items - 1) / 2`` pairs."""
    if n_items < 2:
        raise ValueError(f"a design needs at least 2 items, got {n_items}")
    i, j = np.triu_indices(n_items, k=1)
    return np.column_stack([i, j]).astype(np.int64)


def random_regular_design(n_items: int, degree: int = 6, seed: SeedLike = None,
                          max_attempts: int = 100) -> np.ndarray:
    """Random connected ``degree``-regular comparison graph (each item in ``degree`` pairs).

    The pairing (configuration) model matches ``degree`` stubs per item at random;
    the few self-loops and repeated pairs it makes are repaired by swapping
    endpoints with randomly chosen valid pairs, and graphs that come out
    disconnected are drawn again. Both StudyMB studies used ``degree=6``.

    Parameters
    ----------
    n_items : int
        Number of items in the set.
    degree : int
        Pairs per item; ``n_items * degree`` must be even and ``degree < n_items``.
        ``degree == n_items - 1`` gives the full design.
    seed : int, Generator or None
        Source of randomness.
    max_attempts : int
        Redraws allowed before giving up (only reached for pathological sizes).

    Returns
    -------
    ndarray of shape (n_items * degree // 2, 2)
    """
    if degree < 2 and n_items > 2:
        raise ValueError(f"a {degree}-regular design on {n_items} items is never connected; use degree >= 2")
    if degree >= n_items:
        raise ValueError(f"degree {degree} needs more than {degree} items, got {n_items}")
    if (n_items * degree) % 2:
        raise ValueError(f"n_items * degree must be even, got {n_items} * {degree}")
    if degree == n_items - 1:
        return full_design(n_items)
    rng = _as_generator(seed)
    for _ in range(max_attempts):
        pairs = _pairing_with_repair(n_items, degree, rng)
        if pairs is not None and is_connected(pairs, n_items):
            return _canonical(pairs)
    raise RuntimeError(f"no connected {degree}-regular graph on {n_items} items after {max_attempts} draws")


def _pairing_with_repair(n_items: int, degree: int, rng: np.random.Generator) -> np.ndarray | None:
    stubs = rng.permutation(np.repeat(np.arange(n_items, dtype=np.int64), degree))
    pairs = np.sort(stubs.reshape(-1, 2), axis=1)
    keys = pairs[:, 0] * n_items + pairs[:, 1]
    _, first = np.unique(keys, return_index=True)
    bad = np.ones(len(pairs), dtype=bool)
    bad[first] = False
    bad |= pairs[:, 0] == pairs[:, 1]
    edges = {int(k) for k in keys[~bad]}
    good_rows = list(np.flatnonzero(~bad))
    for row in np.flatnonzero(bad):
        u, v = (int(x) for x in pairs[row])
        for _ in range(1000):  # swap endpoints with a random valid pair until both new pairs are valid
            other = good_rows[int(rng.integers(len(good_rows)))]
            x, y = (int(w) for w in pairs[other])
            if rng.random() < 0.5:
                x, y = y, x
            new_a, new_b = (min(u, x), max(u, x)), (min(v, y), max(v, y))
            key_a, key_b = new_a[0] * n_items + new_a[1], new_b[0] * n_items + new_b[1]
            if u == x or v == y or key_a == key_b or key_a in edges or key_b in edges:
                continue
            edges.discard(int(pairs[other, 0]) * n_items + int(pairs[other, 1]))
            edges.update((key_a, key_b))
            pairs[other], pairs[row] = new_a, new_b
            good_rows.append(int(row))
            break
        else:
            return None
    return pairs


def banded_design(n_items: int, bandwidth: int) -> np.ndarray:
    """All pairs ``(k, l)`` with ``0 < l - k <= bandwidth``, items taken in their given order.

    StudyMB 2.0's JPEG experiment compared 13 images ordered by distortion with
    ``bandwidth=6`` (57 pairs): neighbours in quality are compared, far-apart
    ones (whose order is obvious) are not. ``bandwidth >= n_items - 1`` gives
    the full design.

    Returns
    -------
    ndarray of shape (n_pairs, 2), ``i < j``, sorted lexicographically.
    """
    if n_items < 2:
        raise ValueError(f"a design needs at least 2 items, got {n_items}")
    if bandwidth < 1:
        raise ValueError(f"bandwidth must be >= 1, got {bandwidth}")
    i, j = np.triu_indices(n_items, k=1)
    keep = j - i <= bandwidth
    return np.column_stack([i[keep], j[keep]]).astype(np.int64)


@dataclass(frozen=True)
class GoldPair:
    """A comparison with a known correct answer, for quizzes and hidden attention checks.

    ``item_a`` is shown on the left and ``item_b`` on the right; ``better`` is the
    one an attentive worker must choose (the reference, or the undegraded item).
    """

    item_a: str
    item_b: str
    better: str

    @property
    def worse(self) -> str:
        return self.item_b if self.better == self.item_a else self.item_a


def gold_pairs(good_items: Sequence[str], bad_items: Sequence[str] | None = None, *,
               degrade: Callable[[str], str] | None = None, n_pairs: int | None = None,
               seed: SeedLike = None) -> list[GoldPair]:
    """Gold pairs: a good item against a strongly degraded one, with the answer known.

    Give exactly one source of bad items:

    * ``bad_items``: IDs known to be clearly worse than every good item (e.g. a
      heavily blurred or noised reference prepared in advance). Each pair joins
      a good item with a bad item; bad items are used as evenly as possible.
    * ``degrade``: a callable mapping a good item's ID to the ID of its strongly
      degraded version (the caller creates that image, e.g. while building the
      stimuli); each pair is ``(item, degrade(item))``.

    Good items are used in a random order, each at most once before any repeats,
    and the left/right position of the better item is drawn at random, so the
    correct answer is not always on the same side.

    Parameters
    ----------
    good_items : sequence of str
        The references / undegraded items (the correct answers).
    bad_items : sequence of str, optional
        Known-bad items.
    degrade : callable, optional
        ``good_id -> degraded_id``.
    n_pairs : int, optional
        Number of pairs (default: one per good item).
    seed : int, Generator or None
        Source of randomness.

    Returns
    -------
    list of GoldPair
    """
    if (bad_items is None) == (degrade is None):
        raise ValueError("gold_pairs needs exactly one of bad_items or degrade")
    good = [str(item) for item in good_items]
    if not good:
        raise ValueError("gold_pairs needs at least one good item")
    if bad_items is not None:
        bad = [str(item) for item in bad_items]
        if not bad:
            raise ValueError("bad_items is empty")
        if overlap := set(good) & set(bad):
            raise ValueError(f"items both good and bad: {sorted(overlap)}")
    n_pairs = len(good) if n_pairs is None else int(n_pairs)
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be >= 1, got {n_pairs}")
    rng = _as_generator(seed)
    chosen_good = _balanced_draw(good, n_pairs, rng)
    partners = _balanced_draw(bad, n_pairs, rng) if bad_items is not None else [degrade(g) for g in chosen_good]
    pairs = []
    for g, b in zip(chosen_good, partners):
        if b == g:
            raise ValueError(f"degrade({g!r}) returned the item itself")
        left, right = (g, b) if rng.random() < 0.5 else (b, g)
        pairs.append(GoldPair(left, right, g))
    return pairs


def _balanced_draw(items: list[str], n: int, rng: np.random.Generator) -> list[str]:
    """``n`` items: whole random permutations of ``items`` repeated, so usage counts differ by at most 1."""
    rounds = -(-n // len(items))
    return [items[k] for _ in range(rounds) for k in rng.permutation(len(items))][:n]
