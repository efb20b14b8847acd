"""The motion-matching trial schedule in chromium under Playwright's fake clock (``page.clock``, paused).

The fake clock fires requestAnimationFrame every 16 ms (not 16.67), so stimulus frames
are clock-indexed against a "60 Hz" refresh of 16 ms steps and every boundary can be
off by at most one such step. What is proven, from the module's per-rAF draw log (which
frame, which phase, whether the probe dot was drawn) rather than from pixels:
15 (or 10) movie frames per cycle, the probe on the middle frame only, the ISI and
matching durations, the 3-cycle rule, the cursor -> direction/speed mapping, the
practice repeat rule and the RDK dot motion.
"""
from __future__ import annotations

import math

import pytest

from stimuli.rdk import rdk_dot_positions
from tests.browser._motion_support import main_trial, open_harness, rdk_trial

pytestmark = pytest.mark.timeout(180)

STEP = 16  # fake rAF period (ms)
VIEW_W, VIEW_H = 1366, 768
CX, CY = VIEW_W / 2, VIEW_H / 2


def start(page, spec: dict, state: str = "running") -> None:
    """Harness with a fake clock that moves only when the test runs it (install, then pause:
    an installed clock alone still flows with real time)."""
    page.clock.install(time=1_000_000)
    page.clock.pause_at(1_001_000)
    open_harness(page, {"refreshMs": 1000 / 60, "autoStart": True, **spec})
    page.wait_for_function(f"window.harness.current && window.harness.current.state === '{state}'")


def advance_to(page, ms: float) -> None:
    """Run the fake clock until `ms` after the trial's first rAF (T0)."""
    while page.evaluate("window.harness.current.T0") is None:  # the cycles begin after 2 warm-up refreshes
        page.clock.run_for(STEP)
    now, t0 = page.evaluate("[performance.now(), window.harness.current.T0]")
    if t0 + ms > now:
        page.clock.run_for(int(round(t0 + ms - now)))


def wait_running(page, n_results: int) -> None:
    """The next trial (after n_results answered) is on screen and its cycles have begun."""
    page.wait_for_function(f"window.harness.results.length === {n_results} && window.harness.current"
                           " && window.harness.current.state === 'running'")


def draws(page) -> list[dict]:
    return page.evaluate("window.harness.current.drawLog.map(e => ({t: e.t, cycle: e.cycle, phase: e.phase,"
                         " k: e.k, probe: e.probe, offset: e.offset || null, dots: e.dots || null,"
                         " done: e.cycles_completed}))")


def onsets(log: list[dict]) -> dict[tuple[int, str], float]:
    """rAF time at which each (cycle, phase) began."""
    out: dict[tuple[int, str], float] = {}
    for e in log:
        out.setdefault((e["cycle"], e["phase"]), e["t"])
    return out


def cursor_for(direction_deg: float, speed: float, max_speed: float = 20.0, radius: float = 300.0):
    """Screen position that the panel maps to (direction, speed): the inverse of the contract's mapping."""
    d = radius * math.log2(speed + 1) / math.log2(max_speed + 1)
    rad = math.radians(direction_deg)
    return CX + d * math.cos(rad), CY - d * math.sin(rad)


@pytest.mark.parametrize("movie_frames, probe_index, isi2_ms", [(15, 7, 1000.0), (10, 4, 3000 - 10000 / 30 - 1500)])
def test_cycle_schedule(page, movie_frames, probe_index, isi2_ms):
    start(page, {"trials": [main_trial(1, movie_frames=movie_frames)]})
    page.clock.run_for(3 * 3000 + 200)
    log = draws(page)
    on = onsets(log)
    movie_ms = movie_frames * 1000 / 30
    for cycle in (1, 2, 3):
        movie = [e for e in log if e["cycle"] == cycle and e["phase"] == "movie"]
        # Every stimulus frame 0..n-1 drawn, in order, none skipped (16 ms refreshes are faster than 30 Hz).
        ks = [e["k"] for e in movie]
        assert sorted(set(ks)) == list(range(movie_frames)), ks
        assert ks == sorted(ks)
        # The probe dot: on every refresh of the middle frame and on no other.
        assert {e["k"] for e in movie if e["probe"]} == {probe_index}
        assert all(e["probe"] for e in movie if e["k"] == probe_index)
        assert not any(e["probe"] for e in log if e["cycle"] == cycle and e["phase"] != "movie")
        matching = [e for e in log if e["cycle"] == cycle and e["phase"] == "matching"]
        assert sorted({e["k"] for e in matching}) == list(range(15))
        # Durations from phase onsets, within one fake refresh.
        durations = {
            "movie": on[(cycle, "isi1")] - on[(cycle, "movie")],
            "isi1": on[(cycle, "matching")] - on[(cycle, "isi1")],
            "matching": on[(cycle, "isi2")] - on[(cycle, "matching")],
            "isi2": on[(cycle + 1, "movie")] - on[(cycle, "isi2")],
            "cycle": on[(cycle + 1, "movie")] - on[(cycle, "movie")],
        }
        expected = {"movie": movie_ms, "isi1": 1000.0, "matching": 500.0, "isi2": isi2_ms,
                    "cycle": movie_ms + 1500 + isi2_ms}
        for name, value in durations.items():
            assert abs(value - expected[name]) <= STEP, (cycle, name, value, expected[name])
    # Cycles do not drift: cycle c starts (c-1)·3000 ms after the first (within one refresh).
    assert abs(on[(4, "movie")] - on[(1, "movie")] - 3 * (movie_ms + 1500 + isi2_ms)) <= STEP


