"""Shared helpers of the rating browser tests: the rating page without a server (the harness) and
the worker's moves on a rating trial.

:class:`RatingHarness` serves ``tests/browser/rating_harness.html`` (the rating trial page as the
server renders it: the assignment driver with the ``rating`` paradigm) and experiment_ui/static under
a fake origin with ``page.route``, and plays the worker API of one assignment after the wire format
of the rating paradigm (ARCHITECTURE.md, The paradigm contract): GET state, POST ratings (idempotent
by ``rating_id``; 201 with ``page_complete`` and the next State), POST actions (continue, finish),
POST environment. It keeps every rating body it stored, in order.

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

import functools
import io
import json
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.paradigms.wiring import static_file

REPO = Path(__file__).resolve().parents[2]
STATIC = REPO / "experiment_ui" / "static"
HARNESS = Path(__file__).resolve().parent / "rating_harness.html"
ORIGIN = "http://perceptlab.test"
HARNESS_URL = f"{ORIGIN}/harness/rating.html"
API = f"{ORIGIN}/api/v1/assignments/H1"

# The scales of ITU-T P.910 / P.808 in the order the page shows them (left to right).
SCALES: dict[str, dict[str, Any]] = {
    "acr": {"values": [5, 4, 3, 2, 1], "labels": ["Excellent", "Good", "Fair", "Poor", "Bad"],
            "question": "How would you rate the quality of this image?"},
    "dcr": {"values": [5, 4, 3, 2, 1],
            "labels": ["Imperceptible", "Perceptible but not annoying", "Slightly annoying", "Annoying",
                       "Very annoying"],
            "question": "How does the second image compare with the reference?"},
    "ccr": {"values": [-3, -2, -1, 0, 1, 2, 3],
            "labels": ["Much worse", "Worse", "Slightly worse", "About the same", "Slightly better", "Better",
                       "Much better"],
            "question": "How does the second image compare with the first?"},
}
ROLES = {"acr": ("test",), "dcr": ("reference", "test"), "ccr": ("first", "second")}
RATING_FIELDS = {"rating_id", "trial_id", "rating", "rt_ms"}


@functools.cache
def image_png(token: str, width: int, height: int) -> bytes:
    """A test image: a gradient with a token-dependent tint and a grid (anything decodes it)."""
    import numpy as np
    from PIL import Image

    seed = sum(token.encode())
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([(x * 255 // max(1, width - 1)), (y * 255 // max(1, height - 1)),
                    np.full_like(x, (seed * 37) % 256)], axis=-1).astype(np.uint8)
    rgb[(x % 64 < 2) | (y % 64 < 2)] = 0
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return buffer.getvalue()


@dataclass
class RatingHarness:
    """One assignment of a rating study, played in Python behind ``page.route``.

    Pages: an optional practice page (``quiz_trials``, stage "quiz") then pages of ``trials_per_page``
    trials (stage "trials"), each followed by "page_done"; "finish" ends in "completed".
    ``fail_ratings``: answer the next so many POSTs of ratings with 503 (the queue retries them).
    ``quiz_correct``: the practice ratings judged correct (the others "not quite"); None: no feedback.
    """

    method: str = "dcr"
    slider: bool = False
    trials_per_page: int = 3
    quiz_trials: int = 0
    image_size: tuple[int, int] = (512, 512)
    display: dict[str, Any] = field(default_factory=lambda: {"policy": "fit", "min_image_scale": 0.5,
                                                             "floor": [1000, 600]})
    max_pages: int = 2
    fail_ratings: int = 0
    quiz_correct: tuple[float, float] | None = None
    stage: str = "trials"
    stored: list[dict[str, Any]] = field(default_factory=list)   # rating bodies as stored, in order
    posts: int = 0                                               # POSTs of ratings received (any answer)
    pages_completed: int = 0
    page_index: int = 0
    next_trial_id: int = 100
    trials: list[dict[str, Any]] = field(default_factory=list)   # the current page's trials
    by_rating_id: dict[str, dict[str, Any]] = field(default_factory=dict)
    first_is_reference: dict[int, bool] = field(default_factory=dict)  # CCR: the server's secret, per trial

    def __post_init__(self) -> None:
        self.stage = "quiz" if self.quiz_trials else "trials"
        self._new_page(self.quiz_trials or self.trials_per_page)

    # ------------------------------------------------------------------ State

    def _new_page(self, n: int) -> None:
        self.trials = []
        width, height = self.image_size
        for position in range(n):
            trial_id = self.next_trial_id
            self.next_trial_id += 1
            images = [{"role": role, "url": f"/stimuli/t{trial_id}{role[0]}", "width": width, "height": height}
                      for role in ROLES[self.method]]
            # The CCR hidden side alternates, so a test sees both.
            self.first_is_reference[trial_id] = trial_id % 2 == 0
            self.trials.append({"id": trial_id, "position": position, "answered": False, "images": images})

    def state(self) -> dict[str, Any]:
        scale = {"method": self.method, "slider": self.slider, **SCALES[self.method]}
        out: dict[str, Any] = {
            "assignment_id": "H1", "stage": self.stage, "message": None, "completion": None,
            "progress": {"pages_completed": self.pages_completed, "min_pages": 1, "max_pages": self.max_pages,
                         "reward_per_page": "1.00", "bonus_per_page": "0.80",
                         "next_page": self.pages_completed < self.max_pages},
            "scale": scale, "display": self.display,
        }
        if self.stage in ("quiz", "trials"):
            out["page"] = {"index": self.page_index, "kind": self.stage, "trials": json.loads(json.dumps(self.trials))}
        return out

    def normalised(self, body: dict[str, Any]) -> float:
        """A CCR rating as the server stores it: positive = the test image is better than the reference."""
        first_is_reference = self.first_is_reference[body["trial_id"]]
        return body["rating"] if first_is_reference else -body["rating"]

    # ------------------------------------------------------------------ API

    def _rating(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if set(body) != RATING_FIELDS:
            return 400, {"error": "invalid", "message": f"fields {sorted(body)}"}
        known = self.by_rating_id.get(body["rating_id"])
        if known is not None:
            return (200, {"status": "duplicate"}) if known == body else (409, {"error": "conflict", "message": "x"})
        if self.stage not in ("quiz", "trials"):
            return 409, {"error": "assignment_ended", "message": "The page is over."}
        trial = next((t for t in self.trials if t["id"] == body["trial_id"]), None)
        if trial is None:
            return 404, {"error": "unknown_trial", "message": "No such trial."}
        if trial["answered"]:
            return 409, {"error": "trial_already_answered", "message": "Already answered."}
        values = SCALES[self.method]["values"]
        rating = body["rating"]
        if self.slider:
            ok = isinstance(rating, (int, float)) and min(values) <= rating <= max(values)
        else:
            ok = isinstance(rating, int) and rating in values
        if not ok:
            return 400, {"error": "invalid", "message": f"rating {rating!r}"}
        trial["answered"] = True
        self.by_rating_id[body["rating_id"]] = body
        self.stored.append({**body, "stage": self.stage})
        answer: dict[str, Any] = {"status": "stored", "page_complete": False}
        if self.stage == "quiz" and self.quiz_correct is not None:
            low, high = self.quiz_correct
            answer["feedback"] = {"correct": low <= rating <= high}
        if all(t["answered"] for t in self.trials):
            answer["page_complete"] = True
            if self.stage == "quiz":
                self.stage = "trials"
                self._new_page(self.trials_per_page)
            else:
                self.pages_completed += 1
                self.stage = "page_done"
            answer["state"] = self.state()
        return 201, answer

    def _action(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.stage != "page_done":
            return 409, {"error": "conflict", "message": "Not at the end of a page."}
        if body.get("action") == "continue" and self.pages_completed < self.max_pages:
            self.stage = "trials"
            self.page_index += 1
            self._new_page(self.trials_per_page)
        else:
            self.stage = "completed"
        return 200, self.state()

    def handle(self, route, request) -> None:
        url = request.url.split("#")[0]
        path = url[len(ORIGIN):].split("?")[0]

        def reply(status: int, body: Any) -> None:
            route.fulfill(status=status, body=json.dumps(body), headers={"Content-Type": "application/json"})

        if path == "/harness/rating.html":
            if self.stage == "completed":  # the server's end page
                return route.fulfill(status=200, body='<main id="done"><h1>Thank you</h1></main>',
                                     headers={"Content-Type": "text/html"})
            return route.fulfill(status=200, body=HARNESS.read_bytes(), headers={"Content-Type": "text/html"})
        if path.startswith("/stimuli/"):
            token = path[len("/stimuli/"):]
            return route.fulfill(status=200, body=image_png(token, *self.image_size),
                                 headers={"Content-Type": "image/png"})
        if path == f"{API[len(ORIGIN):]}/state":
            return reply(200, self.state())
        if path == f"{API[len(ORIGIN):]}/environment":
            return reply(201, {"status": "stored"})
        if path == f"{API[len(ORIGIN):]}/ratings":
            self.posts += 1
            if self.fail_ratings > 0:
                self.fail_ratings -= 1
                return reply(503, {"error": "unavailable", "message": "Try again."})
            return reply(*self._rating(json.loads(request.post_data)))
        if path == f"{API[len(ORIGIN):]}/actions":
            return reply(*self._action(json.loads(request.post_data)))
        if path.startswith("/static/"):
            # A paradigm package's browser code (/static/paradigms/<kind>/...), else the app's own.
            own = (STATIC / path[len("/static/"):]).resolve()
            file = static_file(path) or (own if STATIC in own.parents and own.is_file() else None)
            if file is not None:
                kind = "text/javascript" if file.suffix == ".js" else mimetypes.guess_type(file.name)[0]
                return route.fulfill(status=200, body=file.read_bytes(),
                                     headers={"Content-Type": kind or "application/octet-stream"})
        return route.fulfill(status=404, body="not found")

    def open(self, page) -> None:
        """Serve the harness to ``page`` and load it (install ``page.clock`` before, if the test needs it)."""
        page.route(f"{ORIGIN}/**", self.handle)
        page.goto(HARNESS_URL)


# ---------------------------------------------------------------------- the page (harness and server)

# What the page shows next (or "" while it is busy): a trial ready for a rating that is not among
# `answered`, the page-done panel, or one of the server-rendered end pages.
STATUS_JS = """(answered) => {
  if (document.querySelector('main#done')) return 'done';
  if (document.querySelector('main#stopped')) return 'stopped';
  const panel = document.querySelector('#page-done');
  if (panel && !panel.hidden) return 'page_done';
  const trial = document.querySelector('#trial.rating-trial');
  if (trial && !trial.hidden && trial.dataset.accepting === 'true' && !answered.includes(trial.dataset.trialId))
    return 'trial';
  return '';
}"""


def status(page, answered=()) -> str:
    """Wait until the page shows something to act on (see STATUS_JS); survives the app's own reloads."""
    from playwright.sync_api import Error as PlaywrightError

    for _ in range(5):
        try:
            return page.wait_for_function(STATUS_JS, arg=sorted(answered)).json_value()
        except PlaywrightError as error:
            if "context was destroyed" not in str(error) and "navigat" not in str(error):
                raise
    raise AssertionError("the page kept navigating")


