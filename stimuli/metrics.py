"""Full-reference image metrics for interpolated frames.

* Middlebury flow benchmark (Baker et al. 2011, seed 001): interpolation error
  IE (eq. 24) and normalized interpolation error NE (eq. 25), their statistics
  AV, SD, RX, AX (§4.2) and the region masks All / Disc / Untext (§4.3);
* the usual FR-IQA metrics of StudyMB 2.0 Table 4: RMSE, PSNR, SSIM, MS-SSIM, GMSD;
* WAE-IQA (StudyMB 2.0 eq. 4) with leave-one-set-out parameter fitting, and
  the per-set SROCC table of Table 4.

All image arguments are arrays of equal shape: ``(H, W)`` grey or ``(H, W, 3)``
RGB, uint8/uint16 (the data range then follows from the dtype) or float (pass
``data_range``). The reference (ground truth) always comes first.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass

import numpy as np

from .io import StimulusInputError

#: Thresholds (RX) and percentiles (AX) the Middlebury paper reports for IE and NE.
IE_R_THRESHOLDS = (2.5, 5.0, 10.0)
NE_R_THRESHOLDS = (0.5, 1.0, 2.0)
INTERPOLATION_PERCENTILES = (90.0, 95.0, 99.0)

_LUMA = np.array([0.2989, 0.5870, 0.1140])  # ITU-R BT.601 weights as in MATLAB's rgb2gray


# ---------------------------------------------------------------- helpers

def _pair(reference: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    reference, test = np.asarray(reference), np.asarray(test)
    if reference.shape != test.shape:
        raise StimulusInputError(f"test image shape {test.shape} differs from reference shape {reference.shape}")
    if reference.ndim not in (2, 3) or (reference.ndim == 3 and reference.shape[2] != 3):
        raise StimulusInputError(f"expected (H, W) or (H, W, 3) images, got shape {reference.shape}")
    return reference, test


def _data_range(image: np.ndarray, data_range: float | None) -> float:
    if data_range is not None:
        if not data_range > 0:
            raise StimulusInputError(f"data_range must be > 0, got {data_range}")
        return float(data_range)
    if np.issubdtype(image.dtype, np.integer):
        return float(np.iinfo(image.dtype).max)
    raise StimulusInputError(f"pass data_range for {image.dtype} images (it follows from the dtype only for integers)")


def luma(image: np.ndarray) -> np.ndarray:
    """Grey values ``0.2989 R + 0.5870 G + 0.1140 B`` as float64 (grey images pass through)."""
    image = np.asarray(image, np.float64)
    return image if image.ndim == 2 else image @ _LUMA


# ---------------------------------------------------------------- Middlebury IE / NE

def interpolation_error_map(reference: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Per-pixel interpolation error ``|I - I_GT|``: for colour, the L2 norm of the RGB difference."""
    reference, test = _pair(reference, test)
    diff = test.astype(np.float64) - reference
    return np.abs(diff) if diff.ndim == 2 else np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))


def gradient_squared(image: np.ndarray, sigma: float | None = None) -> np.ndarray:
    """``||grad I||^2`` per pixel: central differences (one-sided at the border) of each colour band,
    squared and summed over x, y and the bands.

    The paper gives no derivative filter and mentions a spatial smoothing radius
    without its value; ``sigma`` (pixels, default none) optionally smooths each
    band with a Gaussian before differencing.
    """
    from scipy import ndimage

    image = np.asarray(image, np.float64)
    bands = image[:, :, None] if image.ndim == 2 else image
    total = np.zeros(bands.shape[:2])
    for band in np.moveaxis(bands, 2, 0):
        if sigma:
            band = ndimage.gaussian_filter(band, sigma)
        gy, gx = np.gradient(band)
        total += gx * gx + gy * gy
    return total


def normalized_interpolation_error_map(reference: np.ndarray, test: np.ndarray, epsilon: float = 1.0,
                                       gradient_sigma: float | None = None) -> np.ndarray:
    """Per-pixel normalized error ``|I - I_GT| / sqrt(||grad I_GT||^2 + epsilon)`` (eq. 25's summand, rooted)."""
    if not epsilon > 0:
        raise StimulusInputError(f"epsilon must be > 0, got {epsilon}")
    error = interpolation_error_map(reference, test)
    return error / np.sqrt(gradient_squared(reference, gradient_sigma) + epsilon)


