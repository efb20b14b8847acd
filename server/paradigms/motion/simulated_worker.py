"""The simulated worker of motion matching (``perceptlab simulate``, :mod:`server.simulate_client`).

After consent and instructions the worker calibrates its display as the browser would: a card measured at
about 3.78 px/mm, ``refresh_samples`` requestAnimationFrame intervals of a steady 60 Hz display, and, when
the study measures the blind spot, sweeps that put the eye :data:`VIEWING_DISTANCE_CM` from the screen.
Then it answers the blocks' trials (``GET`` the State, answer its trials in order, until the block ends):

* an **RDK** trial: the worker downloads the trial's dot movie (``GET .../motion-trials/{id}/dots``, the
  file the browser draws) and takes the median displacement of the dots from one frame to the next (every
  dot moves coherently; the few that wrap around the aperture are outliers the median ignores);
* a **main** trial: the worker downloads the clip's frames around the probe and finds the probe's motion
  by block matching: the displacement (whole pixels within :data:`SEARCH_PX`, then a parabola through the
  best match's neighbours for the fraction) that best carries a patch around the probe in the probe's frame
  onto the next frame.

An honest worker adds normal noise of SD :data:`NOISE_PPF` px/frame to what it measured; a careless one (the
run's ``spam`` share) answers a random vector. Every response carries a frame log of a clean 60 Hz display
(the study's ``cycles_required`` cycles of movie and matching phases), so no trial is flagged or repeated
for its timing.
"""
from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np

from ...simulate_client import Answer, SimulatedWorker, now_iso
from ..stages import Stage

REFRESH_MS = 1000.0 / 60.0
CARD_PX = (323.5, 204.0)      # a credit card measured at about 3.78 px/mm
VIEWING_DISTANCE_CM = 55.0
BLIND_SPOT_DEG = 13.5         # the blind spot's angle from fixation (server/paradigms/motion/paradigm.py)
NOISE_PPF = 0.3               # an honest worker's answer noise, px/frame (each of u and v)
PATCH_PX = 7                  # half the side of the patch matched around a probe
SEARCH_PX = 12                # largest displacement searched, px/frame
WINDOW = (1366, 768)


def rdk_velocity(positions: np.ndarray) -> tuple[float, float]:
    """The coherent velocity ``(u, v)`` (px/frame, ``v`` down) of a dot movie's positions
    ``(n_frames, n_dots, 2)``: the median displacement of the dots between consecutive frames."""
    steps = np.diff(np.asarray(positions, dtype=float), axis=0).reshape(-1, 2)
    return float(np.median(steps[:, 0])), float(np.median(steps[:, 1]))


def block_motion(first: np.ndarray, second: np.ndarray, x: float, y: float, patch: int = PATCH_PX,
                 search: int = SEARCH_PX) -> tuple[float, float]:
    """The displacement ``(u, v)`` that best carries the patch around ``(x, y)`` of ``first`` onto
    ``second`` (least squared difference over whole pixels, refined by a parabola on each axis)."""
    a = first if first.ndim == 2 else first.mean(axis=2)
    b = second if second.ndim == 2 else second.mean(axis=2)
    h, w = a.shape
    cx, cy = int(round(x)), int(round(y))
    r = max(1, min(patch, cx, cy, w - 1 - cx, h - 1 - cy))
    template = a[cy - r:cy + r + 1, cx - r:cx + r + 1]
    costs = np.full((2 * search + 1, 2 * search + 1), np.inf)
    for dy in range(-search, search + 1):
        for dx in range(-search, search + 1):
            top, left = cy + dy - r, cx + dx - r
            if top < 0 or left < 0 or top + 2 * r + 1 > h or left + 2 * r + 1 > w:
                continue
            window = b[top:top + 2 * r + 1, left:left + 2 * r + 1]
            costs[dy + search, dx + search] = float(np.mean((window - template) ** 2))
    if not np.isfinite(costs).any():
        return 0.0, 0.0
    iy, ix = np.unravel_index(int(np.argmin(costs)), costs.shape)

    def vertex(c_minus: float, c0: float, c_plus: float) -> float:
        denominator = c_minus - 2 * c0 + c_plus
        if not (np.isfinite(c_minus) and np.isfinite(c_plus)) or denominator <= 0:
            return 0.0
        return float(np.clip(0.5 * (c_minus - c_plus) / denominator, -0.5, 0.5))

    fx = vertex(costs[iy, ix - 1], costs[iy, ix], costs[iy, ix + 1]) if 0 < ix < costs.shape[1] - 1 else 0.0
    fy = vertex(costs[iy - 1, ix], costs[iy, ix], costs[iy + 1, ix]) if 0 < iy < costs.shape[0] - 1 else 0.0
    return ix - search + fx, iy - search + fy


def clean_phase(n_frames: int, t0: float, frame_ms: float) -> list[float]:
    """requestAnimationFrame timestamps of one phase of ``n_frames`` stimulus frames on a steady 60 Hz
    display, up to the refresh that ends it."""
    stamps, k = [], 0
    while True:
        stamp = t0 + k * REFRESH_MS
        stamps.append(round(stamp, 3))
        if math.floor((stamp - t0 + REFRESH_MS / 2) / frame_ms) >= n_frames:
            return stamps
        k += 1


