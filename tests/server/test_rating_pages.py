"""The rating study's server-rendered pages: HIT preview, consent, instructions, the app page, the end page,
and the experimenter's study page with its ratings.csv download (pseudonyms, pilots left out)."""
from __future__ import annotations

import csv
import io

from .rating_support import RatingWorker


def test_worker_pages_render_for_a_rating_study(app, rating_study):
    client = app.test_client()
    preview = client.get(f"/s/{rating_study}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=HIT1")
    assert preview.status_code == 200
    assert b"rate the quality of images against a reference" in preview.data and b"8 ratings" in preview.data
    worker = RatingWorker(client, rating_study)
    page = client.get(f"/w/{worker.token}/")
    assert page.status_code == 200 and b"rate their quality" in page.data  # the consent
    worker.action("consent")
    page = client.get(f"/w/{worker.token}/")
    assert b"How to rate" in page.data and b"Start the training" in page.data and b"REFERENCE" in page.data
    worker.action("instructions_done")
    page = client.get(f"/w/{worker.token}/")
    assert b'"paradigm": "rating"' in page.data and b"css/rating.css" in page.data
    worker.pass_training()
    for _ in range(3):
        worker.answer_page(worker.honest)
        worker.action("continue")
    page = client.get(f"/w/{worker.token}/")
    assert page.status_code == 200 and b"You completed 3 pages" in page.data


def test_the_study_page_and_its_ratings_download(app, rating_study, admin):
    pilot = RatingWorker(app.test_client(), rating_study, pilot=True)
    pilot.pass_training()
    pilot.answer_page(pilot.honest)
    worker = RatingWorker(app.test_client(), rating_study)
    worker.pass_training()
    worker.answer_page(worker.honest)
    page = admin.get(f"/admin/studies/{rating_study}")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "DCR ratings" in text and "scene_01_chelsea" in text and "ratings.csv" in text
    assert worker.worker_id not in text  # pseudonyms only
    download = admin.get(f"/admin/studies/{rating_study}/ratings.csv")
    assert download.status_code == 200 and download.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(download.get_data(as_text=True))))
    assert len(rows) == 3 + 8  # the worker's training and page; the pilot's left out
    assert {r["worker_id"] for r in rows} != {worker.worker_id} and all(r["worker_id"].startswith("w_") for r in rows)
    with_pilot = admin.get(f"/admin/studies/{rating_study}/ratings.csv?include_pilot=1&no_gold=1")
    rows = list(csv.DictReader(io.StringIO(with_pilot.get_data(as_text=True))))
    assert len(rows) == 2 * 6 and all(r["is_gold"] == "0" for r in rows)
    summary = admin.get(f"/admin/api/studies/{rating_study}/summary").json
    assert summary["progress"]["n_ratings"] == 6 and len(summary["workers"]) == 1
    assert admin.get("/admin/studies/nope/ratings.csv").status_code == 404