def _masked(values: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    if mask is None:
        return values.ravel()
    mask = np.asarray(mask, bool)
    if mask.shape != values.shape:
        raise StimulusInputError(f"mask shape {mask.shape} differs from image shape {values.shape}")
    return values[mask]


def interpolation_error(reference: np.ndarray, test: np.ndarray, mask: np.ndarray | None = None) -> float:
    """IE, eq. 24: root mean square over the (masked) pixels of the per-pixel error.

    For RGB this is ``sqrt(3)`` times :func:`rmse`, which averages over channels as well.
    """
    values = _masked(interpolation_error_map(reference, test), mask)
    return float(np.sqrt(np.mean(values * values))) if values.size else float("nan")


def normalized_interpolation_error(reference: np.ndarray, test: np.ndarray, mask: np.ndarray | None = None,
                                   epsilon: float = 1.0, gradient_sigma: float | None = None) -> float:
    """NE, eq. 25, with ``epsilon = 1.0`` graylevels^2 per pixel^2 as in the paper."""
    values = _masked(normalized_interpolation_error_map(reference, test, epsilon, gradient_sigma), mask)
    return float(np.sqrt(np.mean(values * values))) if values.size else float("nan")


def error_statistics(errors: np.ndarray, mask: np.ndarray | None = None,
                     r_thresholds: Sequence[float] = IE_R_THRESHOLDS,
                     a_percentiles: Sequence[float] = INTERPOLATION_PERCENTILES) -> dict[str, float]:
    """Statistics of a per-pixel error map over a region mask (Middlebury §4.2).

    Returns a dict with

    * ``"AV"``, ``"SD"``: mean and (population) standard deviation of the errors (Barron et al.);
    * ``"RMS"``: root mean square, i.e. eq. 24 / 25 when ``errors`` is an IE / NE map;
    * ``"R<X>"`` for each threshold X: percentage of pixels whose error is above X;
    * ``"A<X>"`` for each percentile X: the error at the X-th percentile after sorting
      from low to high (nearest rank: the ``ceil(X/100 * n)``-th smallest error);
    * ``"n"``: number of pixels used.

    Use :data:`IE_R_THRESHOLDS` (graylevels) for IE and :data:`NE_R_THRESHOLDS` (no unit) for NE.
    """
    values = _masked(np.asarray(errors, np.float64), mask)
    stats: dict[str, float] = {"n": float(values.size)}
    empty = values.size == 0
    stats["AV"] = float("nan") if empty else float(values.mean())
    stats["SD"] = float("nan") if empty else float(values.std())
    stats["RMS"] = float("nan") if empty else float(np.sqrt(np.mean(values * values)))
    for x in r_thresholds:
        stats[f"R{x:g}"] = float("nan") if empty else float(100.0 * np.mean(values > x))
    for x in a_percentiles:
        stats[f"A{x:g}"] = float("nan") if empty else float(np.percentile(values, x, method="inverted_cdf"))
    return stats


def _dilate(mask: np.ndarray, size: int) -> np.ndarray:
    from scipy import ndimage

    return ndimage.binary_dilation(mask, structure=np.ones((size, size), bool)) if size > 1 else mask


def valid_flow_mask(flow: np.ndarray, unknown_above: float = 1e9) -> np.ndarray:
    """Pixels whose ground-truth flow is known (finite and not Middlebury's 'unknown' value > 1e9)."""
    flow = np.asarray(flow, np.float64)
    return np.all(np.isfinite(flow) & (np.abs(flow) < unknown_above), axis=2)


def disc_mask(flow: np.ndarray, threshold: float = 1.0, dilation: int = 9,
              valid: np.ndarray | None = None) -> np.ndarray:
    """Motion discontinuities (*Disc*, §4.3): ``||grad flow|| > threshold``, dilated with a 9x9 box.

    ``flow`` is ``(H, W, 2)`` (u, v) in pixels; its gradient magnitude is
    ``sqrt(u_x^2 + u_y^2 + v_x^2 + v_y^2)`` by central differences. The paper
    does not give the threshold; 1.0 pixel of flow change per pixel is our
    default. Pixels outside ``valid`` (default: :func:`valid_flow_mask`) are
    excluded, and their unknown flow is set to 0 before differencing.
    """
    flow = np.asarray(flow, np.float64)
    if flow.ndim != 3 or flow.shape[2] != 2:
        raise StimulusInputError(f"flow must have shape (H, W, 2), got {flow.shape}")
    valid = valid_flow_mask(flow) if valid is None else np.asarray(valid, bool)
    flow = np.where(valid[:, :, None], flow, 0.0)
    magnitude = np.sqrt(gradient_squared(flow))
    return _dilate(magnitude > threshold, dilation) & valid


def disc_mask_from_frames(frame0: np.ndarray, frame1: np.ndarray, threshold: float = 20.0,
                          dilation: int = 9) -> np.ndarray:
    """*Disc* substitute without ground-truth flow (§4.3): frame difference ``> threshold`` graylevels,
    dilated — an estimate of fast-moving regions. The threshold is our choice."""
    return _dilate(interpolation_error_map(frame0, frame1) > threshold, dilation)


def untext_mask(image: np.ndarray, threshold: float = 2.0, dilation: int = 3,
                valid: np.ndarray | None = None) -> np.ndarray:
    """Textureless regions (*Untext*, §4.3): grey-level gradient magnitude ``< threshold``, dilated 3x3.

    Read literally from the paper ("taking the gradient of the image, thresholding
    the magnitude, and dilating with a 3x3 box"); the threshold is not given there.
    The default 2.0 graylevels per pixel is the square root of the 4.0 graylevels^2
    used for textureless regions by Scharstein and Szeliski (2002), which §4.3 follows.
    """
    low = np.sqrt(gradient_squared(luma(image))) < threshold
    mask = _dilate(low, dilation)
    return mask if valid is None else mask & np.asarray(valid, bool)


def region_masks(image: np.ndarray, flow: np.ndarray | None = None, frames: tuple | None = None,
                 valid: np.ndarray | None = None, disc_threshold: float = 1.0,
                 untext_threshold: float = 2.0) -> dict[str, np.ndarray]:
    """``{"all", "disc", "untext"}`` masks for a ground-truth image.

    *Disc* needs the ground-truth ``flow`` or, failing that, two ``frames`` for
    frame differencing; without either it is omitted. *All* is every pixel for
    interpolation (the paper keeps occluded pixels), restricted to ``valid`` if given.
    """
    shape = np.asarray(image).shape[:2]
    valid = np.ones(shape, bool) if valid is None else np.asarray(valid, bool)
    masks = {"all": valid.copy(), "untext": untext_mask(image, untext_threshold, valid=valid)}
    if flow is not None:
        masks["disc"] = disc_mask(flow, disc_threshold, valid=valid & valid_flow_mask(flow))
    elif frames is not None:
        masks["disc"] = disc_mask_from_frames(*frames) & valid
    return masks


# ---------------------------------------------------------------- RMSE, PSNR, SSIM, MS-SSIM, GMSD

def rmse(reference: np.ndarray, test: np.ndarray) -> float:
    """Root mean square error over all pixels and channels."""
    reference, test = _pair(reference, test)
    diff = test.astype(np.float64) - reference
    return float(np.sqrt(np.mean(diff * diff)))


def psnr(reference: np.ndarray, test: np.ndarray, data_range: float | None = None) -> float:
    """Peak signal-to-noise ratio ``10 log10(L^2 / MSE)`` in dB; ``inf`` for identical images."""
    peak = _data_range(np.asarray(reference), data_range)
    error = rmse(reference, test)
    return float("inf") if error == 0 else float(20 * np.log10(peak / error))


def ssim(reference: np.ndarray, test: np.ndarray, data_range: float | None = None) -> float:
    """SSIM (Wang et al. 2004 settings: 11x11 Gaussian window, sigma 1.5), averaged over RGB channels.

    Needs images of at least 11 x 11 pixels.
    """
    from skimage.metrics import structural_similarity

    reference, test = _pair(reference, test)
    return float(structural_similarity(
        reference.astype(np.float64), test.astype(np.float64), data_range=_data_range(reference, data_range),
        channel_axis=-1 if reference.ndim == 3 else None, gaussian_weights=True, sigma=1.5,
        use_sample_covariance=False))


MS_SSIM_WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)


