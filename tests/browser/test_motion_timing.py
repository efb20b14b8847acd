"""Frame timing of the motion trial in headless chromium, under Playwright's paused page clock.

The figures of the real clock (frame drops and onset errors of a shared machine's headless
chromium, ARCHITECTURE.md, Reference figures of peers: 0.3-4.7 % of intervals over 1.5 refreshes) are measured and
printed by ``benchmarks/frame_timing.py``; a test that asserted them would fail on a loaded
machine. Here the page's clock moves only when the test runs it, and its requestAnimationFrame
fires every 16 ms, so the trial's frame log is the same on every machine and its bounds are
exact. What must hold as well: the browser's summary (``phaseTiming`` in motion_trial.js) and
the lead's Python analysis (``analysis.frame_timing``) agree on the same timestamps.
"""
from __future__ import annotations

import numpy as np
import pytest

from analysis.frame_timing import phase_timing, summarise_phases
from tests.browser._motion_support import main_trial, open_harness

pytestmark = pytest.mark.timeout(120)

STEP_MS = 16  # the page clock's requestAnimationFrame period: the "refresh" of these trials
CX, CY = 683, 384


def python_summary(frames: list[dict], refresh_ms: float, movie_frames: int) -> dict:
    return summarise_phases([phase_timing(f["t"], refresh_ms, movie_frames if f["phase"] == "movie" else 15)
                             for f in frames])


def test_trials_timing_figures_on_the_page_clock(page):
    page.clock.install(time=1_000_000)
    page.clock.pause_at(1_001_000)  # an installed clock alone still flows with real time
    open_harness(page, {"trials": [main_trial(1), main_trial(2, movie_frames=10)], "refreshMs": STEP_MS,
                        "autoStart": True, "recordDraws": False})
    page.mouse.move(CX + 120, CY - 40)
    for n in range(2):
        page.wait_for_function(f"window.harness.results.length === {n} && window.harness.current"
                               " && window.harness.current.state === 'running'")
        while not page.evaluate("window.harness.current.cyclesCompleted >= 3"):
            page.clock.run_for(250)
        page.mouse.move(CX + 120, CY - 40 + n)
        page.mouse.click(CX + 120, CY - 40 + n)
    page.wait_for_function("window.harness.results.length === 2")
    results = page.evaluate("window.harness.results")
    for r, movie_frames in zip(results, (15, 10)):
        js = r["summary"]
        py = python_summary(r["frames"], STEP_MS, movie_frames)
        print(f"trial {r['trial_id']} ({movie_frames} frames): drops {py['frame_drops']}/{py['n_intervals']}, "
              f"onset error {py['onset_err_mean_ms']:.3f} ± {py['onset_err_sd_ms']:.3f} ms, "
              f"skipped {py['skipped_frames']}, rt {r['rt_ms']:.0f} ms")
        # Browser summary == Python analysis on the same timestamps.
        assert js["frame_drops"] == py["frame_drops"] and js["n_intervals"] == py["n_intervals"]
        assert js["n_onsets"] == py["n_onsets"] and js["skipped_frames"] == py["skipped_frames"]
        assert js["onset_err_mean_ms"] == pytest.approx(py["onset_err_mean_ms"], abs=1e-9)
        assert js["onset_err_sd_ms"] == pytest.approx(py["onset_err_sd_ms"], abs=1e-9)
        # A refresh every 16 ms never drops or skips a frame: each of the 3 (or more) cycles logged
        # its movie and matching phases with every stimulus frame on time within a refresh, each
        # phase as long as it should be within a refresh.
        assert r["cycles"] >= 3
        assert py["frame_drops"] == 0 and py["skipped_frames"] == 0
        assert abs(py["onset_err_mean_ms"]) < STEP_MS
        assert py["n_onsets"] >= 3 * (movie_frames + 15)
        for f in r["frames"]:
            n = movie_frames if f["phase"] == "movie" else 15
            duration = f["t"][-1] - f["t"][0]  # only complete phases are logged (the one cut by the click is not)
            assert n * 1000 / 30 - STEP_MS <= duration <= n * 1000 / 30 + STEP_MS, (f["cycle"], f["phase"])
        # Answered in the first 250 ms run of the clock after the third cycle ended at 9 s.
        assert 9000 - STEP_MS <= r["rt_ms"] <= 9000 + 250 + STEP_MS


def test_js_and_python_agree_on_the_same_timestamps(page):
    open_harness(page, {"mode": "none", "trials": []})
    rng = np.random.default_rng(5)
    for refresh_ms, n_frames in [(1000 / 60, 15), (1000 / 60, 10), (1000 / 144, 15), (1000 / 50, 15)]:
        # Vsync-ish timestamps with jitter, two stalls of 2 and 4 refreshes, and the phase-ending refresh.
        steps = np.ones(int(n_frames * (1000 / 30) / refresh_ms) + 2)
        steps[3] += 2
        steps[len(steps) // 2] += 4
        t = 1234.5 + np.concatenate([[0], np.cumsum(steps * refresh_ms)]) + rng.normal(0, 0.4, steps.size + 1)
        t[0] = 1234.5
        t = np.sort(t).round(3).tolist()
        js = page.evaluate("([t, r, n]) => window.harness.lib.phaseTiming(t, r, n)", [t, refresh_ms, n_frames])
        py = phase_timing(t, refresh_ms, n_frames)
        assert js["stimIndex"] == py.stim_index.tolist()
        assert js["dropped"] == py.dropped.tolist() and js["nDrops"] == py.n_drops >= 2
        assert js["skippedFrames"] == py.skipped_frames
        assert js["onsetErrors"] == pytest.approx(py.onset_errors_ms.tolist(), abs=1e-9)
