"""Frame timing of browser-presented motion (HuPerFlow, seed 003, Appendix 1).

The browser logs the ``requestAnimationFrame`` timestamp of every refresh of a
timed phase (the movie, the matching noise). Stimulus frames run at 30 Hz and
are indexed by clock time, so a late refresh skips a stimulus frame instead of
delaying the rest:

    k = floor((t - t0 + refresh / 2) / frame_ms)

where ``t0`` is the phase's first timestamp. The half-refresh tolerance keeps
vsync-aligned timestamps (t0 + 33.33 ms arrives as t0 + 33.3 ms or 33.4 ms)
from rounding down to the previous frame. The browser uses the same rule
(``phaseTiming`` in ``experiment_ui/static/js/motion_trial.js``).

Measures, per phase:

* **frame drops**: refresh intervals longer than 1.5 refresh periods (a
  missed vsync). HuPerFlow's script logs onsets only; counting intervals
  also catches stalls that happen between two stimulus frames.
* **onset errors**: for every stimulus frame shown, the timestamp of its first
  refresh minus its ideal onset ``t0 + k * frame_ms`` (HuPerFlow: -0.055 ms,
  SD 3.664 ms).
* **skipped frames**: stimulus frames that never reached the screen.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

FRAME_MS = 1000.0 / 30.0
DROP_FACTOR = 1.5  # an interval over 1.5 refreshes is a dropped frame (the definition)


@dataclass(frozen=True)
class RefreshEstimate:
    hz: float                  # 1000 / median interval
    median_ms: float
    irregular_fraction: float  # share of intervals outside [0.5, 1.5] x median
    n: int                     # intervals used


@dataclass(frozen=True)
class PhaseTiming:
    stim_index: np.ndarray       # stimulus frame drawn at each refresh (int, one per timestamp)
    intervals_ms: np.ndarray     # refresh intervals (len(t) - 1)
    dropped: np.ndarray          # bool per interval: longer than 1.5 refreshes
    onset_errors_ms: np.ndarray  # one per stimulus frame shown, in frame order
    skipped_frames: int          # stimulus frames 0..n_frames-1 never drawn

    @property
    def n_drops(self) -> int:
        return int(self.dropped.sum())


def estimate_refresh(intervals_ms: Sequence[float], min_samples: int = 60) -> RefreshEstimate:
    """Refresh rate from requestAnimationFrame intervals (median, robust to the odd stall).

    Parameters
    ----------
    intervals_ms : sequence of float
        Successive rAF intervals in milliseconds.
    min_samples : int
        Fewest intervals accepted (jsPsych's browser check uses 60).

    Returns
    -------
    RefreshEstimate

    Raises
    ------
    ValueError
        Too few intervals, or values that are not finite and positive.
    """
    intervals = np.asarray(intervals_ms, dtype=float)
    if intervals.ndim != 1 or intervals.size < min_samples:
        raise ValueError(f"need at least {min_samples} refresh intervals, got {intervals.size}")
    if not np.all(np.isfinite(intervals)) or np.any(intervals <= 0):
        raise ValueError("refresh intervals must be finite and positive")
    median = float(np.median(intervals))
    irregular = float(np.mean((intervals < 0.5 * median) | (intervals > DROP_FACTOR * median)))
    return RefreshEstimate(hz=1000.0 / median, median_ms=median, irregular_fraction=irregular, n=int(intervals.size))


def stimulus_frame_index(t: np.ndarray, t0: float, refresh_ms: float, frame_ms: float = FRAME_MS) -> np.ndarray:
    """Stimulus frame due at each timestamp (clock-indexed, half a refresh of tolerance)."""
    return np.floor((np.asarray(t, dtype=float) - t0 + refresh_ms / 2.0) / frame_ms).astype(int)


def phase_timing(t: Sequence[float], refresh_ms: float, n_frames: int, frame_ms: float = FRAME_MS) -> PhaseTiming:
    """Drops, onset errors and skipped frames of one timed phase.

    Parameters
    ----------
    t : sequence of float
        rAF timestamps (ms) of the phase; ``t[0]`` is its onset (stimulus frame 0).
        Timestamps at or after the phase end (index >= n_frames) may be included
        (the refresh that ends a phase): they count for intervals, not onsets.
    refresh_ms : float
        The display's refresh interval (the calibrated median).
    n_frames : int
        Stimulus frames in the phase (15 or 10 for a movie, 15 for matching).
    frame_ms : float
        Stimulus frame duration (33.33 ms at 30 Hz).

    Returns
    -------
    PhaseTiming
    """
    times = np.asarray(t, dtype=float)
    if times.ndim != 1 or times.size == 0:
        raise ValueError("a phase needs at least one timestamp")
    if not np.all(np.isfinite(times)) or np.any(np.diff(times) < 0):
        raise ValueError("timestamps must be finite and non-decreasing")
    if not (refresh_ms > 0 and frame_ms > 0 and n_frames > 0):
        raise ValueError("refresh_ms, frame_ms and n_frames must be positive")
    index = stimulus_frame_index(times, times[0], refresh_ms, frame_ms)
    intervals = np.diff(times)
    in_phase = index < n_frames
    # The first refresh showing each stimulus frame is its onset.
    shown, first = np.unique(index[in_phase], return_index=True)
    onset_errors = times[in_phase][first] - (times[0] + shown * frame_ms)
    return PhaseTiming(stim_index=index, intervals_ms=intervals, dropped=intervals > DROP_FACTOR * refresh_ms,
                       onset_errors_ms=onset_errors, skipped_frames=int(n_frames - shown.size))


def summarise_phases(phases: Sequence[PhaseTiming]) -> dict[str, float | int | None]:
    """Per-trial summary over its logged phases (motion.csv's timing columns).

    Returns ``frame_drops``, ``n_intervals``, ``onset_err_mean_ms``, ``onset_err_sd_ms``
    (sample SD; None with fewer than two onsets), ``n_onsets`` and ``skipped_frames``.
    """
    errors = np.concatenate([p.onset_errors_ms for p in phases]) if phases else np.empty(0)
    return {
        "frame_drops": int(sum(p.n_drops for p in phases)),
        "n_intervals": int(sum(p.intervals_ms.size for p in phases)),
        "onset_err_mean_ms": float(errors.mean()) if errors.size else None,
        "onset_err_sd_ms": float(errors.std(ddof=1)) if errors.size > 1 else None,
        "n_onsets": int(errors.size),
        "skipped_frames": int(sum(p.skipped_frames for p in phases)),
    }
