"""The simulated worker of ratings (ACR, DCR, CCR; ``perceptlab simulate``, :mod:`server.simulate_client`).

An honest worker is a P.913-like rater: its answer to stimulus ``j`` is

    u_ij = psi_j + delta_i + upsilon_i * e_ij,    e_ij ~ N(0, 1),

rounded to the nearest value of the study's scale (or, with the slider, clipped to its range), where
``psi_j`` is what the images show (below), ``delta_i ~ N(0, BIAS_SD)`` the worker's bias and
``upsilon_i`` (log-normal around :data:`INCONSISTENCY`) the worker's inconsistency, both drawn once per
worker: the subject model of ITU-T P.913 (section 12.6) that ``perceptlab analyze-ratings --model p913``
fits. A *careless* worker (the run's ``spam`` share) answers any value of the scale at random.

What an honest worker sees (``observer="images"``, images in [0, 1]):

* **DCR** shows the reference and the test: the impairment is their RMSE, and
  ``psi = 1 + 4 exp(-rmse / noise_rmse_scale)`` (5 for no difference, towards 1 as the error grows);
* **ACR** shows the test alone, so the worker judges it without a reference, by its RMS contrast
  (:func:`contrast`: a washed-out, dark or blurred image looks bad),
  ``psi = 1 + 4 clip((c - CONTRAST_LOW) / (CONTRAST_HIGH - CONTRAST_LOW))``; a crude no-reference
  judgement, calibrated on the demo's scenes, that tells the strongly degraded checks from natural images
  but hardly ranks candidates whose errors keep the contrast (use DCR or paired comparison for those);
* **CCR** shows two images in a random order without saying which is the reference: the worker rates how
  much the second differs from the first (``3 (1 - exp(-rmse / RMSE_SCALE))``) in the direction of their
  contrast (the one with more is judged better; two images alike are "about the same").

The scale's values come from the State (``scale``), so the worker answers any study's scale as shown.
With ``observer="latent"`` a stimulus's quality is its URL's seeded latent value on the scale, which tells
no quality check apart (use it on a study without checks).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...simulate_client import Answer, SimulatedWorker

#: P.913 subject model of the honest worker: SD of the bias (scale points) and the median inconsistency.
BIAS_SD = 0.3
INCONSISTENCY = 0.5
#: RMSE (images in [0, 1]) at which the DCR impairment falls to 1 + 4/e (about "slightly annoying").
RMSE_SCALE = 0.03
#: The RMS contrast (:func:`contrast`) rated "bad" and "excellent" without a reference (ACR). On the demo's
#: scenes the references and candidates have 0.13 to 0.29, the strongly degraded checks 0.03 to 0.065.
CONTRAST_LOW, CONTRAST_HIGH = 0.07, 0.12


def luminance(image: np.ndarray) -> np.ndarray:
    """Rec. 601 luma of an RGB image in [0, 1] (a grey image as it is)."""
    return image if image.ndim == 2 else image[..., :3] @ np.array([0.299, 0.587, 0.114], dtype=image.dtype)


def contrast(image: np.ndarray) -> float:
    """The RMS contrast of an image in [0, 1]: the standard deviation of its luma. A washed-out, dark or
    blurred image has little of it; it needs no reference."""
    return float(np.std(luminance(np.asarray(image, dtype=np.float32))))


def impairment_quality(rmse: float) -> float:
    """``psi`` on the 1..5 scale of an image ``rmse`` away from its reference (DCR)."""
    return 1.0 + 4.0 * math.exp(-rmse / RMSE_SCALE)


def contrast_quality(value: float) -> float:
    """``psi`` on the 1..5 scale of an image of :func:`contrast` ``value`` (ACR, no reference)."""
    return 1.0 + 4.0 * min(1.0, max(0.0, (value - CONTRAST_LOW) / (CONTRAST_HIGH - CONTRAST_LOW)))


def comparison_quality(rmse: float, first_contrast: float, second_contrast: float) -> float:
    """``psi`` on the -3..3 scale of the second of two images against the first (CCR): how much they
    differ (their RMSE, as DCR's impairment) in the direction of their contrast."""
    size = 3.0 * (1.0 - math.exp(-rmse / RMSE_SCALE))  # 0 for two images alike, towards 3 as they differ
    return math.copysign(size, second_contrast - first_contrast)


class RatingWorker(SimulatedWorker):
    """Rates each trial on the study's scale (module docstring)."""

    response_kind = "ratings"
    id_field = "rating_id"

    def __init__(self, driver, honest: bool, rng: np.random.Generator):
        super().__init__(driver, honest, rng)
        self.bias = float(rng.normal(0.0, BIAS_SD))
        self.inconsistency = float(INCONSISTENCY * rng.lognormal(0.0, 0.3))

    async def _contrast(self, url: str) -> float | None:
        cache = self.sim.shared.setdefault("rating.contrast", {})
        if url not in cache:
            image = await self.sim.image(url)
            cache[url] = None if image is None else contrast(image)
        return cache[url]

    async def quality(self, method: str, images: list[dict[str, Any]]) -> float | None:
        """``psi`` of a trial on its method's scale (ACR/DCR 1..5; CCR -3..3 of the second against the
        first); None when an image is unavailable."""
        sim = self.sim
        urls = [image["url"] for image in images]
        if sim.observer == "latent":
            value = sim.latent(urls[-1])
            return 3.0 * math.tanh(value - sim.latent(urls[0])) if method == "ccr" else 3.0 + 1.5 * math.tanh(value)
        if method == "acr":
            value = await self._contrast(urls[0])
            return None if value is None else contrast_quality(value)
        rmse = await sim.rmse(urls[1], urls[0])
        if rmse is None:
            return None
        if method == "dcr":
            return impairment_quality(rmse)
        first, second = await self._contrast(urls[0]), await self._contrast(urls[1])
        return None if first is None or second is None else comparison_quality(rmse, first, second)

    async def answer(self, trial: dict[str, Any], state: dict[str, Any]) -> Answer:
        scale = state["scale"]
        values = np.array(sorted(scale["values"]), dtype=float)
        low, high = float(values[0]), float(values[-1])
        psi = await self.quality(scale["method"], trial["images"])
        if self.honest and psi is not None:
            opinion = psi + self.bias + self.inconsistency * self.rng.normal()
            if scale.get("slider"):
                rating: float = round(min(high, max(low, opinion)), 2)
            else:
                rating = int(values[np.argmin(np.abs(values - opinion))])
        elif scale.get("slider"):
            rating = round(float(self.rng.uniform(low, high)), 2)
        else:
            rating = int(self.rng.choice(values))
        # Agreement: the answer within a step of what the images show (half the scale's steps for CCR).
        correct = None if psi is None else abs(rating - psi) <= 1.0
        body = {"trial_id": int(trial["id"]), "rating": rating, "rt_ms": self.rt_ms()}
        if any(image.get("kind") == "video" for image in trial["images"]):
            body["playback"] = self.playback([[clip] for clip in trial["images"]])  # one after the other
        return Answer(body, rating, correct)
