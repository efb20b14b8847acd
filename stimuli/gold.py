"""Gold (check) pairs: plain to an attentive person, not to be told from real pairs by a script.

A gold pair has an answer nobody attentive can doubt, yet it must look like every other trial:
a script that tells gold from real trials answers gold carefully and the rest at random. Earlier
gold images were made for the purpose (a candidate's error scaled up against one scaled down),
and a script saw them by their bytes alone: the two PNG sizes' ratio was at least 1.29 for gold
and at most 1.18 for real pairs, and the errors' ratio at least 10.5 against at most 6.1.

So gold pairs are now **pairs of the scene's own candidates**, shown as the very files real
trials show (:func:`eligible_gold_pairs`, :func:`choose_gold_pairs`):

* a pair qualifies when one candidate is plainly worse by two unlike measures, as given and
  amplified: its interpolation error IE and its GMSD (gradient structure) are both at least
  ``margin`` times the other's (default 1.5) and its IE is at least ``min_difference`` grey
  levels higher (default 8: a visible step, not only a large ratio of two small errors);
* among the qualifying pairs, those are chosen whose statistics (file sizes, their ratio,
  errors, their ratio, crops; :mod:`stimuli.separability`) look most like the real (design)
  pairs', so that the easiest pairs do not stand out as the only gold.

A scene where no pair qualifies (all candidates alike) falls back to images made of its
candidates' errors (:func:`make_gold_pairs`, below), which are easy to tell from real trials;
``stimuli prepare`` warns about such scenes.

The synthetic construction: the **worse** image is the reference plus the *worst* candidate's
error (largest error) scaled up by a factor ``k > 1``, chosen so that its error is ``margin``
times the worst candidate's (default 2); the **better** image is the reference plus the *best*
candidate's error (smallest non-zero error) scaled down by ``better_scale`` (default 0.5). That
is :func:`make_gold_pair`; :func:`make_gold_pairs` makes several from other candidates' errors
with slightly varied factors and their own seeds. As in artefact amplification
(:mod:`stimuli.amplify`), the factor is lowered per pixel where a value would leave the range,
one factor for the three channels, so the error keeps its direction in RGB and nothing is
clamped. Values are rounded stochastically (seeded). Pixels where the candidate equals the
reference stay untouched. :func:`stimuli.prepare.prepare_scene` then amplifies and crops both
exactly like every candidate. Errors are the Middlebury interpolation error IE
(:func:`stimuli.metrics.interpolation_error`). The reference itself is never a gold side.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
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


# ---------------------------------------------------------------- gold pairs of real candidates

DEFAULT_PAIR_MARGIN = 1.5       # worse candidate's IE (and GMSD) / better candidate's in a gold pair, at least
DEFAULT_MIN_DIFFERENCE = 8.0    # and the two IEs differ by this many grey levels (8-bit scale), at least
EASINESS_WEIGHT = 0.05          # objective: max AUC - this x mean log2(IE ratio) of the chosen pairs
_RESTARTS = 12


@dataclass(frozen=True)
class CandidateGold:
    """A gold pair made of two of the scene's own candidates, shown as they are in real trials.

    Attributes
    ----------
    better, worse : str
        Candidate IDs; ``worse`` has the larger interpolation error in every image kind checked.
    errors : dict
        ``{kind: {"better": IE, "worse": IE}}`` for each kind (``original``, ``amplified``).
    """

    better: str
    worse: str
    errors: dict = field(default_factory=dict)


def eligible_gold_pairs(errors: Mapping[str, Mapping[str, float]], *, margin: float = DEFAULT_PAIR_MARGIN,
                        min_difference: float = DEFAULT_MIN_DIFFERENCE,
                        agreeing: Mapping[str, Mapping[str, float]] | None = None) -> list[CandidateGold]:
    """The candidate pairs an attentive person cannot get wrong, as (better, worse), in a stable order.

    A pair qualifies when, in every image kind of ``errors`` (e.g. as given and as amplified), the
    worse candidate's IE is at least ``margin`` times the better one's and at least
    ``min_difference`` above it, and every measure of ``agreeing`` (e.g. GMSD, which looks at
    structure rather than pixel values) ranks the two the same way by the same ``margin``: one
    image is plainly further from the reference by two unlike measures, so a pair of unlike
    artefacts (fine noise against mild compression, say) that people may judge against the
    pixel error is left out. Both images are ones the study shows in its real trials.

    Parameters
    ----------
    errors : mapping
        ``{kind: {candidate ID: IE}}``, the same IDs in every kind.
    margin : float
        > 1.
    min_difference : float
        >= 0, grey levels of the images' scale.
    agreeing : mapping, optional
        ``{name: {candidate ID: value}}``, larger is worse.
    """
    if not (np.isfinite(margin) and margin > 1):
        raise GoldError(f"gold margin must be > 1 (worse candidate's error / better one's), got {margin}")
    if not min_difference >= 0:
        raise GoldError(f"gold min difference must be >= 0, got {min_difference}")
    kinds = list(errors)
    ids = sorted(errors[kinds[0]])
    others = list((agreeing or {}).values())
    pairs = []
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            better, worse = (a, b) if errors[kinds[0]][a] <= errors[kinds[0]][b] else (b, a)
            plain = all(e[worse] >= margin * e[better] and e[worse] - e[better] >= min_difference
                        for e in errors.values())
            if plain and all(m[worse] >= margin * m[better] and m[worse] > 0 for m in others):
                pairs.append(CandidateGold(better, worse, {k: {"better": e[better], "worse": e[worse]}
                                                           for k, e in {**errors, **(agreeing or {})}.items()}))
    return pairs


def choose_gold_pairs(eligible: Sequence[CandidateGold], statistics: Mapping[str, Mapping[frozenset, Mapping]],
                      real: Sequence[frozenset], n: int, seed: int = 0) -> list[CandidateGold]:
    """``n`` of the ``eligible`` pairs whose statistics look most like the real pairs'.

    A script sees each trial's files: their sizes, dimensions, crops and errors to the reference
    (:mod:`stimuli.separability`). Gold pairs are real pairs, but the easiest ones; picked at
    random, their error ratio alone would tell many of them apart. So the pairs are chosen to
    minimise the largest AUC, over every statistic and every image kind, of gold against
    ``real`` pairs, less a small reward for easier pairs (``EASINESS_WEIGHT`` x their mean log2
    error ratio), by a local search (swap a chosen pair for the best replacement while that helps,
    every replacement scored at once) from ``_RESTARTS`` seeded random starts.

    Parameters
    ----------
    eligible : sequence of CandidateGold
        From :func:`eligible_gold_pairs`.
    statistics : mapping
        ``{kind: {frozenset({a, b}): {statistic: value}}}`` for every eligible and real pair.
    real : sequence of frozenset
        The scene's real (design) pairs.
    n : int
        Pairs wanted; all eligible ones when there are no more than ``n``.
    seed : int

    Returns
    -------
    list of CandidateGold, in the order of ``eligible``.
    """
    if n >= len(eligible):
        return list(eligible)
    if n <= 0:
        return []
    from .separability import auc_matrix

    keys = [frozenset((p.better, p.worse)) for p in eligible]
    blocks_gold, blocks_real = [], []
    for by_pair in statistics.values():
        names = sorted(next(iter(by_pair.values())))
        blocks_gold.append(np.array([[by_pair[k][s] for s in names] for k in keys], float))
        blocks_real.append(np.array([[by_pair[k][s] for s in names] for k in real], float))
    gold_values, real_values = np.hstack(blocks_gold), np.hstack(blocks_real)
    # below[i, j]: share of real pairs below eligible pair i in statistic j (ties half): AUC is a mean of rows.
    below = auc_matrix(gold_values, real_values)
    # A statistic may be infinite for every pair (a ratio to a zero error): inf - inf is NaN, and such a
    # column does not vary.
    with np.errstate(invalid="ignore"):
        varies = np.ptp(np.vstack([gold_values, real_values]), axis=0) > 0
    below = below[:, varies]
    ease = np.array([np.log2(min(e["worse"] / e["better"] if e["better"] > 0 else 1e6 for e in p.errors.values()))
                     for p in eligible])

    def scores(total: np.ndarray, ease_total: float) -> np.ndarray:
        """The objective of chosen sets whose rows of ``below`` sum to ``total`` (one set per row)."""
        mean = total / n
        return np.max(np.maximum(mean, 1 - mean), axis=-1) - EASINESS_WEIGHT * ease_total / n

    rng = np.random.default_rng(seed)
    best, best_score = None, np.inf
    for _ in range(_RESTARTS):
        chosen = rng.choice(len(eligible), n, replace=False)
        total, ease_total = below[chosen].sum(axis=0), ease[chosen].sum()
        current = float(scores(total, ease_total))
        improved = True
        while improved:  # steepest descent: the best swap of each slot, all replacements at once
            improved = False
            for slot in rng.permutation(n):
                out = chosen[slot]
                swapped = scores(total - below[out] + below, ease_total - ease[out] + ease)
                swapped[chosen] = np.inf  # a pair already chosen cannot come in again
                other = int(np.argmin(swapped))
                if swapped[other] < current - 1e-12:
                    total, ease_total = total - below[out] + below[other], ease_total - ease[out] + ease[other]
                    chosen[slot], current, improved = other, float(swapped[other]), True
        if current < best_score:
            best, best_score = np.sort(chosen), current
    return [eligible[i] for i in best]