def test_click_accepted_only_after_three_complete_cycles(page):
    start(page, {"trials": [main_trial(1)]})
    page.mouse.move(CX + 100, CY)               # inside the panel: a value is set
    advance_to(page, 2 * 3000 + 2900)            # 8.9 s: third cycle not complete
    assert page.evaluate("window.harness.current.cyclesCompleted") == 2
    page.mouse.click(CX + 100, CY)
    page.clock.run_for(50)
    assert page.evaluate("window.harness.results.length") == 0
    assert "Watch at least 3 times" in page.text_content(".motion-status")
    advance_to(page, 3 * 3000 + 50)              # past 9 s: third cycle's ISI2 over
    assert page.evaluate("window.harness.current.cyclesCompleted") == 3
    assert page.text_content(".motion-status") == "Click to answer"
    page.mouse.click(CX + 100, CY)
    page.wait_for_function("window.harness.results.length === 1")
    response = page.evaluate("window.harness.results[0]")
    assert response["cycles"] == 3
    assert 9000 - STEP <= response["rt_ms"] <= 9250 + STEP
    # The raw frame log covers every movie and matching phase of the cycles run (4th movie begun).
    phases = [(f["cycle"], f["phase"]) for f in response["frames"]]
    assert phases[:6] == [(1, "movie"), (1, "matching"), (2, "movie"), (2, "matching"), (3, "movie"), (3, "matching")]
    third = response["frames"][4]["t"]
    assert len(third) >= 16 and third == sorted(third)


def test_no_answer_until_the_cursor_entered_the_panel(page):
    start(page, {"trials": [main_trial(1)]})
    page.mouse.move(10, 10)                      # outside the 600 px panel
    advance_to(page, 9300)
    page.mouse.click(10, 10)
    page.clock.run_for(50)
    assert page.evaluate("window.harness.results.length") == 0
    assert "Move the mouse into the circle" in page.text_content(".motion-status")
    page.mouse.move(CX, CY - 50)
    page.mouse.click(CX, CY - 50)
    page.wait_for_function("window.harness.results.length === 1")


def test_direction_and_speed_mapping(page):
    start(page, {"trials": [main_trial(1)]})
    value = lambda: page.evaluate("window.harness.current.cursor")  # noqa: E731

    page.mouse.move(CX + 300, CY)                # right edge: θ = 0, full speed
    v = value()
    assert v["direction_deg"] == pytest.approx(0, abs=1e-9) and v["speed_ppf"] == pytest.approx(20)
    page.mouse.move(CX, CY - 150)                # halfway up: θ = 90, 2^(0.5·log2 21) − 1
    v = value()
    assert v["direction_deg"] == pytest.approx(90)
    assert v["speed_ppf"] == pytest.approx(2 ** (0.5 * math.log2(21)) - 1)
    assert v["speed_ppf"] == pytest.approx(3.583, abs=1e-3)
    page.mouse.move(CX - 100, CY + 100)          # down-left: 225°
    v = value()
    d = math.hypot(100, 100)
    assert v["direction_deg"] == pytest.approx(225)
    assert v["speed_ppf"] == pytest.approx(2 ** (d / 300 * math.log2(21)) - 1)
    assert v["resp_u"] == pytest.approx(v["speed_ppf"] * math.cos(math.radians(225)))
    assert v["resp_v"] == pytest.approx(-v["speed_ppf"] * math.sin(math.radians(225)))
    page.mouse.move(CX + 500, CY - 300)          # outside the panel: last value kept
    assert value() == v

    # The matching noise moves by k·speed·(cos θ, −sin θ) at matching frame k.
    advance_to(page, 9300)
    log = draws(page)
    matching = [e for e in log if e["phase"] == "matching" and e["cycle"] == 3]
    for e in matching:
        assert e["offset"][0] == pytest.approx(e["k"] * v["resp_u"])
        assert e["offset"][1] == pytest.approx(e["k"] * v["resp_v"])
    page.mouse.click(CX + 500, CY - 300)         # a click outside still answers with the kept value
    page.wait_for_function("window.harness.results.length === 1")
    r = page.evaluate("window.harness.results[0]")
    assert r["direction_deg"] == pytest.approx(225, abs=1e-3)
    assert r["resp_u"] == pytest.approx(v["resp_u"], abs=1e-3) and r["resp_v"] == pytest.approx(v["resp_v"], abs=1e-3)