def _gaussian_valid(image: np.ndarray, sigma: float = 1.5, size: int = 11) -> np.ndarray:
    """Correlation with the normalised ``size x size`` Gaussian, 'valid' part (MATLAB filter2 'valid')."""
    from scipy import ndimage

    x = np.arange(size) - (size - 1) / 2
    kernel = np.exp(-x * x / (2 * sigma * sigma))
    kernel /= kernel.sum()  # separable: the 2-D window is the outer product, normalised
    out = ndimage.correlate1d(ndimage.correlate1d(image, kernel, axis=0), kernel, axis=1)
    half = size // 2
    return out[half:-half, half:-half]


def _ssim_terms(x: np.ndarray, y: np.ndarray, peak: float) -> tuple[float, float]:
    """Mean SSIM and mean contrast-structure term of two grey images (valid region)."""
    c1, c2 = (0.01 * peak) ** 2, (0.03 * peak) ** 2
    mu_x, mu_y = _gaussian_valid(x), _gaussian_valid(y)
    var_x = _gaussian_valid(x * x) - mu_x * mu_x
    var_y = _gaussian_valid(y * y) - mu_y * mu_y
    cov = _gaussian_valid(x * y) - mu_x * mu_y
    cs = (2 * cov + c2) / (var_x + var_y + c2)
    luminance = (2 * mu_x * mu_y + c1) / (mu_x * mu_x + mu_y * mu_y + c1)
    return float(np.mean(luminance * cs)), float(np.mean(cs))