def option(page, value):
    """The scale button of ``value``."""
    return page.locator(f"#trial .rating-option[data-value='{value}']")


def pressed_values(page) -> list[str]:
    return page.locator("#trial .rating-option[aria-pressed='true']").evaluate_all(
        "(buttons) => buttons.map((b) => b.dataset.value)")


def queued(page) -> int:
    """Ratings handed to the response queue and not yet acknowledged."""
    return page.evaluate("window.assignmentDriver.queue.pending")


def fits_without_scrolling(page) -> dict[str, Any]:
    """The page's extent against the window, and whether the trial and its Next button are inside it."""
    return page.evaluate("""() => {
      const doc = document.scrollingElement;
      const next = document.querySelector('#rating-next').getBoundingClientRect();
      const trial = document.querySelector('#trial').getBoundingClientRect();
      return {scrollWidth: doc.scrollWidth, scrollHeight: doc.scrollHeight,
              innerWidth: innerWidth, innerHeight: innerHeight,
              nextBottom: next.bottom, nextRight: next.right, trialBottom: trial.bottom,
              scale: Number(document.querySelector('#trial').dataset.scale)};
    }""")


def rate(page, value, how: str = "mouse") -> str:
    """Choose ``value`` on the trial on screen and send it with Next (mouse) or a digit and Enter
    (keys); return the trial's ID."""
    trial_id = page.locator("#trial").get_attribute("data-trial-id")
    if how == "mouse":
        option(page, value).click()
        page.click("#rating-next")
    else:
        key = option(page, value).get_attribute("aria-keyshortcuts")
        page.keyboard.press(key)
        page.keyboard.press("Enter")
    return trial_id


