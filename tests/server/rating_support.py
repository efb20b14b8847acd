"""Rating-study helpers shared by the rating tests: a prepared stimulus folder of their own (creating a
rating study writes its quality checks' images into it), writing and creating a rating study, a scripted
worker (:class:`RatingWorker`), and the known answer of a quality check read from the database.

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

import shutil
import uuid
import zlib
from pathlib import Path

from sqlalchemy import select

from server.pilot import pilot_signature
from server.paradigms.core import study_paradigm
from server.paradigms.rating.models import RatingStimulus, RatingTrial
from server.paradigms.rating.quality import known_range
from server.services import app_services


def copy_prepared(demo_stimuli: Path, folder: Path) -> Path:
    """A copy of the demo's prepared scenes under ``folder``, without the quality-check images a rating study
    wrote beside them (``<scene>/rating/``: the demo's own DCR study writes them into the shared fixture);
    returns its study manifest."""
    target = folder / "prepared"
    shutil.copytree(demo_stimuli / "prepared", target, ignore=shutil.ignore_patterns("rating"))
    return target / "manifest.json"


def write_rating_study(folder: Path, manifest: Path, slug: str = "rating", **sections) -> Path:
    """A rating study.toml over ``manifest``; ``sections`` like ``rating={"method": "acr"}``."""
    sections["entry"] = {"external_hits": True, **sections.get("entry", {})}  # MTurk entries without posted HITs
    lines = ["[study]", 'kind = "rating"', f'slug = "{slug}"', 'name = "Rating test"',
             f'manifests = ["{manifest.as_posix()}"]']
    for section, values in sections.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            text = f'"{value}"' if isinstance(value, str) else str(value).lower() if isinstance(value, bool) \
                else repr(value)
            lines.append(f"{key} = {text}")
    path = folder / f"{slug}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def create_rating_study(app, manifest: Path, folder: Path, slug: str = "rating", **sections) -> str:
    from server.paradigms import create_study, read_study_file

    spec = read_study_file(write_rating_study(folder, manifest, slug, **sections))
    with app_services(app).sessions() as session:
        create_study(session, spec)
        session.commit()
    return slug


# Small pages so that a test walks through several quickly.
SMALL = {"pages": {"ratings_per_page": 8, "min_pages": 1, "max_pages": 3, "reward_per_page": "0.50",
                   "bonus_per_page": "0.40"},
         "rating": {"ratings_per_stimulus": 3},
         "quality": {"quiz_size": 3, "gold_rate": 0.25, "gold_min_answered": 2}}


def trial_facts(app, trial_id: int) -> tuple[str, str, bool, bool]:
    """``(role, method, reference_first, is_quiz)`` of a trial, read from the database as the server judges."""
    with app_services(app).sessions() as session:
        row = session.execute(select(RatingStimulus.role, RatingStimulus.study_id, RatingTrial.reference_first,
                                     RatingTrial.is_quiz)
                              .join(RatingStimulus, RatingTrial.stimulus_id == RatingStimulus.id)
                              .where(RatingTrial.id == trial_id)).one()
        _, spec = study_paradigm(session, row.study_id)
    return row.role, spec.method, row.reference_first, row.is_quiz


def consistent_rating(item_id: str, rng) -> int:
    """An honest worker's rating of a stimulus on a 1..5 scale: its own level (fixed by its ID) give or take
    often one point more or less (``rng``: a seeded ``random.Random``), so the screening keeps such workers."""
    level = 1 + zlib.crc32(item_id.encode()) % 5
    return min(5, max(1, level + rng.choice((-1, 0, 1))))


def trial_stimulus(app, trial_id: int) -> tuple[str, str]:
    """``(scene, item_id)`` of the stimulus a trial shows."""
    with app_services(app).sessions() as session:
        return tuple(session.execute(select(RatingStimulus.scene, RatingStimulus.item_id)
                                     .join(RatingTrial, RatingTrial.stimulus_id == RatingStimulus.id)
                                     .where(RatingTrial.id == trial_id)).one())


def shown_answer(app, trial_id: int, correct: bool = True) -> int:
    """An answer on the scale as shown for a trial: for a quality check, one in its known range (``correct``)
    or one outside it; for a real stimulus the scale's middle value (CCR 0, else 3)."""
    role, method, reference_first, _ = trial_facts(app, trial_id)
    if role == "test":
        return 0 if method == "ccr" else 3
    low, high = known_range(method, role)
    scale = range(-3, 4) if method == "ccr" else range(1, 6)
    if correct:
        value = next(v for v in scale if low <= v <= high)
    else:
        value = max(scale, key=lambda v: max(low - v, v - high))  # the farthest from the range
    # CCR: the stored rating is the answer with its sign turned when the reference was the second image.
    return value if method != "ccr" or reference_first else -value


class RatingWorker:
    """A simulated worker of a rating study over the Flask test client.

    Ratings are posted to ``POST /api/v1/assignments/<id>/ratings`` (the paradigm's response kind).
    """

    def __init__(self, client, slug: str, worker_id: str | None = None, pilot: bool = False):
        self.client = client
        self.app = client.application if hasattr(client, "application") else client.client.application  # SpecClient
        self.worker_id = worker_id or f"W{uuid.uuid4().hex[:10].upper()}"
        body = {"platform": "mturk", "worker_id": self.worker_id, "assignment_id": f"A{uuid.uuid4().hex[:12].upper()}",
                "hit_id": "HIT1", "turk_submit_to": "https://workersandbox.mturk.com"}
        if pilot:  # the study's pilot signature, as `perceptlab simulate` sends it (server/pilot.py)
            body["pilot"] = pilot_signature(self.app.config["SECRET_KEY"], slug)
        response = client.post(f"/api/v1/studies/{slug}/assignments", json=body)
        assert response.status_code == 201, response.json
        self.assignment_id = response.json["assignment_id"]
        self.token = response.json["token"]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def state(self) -> dict:
        response = self.client.get(f"/api/v1/assignments/{self.assignment_id}/state", headers=self.headers)
        assert response.status_code == 200, response.json
        return response.json

    def action(self, action: str):
        return self.client.post(f"/api/v1/assignments/{self.assignment_id}/actions", headers=self.headers,
                                json={"action": action})

    def start(self) -> dict:
        """Consent and instructions: the state at the training (or the first page without one)."""
        assert self.action("consent").status_code == 200
        response = self.action("instructions_done")
        assert response.status_code == 200, response.json
        return response.json

    def rate(self, trial_id: int, rating, rating_id: str | None = None, rt_ms: float = 2310.0,
             **extra) -> tuple[int, dict]:
        """Post one rating; ``(status, body)``."""
        body = {"rating_id": rating_id or str(uuid.uuid4()), "trial_id": trial_id, "rating": rating, "rt_ms": rt_ms,
                **extra}
        response = self.client.post(f"/api/v1/assignments/{self.assignment_id}/ratings", headers=self.headers,
                                    json=body)
        return response.status_code, response.json

    def answer_page(self, choose) -> dict:
        """Rate every open trial of the current page with ``choose(trial) -> rating``; return the last body."""
        body = {}
        for trial in self.state()["page"]["trials"]:
            if not trial["answered"]:
                status, body = self.rate(trial["id"], choose(trial))
                assert status == 201, body
        return body

    def honest(self, trial: dict) -> int:
        """A quality check's answer in range; the scale's middle for a real stimulus."""
        return shown_answer(self.app, trial["id"])

    def rate_pages(self, pages: int, real) -> None:
        """Rate ``pages`` pages: real stimuli ``real()``, quality checks in their range; go on after each page."""
        for _ in range(pages):
            body = self.answer_page(lambda t: real() if trial_facts(self.app, t["id"])[0] == "test" else self.honest(t))
            if body.get("stage") == "page_done":
                self.action("continue")

    def rate_stimuli(self, pages: int, value_of) -> dict:
        """Rate up to ``pages`` pages: each real stimulus ``value_of(scene, item_id)``, quality checks in their
        range; go on after each page. Returns the last state (stops early when the worker has no page)."""
        state = self.state()
        for _ in range(pages):
            if not state.get("page"):
                break
            body = self.answer_page(lambda t: value_of(*trial_stimulus(self.app, t["id"]))
                                    if trial_facts(self.app, t["id"])[0] == "test" else self.honest(t))
            if body.get("stage") == "page_done":
                self.action("continue")
            state = self.state()
        return state

    def pass_training(self) -> dict:
        """Start and answer the training correctly: the state at the first page of trials."""
        state = self.start()
        if state["stage"] == "quiz":
            self.answer_page(self.honest)
            state = self.state()
        return state