def _halve(image: np.ndarray) -> np.ndarray:
    """2x2 mean with symmetric padding, then every second pixel (Wang's msssim.m downsampling)."""
    padded = np.pad(image, ((0, 1), (0, 1)), mode="symmetric")
    mean = (padded[:-1, :-1] + padded[1:, :-1] + padded[:-1, 1:] + padded[1:, 1:]) / 4
    return mean[::2, ::2]


def ms_ssim(reference: np.ndarray, test: np.ndarray, data_range: float | None = None,
            weights: Sequence[float] = MS_SSIM_WEIGHTS) -> float:
    """Multi-scale SSIM (Wang, Simoncelli and Bovik 2003), five scales, on the luma of RGB images.

    ``prod_{j<M} cs_j^{w_j} * ssim_M^{w_M}`` as in the authors' msssim.m; a
    negative mean term (possible only for very dissimilar images) counts as 0
    so the fractional powers stay real.

    Raises
    ------
    StimulusInputError
        Images smaller than ``11 * 2**(scales-1)`` (176 for five scales) on a side.
    """
    reference, test = _pair(reference, test)
    peak = _data_range(reference, data_range)
    x, y = luma(reference), luma(test)
    smallest = 11 * 2 ** (len(weights) - 1)
    if min(x.shape) < smallest:
        raise StimulusInputError(f"MS-SSIM with {len(weights)} scales needs images of at least "
                                 f"{smallest} x {smallest} pixels, got {x.shape[1]} x {x.shape[0]}")
    value = 1.0
    for scale, weight in enumerate(weights):
        full, cs = _ssim_terms(x, y, peak)
        last = scale == len(weights) - 1
        value *= max(full if last else cs, 0.0) ** weight
        if not last:
            x, y = _halve(x), _halve(y)
    return float(value)


def gmsd(reference: np.ndarray, test: np.ndarray, data_range: float | None = None) -> float:
    """Gradient magnitude similarity deviation (Xue et al. 2014), as in the authors' GMSD.m.

    Luma rescaled to 0..255, 2x2 mean filter and 2x downsampling, Prewitt
    gradients (zero padded, 'same'), similarity ``(2 m1 m2 + T) / (m1^2 + m2^2 + T)``
    with ``T = 170`` (about ``0.0026 * 255^2``), and its standard deviation
    (``N - 1`` normalisation as MATLAB's std2). 0 for identical images; larger is worse.
    """
    from scipy import ndimage

    reference, test = _pair(reference, test)
    scale = 255.0 / _data_range(reference, data_range)
    prewitt_x = np.array([[1.0, 0.0, -1.0]] * 3) / 3
    maps = []
    for image in (reference, test):
        grey = luma(image) * scale
        padded = np.pad(grey, ((0, 1), (0, 1)))  # conv2(Y, ones(2)/4, 'same'): zero padding below/right
        grey = ((padded[:-1, :-1] + padded[1:, :-1] + padded[:-1, 1:] + padded[1:, 1:]) / 4)[::2, ::2]
        gx = ndimage.convolve(grey, prewitt_x, mode="constant")
        gy = ndimage.convolve(grey, prewitt_x.T, mode="constant")
        maps.append(np.sqrt(gx * gx + gy * gy))
    t = 170.0
    quality = (2 * maps[0] * maps[1] + t) / (maps[0] ** 2 + maps[1] ** 2 + t)
    return float(np.std(quality, ddof=1)) if quality.size > 1 else 0.0