def answer(page, n_results: int, direction_deg: float, speed: float) -> None:
    wait_running(page, n_results)
    x, y = cursor_for(direction_deg, speed)
    page.mouse.move(x, y)
    advance_to(page, 9200)
    page.mouse.click(x, y)
    page.wait_for_function(f"window.harness.results.length === {n_results + 1} && window.harness.feedback === true")


def test_practice_failed_trial_is_repeated_until_six_passes(page):
    a = main_trial(11, gt=(3.0, -2.0), practice=True, feedback=True)
    b = main_trial(12, probe=(400.0, 150.0), gt=(-5.0, 0.0), practice=True, feedback=True)
    start(page, {"mode": "practice", "trials": [a, b], "needed": 6, "max": 30})
    right = {11: (math.degrees(math.atan2(2, 3)), math.hypot(3, 2)), 12: (180.0, 5.0)}
    plan = ["fail", "pass", "fail", "fail", "pass", "pass", "pass", "pass", "pass"]
    for i, outcome in enumerate(plan):
        shown = page.evaluate("window.harness.shown")[-1]
        direction, speed = right[shown]
        if outcome == "fail":
            direction += 90                       # 90° off: fails the 30° rule
        answer(page, i, direction, speed)
        text = page.text_content(".motion-feedback")
        assert "Direction error" in text and "px/frame" in text
        assert ("will be repeated" in text) == (outcome == "fail")
        page.keyboard.press("Space")
    page.wait_for_function("window.harness.done === true")
    verdicts = page.evaluate("window.harness.verdicts")
    assert [v["passed"] for v in verdicts] == [o == "pass" for o in plan]
    # A failed trial is shown again; a passed one hands over to the next trial.
    assert page.evaluate("window.harness.shown") == [11, 11, 12, 12, 12, 11, 12, 11, 12]
    assert verdicts[-1]["finished"] and sum(v["passed"] for v in verdicts) == 6


def test_practice_ends_after_thirty_trials(page):
    """HuPerFlow's limit: practice ends after 30 trials however many failed. The step rule's default is
    walked through 30 failures; the page follows the rule's verdicts, shown here with a limit of 4
    (each trial in the browser is 3 cycles of 3 s)."""
    a = main_trial(21, gt=(0.0, -4.0), practice=True, feedback=True)
    start(page, {"mode": "practice", "trials": [a], "needed": 6, "max": 4, "recordDraws": False})
    steps = page.evaluate("""async () => {
      const m = await import('/static/js/motion_trial.js');
      const out = [];
      for (let done = 1; done <= 31; done++) {  // counts after each failed trial; the default limits
        const step = m.practiceStep({ done, passes: 0 }, false);
        out.push(step);
        if (step.finished) break;
      }
      return out;
    }""")
    assert len(steps) == 30 and steps[-1]["finished"] and not any(s["finished"] for s in steps[:-1])
    assert [s["repeat"] for s in steps] == [True] * 29 + [False]
    for i in range(4):
        answer(page, i, 270.0, 4.0)               # opposite direction: always fails
        page.keyboard.press("Space")
    page.wait_for_function("window.harness.done === true")
    verdicts = page.evaluate("window.harness.verdicts")
    assert len(verdicts) == 4 and not any(v["passed"] for v in verdicts)
    assert [v["repeat"] for v in verdicts] == [True] * 3 + [False]
    assert verdicts[-1]["finished"]


def test_feedback_reports_errors_against_ground_truth(page):
    trial = main_trial(5, gt=(4.0, 0.0), practice=True, feedback=True)
    start(page, {"mode": "practice", "trials": [trial], "needed": 1, "max": 30})
    answer(page, 0, 12.0, 4.0)                    # 12° off, same speed
    r = page.evaluate("window.harness.results[0]")
    epe = math.hypot(r["resp_u"] - 4.0, r["resp_v"])
    text = page.text_content(".motion-errors")
    assert text == f"Direction error 12°, error {epe:.1f} px/frame"
    assert page.get_attribute(".motion-feedback", "data-passed") == "true"


