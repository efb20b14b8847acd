"""Shared helpers of the motion browser tests and benchmarks/frame_timing.py.

The harness page (experiment_ui/static/harness/motion.html) and the ES modules are
served by Playwright's ``page.route`` from the working tree under a fake origin, so no
server is needed and module imports work (they do not from file:// URLs).
"""
from __future__ import annotations

import functools
import io
import json
import mimetypes
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

REPO = Path(__file__).resolve().parents[2]
STATIC = REPO / "experiment_ui" / "static"
ORIGIN = "http://perceptlab.test"
HARNESS_URL = f"{ORIGIN}/static/harness/motion.html"
FRAME_MS = 1000 / 30


def serve_static(page, extra: dict[str, Any] | None = None) -> None:
    """Serve experiment_ui/static under ORIGIN/static; ``extra`` maps other URL paths to
    a handler ``(route, request) -> None`` (e.g. a fake API endpoint)."""
    extra = extra or {}

    def handle(route, request):
        path = request.url[len(ORIGIN):].split("?")[0].split("#")[0]
        if path in extra:
            return extra[path](route, request)
        if path == "/static/harness/noise.png":  # the harness's matching-noise texture (a study ships its own)
            return route.fulfill(status=200, body=noise_png(), headers={"Content-Type": "image/png"})
        if path == "/static/harness/rdk-dots.bin":  # a synthetic RDK trial's dots, by the server's renderer
            return route.fulfill(status=200, body=rdk_dots(urlsplit(request.url).query),
                                 headers={"Content-Type": "application/octet-stream"})
        if path.startswith("/static/"):
            file = (STATIC / path[len("/static/"):]).resolve()
            if STATIC in file.parents and file.is_file():
                kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
                if file.suffix == ".js":
                    kind = "text/javascript"
                return route.fulfill(status=200, body=file.read_bytes(), headers={"Content-Type": kind})
        return route.fulfill(status=404, body="not found")

    page.route(f"{ORIGIN}/**", handle)


@functools.cache
def noise_png(size: int = 1024) -> bytes:
    """A seamless 1/f² texture as a grey PNG, made like a study's (stimuli.noise)."""
    from PIL import Image

    from stimuli.noise import brownian_noise

    buffer = io.BytesIO()
    Image.fromarray(brownian_noise(size, rng=0)).save(buffer, format="PNG")
    return buffer.getvalue()


@functools.cache
def rdk_dots(query: str) -> bytes:
    """The dot movie (as GET .../motion-trials/<id>/dots sends it) of the harness's query
    ``direction_deg, speed_ppf, seed, n_dots, aperture_px, n_frames``."""
    from stimuli.rdk import rdk_dot_movie

    q = {k: v[0] for k, v in parse_qs(query).items()}
    return rdk_dot_movie(int(q["n_dots"]), int(q["aperture_px"]), float(q["direction_deg"]), float(q["speed_ppf"]),
                         int(q["seed"]), int(q["n_frames"]))


def open_harness(page, spec: dict, *, extra: dict | None = None) -> None:
    """Load the harness with ``spec`` (install ``page.clock`` before calling this for fake time)."""
    serve_static(page, extra)
    page.add_init_script(f"window.__harness = {json.dumps(spec)};")
    page.goto(HARNESS_URL)
    page.wait_for_function("window.harness && window.harness.ready === true")


def main_trial(trial_id: int = 1, *, movie_frames: int = 15, probe=(300.0, 200.0), gt=(3.0, -2.0),
               practice: bool = False, feedback: bool = False) -> dict:
    """A main trial on a synthetic 768x432 clip (drawn by the harness)."""
    movie_ms = movie_frames * FRAME_MS
    return {"trial_id": trial_id, "kind": "main", "practice": practice, "feedback": feedback, "repetition": 1,
            "movie_frames": movie_frames, "movie_ms": movie_ms, "isi2_ms": 3000 - movie_ms - 1000 - 500,
            "clip": {"clip_id": "synthetic", "synthetic": True, "frames": [], "width": 768, "height": 432},
            "probe": {"probe_id": f"p{trial_id:02d}", "x": probe[0], "y": probe[1],
                      "frame_index": (movie_frames - 1) // 2},
            "gt": {"u": gt[0], "v": gt[1]}}


def rdk_trial(trial_id: int = 1, *, direction_deg: float = 37.5, speed_ppf: float = 8.2, seed: int = 123,
              n_dots: int = 5000, practice: bool = False, feedback: bool = False) -> dict:
    import math

    """An RDK trial as State sends it (no direction, speed or seed), plus the harness's "synthetic"
    parameters of its dot movie (served by :func:`rdk_dots`) and the true vector for feedback."""
    rad = math.radians(direction_deg)
    return {"trial_id": trial_id, "kind": "rdk", "practice": practice, "feedback": feedback, "repetition": 1,
            "movie_frames": 15, "movie_ms": 500, "isi2_ms": 1000,
            "rdk": {"n_dots": n_dots, "aperture_px": 600, "dot_px": 2},
            "synthetic": {"direction_deg": direction_deg, "speed_ppf": speed_ppf, "seed": seed},
            "gt": {"u": speed_ppf * math.cos(rad), "v": -speed_ppf * math.sin(rad)}}