# ---------------------------------------------------------------- WAE-IQA

@dataclass(frozen=True)
class WAEParameters:
    """Parameters of WAE-IQA: polynomial ``f(x) = a1 x + a2 x^2 + a3 x^3`` and logistic weight
    ``w(x) = 1 / (1 + exp(-s (x - t)))`` of the normalised absolute grey error ``x`` in [0, 1]."""

    a1: float
    a2: float
    a3: float
    s: float
    t: float


#: The parameters StudyMB 2.0 shows for Dumptruck (Fig. 20).
WAE_PAPER_PARAMETERS = WAEParameters(a1=8.7285, a2=4.6443, a3=0.7516, s=28.0186, t=0.0973)


def grey8(image: np.ndarray) -> np.ndarray:
    """8-bit grey image as WAE-IQA uses: rounded luma (16-bit images are first scaled to 8 bits)."""
    image = np.asarray(image)
    scale = 255.0 / np.iinfo(image.dtype).max if np.issubdtype(image.dtype, np.integer) else 1.0
    return np.clip(np.rint(luma(image) * scale), 0, 255).astype(np.uint8)


def abs_error_histogram(reference: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Counts of the 256 possible grey-level absolute errors ``|grey8(test) - grey8(reference)|``.

    WAE depends on an image only through this histogram, which makes
    evaluating many parameter sets (fitting) a small matrix product.
    """
    reference, test = _pair(reference, test)
    diff = np.abs(grey8(test).astype(np.int16) - grey8(reference))
    return np.bincount(diff.ravel(), minlength=256).astype(np.float64)


def wae_from_histograms(histograms: np.ndarray, parameters: WAEParameters = WAE_PAPER_PARAMETERS) -> np.ndarray:
    """WAE (eq. 4) of one or more error histograms (last axis: 256 bins); larger is worse."""
    from scipy.special import expit

    a1, a2, a3, s, t = astuple(parameters)
    x = np.arange(256) / 255.0
    weight = expit(s * (x - t))
    f = a1 * x + a2 * x * x + a3 * x ** 3
    histograms = np.asarray(histograms, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (histograms @ (weight * f)) / (histograms @ weight)


def wae_iqa(reference: np.ndarray, test: np.ndarray, parameters: WAEParameters = WAE_PAPER_PARAMETERS) -> float:
    """WAE-IQA of StudyMB 2.0 (eq. 4): ``sum w(x) f(x) / sum w(x)`` over the pixels' normalised
    absolute grey errors ``x = |I_hat - I| / 255``. Larger is worse."""
    return float(wae_from_histograms(abs_error_histogram(reference, test), parameters))


def _rank_correlation(values: np.ndarray, ranks_other: np.ndarray) -> float:
    """Spearman's rho of ``values`` against precomputed (average) ranks: fast path used while fitting."""
    from scipy.stats import rankdata

    a = rankdata(values) - (len(values) + 1) / 2
    b = ranks_other - (len(values) + 1) / 2
    denominator = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denominator) if denominator > 0 else 0.0


def _to_parameters(theta: np.ndarray) -> WAEParameters:
    # a1, a2, a3, s live on [0, inf): optimise their logarithms; t in [0, 1]: its logit.
    a1, a2, a3, s = np.exp(np.clip(theta[:4], -30, 30))
    t = 1 / (1 + np.exp(-np.clip(theta[4], -30, 30)))
    return WAEParameters(float(a1), float(a2), float(a3), float(s), float(t))


def _from_parameters(p: WAEParameters) -> np.ndarray:
    t = min(max(p.t, 1e-6), 1 - 1e-6)
    return np.array([*np.log(np.maximum([p.a1, p.a2, p.a3, p.s], 1e-12)), np.log(t / (1 - t))])