def frame_log(params: dict[str, Any], movie_frames: int, t0: float) -> list[dict[str, Any]]:
    """The frame log of a trial shown for the study's required cycles without a dropped frame."""
    frame_ms = 1000.0 / float(params["frame_rate_hz"])
    matching = round(float(params["matching_ms"]) / frame_ms)
    cycle_ms = float(params["cycle_ms"])
    log = []
    for cycle in range(1, int(params["cycles_required"]) + 1):
        start = t0 + (cycle - 1) * cycle_ms
        log.append({"cycle": cycle, "phase": "movie", "t": clean_phase(movie_frames, start, frame_ms)})
        matching_start = start + movie_frames * frame_ms + float(params["isi1_ms"])
        log.append({"cycle": cycle, "phase": "matching", "t": clean_phase(matching, matching_start, frame_ms)})
    return log


class MotionWorker(SimulatedWorker):
    """Calibrates, then matches the motion of RDK and main trials (module docstring)."""

    response_kind = "motion-responses"
    id_field = "response_id"

    def __init__(self, driver, honest: bool, rng: np.random.Generator):
        super().__init__(driver, honest, rng)
        self.clock_ms = 1000.0  # the worker's performance.now(), advanced trial by trial

    async def run_stage(self, stage: str, state: dict[str, Any]) -> dict[str, Any]:
        if stage == Stage.CALIBRATION:
            return await self.calibrate(state)
        trials = state.get("trials") or []
        if not trials:
            return await self.driver.state()
        for trial in trials:
            answer = await self.respond(trial, state["params"])
            status, reply = await self.driver.send(answer, trial["trial_id"])
            if status not in (200, 201) or not isinstance(reply, dict) or reply.get("stage") != stage \
                    or reply.get("repeat_added"):
                break  # the block ended, moved on, or a repeat came: read the State again
        return await self.driver.state()

    async def calibrate(self, state: dict[str, Any]) -> dict[str, Any]:
        params = state["params"]
        n = int(params["refresh_samples"])
        intervals = (REFRESH_MS + self.rng.uniform(-0.05, 0.05, n)).round(3).tolist()
        width = max(WINDOW[0], int(params.get("min_window_width") or 0))
        height = max(WINDOW[1], int(params.get("min_window_height") or 0))
        body: dict[str, Any] = {"card_width_px": CARD_PX[0], "card_height_px": CARD_PX[1],
                                "refresh_intervals_ms": intervals, "fullscreen": True, "device_pixel_ratio": 1,
                                "screen_width": max(1920, width), "screen_height": max(1080, height),
                                "window_width": width, "window_height": height}
        if params.get("blind_spot"):
            px_per_mm = (CARD_PX[0] / float(params["card_width_mm"]) + CARD_PX[1] / float(params["card_height_mm"])) / 2
            distance_px = math.tan(math.radians(BLIND_SPOT_DEG)) * VIEWING_DISTANCE_CM * 10 * px_per_mm
            body["blind_spot_px"] = [round(distance_px + float(self.rng.normal(0, 5)), 1)
                                     for _ in range(int(params["blind_spot_repetitions"]))]
        # The answer says whether the display was accepted; the State says where that leads.
        await self.driver.api("calibration", "POST", self.driver.path("calibration"), body)
        return await self.driver.state()

    async def measure(self, trial: dict[str, Any]) -> tuple[float, float] | None:
        """The trial's motion as the worker sees it (px/frame), or None when its media are unavailable."""
        sim, driver = self.sim, self.driver
        if "rdk" in trial:
            from stimuli.rdk import decode_dot_movie

            data = await sim.fetch(driver.path(f"motion-trials/{trial['trial_id']}/dots"), "dots", driver.token)
            if data is None:
                return None
            positions, _ = await asyncio.to_thread(decode_dot_movie, data)
            return rdk_velocity(positions)
        frames, probe = trial["clip"]["frames"], trial["probe"]
        index = int(probe["frame_index"])
        if not 0 <= index < len(frames) - 1:
            index = max(0, len(frames) - 2)
        first, second = await asyncio.gather(sim.image(frames[index]), sim.image(frames[index + 1]))
        if first is None or second is None:
            return None
        return await asyncio.to_thread(block_motion, first, second, float(probe["x"]), float(probe["y"]))

    async def respond(self, trial: dict[str, Any], params: dict[str, Any]) -> Answer:
        limit = float(params.get("max_speed_ppf") or 20.0)
        seen = await self.measure(trial)
        if self.honest and seen is not None:
            u, v = (seen[0] + float(self.rng.normal(0, NOISE_PPF)), seen[1] + float(self.rng.normal(0, NOISE_PPF)))
        else:
            angle, speed = self.rng.uniform(0, 2 * math.pi), self.rng.uniform(0, limit)
            u, v = speed * math.cos(angle), -speed * math.sin(angle)
        speed = math.hypot(u, v)
        if speed > limit:  # the control panel gives at most max_speed_ppf
            u, v, speed = u * limit / speed, v * limit / speed, limit
        correct = None if seen is None else math.hypot(u - seen[0], v - seen[1]) <= 1.0
        movie_frames = int(trial["movie_frames"])
        rt_ms = max(self.rt_ms(), float(params["cycles_required"]) * float(params["cycle_ms"]))
        body = {"trial_id": int(trial["trial_id"]), "resp_u": round(u, 4), "resp_v": round(v, 4),
                "direction_deg": round(math.degrees(math.atan2(-v, u)) % 360, 3), "speed_ppf": round(speed, 4),
                "cycles": int(params["cycles_required"]), "rt_ms": round(rt_ms, 1),
                "frames": frame_log(params, movie_frames, self.clock_ms), "client_time": now_iso(),
                "window_width": WINDOW[0], "window_height": WINDOW[1], "device_pixel_ratio": 1}
        self.clock_ms += rt_ms + 500.0
        return Answer(body, (round(u, 3), round(v, 3)), correct)
