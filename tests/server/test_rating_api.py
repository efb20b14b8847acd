"""The rating paradigm's worker path: the State's wire format per method, training, pages, idempotent
ratings (replay, conflicts), ended assignments, the CCR normalisation, pilots, on SQLite and PostgreSQL."""
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from server.paradigms.rating import PARADIGM
from server.models import Assignment, Page
from server.paradigms.rating.models import RatingResponse, RatingStimulus, RatingTrial
from server.services import app_services

from .api_support import SpecClient
from .rating_support import SMALL, RatingWorker, create_rating_study, shown_answer, trial_facts


def _responses(app) -> list[tuple]:
    with app_services(app).sessions() as session:
        return session.execute(select(RatingResponse.trial_id, RatingResponse.raw_rating, RatingResponse.rating,
                                      RatingTrial.reference_first)
                               .join(RatingTrial, RatingResponse.trial_id == RatingTrial.id)).all()


@pytest.mark.parametrize("method, roles", [("acr", ["test"]), ("dcr", ["reference", "test"]),
                                           ("ccr", ["first", "second"])])
def test_the_state_is_the_wire_format_and_tells_no_check_apart(app, rating_manifest, tmp_path, method, roles):
    slug = create_rating_study(app, rating_manifest, tmp_path, slug=method, **{**SMALL, "rating": {"method": method}})
    worker = RatingWorker(SpecClient(app.test_client()), slug)  # every answer checked against the OpenAPI document
    state = worker.start()
    assert state["stage"] == "quiz"
    assert set(state) == {"assignment_id", "stage", "message", "completion", "progress", "scale", "display", "page"}
    scale = state["scale"]
    assert scale["method"] == method and scale["slider"] is False
    if method == "ccr":
        assert scale["values"] == [-3, -2, -1, 0, 1, 2, 3] and scale["labels"][0] == "Much worse"
    else:
        assert scale["values"] == [5, 4, 3, 2, 1]
        assert scale["labels"][0] == ("Excellent" if method == "acr" else "Imperceptible")
    assert state["display"] == {"policy": "fit", "min_image_scale": 0.5, "floor": [1000, 600]}
    assert state["progress"]["min_pages"] == 1 and state["progress"]["reward_per_page"] == "0.50"
    state = worker.pass_training()
    assert state["stage"] == "trials" and state["progress"]["next_page"] is True
    page = state["page"]
    assert page["kind"] == "trials" and len(page["trials"]) == 8
    sizes = set()
    for trial in page["trials"]:
        assert set(trial) == {"id", "position", "answered", "images"} and isinstance(trial["id"], int)
        assert [image["role"] for image in trial["images"]] == roles
        for image in trial["images"]:
            assert set(image) == {"role", "url", "width", "height"}
            assert image["url"].startswith(f"/stimuli/{slug}/") and "." in image["url"].rsplit("/", 1)[1]
            sizes.add((image["width"], image["height"]))
    assert sorted(t["position"] for t in page["trials"]) == list(range(8))
    for trial in page["trials"]:  # two images of a trial never share a URL (a hidden reference has its own file)
        assert len({image["url"] for image in trial["images"]}) == len(trial["images"])
    # Checks and real trials are on the page together, and look the same: no flag, no name in the URL.
    kinds = {trial_facts(app, t["id"])[0] for t in page["trials"]}
    assert "test" in kinds and kinds - {"test"}
    text = str(state)
    for word in ("gold", "reference_first", "hidden", "__", "amplified", "scene"):
        assert word not in text.replace('"reference"', "").replace("'reference'", "")


def test_a_worker_walks_through_training_pages_and_completes(app, rating_study):
    worker = RatingWorker(app.test_client(), rating_study)
    state = worker.pass_training()
    for page in range(3):
        body = worker.answer_page(worker.honest)
        assert body["page_complete"] is True and body["status"] == "stored"
        if page < 2:
            assert body["stage"] == "page_done"
            state = worker.state()
            assert state["progress"]["pages_completed"] == page + 1
            assert worker.action("continue").status_code == 200
    state = worker.state()
    assert state["stage"] == "completed" and state["completion"]["mode"] == "mturk"
    assert state["progress"]["pages_completed"] == 3


def test_failing_the_training_disqualifies(app, rating_study):
    worker = RatingWorker(app.test_client(), rating_study)
    state = worker.start()
    assert state["stage"] == "quiz"
    for trial in state["page"]["trials"]:
        status, body = worker.rate(trial["id"], shown_answer(app, trial["id"], correct=False))
        assert status == 201 and body["feedback"] == {"correct": False}
    state = worker.state()
    assert state["stage"] == "disqualified" and "training" in state["message"]
    assert state["completion"] is None


