"""The worker's screen measured in millimetres and their distance from it, for every paradigm: the credit-card
match (px per mm) and the blind-spot sweeps (viewing distance), as the browser's shared modules measure them
(experiment_ui/static/js/calibration.js, blind_spot.js). Motion matching's calibration and the ``[viewing]``
checks (server/paradigms/viewing.py) both compute their figures here.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

CARD_WIDTH_MM = 85.60   # ISO/IEC 7810 ID-1 (credit card)
CARD_HEIGHT_MM = 53.98
BLIND_SPOT_DEG = 13.5     # horizontal angle of the blind spot from the fixation point (jsPsych virtual-chinrest)
BLIND_SPOT_CM = (20.0, 200.0)  # plausible viewing distances: nobody sits nearer or farther at a computer


def card_px_per_mm(card_width_px: float, card_height_px: float) -> float:
    """CSS px per mm from both sides of the on-screen card the worker matched to a real one (their mean)."""
    return (card_width_px / CARD_WIDTH_MM + card_height_px / CARD_HEIGHT_MM) / 2


def calibration_figures(card_width_px: float, card_height_px: float, px_per_degree: float) -> tuple[float, float]:
    """``(px_per_mm, viewing_distance_cm)``: px per mm from both sides of the card, and the distance
    at which ``px_per_degree`` pixels subtend one degree of visual angle."""
    px_per_mm = card_px_per_mm(card_width_px, card_height_px)
    distance_cm = (px_per_degree / px_per_mm / 10) / (2 * math.tan(math.radians(0.5)))
    return px_per_mm, distance_cm


def blind_spot_distance(sweeps_px: Sequence[float], px_per_mm: float) -> float:
    """Viewing distance (cm) from the blind-spot sweeps: the mean square-to-dot distance where the dot
    vanished, in cm, over tan 13.5° (the blind spot's angle from fixation; jsPsych's virtual-chinrest)."""
    mean_cm = sum(sweeps_px) / len(sweeps_px) / px_per_mm / 10
    return mean_cm / math.tan(math.radians(BLIND_SPOT_DEG))