@dataclass(frozen=True)
class WAEFit:
    """Result of :func:`fit_wae_parameters`."""

    test_srocc: dict[str, float]            # per held-out set: SROCC of -WAE against the scale values
    fold_parameters: dict[str, WAEParameters]  # parameters trained without that set
    parameters: WAEParameters                # trained on all sets (for new data)
    average: float                           # mean of test_srocc, as Table 4's "Average"


def _fit_on(histograms: list[np.ndarray], ranks: list[np.ndarray], starts: np.ndarray,
            maxiter: int) -> WAEParameters:
    from scipy.optimize import minimize

    def loss(theta: np.ndarray) -> float:
        parameters = _to_parameters(theta)
        rhos = [_rank_correlation(-wae_from_histograms(h, parameters), r) for h, r in zip(histograms, ranks)]
        return -float(np.nanmean(rhos))

    best_theta, best_loss = starts[0], np.inf
    for start in starts:
        # The SROCC is piecewise constant: a wide initial simplex lets Nelder-Mead see its steps.
        simplex = start + np.vstack([np.zeros(5), np.eye(5) * 1.5])
        result = minimize(loss, start, method="Nelder-Mead",
                          options={"initial_simplex": simplex, "maxiter": maxiter, "xatol": 1e-3, "fatol": 1e-6})
        if result.fun < best_loss:
            best_theta, best_loss = result.x, result.fun
    return _to_parameters(best_theta)


def fit_wae_parameters(histograms: Mapping[str, np.ndarray], subjective: Mapping[str, np.ndarray],
                       n_starts: int = 4, seed: int | np.random.Generator | None = 0,
                       maxiter: int = 400) -> WAEFit:
    """Choose WAE-IQA's five parameters by leave-one-set-out cross-validation (StudyMB 2.0).

    For each set, the parameters maximising the mean SROCC between ``-WAE`` and
    the subjective scale values over the *other* sets are found with
    Nelder-Mead from ``n_starts`` starting points (the paper's Fig. 20 values
    and seeded random draws); the held-out set's SROCC is the cross-validated
    figure of Table 4.

    Parameters
    ----------
    histograms : mapping set_id -> ndarray (n_items, 256)
        :func:`abs_error_histogram` of each item of the set, in the order of ``subjective``.
    subjective : mapping set_id -> ndarray (n_items,)
        Scale values (larger = better).
    n_starts : int
        Starting points per optimisation (>= 1).
    seed : int, Generator or None
        Randomness of the starting points.
    maxiter : int
        Nelder-Mead iterations per start.
    """
    from scipy.stats import rankdata

    set_ids = list(subjective)
    if len(set_ids) < 2:
        raise StimulusInputError("leave-one-set-out fitting needs at least two sets")
    if missing := [s for s in set_ids if s not in histograms]:
        raise StimulusInputError(f"no error histograms for sets {missing}")
    hists = {s: np.atleast_2d(np.asarray(histograms[s], np.float64)) for s in set_ids}
    ranks = {s: rankdata(np.asarray(subjective[s], np.float64)) for s in set_ids}
    for s in set_ids:
        if hists[s].shape != (len(ranks[s]), 256):
            raise StimulusInputError(f"set {s!r}: histograms shape {hists[s].shape}, expected ({len(ranks[s])}, 256)")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    starts = np.vstack([_from_parameters(WAE_PAPER_PARAMETERS)] + [
        _from_parameters(WAEParameters(*np.exp(rng.uniform(np.log(0.01), np.log(10), 3)),
                                       float(np.exp(rng.uniform(0, np.log(100)))), float(rng.uniform(0.0, 0.5))))
        for _ in range(max(n_starts, 1) - 1)])
    fold_parameters, test_srocc = {}, {}
    for held_out in set_ids:
        train = [s for s in set_ids if s != held_out]
        fold_parameters[held_out] = _fit_on([hists[s] for s in train], [ranks[s] for s in train], starts, maxiter)
        test_srocc[held_out] = _rank_correlation(-wae_from_histograms(hists[held_out], fold_parameters[held_out]),
                                                 ranks[held_out])
    overall = _fit_on([hists[s] for s in set_ids], [ranks[s] for s in set_ids], starts, maxiter)
    return WAEFit(test_srocc, fold_parameters, overall, float(np.mean(list(test_srocc.values()))))


# ---------------------------------------------------------------- SROCC table (Table 4)