def test_ratings_are_idempotent_and_conflicts_refused(app, rating_study):
    worker = RatingWorker(app.test_client(), rating_study)
    first, second = worker.pass_training()["page"]["trials"][:2]
    rating_id = str(uuid.uuid4())
    answer = worker.honest(first)
    status, body = worker.rate(first["id"], answer, rating_id)
    assert status == 201 and body["status"] == "stored" and body["page_complete"] is False
    assert worker.rate(first["id"], answer, rating_id) == (200, {"rating_id": rating_id, "status": "duplicate",
                                                                 "stage": "trials", "page_complete": False})
    status, body = worker.rate(first["id"], 1 if answer != 1 else 2, rating_id)  # same ID, another answer
    assert (status, body["error"]) == (409, "conflict")
    status, body = worker.rate(first["id"], answer)  # another ID for an answered trial
    assert (status, body["error"]) == (409, "trial_already_answered")
    status, body = worker.rate(second["id"], 3, rating_id)  # the ID of a stored rating for another trial
    assert (status, body["error"]) == (409, "conflict")
    status, body = worker.rate(10**9, 3)
    assert (status, body["error"]) == (404, "unknown_trial")
    assert len(_responses(app)) == 1 + 3  # the training's three and the one rating


MALFORMED = [
    ({"rating": 6}, "rating must be one of 5, 4, 3, 2, 1"), ({"rating": 2.5}, "rating must be one of"),
    ({"rating": True}, "rating must be"), ({"rating": "4"}, "rating must be"),
    ({"rt_ms": -1}, "rt_ms"), ({"rating_id": "x"}, "rating_id must be a UUID"),
    ({"trial_id": "17"}, "trial_id must be"), ({"colour": 1}, "colour"),
]


def test_malformed_ratings_are_refused_with_a_400(app, rating_study):
    # One study for every malformed body (creating one writes its check images): each is refused and stores
    # nothing, so the trial stays open for the next.
    worker = RatingWorker(app.test_client(), rating_study)
    trial = worker.pass_training()["page"]["trials"][0]
    stored = len(_responses(app))
    for body, problem in MALFORMED:
        payload = {"rating_id": str(uuid.uuid4()), "trial_id": trial["id"], "rating": 3, "rt_ms": 1000.0, **body}
        status, answer = worker.rate(payload.pop("trial_id"), payload.pop("rating"), payload.pop("rating_id"),
                                     payload.pop("rt_ms"), **payload)
        assert status == 400 and problem in answer["message"], (body, answer)
    assert len(_responses(app)) == stored
    assert worker.rate(trial["id"], 3)[0] == 201  # the trial is still open


def test_the_slider_takes_numbers_within_the_scale(app, rating_manifest, tmp_path):
    slug = create_rating_study(app, rating_manifest, tmp_path, **{**SMALL, "rating": {"method": "ccr", "slider": True}})
    worker = RatingWorker(app.test_client(), slug)
    trials = worker.pass_training()["page"]["trials"]
    assert worker.state()["scale"]["slider"] is True
    assert worker.rate(trials[0]["id"], 3.5)[0] == 400
    assert worker.rate(trials[0]["id"], 1.25)[0] == 201


def test_ccr_ratings_are_stored_positive_when_the_test_is_better(app, rating_manifest, tmp_path):
    slug = create_rating_study(app, rating_manifest, tmp_path,
                               **{**SMALL, "rating": {"method": "ccr"}, "quality": {"quiz_size": 0, "gold_rate": 0.0}})
    worker = RatingWorker(app.test_client(), slug)
    worker.pass_training()
    worker.answer_page(lambda trial: 2)  # "the second is better than the first", on every trial
    rows = _responses(app)
    assert {r.reference_first for r in rows} == {True, False}  # the reference's side is drawn per trial
    for _, raw, stored, reference_first in rows:
        assert raw == 2 and stored == (2 if reference_first else -2)


def test_a_rating_after_the_end_is_refused_with_409(app, rating_manifest, tmp_path):
    slug = create_rating_study(app, rating_manifest, tmp_path, **{
        **SMALL, "quality": {"quiz_size": 0, "gold_rate": 0.25, "gold_min_answered": 1, "accuracy_threshold": 1.0}})
    worker = RatingWorker(app.test_client(), slug)
    trials = worker.pass_training()["page"]["trials"]
    check = next(t for t in trials if trial_facts(app, t["id"])[0] != "test")
    status, body = worker.rate(check["id"], shown_answer(app, check["id"], correct=False))
    assert status == 201 and body["stage"] == "stopped"
    open_trial = next(t for t in trials if t["id"] != check["id"])
    status, body = worker.rate(open_trial["id"], 3)
    assert (status, body["error"]) == (409, "assignment_ended")
    state = worker.state()
    assert state["stage"] == "stopped" and "check questions" in state["message"]


def test_pilots_fill_no_target(app, rating_study):
    pilot = RatingWorker(app.test_client(), rating_study, pilot=True)
    pilot.pass_training()
    pilot.answer_page(pilot.honest)
    worker = RatingWorker(app.test_client(), rating_study)
    worker.pass_training()
    worker.answer_page(worker.honest)
    with app_services(app).sessions() as session:
        study = session.scalar(select(RatingStimulus.study_id).limit(1))
        assert PARADIGM.progress(session, study)["n_responses"] == 6  # the worker's six real ratings; none of the pilot's
        # The pilot's pages reserve nothing (the worker's page does, until it is complete).
        reserved = session.execute(select(Page.reserved_until).join(Assignment, Page.assignment_id == Assignment.id)
                                   .where(Assignment.pilot, Page.kind == "trials")).scalars().all()
    assert reserved == [None]
