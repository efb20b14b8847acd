"""Gold stimuli built from the scene's own artefacts.

A gold (check) pair has an answer nobody attentive can doubt, yet it must look
like every other trial: a blurred or noisy copy among interpolation artefacts
is spotted at a glance, and then a clicker can answer gold pairs carefully and
the real pairs at random. So both gold images are made of the scene's real
candidate errors ``d = candidate - reference``:

* the **worse** image is the reference plus the *worst* candidate's error
  (largest error) scaled up by a factor ``k > 1``, chosen so that its error is
  ``margin`` times the worst candidate's (default 2);
* the **better** image is the reference plus the *best* candidate's error
  (smallest non-zero error) scaled down by ``better_scale`` (default 0.5).

That is :func:`make_gold_pair`. A scene gets several such pairs
(:func:`make_gold_pairs`, default 6 in :mod:`stimuli.prepare`), made of other
candidates' errors with slightly varied factors and their own seeds: one pair
shown to a worker again and again would be a pattern to spot, since real pairs
never repeat for a worker.

As in artefact amplification (:mod:`stimuli.amplify`), the factor is lowered
per pixel where a value would leave the range, one factor for the three
channels, so the error keeps its direction in RGB and nothing is clamped.
Values are rounded stochastically (seeded): a scaled error of half a grey
level then changes about half of those pixels instead of all or none, so the
better image is neither the reference nor the best candidate itself.
Pixels where the candidate equals the reference stay untouched: the change
is as local as the artefacts are.

:func:`stimuli.prepare.prepare_scene` then amplifies and crops both exactly
like every candidate. Errors are the Middlebury interpolation error IE
(:func:`stimuli.metrics.interpolation_error`). StudyMB 1.0 built its test
questions from the ground truth against a bad image; here the ground truth
itself is never shown as a gold side, so its file, URL or bytes cannot give
the answer away.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .io import StimulusInputError, check_rgb, max_value

DEFAULT_MARGIN = 2.0        # worse gold error / worst candidate error, at least
DEFAULT_BETTER_SCALE = 0.5  # better gold error ~ this x best candidate error (at most ~0.71x after rounding)
WORSE_SOURCE_SHARE = 0.5  # worse gold images come from candidates with >= this x the worst IE
VARIANT_MAX_FACTOR_PER_MARGIN = 3.0  # factor cap of other worse sources, per unit of margin
MARGIN_JITTER = 1.25  # gold pairs after the first aim at margin x [1, this) the worst candidate's IE
MAX_FACTOR = 64.0           # largest error factor tried for the worse image
_BISECTION_STEPS = 60


class GoldError(StimulusInputError):
    """The scene's candidates do not allow a gold pair that meets the documented rule."""


@dataclass(frozen=True)
class GoldPair:
    """The two gold images of a scene (not yet amplified) and how they were made.

    Attributes
    ----------
    better, worse : ndarray
        Same shape and dtype as the reference.
    errors : dict
        ``{"metric": "interpolation_error", "candidates": {id: IE}, "better": IE, "worse": IE}``.
    construction : dict
        JSON-ready parameters: source candidates, factors, margin, seed, rounding.
    """

    better: np.ndarray
    worse: np.ndarray
    errors: dict = field(default_factory=dict)
    construction: dict = field(default_factory=dict)


def error_norm_squared(reference: np.ndarray, image: np.ndarray) -> np.ndarray:
    """Squared RGB length of ``image - reference`` per pixel, shape ``(H, W)``, float64."""
    diff = image.astype(np.float64) - reference
    return np.einsum("ijk,ijk->ij", diff, diff)