#: Metrics for which a smaller value means better quality (their sign is flipped before correlating).
LOWER_IS_BETTER = frozenset({"rmse", "mse", "gmsd", "ie", "ne", "wae", "wae-iqa", "mad", "gn-rmse"})


def _lower_is_better(metric: str) -> bool:
    return metric.lower().replace("_", "-") in LOWER_IS_BETTER


def metric_srocc_table(metric_values: Mapping[str, Mapping[str, np.ndarray]],
                       subjective: Mapping[str, np.ndarray],
                       higher_is_better: Mapping[str, bool] | None = None) -> list[dict]:
    """SROCC between each metric and the subjective scale values, per set, plus their average.

    Parameters
    ----------
    metric_values : mapping metric -> (mapping set_id -> values per item)
        Items in the same order as ``subjective[set_id]``.
    subjective : mapping set_id -> scale values per item (larger = better)
    higher_is_better : mapping metric -> bool, optional
        Direction of each metric; by default the names in :data:`LOWER_IS_BETTER`
        are distortions (their values are negated), all others similarities, so a
        metric that agrees with the observers gets a positive SROCC as in Table 4.

    Returns
    -------
    list of dict
        One row per set (``{"set": set_id, metric: srocc, ...}``, in the order of
        ``subjective``), then ``{"set": "Average", ...}``: the mean over sets, as in
        StudyMB 2.0 Table 4. A metric without values for a set gives NaN there.
    """
    direction = dict(higher_is_better or {})
    rows = []
    for set_id, scale in subjective.items():
        row: dict = {"set": set_id}
        for metric, per_set in metric_values.items():
            if set_id not in per_set:
                row[metric] = float("nan")
                continue
            values = np.asarray(per_set[set_id], np.float64)
            if values.shape != np.shape(scale):
                raise StimulusInputError(f"metric {metric!r}, set {set_id!r}: {values.size} values "
                                         f"for {np.size(scale)} subjective scale values")
            sign = 1.0 if direction.get(metric, not _lower_is_better(metric)) else -1.0
            row[metric] = _srocc(sign * values, scale)
        rows.append(row)
    average: dict = {"set": "Average"}
    for metric in metric_values:
        values = [row[metric] for row in rows if np.isfinite(row[metric])]
        average[metric] = float(np.mean(values)) if values else float("nan")
    rows.append(average)
    return rows


def _srocc(x, y) -> float:
    """Spearman's rho over the pairs where both values are finite (NaN for fewer than two pairs).

    The same figure as :func:`analysis.correlation.srocc`, computed here because ``stimuli`` must not
    depend on ``analysis`` (the analysis package uses the stimulus package, never the reverse).
    """
    from scipy.stats import spearmanr

    x, y = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    keep = np.isfinite(x) & np.isfinite(y)
    return float(spearmanr(x[keep], y[keep]).statistic) if keep.sum() > 1 else float("nan")


def format_srocc_table(rows: Sequence[dict]) -> str:
    """Plain-text table of :func:`metric_srocc_table` rows (sets down, metrics across)."""
    metrics = [key for key in rows[0] if key != "set"] if rows else []
    width = max([len("set")] + [len(str(row["set"])) for row in rows])
    lines = [f"{'set':<{width}}  " + "  ".join(f"{m:>8}" for m in metrics)]
    for row in rows:
        lines.append(f"{str(row['set']):<{width}}  " + "  ".join(f"{row[m]:>8.4f}" for m in metrics))
    return "\n".join(lines)


# ---------------------------------------------------------------- all at once

def compare_images(reference: np.ndarray, test: np.ndarray) -> dict[str, float]:
    """RMSE, PSNR, SSIM, MS-SSIM, GMSD, IE, NE and WAE (paper parameters) of one image pair.

    Metrics that cannot be computed for the image size (SSIM below 11 px, MS-SSIM
    below 176 px on a side) are NaN.
    """
    out = {"rmse": rmse(reference, test), "psnr": psnr(reference, test)}
    for name, function in (("ssim", ssim), ("ms_ssim", ms_ssim)):
        try:
            out[name] = function(reference, test)
        except ValueError:  # too small for the window / number of scales
            out[name] = float("nan")
    out["gmsd"] = gmsd(reference, test)
    out["ie"] = interpolation_error(reference, test)
    out["ne"] = normalized_interpolation_error(reference, test)
    out["wae"] = wae_iqa(reference, test)
    return out
