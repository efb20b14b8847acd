"""Quality control of ratings, as pure functions: the known answer range of each quality check,
hidden-gold and quiz scores, and straight-lining.

A rating study mixes three kinds of quality check into its pages (P.808's gold and trapping
questions and P.910's hidden reference, as one rule: a known range of acceptable answers), each
indistinguishable from real trials on the wire (server/paradigms/rating/study.py makes their files):

* the **hidden reference**: the scene's reference shown as the test (in a copy of its own with one code
  value of noise, so that its URL, bytes and pixels differ from the reference's, below visibility). DCR: "Imperceptible" or "Perceptible but not
  annoying" (5 or 4); ACR: Fair or better (3-5, the reference of a natural scene); CCR: about the
  same (-1..1 normalised).
* the **strongly degraded image** (``gold_low``): the scene's reference blurred, washed out and darkened
  to at least twice the worst candidate's interpolation error (:func:`stimuli.check_images.blurred_degradations`),
  amplified like every candidate. DCR and ACR: 1 or 2 (Very annoying / Annoying, Bad / Poor); CCR: worse
  than the reference (-3..-1 normalised).

The **quiz** (training) is a page of such checks before the first page of real trials; a worker who
answers fewer than ``accuracy_threshold`` of them in range is disqualified for good, like the paired
quiz. Hidden checks on later pages stop a worker whose share in range falls below the threshold once
``gold_min_answered`` were answered. **Straight-lining**: a page of at least
:data:`STRAIGHT_LINE_MIN_TRIALS` ratings that are all the same answer (zero variance over the page) is
straight-lined; a worker with ``straight_line_pages`` such pages is stopped (0: never).

With the slider a continuous answer counts as the label it is nearest to: a range widens by half a
step on each side.
"""
from __future__ import annotations

import numpy as np

from .models import GOLD_LOW, HIDDEN_REFERENCE

STRAIGHT_LINE_MIN_TRIALS = 5  # fewer ratings on a page say too little about the worker's variance

# method -> role -> (lowest, highest) acceptable normalised rating (server/paradigms/rating/scales.py).
KNOWN_RANGES: dict[str, dict[str, tuple[int, int]]] = {
    "acr": {HIDDEN_REFERENCE: (3, 5), GOLD_LOW: (1, 2)},
    "dcr": {HIDDEN_REFERENCE: (4, 5), GOLD_LOW: (1, 2)},
    "ccr": {HIDDEN_REFERENCE: (-1, 1), GOLD_LOW: (-3, -1)},
}


def known_range(method: str, role: str, slider: bool = False) -> tuple[float, float]:
    """The acceptable normalised ratings of a quality check of ``role`` (inclusive bounds).

    Raises
    ------
    KeyError
        ``role`` is not a quality check (a real stimulus has no right answer).
    """
    low, high = KNOWN_RANGES[method][role]
    widen = 0.5 if slider else 0.0
    return low - widen, high + widen


def in_range(method: str, role: str, rating: float, slider: bool = False) -> bool:
    """Whether a normalised ``rating`` of a quality check of ``role`` is in its known range."""
    low, high = known_range(method, role, slider)
    return low <= rating <= high


def below_threshold(correct: int, total: int, threshold: float) -> bool:
    """Whether ``correct`` of ``total`` answers in range fall below the share ``threshold``."""
    return correct < threshold * total - 1e-9


def straight_lined(ratings: np.ndarray, min_trials: int = STRAIGHT_LINE_MIN_TRIALS) -> bool:
    """Whether one page's ratings (as answered, on the scale shown) are all alike: at least ``min_trials``
    of them with zero variance.

    Parameters
    ----------
    ratings : ndarray, shape (n,)
        The raw answers of every trial of the page (real and quality checks).
    min_trials : int
        Pages with fewer answers are never called straight-lined.
    """
    ratings = np.asarray(ratings, dtype=float)
    return ratings.size >= min_trials and float(np.ptp(ratings)) == 0.0
