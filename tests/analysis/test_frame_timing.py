import numpy as np
import pytest

from analysis.frame_timing import FRAME_MS, estimate_refresh, phase_timing, summarise_phases

REFRESH = 1000.0 / 60.0


def vsync(n: int, start: float = 1000.0, refresh: float = REFRESH) -> np.ndarray:
    return start + refresh * np.arange(n)


def test_perfect_60hz_movie_shows_every_frame_on_time():
    # 15 frames at 30 Hz = 30 refreshes at 60 Hz, plus the refresh that ends the phase.
    timing = phase_timing(vsync(31), REFRESH, 15)
    assert timing.n_drops == 0
    assert timing.skipped_frames == 0
    assert timing.onset_errors_ms.size == 15
    np.testing.assert_allclose(timing.onset_errors_ms, 0.0, atol=1e-9)
    # Two refreshes per stimulus frame, then the end-of-phase refresh.
    assert list(timing.stim_index[:6]) == [0, 0, 1, 1, 2, 2]
    assert timing.stim_index[-1] == 15


def test_vsync_rounding_does_not_delay_a_frame():
    # Timestamps quantised to 0.1 ms (as some browsers report them) land a hair before the ideal onset.
    t = np.round(vsync(31), 1) - 0.05
    timing = phase_timing(t, REFRESH, 15)
    assert timing.skipped_frames == 0
    assert np.abs(timing.onset_errors_ms).max() < 0.2


def test_a_stall_of_three_refreshes_is_one_drop_and_skips_a_frame():
    t = list(vsync(31))
    # Refreshes 10, 11 and 12 never happen (the main thread was busy): one long interval of 4 refreshes.
    stalled = np.array(t[:10] + t[13:])
    timing = phase_timing(stalled, REFRESH, 15)
    assert timing.n_drops == 1
    assert np.flatnonzero(timing.dropped).tolist() == [9]
    # Stimulus frame 5 (refreshes 10-11) was never drawn; frame 6 came late by one refresh.
    assert timing.skipped_frames == 1
    assert 5 not in timing.stim_index
    assert timing.onset_errors_ms.max() == pytest.approx(REFRESH)


def test_120hz_and_a_late_refresh_skip_rather_than_delay():
    refresh = 1000.0 / 120.0
    t = vsync(61, refresh=refresh)
    timing = phase_timing(t, refresh, 15)
    assert timing.n_drops == 0 and timing.skipped_frames == 0
    # A 40 ms hiccup: the clock index jumps, the frames after it are on time again.
    late = np.concatenate([t[:20], t[25:]])
    timing = phase_timing(late, refresh, 15)
    assert timing.n_drops == 1
    assert abs(timing.onset_errors_ms[-1]) < 1e-9


def test_summary_over_phases():
    phases = [phase_timing(vsync(31), REFRESH, 15), phase_timing(np.r_[vsync(10), vsync(20)[13:]], REFRESH, 15)]
    summary = summarise_phases(phases)
    assert summary["frame_drops"] == 1
    assert summary["n_intervals"] == 30 + phases[1].intervals_ms.size
    assert summary["n_onsets"] == 15 + phases[1].onset_errors_ms.size
    errors = np.concatenate([p.onset_errors_ms for p in phases])
    assert summary["onset_err_mean_ms"] == pytest.approx(errors.mean())
    assert summary["onset_err_sd_ms"] == pytest.approx(errors.std(ddof=1))
    assert summarise_phases([])["onset_err_mean_ms"] is None


def test_refresh_estimate_is_the_median_and_flags_irregular_intervals():
    rng = np.random.default_rng(0)
    intervals = REFRESH + rng.normal(0, 0.2, 100)
    intervals[::10] = 2 * REFRESH  # ten stalls
    estimate = estimate_refresh(intervals)
    assert estimate.hz == pytest.approx(60.0, abs=0.5)  # the median ignores the stalls
    assert estimate.irregular_fraction == pytest.approx(0.10)
    assert estimate.n == 100
    with pytest.raises(ValueError, match="at least 60"):
        estimate_refresh(intervals[:59])
    with pytest.raises(ValueError, match="positive"):
        estimate_refresh(np.r_[intervals, -1.0])


def test_bad_timestamps_are_refused():
    with pytest.raises(ValueError, match="non-decreasing"):
        phase_timing([0.0, 20.0, 10.0], REFRESH, 15)
    with pytest.raises(ValueError, match="at least one"):
        phase_timing([], REFRESH, 15)
    with pytest.raises(ValueError, match="positive"):
        phase_timing([0.0], 0.0, 15)
    assert FRAME_MS == pytest.approx(33.333, abs=1e-3)
