"""Motion-perception statistics (HuPerFlow paradigm, issue 5).

Vectors are optical-flow vectors in pixels per (30 Hz) frame in **image
coordinates**: ``u`` to the right, ``v`` down. Directions are reported as the
y-up polar angle ``atan2(-v, u)`` in degrees, 0-360, so "up" on the screen is
90 degrees.

Equation numbers refer to Yang et al., "HuPerFlow" (seed 003): eq. 1 is the
end-point error, eq. 2 the partial correlation between a model and the human
responses controlling for the ground truth, eqs. S1-S3 (Appendix 3) the three
factors of the response consistency index (RCI).

The statistics are pure functions over numpy arrays (scalars broadcast); the
readers at the end turn motion.csv, prediction CSVs and frames.csv into arrays
and raise :class:`MotionFormatError` naming file, line and column.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .correlation import finite_pairs
from .formats import read_csv_table

PRACTICE_MAX_EPE = 10.0
PRACTICE_MAX_DIR_DEG = 30.0


# --------------------------------------------------------------------------- vector basics

def epe(u1, v1, u2, v2) -> np.ndarray:
    """End-point error (eq. 1): Euclidean distance between two flow vectors.

    Parameters
    ----------
    u1, v1, u2, v2 : array_like
        Components of the two vectors (image coordinates, px/frame); broadcast.

    Returns
    -------
    numpy.ndarray
        ``hypot(u1 - u2, v1 - v2)`` (a 0-d array for scalar input).
    """
    return np.hypot(np.asarray(u1, float) - np.asarray(u2, float),
                    np.asarray(v1, float) - np.asarray(v2, float))


def direction_deg(u, v) -> np.ndarray:
    """Direction of an image-coordinate vector as a y-up polar angle in [0, 360).

    ``v`` points down in the image, so the angle is ``atan2(-v, u)``: a vector
    pointing up on the screen (``v < 0``) has direction 90. The zero vector
    gets direction 0 (``atan2(0, 0)``).

    Parameters
    ----------
    u, v : array_like
        Vector components (image coordinates).

    Returns
    -------
    numpy.ndarray
        Degrees in [0, 360).
    """
    deg = np.degrees(np.arctan2(-np.asarray(v, float), np.asarray(u, float)))
    deg = np.mod(deg, 360.0)
    # mod of a tiny negative number rounds to exactly 360.0
    return np.where(deg >= 360.0, 0.0, deg)


def speed(u, v) -> np.ndarray:
    """Vector length ``hypot(u, v)`` (px/frame)."""
    return np.hypot(np.asarray(u, float), np.asarray(v, float))


def angle_difference_deg(u1, v1, u2, v2) -> np.ndarray:
    """Unsigned angle between two vectors in degrees, 0-180.

    Computed from the directions and wrapped, so 350 vs 10 degrees is 20. A
    zero vector has direction 0 (see :func:`direction_deg`).
    """
    d = np.abs(direction_deg(u1, v1) - direction_deg(u2, v2))
    return np.minimum(d, 360.0 - d)


def practice_passed(gt_u, gt_v, resp_u, resp_v, max_epe: float = PRACTICE_MAX_EPE,
                    max_dir_deg: float = PRACTICE_MAX_DIR_DEG) -> np.ndarray:
    """Practice verdict: EPE ≤ ``max_epe`` and direction difference ≤ ``max_dir_deg``.

    Parameters
    ----------
    gt_u, gt_v : array_like
        Ground-truth vector of the trial(s).
    resp_u, resp_v : array_like
        The observer's response vector(s).
    max_epe : float
        Largest accepted end-point error (px/frame), default 10.
    max_dir_deg : float
        Largest accepted angle between response and ground truth, default 30.

    Returns
    -------
    numpy.ndarray of bool
        A 0-d array for scalar input (``bool(...)`` works).
    """
    ok_epe = epe(resp_u, resp_v, gt_u, gt_v) <= max_epe
    ok_dir = angle_difference_deg(resp_u, resp_v, gt_u, gt_v) <= max_dir_deg
    return np.logical_and(ok_epe, ok_dir)


# --------------------------------------------------------------------------- correlations

def pearson_r(a, b) -> float:
    """Pearson correlation of two 1-D samples; NaN when undefined.

    Undefined means fewer than 2 finite pairs or zero variance in either
    sample. Pairs with a NaN in either sample are dropped.
    """
    a, b = finite_pairs(a, b)
    if a.size < 2:
        return float("nan")
    da, db = a - a.mean(), b - b.mean()
    den = np.sqrt(np.dot(da, da) * np.dot(db, db))
    if den == 0.0:
        return float("nan")
    return float(np.clip(np.dot(da, db) / den, -1.0, 1.0))


def _pool(u, v) -> np.ndarray:
    return np.concatenate([np.asarray(u, float).ravel(), np.asarray(v, float).ravel()])


def pooled_uv_r(a_u, a_v, b_u, b_v) -> float:
    """Pearson r with u and v of all probes pooled into one sample of length 2n.

    This is how HuPerFlow correlates flow fields ("r (uv)" in Tables S1-S12):
    ``pearson([a_u, a_v], [b_u, b_v])``.

    Parameters
    ----------
    a_u, a_v, b_u, b_v : array_like, shape (n,)
        The two vector sets, probe by probe.

    Returns
    -------
    float
        r in [-1, 1], NaN when undefined (n < 1 or a constant sample).
    """
    return pearson_r(_pool(a_u, a_v), _pool(b_u, b_v))


def screening_r(gt_u, gt_v, resp_u, resp_v) -> float:
    """RDK screening score: :func:`pooled_uv_r` of responses against the true vectors."""
    return pooled_uv_r(gt_u, gt_v, resp_u, resp_v)


def _as_vectors(x, name: str = "vectors") -> np.ndarray:
    """``x`` as a float array of shape (n, 2) (columns u, v)."""
    a = np.asarray(x, float)
    if a.ndim == 1 and a.shape[0] == 2:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != 2:
        raise ValueError(f"{name} must have shape (n, 2) with columns u, v; got {a.shape}")
    return a


def circular_mean_deg(deg) -> float:
    """Circular mean of angles in degrees (direction of the mean unit vector), in [0, 360)."""
    rad = np.radians(np.asarray(deg, float))
    return float(np.mod(np.degrees(np.arctan2(np.sin(rad).sum(), np.cos(rad).sum())), 360.0))


def circular_r(a_deg, b_deg) -> float:
    """Circular-circular correlation of Jammalamadaka and SenGupta (Topics in Circular Statistics, 2001).

    ``r = Σ sin(a−ā)·sin(b−b̄) / sqrt(Σ sin²(a−ā) · Σ sin²(b−b̄))`` with ``ā``,
    ``b̄`` the circular means. Unlike Pearson's r on raw angles it does not
    depend on where the 0/360 cut lies: 359° and 1° are 2° apart. It equals 1
    for identical samples and lies in [−1, 1]. NaN with fewer than 2 pairs or
    when either sample has no spread around its mean.
    """
    a, b = finite_pairs(a_deg, b_deg)
    if a.size < 2:
        return float("nan")
    sa = np.sin(np.radians(a - circular_mean_deg(a)))
    sb = np.sin(np.radians(b - circular_mean_deg(b)))
    den = np.sqrt(np.dot(sa, sa) * np.dot(sb, sb))
    if den < 1e-12:
        return float("nan")
    return float(np.clip(np.dot(sa, sb) / den, -1.0, 1.0))


def direction_r(a_u, a_v, b_u, b_v) -> float:
    """Correlation of the directions of two vector sets (circular, see :func:`circular_r`).

    HuPerFlow reports "r (dir)" without saying how the wrap at 0/360 is
    handled; a Pearson r on angles changes when a direction crosses the cut,
    so we use the Jammalamadaka-SenGupta circular correlation and name the
    output columns ``..._dir_circ``. Probes where either vector is zero (no
    direction) are left out.
    """
    a_u, a_v, b_u, b_v = (np.asarray(x, float).ravel() for x in (a_u, a_v, b_u, b_v))
    moving = (np.hypot(a_u, a_v) > 0) & (np.hypot(b_u, b_v) > 0)
    return circular_r(direction_deg(a_u[moving], a_v[moving]), direction_deg(b_u[moving], b_v[moving]))


def speed_r(a_u, a_v, b_u, b_v) -> float:
    """Pearson r of the speeds ``hypot(u, v)`` of two vector sets ("r (spd)")."""
    return pearson_r(speed(a_u, a_v), speed(b_u, b_v))


CORRELATIONS = {"uv": pooled_uv_r, "dir": direction_r, "spd": speed_r}


def undefined_reason(a, b, kind: str = "uv", names: tuple[str, str] = ("a", "b")) -> str | None:
    """Why :func:`vector_r` of the (n, 2) vector sets ``a`` and ``b`` is NaN; None when it is defined.

    The reasons follow the rules of :func:`pearson_r` and :func:`circular_r`: too few
    usable probes (both vectors finite; for directions, both also non-zero; 2 for
    speeds and directions, 1 for pooled u and v),
    or no spread in one of the samples (every u and v, speed or direction equal).
    ``names`` name the two sets in the message.
    """
    a, b = _as_vectors(a, "a"), _as_vectors(b, "b")
    usable = np.isfinite(a).all(1) & np.isfinite(b).all(1)
    if kind == "dir":
        usable &= (np.hypot(*a.T) > 0) & (np.hypot(*b.T) > 0)
    n = int(usable.sum())
    needed = 1 if kind == "uv" else 2          # pooled u and v: one probe gives a sample of two
    if n < needed:
        what = "probes with motion in both" if kind == "dir" else "probes"
        return f"{n} {what} (at least {needed} needed)"
    for name, x in zip(names, (a[usable], b[usable])):
        if kind == "uv" and np.ptp(x) == 0:
            return f"every {name} u and v equal (no variance)"
        if kind == "spd" and np.ptp(np.hypot(*x.T)) == 0:
            return f"every {name} speed equal (no variance)"
        if kind == "dir":
            deg = direction_deg(*x.T)
            spread = np.sin(np.radians(deg - circular_mean_deg(deg)))
            if np.dot(spread, spread) < 1e-12:
                return f"every {name} direction equal or opposite (no spread around the circular mean)"
    return None if np.isfinite(vector_r(a, b, kind)) else "undefined"


def vector_r(a, b, kind: str = "uv") -> float:
    """Correlation of two (n, 2) vector sets: ``kind`` "uv" (pooled), "dir" (circular) or "spd"."""
    a, b = _as_vectors(a, "a"), _as_vectors(b, "b")
    if kind not in CORRELATIONS:
        raise ValueError(f"kind must be one of {', '.join(CORRELATIONS)}, got {kind!r}")
    return CORRELATIONS[kind](a[:, 0], a[:, 1], b[:, 0], b[:, 1])


# --------------------------------------------------------------------------- partial correlation (eq. 2)

def partial_r(r_resp_model: float, r_resp_gt: float, r_model_gt: float) -> float:
    """First-order partial correlation (eq. 2) from the three pairwise correlations.

    ``ρ = (r_rm − r_rg·r_mg) / (sqrt(1 − r_rg²)·sqrt(1 − r_mg²))``. NaN when
    either |r| with the ground truth is 1 (e.g. the model *is* the ground
    truth: nothing is left once GT is controlled for) or any input is NaN.
    """
    den = np.sqrt(max(0.0, 1.0 - r_resp_gt ** 2)) * np.sqrt(max(0.0, 1.0 - r_model_gt ** 2))
    if not np.isfinite(den) or den < 1e-12 or not np.isfinite(r_resp_model):
        return float("nan")
    return float(np.clip((r_resp_model - r_resp_gt * r_model_gt) / den, -1.0, 1.0))


def partial_correlation(resp, model, gt, kind: str = "uv") -> float:
    """Partial correlation of a model with human responses controlling for GT (eq. 2).

    Parameters
    ----------
    resp, model, gt : array_like, shape (n, 2)
        Per-probe human mean vectors, model predictions and ground truth
        (columns u, v; image coordinates).
    kind : {"uv", "dir", "spd"}
        Which correlation enters eq. 2: u and v pooled (:func:`pooled_uv_r`,
        the paper's ρ_uv), circular correlation of directions
        (:func:`direction_r`) or Pearson r of speeds (:func:`speed_r`).

    Returns
    -------
    float
        ρ in [−1, 1]; NaN when undefined (see :func:`partial_r`). Probes with a
        non-finite value in any of the three inputs are left out.
    """
    resp, model, gt = _as_vectors(resp, "resp"), _as_vectors(model, "model"), _as_vectors(gt, "gt")
    ok = np.isfinite(resp).all(1) & np.isfinite(model).all(1) & np.isfinite(gt).all(1)
    resp, model, gt = resp[ok], model[ok], gt[ok]
    return partial_r(vector_r(resp, model, kind), vector_r(resp, gt, kind), vector_r(model, gt, kind))


# --------------------------------------------------------------------------- RCI (eqs. S1-S3)

def rci_components(resp, model, gt) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three factors of the response consistency index per probe.

    With R the human response, G the ground truth, M the model prediction and
    O the origin (all (n, 2)):

    * A (eq. S1) = |GR| / (|OG| + |OR|), in [0, 1]: how far the response is
      from the truth, relative to the two vectors' lengths.
    * B (eq. S2) = cos∠(GR, GM) = GR·GM / (|GR|·|GM|), in [−1, 1]: whether the
      model errs in the same direction as the human.
    * C (eq. S3) = |GM| / (|GM| + |RM|), in [0, 1]: closer to 1 the closer the
      model is to the response than to the truth.

    Degenerate cases (defined here; the paper does not say):

    * R = G (no human error, including R = G = 0): A = 0 and B = 0 (GR has no
      direction), so RCI = 0 -- there is no illusion to be consistent with.
    * M = G (the model has no error): B = 0 and C = 0, so RCI = 0.
    * M = R ≠ G: C = 1, B = 1, RCI = A.
    """
    resp, model, gt = _as_vectors(resp, "resp"), _as_vectors(model, "model"), _as_vectors(gt, "gt")
    gr, gm, rm = resp - gt, model - gt, model - resp
    n_gr, n_gm, n_rm = (np.hypot(x[:, 0], x[:, 1]) for x in (gr, gm, rm))
    n_og, n_or = np.hypot(gt[:, 0], gt[:, 1]), np.hypot(resp[:, 0], resp[:, 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        a = np.where(n_og + n_or > 0, n_gr / (n_og + n_or), 0.0)
        cos = (gr * gm).sum(1) / (n_gr * n_gm)
        b = np.where((n_gr > 0) & (n_gm > 0), np.clip(cos, -1.0, 1.0), 0.0)
        c = np.where(n_gm + n_rm > 0, n_gm / (n_gm + n_rm), 0.0)
    # propagate missing inputs instead of silently scoring them 0
    missing = ~(np.isfinite(resp).all(1) & np.isfinite(model).all(1) & np.isfinite(gt).all(1))
    a, b, c = (np.where(missing, np.nan, x) for x in (a, b, c))
    return a, b, c


def rci(resp, model, gt) -> tuple[np.ndarray, float]:
    """Response consistency index (Appendix 3, eqs. S1-S3): per-probe A·B·C and its mean.

    Parameters
    ----------
    resp, model, gt : array_like, shape (n, 2)
        Human mean response, model prediction and ground truth per probe.

    Returns
    -------
    per_probe : numpy.ndarray, shape (n,)
        A·B·C in [−1, 1] (NaN where an input is missing); degenerate probes
        score 0, see :func:`rci_components`.
    mean : float
        Mean over the probes with a value (NaN when none). Near +1 when the
        model reproduces the human errors, near −1 when it errs the opposite way.
    """
    a, b, c = rci_components(resp, model, gt)
    per_probe = a * b * c
    ok = np.isfinite(per_probe)
    return per_probe, (float(per_probe[ok].mean()) if ok.any() else float("nan"))


# --------------------------------------------------------------------------- per-probe means

def _group(*keys) -> tuple[np.ndarray, np.ndarray]:
    """Integer group index of rows keyed by several string columns, and the first row of each group."""
    joined = np.asarray(keys[0], dtype=str)
    for k in keys[1:]:
        joined = np.char.add(np.char.add(joined, "\x1f"), np.asarray(k, dtype=str))
    _, first, index = np.unique(joined, return_index=True, return_inverse=True)
    # order groups by first appearance, so output follows the file
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[index.ravel()], first[order]


@dataclass(frozen=True)
class ProbeMeans:
    """Mean perceived vector per probe (or per observer and probe).

    All arrays have one entry per group; ``worker_id`` is empty-string when
    the means pool the observers.
    """

    clip_id: np.ndarray
    probe_id: np.ndarray
    dataset: np.ndarray
    worker_id: np.ndarray
    gt_u: np.ndarray
    gt_v: np.ndarray
    mean_u: np.ndarray
    mean_v: np.ndarray
    sd_u: np.ndarray        # sample SD (ddof=1) over trials; NaN for a single trial
    sd_v: np.ndarray
    n: np.ndarray           # trials
    n_observers: np.ndarray

    def __len__(self) -> int:
        return len(self.mean_u)

    @property
    def gt(self) -> np.ndarray:
        return np.column_stack([self.gt_u, self.gt_v])

    @property
    def mean(self) -> np.ndarray:
        return np.column_stack([self.mean_u, self.mean_v])

    @property
    def epe(self) -> np.ndarray:
        """EPE (eq. 1) of the mean perceived vector against the ground truth."""
        return epe(self.mean_u, self.mean_v, self.gt_u, self.gt_v)

    @property
    def keys(self) -> list[tuple[str, str]]:
        return list(zip(self.clip_id.tolist(), self.probe_id.tolist()))


def probe_means(clip_id, probe_id, gt_u, gt_v, resp_u, resp_v, *, worker_id=None, dataset=None,
                by_observer: bool = False) -> ProbeMeans:
    """Mean response vector per probe over repetitions and observers (or per observer).

    Parameters
    ----------
    clip_id, probe_id : array_like of str, shape (N,)
        Identify the probe of each trial.
    gt_u, gt_v, resp_u, resp_v : array_like, shape (N,)
        Ground truth and response of each trial.
    worker_id : array_like of str, optional
        Observer of each trial; needed for ``by_observer`` and ``n_observers``.
    dataset : array_like of str, optional
        Dataset of each trial (the first trial of a probe names it).
    by_observer : bool
        Average over an observer's repetitions only, one row per (observer,
        probe): what each point of HuPerFlow Fig. S2 shows.

    Returns
    -------
    ProbeMeans
        Groups in order of first appearance. The ground truth of a probe is
        the mean of its trials' GT (they are identical in a valid file).
    """
    cols = [np.asarray(c, float) for c in (gt_u, gt_v, resp_u, resp_v)]
    n_rows = cols[0].size
    clip_id, probe_id = np.asarray(clip_id, dtype=str), np.asarray(probe_id, dtype=str)
    worker = np.full(n_rows, "", dtype=object) if worker_id is None else np.asarray(worker_id, dtype=str)
    data = np.full(n_rows, "", dtype=object) if dataset is None else np.asarray(dataset, dtype=str)
    if by_observer and worker_id is None:
        raise ValueError("by_observer needs worker_id")
    if n_rows == 0:
        empty = np.array([], dtype=object)
        z = np.array([], float)
        return ProbeMeans(empty, empty, empty, empty, z, z, z, z, z, z, np.array([], int), np.array([], int))
    keys = (worker, clip_id, probe_id) if by_observer else (clip_id, probe_id)
    g, first = _group(*keys)
    k = first.size
    n = np.bincount(g, minlength=k)
    means = [np.bincount(g, c, k) / n for c in cols]
    var = [np.bincount(g, (c - m[g]) ** 2, k) for c, m in zip(cols[2:], means[2:])]
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = [np.where(n > 1, np.sqrt(v / (n - 1)), np.nan) for v in var]
    if worker_id is None:
        n_obs = np.ones(k, dtype=int)
    else:
        _, pair_first = _group(worker, clip_id, probe_id)
        n_obs = np.bincount(g[pair_first], minlength=k)
    return ProbeMeans(clip_id[first].astype(object), probe_id[first].astype(object), data[first].astype(object),
                      (worker[first] if by_observer else np.full(k, "", dtype=object)).astype(object),
                      means[0], means[1], means[2], means[3], sd[0], sd[1], n.astype(int), n_obs.astype(int))


# --------------------------------------------------------------------------- inter-observer agreement

@dataclass(frozen=True)
class InterObserver:
    """Pooled-uv r between the per-probe means of every pair of observers with enough common probes."""

    pairs: list[tuple[str, str, int, float]]   # (worker a, worker b, common probes, r)
    mean: float
    sd: float
    min: float
    max: float
    n_pairs: int

    def summary(self) -> dict:
        return {"mean": self.mean, "sd": self.sd, "min": self.min, "max": self.max, "n_pairs": self.n_pairs}


def inter_observer_correlation(per_observer: ProbeMeans, min_common: int = 3) -> InterObserver:
    """Inter-observer correlation (HuPerFlow §3.2.2).

    For every pair of observers with at least ``min_common`` probes in
    common, the pooled-uv Pearson r (:func:`pooled_uv_r`) of their per-probe
    mean vectors over those probes. Pairs whose r is undefined (a constant
    sample) are left out. SD is the sample SD (ddof=1) over pairs.

    Parameters
    ----------
    per_observer : ProbeMeans
        From :func:`probe_means` with ``by_observer=True``.
    min_common : int
        Fewest common probes for a pair to count (default 3).
    """
    workers, w = np.unique(per_observer.worker_id.astype(str), return_inverse=True)
    probes, p = np.unique(np.char.add(np.char.add(per_observer.clip_id.astype(str), "\x1f"),
                                      per_observer.probe_id.astype(str)), return_inverse=True)
    u = np.full((workers.size, probes.size), np.nan)
    v = np.full_like(u, np.nan)
    u[w, p], v[w, p] = per_observer.mean_u, per_observer.mean_v
    seen = np.isfinite(u)
    common = seen.astype(int) @ seen.T.astype(int)
    pairs = []
    for i, j in zip(*np.nonzero(np.triu(common >= min_common, k=1))):
        both = seen[i] & seen[j]
        r = pooled_uv_r(u[i, both], v[i, both], u[j, both], v[j, both])
        if np.isfinite(r):
            pairs.append((str(workers[i]), str(workers[j]), int(both.sum()), r))
    rs = np.array([x[3] for x in pairs])
    if rs.size == 0:
        nan = float("nan")
        return InterObserver(pairs, nan, nan, nan, nan, 0)
    sd = float(rs.std(ddof=1)) if rs.size > 1 else float("nan")
    return InterObserver(pairs, float(rs.mean()), sd, float(rs.min()), float(rs.max()), int(rs.size))


# --------------------------------------------------------------------------- EPE vs flow properties

@dataclass(frozen=True)
class EpeBins:
    """Binned mean EPE against one flow property (HuPerFlow Fig. 4)."""

    property: str
    edges: np.ndarray       # (k+1,)
    n: np.ndarray           # (k,) probes per bin
    mean_epe: np.ndarray    # (k,) NaN for an empty bin
    se: np.ndarray          # (k,) SD/sqrt(n), NaN with fewer than 2 probes
    mean_value: np.ndarray  # (k,) mean of the property within the bin

    def rows(self) -> list[dict]:
        return [{"property": self.property, "bin_low": float(self.edges[i]), "bin_high": float(self.edges[i + 1]),
                 "mean_value": float(self.mean_value[i]), "n": int(self.n[i]), "mean_epe": float(self.mean_epe[i]),
                 "se": float(self.se[i])} for i in range(self.n.size)]


def epe_by_property(epe_values, values, bins=6, name: str = "property") -> EpeBins:
    """Mean EPE (with standard error and count) in bins of a flow property.

    Parameters
    ----------
    epe_values : array_like, shape (n,)
        EPE (eq. 1) of each probe's mean response against the ground truth.
    values : array_like, shape (n,)
        The property per probe: GT speed, image gradient (mean Sobel
        magnitude within ±40 px, §3.2.3), ...
    bins : int or array_like
        Number of equal-width bins between the smallest and largest value,
        or explicit bin edges. The last bin includes its upper edge.
    name : str
        Name of the property, copied into the output.

    Returns
    -------
    EpeBins
        Probes with a non-finite EPE or value are left out.
    """
    e, x = np.asarray(epe_values, float).ravel(), np.asarray(values, float).ravel()
    if e.shape != x.shape:
        raise ValueError(f"epe and {name} differ in length: {e.size} vs {x.size}")
    ok = np.isfinite(e) & np.isfinite(x)
    e, x = e[ok], x[ok]
    if np.ndim(bins) == 0:
        k = int(bins)
        if k < 1:
            raise ValueError(f"bins must be at least 1, got {k}")
        lo, hi = (float(x.min()), float(x.max())) if x.size else (0.0, 1.0)
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, k + 1)
    else:
        edges = np.asarray(bins, float)
        if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
            raise ValueError("bin edges must be an increasing 1-D sequence of at least 2 values")
    k = edges.size - 1
    b = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, k - 1)
    inside = (x >= edges[0]) & (x <= edges[-1])
    b, e, x = b[inside], e[inside], x[inside]
    n = np.bincount(b, minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(b, e, k) / n
        mean_value = np.bincount(b, x, k) / n
        ss = np.bincount(b, (e - mean[b]) ** 2, k)
        se = np.where(n > 1, np.sqrt(ss / np.maximum(n - 1, 1)) / np.sqrt(n), np.nan)
    return EpeBins(name, edges, n.astype(int), mean, se, mean_value)


# --------------------------------------------------------------------------- scatter statistics (Fig. S2)

def agreement_stats(gt, resp) -> dict:
    """The numbers in the corner of HuPerFlow Fig. S2, u and v pooled.

    Returns ``r`` (Pearson), ``r2`` (r²), ``slope`` (least-squares slope of
    response on GT) and ``R2_identity`` = 1 − Σ(resp − gt)² / Σ(resp − mean
    resp)²: the coefficient of determination of the ideal response line
    y = x (negative when GT predicts worse than the mean response).
    """
    g = _pool(*_as_vectors(gt, "gt").T)
    r = _pool(*_as_vectors(resp, "resp").T)
    ok = np.isfinite(g) & np.isfinite(r)
    g, r = g[ok], r[ok]
    nan = float("nan")
    if g.size < 2:
        return {"n": int(g.size // 2), "r": nan, "r2": nan, "slope": nan, "R2_identity": nan}
    corr = pearson_r(g, r)
    dg = g - g.mean()
    slope = float(np.dot(dg, r - r.mean()) / np.dot(dg, dg)) if np.dot(dg, dg) > 0 else nan
    ss_tot = float(np.sum((r - r.mean()) ** 2))
    r2_id = 1.0 - float(np.sum((r - g) ** 2)) / ss_tot if ss_tot > 0 else nan
    return {"n": int(g.size // 2), "r": corr, "r2": corr ** 2, "slope": slope, "R2_identity": r2_id}


# --------------------------------------------------------------------------- model tables (Table 2, S1-S12)

GROUND_TRUTH = "Ground truth"
ALL_DATASETS = "All datasets"
#: metric key -> (table name, description); the order of Table 2's columns
TABLE_METRICS = {
    "rho_uv": ("S1", "partial correlation with human responses controlling for GT, u and v pooled (eq. 2)"),
    "rho_dir_circ": ("S2", "partial correlation of directions (circular r in eq. 2)"),
    "rho_spd": ("S3", "partial correlation of speeds (eq. 2)"),
    "rci": ("S4", "mean response consistency index (eqs. S1-S3)"),
    "r_human_uv": ("S5", "Pearson r with human responses, u and v pooled"),
    "r_human_dir_circ": ("S6", "circular correlation of directions with human responses"),
    "r_human_spd": ("S7", "Pearson r of speeds with human responses"),
    "epe_human": ("S8", "mean end-point error against human responses (eq. 1)"),
    "r_gt_uv": ("S9", "Pearson r with ground truth, u and v pooled"),
    "r_gt_dir_circ": ("S10", "circular correlation of directions with ground truth"),
    "r_gt_spd": ("S11", "Pearson r of speeds with ground truth"),
    "epe_gt": ("S12", "mean end-point error against ground truth (eq. 1)"),
}


def model_metrics(human, model, gt, *, is_ground_truth: bool = False) -> dict[str, float]:
    """All Table 2 columns for one model over one set of probes.

    Parameters
    ----------
    human, model, gt : array_like, shape (n, 2)
        Per-probe mean human response, model prediction and ground truth.
        Probes with a missing (non-finite) prediction are left out.
    is_ground_truth : bool
        The "model" is the ground truth itself: RCI is reported as NaN as in
        the paper (every probe would be the degenerate M = G case).

    Returns
    -------
    dict
        Keys of :data:`TABLE_METRICS` plus ``n_probes``.
    """
    human, model, gt = _as_vectors(human, "human"), _as_vectors(model, "model"), _as_vectors(gt, "gt")
    ok = np.isfinite(human).all(1) & np.isfinite(model).all(1) & np.isfinite(gt).all(1)
    h, m, g = human[ok], model[ok], gt[ok]
    out: dict[str, float] = {"n_probes": int(ok.sum())}
    for kind, suffix in (("uv", "uv"), ("dir", "dir_circ"), ("spd", "spd")):
        r_hm, r_hg, r_mg = vector_r(h, m, kind), vector_r(h, g, kind), vector_r(m, g, kind)
        out[f"rho_{suffix}"] = partial_r(r_hm, r_hg, r_mg)
        out[f"r_human_{suffix}"] = r_hm
        out[f"r_gt_{suffix}"] = r_mg
    out["rci"] = float("nan") if is_ground_truth or not h.size else rci(h, m, g)[1]
    nan = float("nan")
    out["epe_human"] = float(epe(*m.T, *h.T).mean()) if h.size else nan
    out["epe_gt"] = float(epe(*m.T, *g.T).mean()) if h.size else nan
    return out


def model_table(human, gt, datasets, models: dict[str, np.ndarray], *,
                include_ground_truth: bool = True) -> dict[str, dict[str, dict[str, float]]]:
    """Table 2 and Tables S1-S12: every metric for every model, per dataset and over all.

    Parameters
    ----------
    human, gt : array_like, shape (n, 2)
        Per-probe mean human response and ground truth.
    datasets : array_like of str, shape (n,)
        Dataset of each probe; one column per distinct value plus
        :data:`ALL_DATASETS` (all probes pooled, as in the paper).
    models : dict
        Model name -> (n, 2) predictions aligned with the probes (NaN where
        the model has no prediction).
    include_ground_truth : bool
        Add the :data:`GROUND_TRUTH` row (ρ and RCI NaN, r vs GT 1, EPE vs GT 0).

    Returns
    -------
    dict
        ``table[model][dataset][metric]``; datasets in order of first
        appearance, then "All datasets".
    """
    human, gt = _as_vectors(human, "human"), _as_vectors(gt, "gt")
    datasets = np.asarray(datasets, dtype=str)
    if datasets.shape != (human.shape[0],):
        raise ValueError(f"datasets must have one entry per probe ({human.shape[0]}), got {datasets.shape}")
    _, first = np.unique(datasets, return_index=True)
    names = [str(d) for d in datasets[np.sort(first)]]
    rows = ({GROUND_TRUTH: gt} if include_ground_truth else {}) | dict(models)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for name, pred in rows.items():
        pred = _as_vectors(pred, name)
        if pred.shape != human.shape:
            raise ValueError(f"model {name!r}: {pred.shape[0]} predictions for {human.shape[0]} probes")
        is_gt = include_ground_truth and name == GROUND_TRUTH
        table[name] = {d: model_metrics(human[datasets == d], pred[datasets == d], gt[datasets == d],
                                        is_ground_truth=is_gt) for d in names}
        table[name][ALL_DATASETS] = model_metrics(human, pred, gt, is_ground_truth=is_gt)
    return table


# --------------------------------------------------------------------------- frame timing summary

def timing_summary(frame_drops, onset_err_mean_ms=None, onset_err_sd_ms=None, *, frames: dict | None = None) -> dict:
    """Summary of the presentation timing of a set of trials (HuPerFlow Appendix 1).

    From motion.csv alone the number of logged refresh intervals is unknown,
    so no frame-drop *rate* can be given: we report the trials with drops and
    the mean drops per trial, and pool the per-trial onset-error means and SDs
    with equal weight per trial (pooled variance = mean of the per-trial
    variances + variance of the per-trial means, i.e. as if every trial logged
    the same number of onsets).

    When ``frames`` (the columns of frames.csv: ``dropped`` and ``onset_err_ms``,
    NaN where a rAF is not the first of a stimulus frame) is given, the drop
    rate is dropped intervals / logged intervals and the onset-error mean and
    SD (ddof=1) are taken over all logged onsets, which weights each trial by
    its number of onsets.

    Parameters
    ----------
    frame_drops : array_like, shape (N,)
        Dropped frames per trial (motion.csv ``frame_drops``).
    onset_err_mean_ms, onset_err_sd_ms : array_like, shape (N,), optional
        Per-trial onset error mean and SD (ms); NaN entries are skipped.
    frames : dict, optional
        ``{"dropped": bool array, "onset_err_ms": float array, "interval_ms": float array}``.
    """
    drops = np.asarray(frame_drops, float)
    drops_ok = drops[np.isfinite(drops)]
    out = {"trials": int(drops.size), "trials_with_drops": int((drops_ok > 0).sum()),
           "total_drops": int(drops_ok.sum()),
           "mean_drops_per_trial": float(drops_ok.mean()) if drops_ok.size else float("nan"),
           "source": "motion.csv"}
    nan = float("nan")
    out["onset_err_mean_ms"], out["onset_err_sd_ms"] = nan, nan
    if onset_err_mean_ms is not None:
        m = np.asarray(onset_err_mean_ms, float)
        s = np.asarray(onset_err_sd_ms, float) if onset_err_sd_ms is not None else np.full_like(m, np.nan)
        ok = np.isfinite(m)
        if ok.any():
            out["onset_err_mean_ms"] = float(m[ok].mean())
            within = np.where(np.isfinite(s[ok]), s[ok] ** 2, 0.0).mean()
            out["onset_err_sd_ms"] = float(np.sqrt(within + m[ok].var()))
    if frames is not None:
        dropped = np.asarray(frames["dropped"], bool)
        interval = np.asarray(frames.get("interval_ms", np.ones(dropped.size)), float)
        logged = np.isfinite(interval)  # the first rAF of a phase has no interval
        onsets = np.asarray(frames["onset_err_ms"], float)
        onsets = onsets[np.isfinite(onsets)]
        out.update(source="frames.csv", n_intervals=int(logged.sum()), dropped_intervals=int(dropped[logged].sum()),
                   frame_drop_rate=float(dropped[logged].mean()) if logged.any() else nan,
                   n_onsets=int(onsets.size),
                   onset_err_mean_ms=float(onsets.mean()) if onsets.size else nan,
                   onset_err_sd_ms=float(onsets.std(ddof=1)) if onsets.size > 1 else nan)
    return out


# --------------------------------------------------------------------------- reading motion.csv and predictions

MOTION_COLUMNS = ("worker_id", "clip_id", "probe_id", "repetition", "gt_u", "gt_v", "resp_u", "resp_v", "cycles",
                  "rt_ms", "frame_drops", "onset_err_mean_ms", "onset_err_sd_ms")
MOTION_EXTRA_COLUMNS = ("dataset", "probe_x", "probe_y", "probe_frame", "trial_id", "timing_flagged", "practice")
_MOTION_TEXT = ("worker_id", "clip_id", "probe_id", "dataset", "trial_id")
_MOTION_OPTIONAL_NUMBERS = ("cycles", "rt_ms", "onset_err_mean_ms", "onset_err_sd_ms", "probe_x", "probe_y",
                            "probe_frame")
PREDICTION_COLUMNS = ("clip_id", "probe_id", "pred_u", "pred_v")
FRAMES_COLUMNS = ("worker_id", "trial_id", "clip_id", "probe_id", "repetition", "cycle", "phase", "raf_index",
                  "t_ms", "stim_frame", "interval_ms", "dropped", "onset_err_ms")


class MotionFormatError(ValueError):
    """An input file that cannot be analysed; ``str()`` is one line naming file, line and column."""

    def __init__(self, path: str, line: int | None, message: str, column: str | None = None):
        self.path, self.line, self.column = path, line, column
        where = path if line is None else f"{path}, line {line}"
        if column:
            where += f", column {column}"
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class MotionTrials:
    """The rows of a motion.csv as arrays (one entry per trial)."""

    worker_id: np.ndarray     # str (object)
    clip_id: np.ndarray
    probe_id: np.ndarray
    dataset: np.ndarray       # "" when the file has no dataset column
    repetition: np.ndarray    # int
    gt_u: np.ndarray
    gt_v: np.ndarray
    resp_u: np.ndarray
    resp_v: np.ndarray
    frame_drops: np.ndarray   # int
    practice: np.ndarray      # bool
    line: np.ndarray          # line in the file
    numbers: dict[str, np.ndarray] = field(default_factory=dict)  # optional numeric columns (NaN when empty)
    path: str = "motion.csv"

    def __len__(self) -> int:
        return len(self.worker_id)

    def subset(self, mask) -> MotionTrials:
        m = np.asarray(mask)
        pick = {k: getattr(self, k)[m] for k in ("worker_id", "clip_id", "probe_id", "dataset", "repetition",
                                                 "gt_u", "gt_v", "resp_u", "resp_v", "frame_drops", "practice",
                                                 "line")}
        return MotionTrials(**pick, numbers={k: v[m] for k, v in self.numbers.items()}, path=self.path)

    def with_dataset(self, dataset) -> MotionTrials:
        fields = {k: getattr(self, k) for k in ("worker_id", "clip_id", "probe_id", "repetition", "gt_u", "gt_v",
                                                "resp_u", "resp_v", "frame_drops", "practice", "line")}
        return MotionTrials(**fields, dataset=np.asarray(dataset, dtype=object), numbers=self.numbers,
                            path=self.path)

    def probe_means(self, by_observer: bool = False) -> ProbeMeans:
        return probe_means(self.clip_id, self.probe_id, self.gt_u, self.gt_v, self.resp_u, self.resp_v,
                           worker_id=self.worker_id, dataset=self.dataset, by_observer=by_observer)


def _read_rows(path, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> tuple[str, dict, np.ndarray]:
    """Validated CSV text columns: ``(name, {column: str array}, line numbers)``; at least one row."""
    name, wanted, rows, lines = read_csv_table(path, required, optional, MotionFormatError, strip=True)
    if not rows:
        raise MotionFormatError(name, None, "no data rows (the file has a header only)")
    table = np.asarray(rows, dtype=object)
    return name, {c: table[:, k].astype(str) for k, c in enumerate(wanted)}, np.asarray(lines, dtype=np.int64)


def _numbers(name: str, cols: dict, lines: np.ndarray, column: str, *, required: bool = True,
             integer: bool = False) -> np.ndarray:
    """Parse one text column as floats; empty fields are NaN unless ``required``."""
    text = cols[column]
    empty = np.char.str_len(text) == 0
    values = np.full(text.size, np.nan)
    for k in np.flatnonzero(~empty):  # float() per field keeps the error message exact
        try:
            values[k] = float(text[k])
        except ValueError:
            raise MotionFormatError(name, int(lines[k]), f"{str(text[k])!r} is not a number", column) from None
    bad = np.flatnonzero(~empty & ~np.isfinite(values))
    if bad.size:
        raise MotionFormatError(name, int(lines[bad[0]]), f"{str(text[bad[0]])!r} is not a finite number", column)
    if required and empty.any():
        raise MotionFormatError(name, int(lines[np.flatnonzero(empty)[0]]), "empty field", column)
    if integer:
        frac = np.flatnonzero(np.isfinite(values) & (values != np.round(values)))
        if frac.size:
            raise MotionFormatError(name, int(lines[frac[0]]), f"{str(text[frac[0]])!r} is not an integer", column)
    return values


def _require_text(name: str, cols: dict, lines: np.ndarray, columns) -> None:
    for c in columns:
        empty = np.flatnonzero(np.char.str_len(cols[c]) == 0)
        if empty.size:
            raise MotionFormatError(name, int(lines[empty[0]]), "empty field", c)


def _flags(name: str, cols: dict, lines: np.ndarray, column: str) -> np.ndarray:
    if column not in cols:
        return np.zeros(lines.size, dtype=bool)
    text = np.char.lower(cols[column])
    true, false = np.isin(text, ["1", "true", "yes"]), np.isin(text, ["0", "false", "no", ""])
    bad = np.flatnonzero(~(true | false))
    if bad.size:
        raise MotionFormatError(name, int(lines[bad[0]]), f"{str(cols[column][bad[0]])!r} is not 0/1", column)
    return true


def read_motion_csv(path: str | os.PathLike) -> MotionTrials:
    """Read and validate a motion.csv (ARCHITECTURE.md format; extra columns allowed).

    Raises
    ------
    MotionFormatError
        Naming the file, line and column of the first bad field: a missing
        required column, an empty ID, a non-numeric vector component,
        a negative ``frame_drops``, or a probe whose trials disagree on GT.
    """
    name, cols, lines = _read_rows(path, MOTION_COLUMNS, MOTION_EXTRA_COLUMNS)
    _require_text(name, cols, lines, ("worker_id", "clip_id", "probe_id"))
    vec = {c: _numbers(name, cols, lines, c) for c in ("gt_u", "gt_v", "resp_u", "resp_v")}
    repetition = _numbers(name, cols, lines, "repetition", required=False, integer=True)
    drops = _numbers(name, cols, lines, "frame_drops", required=False, integer=True)
    negative = np.flatnonzero(drops < 0)
    if negative.size:
        raise MotionFormatError(name, int(lines[negative[0]]), "frame_drops must be ≥ 0", "frame_drops")
    numbers = {c: _numbers(name, cols, lines, c, required=False) for c in _MOTION_OPTIONAL_NUMBERS if c in cols}
    trials = MotionTrials(
        worker_id=cols["worker_id"].astype(object), clip_id=cols["clip_id"].astype(object),
        probe_id=cols["probe_id"].astype(object),
        dataset=(cols["dataset"] if "dataset" in cols else np.full(lines.size, "")).astype(object),
        repetition=np.nan_to_num(repetition, nan=0).astype(np.int64), **vec,
        frame_drops=np.nan_to_num(drops, nan=0).astype(np.int64),
        practice=_flags(name, cols, lines, "practice"), line=lines, numbers=numbers, path=name)
    _check_consistent_gt(trials)
    return trials


def _check_consistent_gt(trials: MotionTrials, tol: float = 1e-6) -> None:
    """Every trial of a probe must carry the same GT vector (within ``tol`` px/frame)."""
    g, first = _group(trials.clip_id, trials.probe_id)
    off = np.hypot(trials.gt_u - trials.gt_u[first][g], trials.gt_v - trials.gt_v[first][g])
    bad = np.flatnonzero(off > tol)
    if bad.size:
        k = bad[0]
        raise MotionFormatError(trials.path, int(trials.line[k]),
                                f"probe {trials.clip_id[k]}/{trials.probe_id[k]} has GT ({trials.gt_u[k]}, "
                                f"{trials.gt_v[k]}) but line {trials.line[first[g[k]]]} has "
                                f"({trials.gt_u[first[g[k]]]}, {trials.gt_v[first[g[k]]]})", "gt_u")


@dataclass(frozen=True)
class Predictions:
    """Model predictions per probe: parallel arrays (one entry per row of the CSV)."""

    model: np.ndarray
    clip_id: np.ndarray
    probe_id: np.ndarray
    pred_u: np.ndarray
    pred_v: np.ndarray

    def models(self) -> list[str]:
        _, first = np.unique(self.model.astype(str), return_index=True)
        return [str(m) for m in self.model[np.sort(first)]]

    def aligned(self, keys: list[tuple[str, str]]) -> dict[str, np.ndarray]:
        """Model name -> (n, 2) predictions for the probes ``keys`` (NaN where a model has none)."""
        out = {}
        index = {k: i for i, k in enumerate(keys)}
        for name in self.models():
            pred = np.full((len(keys), 2), np.nan)
            rows = np.flatnonzero(self.model == name)
            for r in rows:
                i = index.get((str(self.clip_id[r]), str(self.probe_id[r])))
                if i is not None:
                    pred[i] = self.pred_u[r], self.pred_v[r]
            out[name] = pred
        return out

    @staticmethod
    def concat(parts: list[Predictions]) -> Predictions:
        return Predictions(*(np.concatenate([getattr(p, f) for p in parts]).astype(t) for f, t in
                             (("model", object), ("clip_id", object), ("probe_id", object), ("pred_u", float),
                              ("pred_v", float))))

    @staticmethod
    def from_rows(rows: list[dict]) -> Predictions:
        """From dicts with ``model, clip_id, probe_id, pred_u, pred_v`` (e.g. ``machine_predictions``)."""
        cols = {k: np.asarray([r[k] for r in rows], dtype=object if k in ("model", "clip_id", "probe_id") else float)
                for k in ("model", "clip_id", "probe_id", "pred_u", "pred_v")}
        return Predictions(**cols)


def read_predictions(path: str | os.PathLike, model: str | None = None) -> Predictions:
    """Read a model-prediction CSV: ``clip_id,probe_id,pred_u,pred_v`` (+ optional ``model``).

    Parameters
    ----------
    path : path-like
        The CSV (image coordinates, px/frame).
    model : str, optional
        Name for rows without a ``model`` column (or with it empty); default
        the file's stem.

    Raises
    ------
    MotionFormatError
        For missing columns, empty IDs, non-numeric predictions, or a probe
        predicted twice by the same model.
    """
    name, cols, lines = _read_rows(path, PREDICTION_COLUMNS, ("model",))
    _require_text(name, cols, lines, ("clip_id", "probe_id"))
    u, v = _numbers(name, cols, lines, "pred_u"), _numbers(name, cols, lines, "pred_v")
    default = model or Path(name).stem
    names = cols.get("model", np.full(lines.size, ""))
    names = np.where(np.char.str_len(names) == 0, default, names)
    if model is not None and "model" in cols and np.unique(names).size == 1:
        names = np.full(lines.size, model)  # NAME=file renames a single-model file; several models keep theirs
    g, _ = _group(names, cols["clip_id"], cols["probe_id"])
    dup = np.flatnonzero(np.bincount(g) > 1)
    if dup.size:
        rows = np.flatnonzero(g == dup[0])
        raise MotionFormatError(name, int(lines[rows[1]]), f"model {str(names[rows[1]])!r} predicts probe "
                                f"{cols['clip_id'][rows[1]]}/{cols['probe_id'][rows[1]]} again (first on line "
                                f"{lines[rows[0]]})")
    return Predictions(names.astype(object), cols["clip_id"].astype(object), cols["probe_id"].astype(object), u, v)


def read_frames_csv(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The timing columns of a frames.csv: ``dropped`` (bool), ``interval_ms`` and ``onset_err_ms`` (NaN = empty)."""
    name, cols, lines = _read_rows(path, ("interval_ms", "dropped", "onset_err_ms"), FRAMES_COLUMNS)
    return {"dropped": _flags(name, cols, lines, "dropped"),
            "interval_ms": _numbers(name, cols, lines, "interval_ms", required=False),
            "onset_err_ms": _numbers(name, cols, lines, "onset_err_ms", required=False)}