# ---------------------------------------------------------------------- a real rating study

# Small studies: a training of 2 quality checks, pages of 6 ratings, at most 2 pages.
SMALL_RATING_STUDY: dict[str, dict[str, Any]] = {
    "rating": {"ratings_per_stimulus": 3},
    "pages": {"ratings_per_page": 6, "min_pages": 1, "max_pages": 2, "reward_per_page": "0.50",
              "bonus_per_page": "0.40"},
    "quality": {"quiz_size": 2, "gold_rate": 0.2, "gold_min_answered": 2},
}


def create_rating_study(app, demo_stimuli: Path, folder: Path, slug: str, method: str, *, slider: bool = False,
                        **sections: dict[str, Any]) -> str:
    """A :data:`SMALL_RATING_STUDY` of ``method`` over a copy of the demo's prepared scenes (creating a
    rating study writes its quality checks' images beside them); ``sections`` add or override keys."""
    from server.paradigms import create_study, read_study_file
    from tests.server.rating_support import copy_prepared, write_rating_study

    tables = {name: dict(values) for name, values in SMALL_RATING_STUDY.items()}
    tables["rating"].update(method=method, slider=slider)
    for name, values in sections.items():
        tables.setdefault(name, {}).update(values)
    manifest = copy_prepared(demo_stimuli, folder / slug)
    spec = read_study_file(write_rating_study(folder, manifest, slug, **tables))
    with _session(app) as session:
        create_study(session, spec)
        session.commit()
    return slug