def test_rdk_dots_move_by_speed_in_direction(page):
    """The page draws the server-rendered dot movie (no direction or speed in the trial): its dots
    move by the trial's vector, stay in the aperture and are the reference renderer's positions."""
    direction, speed = 37.5, 8.2
    trial = rdk_trial(3, direction_deg=direction, speed_ppf=speed, seed=99)
    assert not {"direction_deg", "speed_ppf", "seed"} & set(trial["rdk"])
    start(page, {"trials": [trial]})
    page.clock.run_for(600)
    movie = [e for e in draws(page) if e["phase"] == "movie" and e["cycle"] == 1]
    by_k = {}
    for e in movie:
        by_k.setdefault(e["k"], e["dots"])
    assert sorted(by_k) == list(range(15))
    du, dv = speed * math.cos(math.radians(direction)), -speed * math.sin(math.radians(direction))
    moved = wrapped = 0
    for k in range(14):
        for (x0, y0), (x1, y1) in zip(by_k[k], by_k[k + 1]):
            assert math.hypot(x1, y1) <= 300 + 1 / 64        # always inside the aperture (1/64 px fixed point)
            if abs(x1 - x0 - du) < 1 / 64 + 1e-4 and abs(y1 - y0 - dv) < 1 / 64 + 1e-4:
                moved += 1
            else:
                wrapped += 1
                # Re-entered on the opposite side: now moving inward from the far edge.
                assert math.hypot(x0, y0) > 300 - speed - 1e-6
    assert moved >= 60 and wrapped <= 10
    reference = rdk_dot_positions(5000, 600, direction, speed, 99, 15)
    for k, dots in by_k.items():
        assert [c for xy in dots for c in xy] == pytest.approx(reference[k, :5].ravel().tolist(), abs=1 / 128 + 1e-4)
    # What is on the canvas at a movie frame: a white dot at every dot's position of that frame, and
    # the background between them (the frames are drawn once into bitmaps before the trial starts).
    advance_to(page, 3000 + 250)  # cycle 2, mid-movie
    drawn = page.evaluate("""() => {
      const t = window.harness.current, log = t.drawLog, k = log[log.length - 1].k;
      const dpr = window.devicePixelRatio || 1, movie = t.assets.dots;
      const image = t.ctx.getImageData(0, 0, t.canvas.width, t.canvas.height);
      const bright = (x, y) => {
        const i = 4 * (Math.floor(y * dpr) * image.width + Math.floor(x * dpr));  // inside a 2-px dot whatever its sub-pixel position
        return image.data[i] > 200 && image.data[i + 1] > 200 && image.data[i + 2] > 200;
      };
      let onDots = 0, onGaps = 0, gaps = 0;
      for (let i = 0; i < movie.n; i++) {
        const [x, y] = movie.position(i, k);
        onDots += bright(t.cx + x, t.cy + y);
      }
      for (let i = 0; i < 2000; i++) {  // points of the aperture on a grid, far from every dot
        const x = ((i * 37) % 500) - 250, y = Math.floor(i / 4) - 250;
        let near = false;
        for (let j = 0; j < movie.n && !near; j++) {
          const [dx, dy] = movie.position(j, k);
          near = Math.abs(dx - x) < 3 && Math.abs(dy - y) < 3;
        }
        if (near || Math.hypot(x, y) > 280) continue;
        gaps += 1;
        onGaps += bright(t.cx + x, t.cy + y);
      }
      return { phase: log[log.length - 1].phase, n: movie.n, onDots, gaps, onGaps };
    }""")
    assert drawn["phase"] == "movie"
    assert drawn["onDots"] >= 0.98 * drawn["n"], drawn  # a few lie under the placeholders or the panel
    assert drawn["gaps"] > 300 and drawn["onGaps"] == 0, drawn
    # A response that is not a dot movie is refused, not drawn.
    refused = page.evaluate("""async () => {
      const m = await import('/static/js/motion_trial.js');
      const out = [];
      for (const bytes of [new Uint8Array(8), new Uint8Array([82, 68, 75, 49, 1, 0, 64, 0, 9, 0, 0, 0, 88, 2, 0, 0])]) {
        try { m.decodeDotMovie(bytes.buffer); out.push('decoded'); } catch (e) { out.push(e.message); }
      }
      return out;
    }""")
    assert refused == ["not a dot movie", "dot movie: bad header or length"]


def test_small_window_hides_the_trial(page):
    page.set_viewport_size({"width": 990, "height": 590})
    start(page, {"trials": [main_trial(1)], "autoStart": False}, state="ready")
    assert page.is_visible(".motion-too-small")
    assert not page.is_visible(".motion-canvas")
    text = page.text_content(".motion-too-small")
    assert "needed at least 1000 × 600" in text  # the declared default; a study's State sends its own need
    assert "zoom" not in text.lower()  # zooming out would make the card calibration wrong
    page.set_viewport_size({"width": 1366, "height": 768})
    page.wait_for_function("!document.querySelector('.motion-too-small') ||"
                           " document.querySelector('.motion-too-small').hidden")
    assert page.is_visible(".motion-canvas")
    assert "Click or press Space to start" in page.text_content(".motion-status")