def candidate_errors(reference: np.ndarray, candidates: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Interpolation error IE (Middlebury eq. 24) of every candidate against the reference."""
    from .metrics import interpolation_error

    return {item_id: interpolation_error(reference, image) for item_id, image in candidates.items()}


def scale_error(reference: np.ndarray, candidate: np.ndarray, factor: float,
                rng: np.random.Generator) -> np.ndarray:
    """``reference + f * (candidate - reference)`` with per-pixel ``f <= factor``, stochastically rounded.

    Parameters
    ----------
    reference, candidate : ndarray, shape (H, W, 3), uint8 or uint16, equal shape and dtype
    factor : float
        Error scale, > 0. Above 1 it is lowered per pixel to the largest value
        that keeps all three channels in range (as in Algorithm 1 of StudyMB 2.0).
    rng : numpy.random.Generator
        Source of the stochastic rounding.

    Returns
    -------
    ndarray, same shape and dtype; equal to ``reference`` wherever ``candidate`` is.
    """
    if not np.isfinite(factor) or factor <= 0:
        raise GoldError(f"factor must be a finite number > 0, got {factor}")
    reference, candidate = check_rgb(reference, "reference"), check_rgb(candidate, "candidate")
    if reference.shape != candidate.shape or reference.dtype != candidate.dtype:
        raise GoldError(f"candidate {candidate.shape} {candidate.dtype} differs from reference "
                        f"{reference.shape} {reference.dtype}")
    exact = reference + _pixel_factors(reference, candidate, factor)[:, :, None] * (
        candidate.astype(np.float64) - reference)
    exact = np.clip(exact, 0, max_value(reference.dtype))  # only float round-off can step outside
    floor = np.floor(exact)
    rounded = floor + (rng.random(exact.shape) < exact - floor)
    return rounded.astype(reference.dtype)


def _pixel_factors(reference: np.ndarray, candidate: np.ndarray, factor: float) -> np.ndarray:
    from .amplify import pixel_alpha

    if factor > 1:
        return pixel_alpha(reference, candidate, factor)
    return np.full(reference.shape[:2], float(factor))  # a convex mix never leaves the range


def factor_for_error(reference: np.ndarray, candidate: np.ndarray, target: float,
                     max_factor: float = MAX_FACTOR) -> float | None:
    """Smallest factor ``k`` in ``[1, max_factor]`` whose scaled error (before rounding) has IE >= ``target``.

    IE grows monotonically with ``k`` (each pixel's factor is ``min(limit, k)``),
    so a bisection finds it. Returns ``None`` when even ``max_factor`` falls short
    (the error points into saturated values almost everywhere).
    """
    limit = _pixel_factors(reference, candidate, max_factor)
    norm2 = error_norm_squared(reference, candidate)

    def ie(k: float) -> float:
        return float(np.sqrt(np.mean(np.minimum(limit, k) ** 2 * norm2)))

    if ie(max_factor) < target:
        return None
    low, high = 1.0, max_factor
    for _ in range(_BISECTION_STEPS):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if ie(middle) < target else (low, middle)
    return high


def make_gold_pair(reference: np.ndarray, candidates: Mapping[str, np.ndarray], *,
                   margin: float = DEFAULT_MARGIN, better_scale: float = DEFAULT_BETTER_SCALE,
                   seed: int | np.random.Generator | None = 0) -> GoldPair:
    """Build the better and worse gold images of a scene from its candidates' own errors.

    Parameters
    ----------
    reference : ndarray, shape (H, W, 3), uint8 or uint16
        Ground truth.
    candidates : mapping of str to ndarray
        The scene's candidates (same shape and dtype), at least one differing from the reference.
    margin : float
        The worse image's IE is at least ``margin`` (> 1) times the largest candidate IE.
    better_scale : float
        The best candidate's error is scaled by this (in ``(0, 0.85]``), so the better
        image's IE is below the smallest non-zero candidate IE (about ``better_scale`` times it).
    seed : int, Generator or None
        Seed of the stochastic rounding; the same seed gives the same images.

    Returns
    -------
    GoldPair

    Raises
    ------
    GoldError
        Bad parameters, no candidate differs from the reference, the margin cannot be
        reached, or a gold image would equal the reference or a candidate.
    """
    _check_parameters(margin, better_scale)
    reference = check_rgb(reference, "reference")
    errors = candidate_errors(reference, candidates)
    worst, best = _worst_and_best(errors)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    pair = _build_pair(reference, candidates, errors, _Recipe(worst, margin, best, better_scale, MAX_FACTOR), rng,
                       seed if isinstance(seed, int) else None)
    if pair is None:
        raise GoldError(f"the worst candidate {worst!r} cannot be scaled to {margin}x its error without leaving "
                        f"the value range (up to {MAX_FACTOR:g}x): lower the gold margin")
    check_gold_pair(pair, reference, candidates, margin)
    return pair


@dataclass(frozen=True)
class _Recipe:
    """Which candidate errors make one gold pair, and how far they are scaled."""

    worse_from: str
    worse_margin: float   # the worse image's IE is aimed at this x the *worst* candidate's IE
    better_from: str
    better_factor: float  # the better source's error is multiplied by this
    max_factor: float     # the worse source's error is scaled up at most this much


def _build_pair(reference: np.ndarray, candidates: Mapping[str, np.ndarray], errors: dict[str, float],
                recipe: _Recipe, rng: np.random.Generator, seed: int | None) -> GoldPair | None:
    """The pair a recipe gives, or None when the worse source cannot reach its target in range."""
    # 1 % above the target, so the stochastic rounding cannot take the result below it.
    factor = factor_for_error(reference, candidates[recipe.worse_from],
                              1.01 * recipe.worse_margin * max(errors.values()), recipe.max_factor)
    if factor is None:
        return None
    worse = scale_error(reference, candidates[recipe.worse_from], factor, rng)
    better = scale_error(reference, candidates[recipe.better_from], recipe.better_factor, rng)
    return GoldPair(better, worse, _pair_errors(reference, better, worse, errors), {
        "method": "scaled candidate error", "worse_from": recipe.worse_from, "worse_factor": factor,
        "margin": recipe.worse_margin, "better_from": recipe.better_from, "better_factor": recipe.better_factor,
        "rounding": "stochastic", "seed": seed, "metric": "interpolation_error"})


def make_gold_pairs(reference: np.ndarray, candidates: Mapping[str, np.ndarray], n: int, *,
                    margin: float = DEFAULT_MARGIN, better_scale: float = DEFAULT_BETTER_SCALE,
                    seed: int = 0) -> list[GoldPair]:
    """``n`` distinct gold pairs of one scene, each meeting the rule of :func:`check_gold_pair`.

    One gold pair shown again and again is a pattern a clicker can learn, while real
    pairs never repeat for a worker; so a scene gets several, made of different
    candidates' errors. Pair ``k`` takes its worse image from the ``k``-th of the worse
    sources (cycling; see :func:`_worse_sources`), scaled up until its IE is ``margin`` x
    (1 to ``MARGIN_JITTER``) times the *worst* candidate's IE, and its better image from
    the ``k``-th best candidate of the better half, scaled by ``better_scale`` x (0.8 to 1)
    x (best IE / its IE), so that it stays below the best candidate's error. Pair 0 is the
    worst and best candidates at ``margin`` and ``better_scale`` exactly. Each pair has
    its own seed (recorded in ``construction``); a pair that breaks the rule or repeats
    an image is drawn again from the next sources.

    Parameters
    ----------
    reference, candidates, margin, better_scale :
        As in :func:`make_gold_pair`.
    n : int
        Number of pairs, >= 0.
    seed : int
        Root of the per-pair seeds (jitter of the factors and stochastic rounding).

    Returns
    -------
    list of GoldPair
        No image equals the reference, a candidate, or any other gold image of the list.

    Raises
    ------
    GoldError
        As :func:`make_gold_pair`, or when no try gives a new pair that meets the rule.
    """
    _check_parameters(margin, better_scale)
    if n < 0:
        raise GoldError(f"the number of gold pairs must be >= 0, got {n}")
    if n == 0:
        return []
    reference = check_rgb(reference, "reference")
    errors = candidate_errors(reference, candidates)
    _, best = _worst_and_best(errors)  # raises when no candidate differs from the reference
    worse_sources = _worse_sources(reference, candidates, errors, margin)
    better_sources = _better_sources(errors)
    pairs: list[GoldPair] = []
    seen: set[bytes] = set()
    attempts = len(worse_sources) * len(better_sources) + 3
    for k in range(n):
        for attempt in range(attempts):
            variant_seed = int(np.random.SeedSequence([seed, k, attempt]).generate_state(1)[0])
            rng = np.random.default_rng(variant_seed)
            exact = k == 0 and attempt == 0
            worse_jitter, better_jitter = (1.0, 1.0) if exact else (1 + (MARGIN_JITTER - 1) * rng.random(),
                                                                    0.8 + 0.2 * rng.random())
            worse_from = worse_sources[(k + attempt) % len(worse_sources)]
            better_from = better_sources[(k + attempt // len(worse_sources)) % len(better_sources)]
            recipe = _Recipe(worse_from, margin * worse_jitter, better_from,
                             better_scale * better_jitter * errors[best] / errors[better_from],
                             MAX_FACTOR if worse_from == worse_sources[0] else _variant_cap(margin))
            pair = _build_pair(reference, candidates, errors, recipe, rng, variant_seed)
            if pair is not None and not {_digest(pair.better), _digest(pair.worse)} & seen \
                    and _meets_rule(pair, reference, candidates, margin):
                break
        else:
            raise GoldError(f"no new gold pair #{k + 1} meets the rule after {attempts} tries: lower the gold "
                            f"margin or ask for fewer gold pairs")
        seen.update((_digest(pair.better), _digest(pair.worse)))
        pairs.append(pair)
    return pairs


def _variant_cap(margin: float) -> float:
    return VARIANT_MAX_FACTOR_PER_MARGIN * margin


def _worse_sources(reference: np.ndarray, candidates: Mapping[str, np.ndarray], errors: dict[str, float],
                   margin: float) -> list[str]:
    """Candidates whose error makes worse gold images, worst first.

    The worst candidate, then the others of the worse half that have at least
    ``WORSE_SOURCE_SHARE`` of its IE and reach the largest jittered target within
    ``_variant_cap(margin)``: a small error scaled up many times, or one whose pixels
    have no room left in the value range, would look like scattered noise rather
    than the scene's artefacts.
    """
    ranked = sorted(((e, i) for i, e in errors.items() if e > 0), reverse=True)
    worst_error, worst = ranked[0]
    target = 1.01 * MARGIN_JITTER * margin * worst_error
    others = [i for e, i in ranked[1:(len(ranked) + 1) // 2] if e >= WORSE_SOURCE_SHARE * worst_error
              and factor_for_error(reference, candidates[i], target, _variant_cap(margin)) is not None]
    return [worst, *others]


def _better_sources(errors: dict[str, float]) -> list[str]:
    """The better half of the candidates with an error, best first."""
    ranked = sorted((e, i) for i, e in errors.items() if e > 0)
    return [i for _, i in ranked[:(len(ranked) + 1) // 2]]


def _meets_rule(pair: GoldPair, reference: np.ndarray, candidates: Mapping[str, np.ndarray], margin: float) -> bool:
    try:
        check_gold_pair(pair, reference, candidates, margin)
    except GoldError:
        return False
    return True


def _digest(image: np.ndarray) -> bytes:
    import hashlib

    return hashlib.sha256(image.tobytes()).digest()


def _check_parameters(margin: float, better_scale: float) -> None:
    if not (np.isfinite(margin) and margin > 1):
        raise GoldError(f"gold margin must be > 1 (worse gold error / worst candidate error), got {margin}")
    # A rounded value never exceeds the candidate's (|round(s d)| <= |d| for s < 1); up to s = sqrt(3)/2
    # even its expected square, (s d)^2 + 1/4 at most, stays below d^2.
    if not 0 < better_scale <= 0.85:
        raise GoldError(f"gold better_scale must be in (0, 0.85], got {better_scale}")


def _worst_and_best(errors: dict[str, float]) -> tuple[str, str]:
    positive = {item_id: e for item_id, e in errors.items() if e > 0}
    if not positive:
        raise GoldError("every candidate equals the reference: there is no artefact to build gold pairs from")
    return max(positive, key=positive.get), min(positive, key=positive.get)


def _pair_errors(reference: np.ndarray, better: np.ndarray, worse: np.ndarray, errors: dict[str, float]) -> dict:
    from .metrics import interpolation_error

    return {"metric": "interpolation_error", "candidates": dict(errors),
            "better": interpolation_error(reference, better), "worse": interpolation_error(reference, worse)}


def check_gold_pair(pair: GoldPair, reference: np.ndarray, candidates: Mapping[str, np.ndarray],
                    margin: float) -> None:
    """Raise :class:`GoldError` unless the pair meets the rule.

    The rule: IE(worse) >= ``margin`` x the largest candidate IE; 0 < IE(better) <
    the smallest non-zero candidate IE; neither image equals the reference or any
    candidate pixel for pixel (hence not byte for byte either).
    """
    errors = pair.errors["candidates"]
    worst = max(errors.values())
    best = min(e for e in errors.values() if e > 0)
    if pair.errors["worse"] < margin * worst:
        raise GoldError(f"worse gold error {pair.errors['worse']:.3f} is below {margin} x the worst candidate's "
                        f"{worst:.3f}")
    if not 0 < pair.errors["better"] < best:
        raise GoldError(f"better gold error {pair.errors['better']:.3f} is not in (0, best candidate's {best:.3f})")
    for name, image in (("better", pair.better), ("worse", pair.worse)):
        same = [item_id for item_id, other in {"reference": reference, **candidates}.items()
                if np.array_equal(image, other)]
        if same:
            raise GoldError(f"the {name} gold image equals {same[0]!r}: pick another seed")