def _session(app):
    from server.services import app_services

    return app_services(app).sessions()


def trial_facts(app, trial_id: str | int) -> dict[str, Any]:
    """What the server knows of a trial and the page never sees: the stimulus's role (test,
    hidden_reference, gold_low) and, for CCR, whether the reference was the first image."""
    from server.paradigms.rating.models import RatingStimulus, RatingTrial

    with _session(app) as session:
        trial = session.get(RatingTrial, int(trial_id))
        stimulus = session.get(RatingStimulus, trial.stimulus_id)
        return {"role": stimulus.role, "reference_first": trial.reference_first, "is_gold": trial.is_gold,
                "is_quiz": trial.is_quiz}


def stored_ratings(app, assignment_id: int) -> dict[str, Any]:
    """trial ID (as the page shows it) -> the stored RatingResponse."""
    from sqlalchemy import select

    from server.paradigms.rating.models import RatingResponse

    with _session(app) as session:
        rows = session.scalars(select(RatingResponse).where(RatingResponse.assignment_id == assignment_id)).all()
        session.expunge_all()
    return {str(r.trial_id): r for r in rows}


def assignment_of(app, external_id: str):
    from sqlalchemy import select

    from server.models import Assignment

    with _session(app) as session:
        assignment = session.scalar(select(Assignment).where(Assignment.external_id == external_id))
        assert assignment is not None, f"no assignment {external_id}"
        session.expunge(assignment)
        return assignment


def shown_rating(method: str, normalised: float, reference_first: bool) -> float:
    """The answer to click for a wanted stored (normalised) rating: CCR turns the sign when the
    reference was the second image (the server's normalisation, undone)."""
    return normalised if method != "ccr" or reference_first else -normalised


class RatingWalker:
    """Rates the trials of a rating study's pages and remembers every answer given (trial ID -> value).

    Quality checks (read from the database, as the server judges them) get an answer in their known
    range, so the worker is neither disqualified nor stopped; real trials cycle through ``answers`` so
    that no page is straight-lined."""

    def __init__(self, page, app, method: str, answers, how: str = "mouse"):
        self.page = page
        self.app = app
        self.method = method
        self.answers = list(answers)
        self.how = how
        self.choices: dict[str, float] = {}
        self.facts: dict[str, dict[str, Any]] = {}
        self.labels: dict[str, list[str]] = {}  # trial ID -> the labels above its images
        self._k = 0

    def status(self) -> str:
        return status(self.page, self.choices)

    def pick(self, facts: dict[str, Any]) -> float:
        from server.paradigms.rating.quality import KNOWN_RANGES

        if facts["role"] in KNOWN_RANGES[self.method]:
            low, high = KNOWN_RANGES[self.method][facts["role"]]
            return shown_rating(self.method, round((low + high) / 2), facts["reference_first"])
        value = self.answers[self._k % len(self.answers)]
        self._k += 1
        return value

    def answer(self) -> str:
        trial_id = self.page.locator("#trial").get_attribute("data-trial-id")
        facts = self.facts[trial_id] = trial_facts(self.app, trial_id)
        self.labels[trial_id] = self.page.locator("#trial .rating-label").all_inner_texts()
        value = self.pick(facts)
        rate(self.page, int(value), self.how)
        self.choices[trial_id] = value
        return trial_id

    def run(self, kind: str | None = None) -> str:
        """Rate trials until something else than a trial shows; return that status."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

        while (current := self.status()) == "trial":
            if kind is not None:
                assert self.page.locator("#trial").get_attribute("data-page-kind") == kind
            try:
                self.answer()
            except PlaywrightTimeoutError:
                # The next trial shows at once while the last rating is confirmed; when that rating ended
                # the page, the page then leaves for the server's stage: look again.
                continue
        return current
