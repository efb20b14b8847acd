"""The simulated worker of paired comparison (``perceptlab simulate``, :mod:`server.simulate_client`).

*Honest* workers are Thurstone Case V observers. With ``observer="images"`` (the default) they look at
the stimuli: the quality of a candidate is the RMSE between its full image and the trial's reference
image, and the worker chooses *right* when

    (rmse_left - rmse_right) / noise_rmse + e > 0,    e ~ N(0, 1),

so a candidate closer to the reference wins more often. ``noise_rmse`` is the observer noise in RMSE
units (images scaled to [0, 1]). Its default, :data:`DEFAULT_NOISE_RMSE` = 0.01, was calibrated on the demo
study (``perceptlab stimuli build-demo``, 4 scenes x 11 methods, amplified images): there the median |RMSE
difference| of a design pair is 0.026, so honest workers agree with the lower-RMSE candidate on 88 % of
design pairs on average (82 % at 0.02, 92 % at 0.005), and the gold pairs (pairs of candidates whose errors
differ by at least 1.5x and 8 grey levels, see :mod:`stimuli.gold`) are answered correctly with
probability >= 0.997 each, far above the 70 % gold threshold.

With ``observer="latent"`` no image is downloaded: the worker chooses right when
``latent_right - latent_left + e > 0`` with each URL's seeded latent quality. Nothing in a URL tells a
gold pair or its better image, so latent workers answer gold pairs at chance and fail the quiz: use this
mode on a study without quiz and hidden gold (``quiz_size = 0``, ``gold_rate = 0``). It measures only the
API/vote path (``benchmarks/server_load.py``).

On video trials (clips) the RMSE is that of the clips' middle frames (:mod:`server.simulate_client`), and
each vote carries a simulated playback log of the clips played as the browser plays them.

*Careless* workers pick left or right with probability 1/2. Their choice ignores the images, but the
simulator still works out which side was closer to the reference for the report's agreement figures, so
with ``observer="images"`` their trials' images are fetched too (once, through the shared cache).
"""
from __future__ import annotations

import asyncio
from typing import Any

from ...simulate_client import WINDOW, Answer, SimulatedWorker, now_iso

#: Observer noise in RMSE units (images in [0, 1]); calibrated on the demo study (module docstring).
DEFAULT_NOISE_RMSE = 0.01


class PairedWorker(SimulatedWorker):
    """Votes left or right on each pair (module docstring)."""

    response_kind = "votes"
    id_field = "vote_id"

    async def quality_gap(self, trial: dict[str, Any]) -> float | None:
        """How much better the right image is than the left, in observer z units (None: unknown)."""
        sim = self.sim
        ref = trial["reference"]["full"]
        left, right = trial["left"]["full"], trial["right"]["full"]
        if sim.observer == "latent":
            return sim.latent(right) - sim.latent(left)
        r_left, r_right = await asyncio.gather(sim.rmse(left, ref), sim.rmse(right, ref))
        if r_left is None or r_right is None:
            return None
        return (r_left - r_right) / sim.options.get("noise_rmse", DEFAULT_NOISE_RMSE)

    async def answer(self, trial: dict[str, Any], state: dict[str, Any]) -> Answer:
        gap = await self.quality_gap(trial)
        if self.honest and gap is not None:
            choice = "right" if gap + self.rng.normal() > 0 else "left"
        else:
            choice = "right" if self.rng.random() < 0.5 else "left"
        correct = None if gap is None or gap == 0 else (choice == "right") == (gap > 0)
        body = {"trial_id": str(trial["trial_id"]), "choice": choice, "rt_ms": self.rt_ms(), "input": self.input,
                "client_time": now_iso(), "window": dict(WINDOW)}
        if trial["reference"].get("kind") == "video":  # as pc_trial.js plays them ([media] reference_position)
            pair = [trial["left"], trial["right"]]
            before = state["media"].get("reference_position") == "before"
            body["playback"] = self.playback([[trial["reference"]], pair] if before else [[*pair, trial["reference"]]])
        return Answer(body, choice, correct)
