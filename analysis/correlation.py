"""Rank and linear correlations with confidence intervals (StudyMB 1.0 Table II, StudyMB 2.0).

All functions take two equally long 1-D sequences and ignore pairs where
either value is NaN.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri


def _stats():
    """scipy.stats, imported on first use: it takes 0.4 s, and ``perceptlab analyze`` rarely needs it."""
    from scipy import stats
    return stats


@dataclass(frozen=True)
class Correlation:
    """A correlation estimate with its confidence interval."""

    r: float
    ci_low: float
    ci_high: float
    n: int
    method: str

    @property
    def disagreement(self) -> float:
        """``1 - r``: the disagreement level plotted in StudyMB (Fig. 5 / Fig. 13)."""
        return 1.0 - self.r


def finite_pairs(x, y) -> tuple[np.ndarray, np.ndarray]:
    """``x`` and ``y`` flattened to floats, without the pairs where either is NaN or infinite."""
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y differ in length: {x.size} vs {y.size}")
    keep = np.isfinite(x) & np.isfinite(y)
    return x[keep], y[keep]


def srocc(x, y) -> float:
    """Spearman rank-order correlation coefficient."""
    x, y = finite_pairs(x, y)
    return float(_stats().spearmanr(x, y).statistic) if x.size > 1 else float("nan")


def plcc(x, y) -> float:
    """Pearson linear correlation coefficient."""
    x, y = finite_pairs(x, y)
    return float(_stats().pearsonr(x, y).statistic) if x.size > 1 else float("nan")


def krocc(x, y) -> float:
    """Kendall rank-order correlation coefficient (tau-b, handles ties)."""
    x, y = finite_pairs(x, y)
    return float(_stats().kendalltau(x, y).statistic) if x.size > 1 else float("nan")


def fisher_ci(r: float, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Fisher-z interval ``tanh(atanh(r) -/+ Phi^-1(p) / sqrt(n - 3))``.

    ``p = 1 - (1 - confidence) / 2``, so a 95 % interval uses ``Phi^-1(0.975) = 1.96``
    (the formula of StudyMB 1.0/2.0). Needs ``n > 3``; returns NaNs otherwise.
    """
    if n <= 3 or not np.isfinite(r):
        return float("nan"), float("nan")
    z = np.arctanh(np.clip(r, -1 + 1e-15, 1 - 1e-15))
    half = ndtri(1 - (1 - confidence) / 2) / np.sqrt(n - 3)
    return float(np.tanh(z - half)), float(np.tanh(z + half))


def correlate(x, y, method: str = "srocc", confidence: float = 0.95) -> Correlation:
    """A correlation (``"srocc"``, ``"plcc"`` or ``"krocc"``) with its Fisher-z interval."""
    functions = {"srocc": srocc, "plcc": plcc, "krocc": krocc}
    if method not in functions:
        raise ValueError(f"unknown correlation {method!r}; choose from {sorted(functions)}")
    xc, _ = finite_pairs(x, y)
    r = functions[method](x, y)
    low, high = fisher_ci(r, xc.size, confidence)
    return Correlation(r, low, high, xc.size, method)


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    denom = np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * b).sum(axis=1) / denom


@dataclass(frozen=True)
class BootstrapCorrelation:
    """Bootstrapped SROCC as in StudyMB 1.0 Table II."""

    srocc: float            # SROCC of the full sample
    mean: float             # mean SROCC over resamples ("bootstrapped SROCC")
    fisher_low: float       # Fisher-z interval around the bootstrapped SROCC
    fisher_high: float
    percentile_low: float   # percentile interval of the resamples
    percentile_high: float
    n: int
    n_boot: int


def bootstrap_srocc(x, y, n_boot: int = 1000, confidence: float = 0.95,
                    seed: int | np.random.Generator | None = 0) -> BootstrapCorrelation:
    """SROCC bootstrapped over items (pairs of x and y resampled with replacement).

    Reports the full-sample SROCC, the mean over ``n_boot`` resamples with its
    Fisher-z interval (StudyMB's Table II), and the percentile interval.
    """
    x, y = finite_pairs(x, y)
    n = x.size
    if n < 4:
        raise ValueError(f"bootstrap_srocc needs at least 4 complete pairs, got {n}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    rho = _rowwise_pearson(_stats().rankdata(x[idx], axis=1), _stats().rankdata(y[idx], axis=1))
    rho = rho[np.isfinite(rho)]
    mean = float(rho.mean())
    low, high = fisher_ci(mean, n, confidence)
    alpha = (1 - confidence) / 2
    p_low, p_high = np.quantile(rho, [alpha, 1 - alpha])
    return BootstrapCorrelation(srocc(x, y), mean, low, high, float(p_low), float(p_high), n, n_boot)
