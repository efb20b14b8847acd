"""[stopping] that a few people cannot trigger (server/stopping.py): the attacks of issue 38 replayed through the API.

* Two invented plain-link participants who pass their checks and agree on every stimulus made a rating study stop
  "at its precision target" with half-widths of 0: now an item counts only once ``[stopping] min_workers`` different
  workers kept by the screening of ``perceptlab results`` answered it, and no zero-width interval meets a target.
* Bare entries that never consent filled ``max_participants``: now only participants who consented count.
"""
from __future__ import annotations

import datetime as dt
import math
import zlib

import numpy as np
import pytest
from sqlalchemy import select

from server import stopping
from server.models import Study, StudyStopping
from server.paradigms.core import Precision, SetPrecision
from server.paradigms.rating.study import RatingSpec
from server.paradigms.studyfile import StudyDefinitionError
from server.services import app_services

from .rating_support import SMALL, RatingWorker, create_rating_study


class LinkRater(RatingWorker):
    """A rating worker who enters by the study's plain link with an invented participant ID (no HIT, no signature)."""

    def __init__(self, client, slug: str, worker_id: str):
        self.client, self.app, self.worker_id = client, client.application, worker_id
        response = client.post(f"/api/v1/studies/{slug}/assignments", json={"platform": "link", "worker_id": worker_id})
        assert response.status_code == 201, response.json
        self.assignment_id, self.token = response.json["assignment_id"], response.json["token"]


def _status(app, slug: str) -> tuple[int, str]:
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        return study.id, study.status


def _record(app, study_id: int) -> StudyStopping:
    with app_services(app).sessions() as session:
        record = session.get(StudyStopping, study_id)
        session.expunge(record)
        return record


def _agreed(scene: str, item: str) -> int:
    """The value both colluders give a stimulus: the same for both, different between stimuli (so no screening
    rule sees a straight-liner or a worker at odds with the others)."""
    return 1 + zlib.crc32(f"{scene}/{item}".encode()) % 5


def test_two_agreeing_link_participants_cannot_stop_a_rating_study(app, rating_manifest, tmp_path):
    app.config["SERVER"]["stopping_check_seconds"] = 0  # checked after every page, as a busy study would be
    slug = create_rating_study(app, rating_manifest, tmp_path, stopping={"halfwidth": 0.5},
                               **{**SMALL, "pages": {**SMALL["pages"], "max_pages": 12},
                                  "rating": {"ratings_per_stimulus": 10}})
    study_id, _ = _status(app, slug)
    api = app.test_client()
    for name in ("INVENTED1", "INVENTED2"):
        worker = LinkRater(api, slug, name)
        worker.pass_training()
        state = worker.rate_stimuli(12, _agreed)
        assert state["stage"] in ("page_done", "completed") or not state.get("page")
    record = stopping.check_in_app(app, study_id)
    assert _status(app, slug)[1] == "active" and record.stopped_at is None  # before: stopped, half-width 0.000
    measured = record.measured
    assert not measured["target_met"] and measured["counts"]["participants"] == 2
    assert all(s["meeting"] == 0 and s["halfwidth"] is None and s["too_few_workers"] == s["items"]
               for s in measured["sets"])
    # Every stimulus was rated by both, with one value: their intervals have zero width, and would have "met" 0.5.
    assert sum(s["responses"] for s in measured["sets"]) == sum(s["items"] for s in measured["sets"]) * 2
    lines = "\n".join(stopping.describe(record))
    assert "do not count yet: fewer than 5 different workers who passed screening answered each" in lines
    assert "2 of 2 workers kept by the screening of perceptlab results" in lines
    # A later entrant is still welcome.
    assert api.post(f"/api/v1/studies/{slug}/assignments",
                    json={"platform": "link", "worker_id": "LATER"}).status_code == 201


def test_bare_entries_do_not_fill_the_participant_cap(app, rating_manifest, tmp_path):
    app.config["SERVER"]["stopping_check_seconds"] = 0
    slug = create_rating_study(app, rating_manifest, tmp_path, stopping={"max_participants": 16}, **SMALL)
    study_id, _ = _status(app, slug)
    api = app.test_client()
    for k in range(16):  # invented IDs that enter and never consent
        entered = api.post(f"/api/v1/studies/{slug}/assignments", json={"platform": "link", "worker_id": f"BARE{k}"})
        assert entered.status_code == 201
    honest = LinkRater(api, slug, "HONEST")
    honest.pass_training()
    honest.rate_stimuli(1, lambda scene, item: 3)  # the page's end checks [stopping]
    assert _status(app, slug)[1] == "active"  # before: stopped here, with 17 "participants"
    record = _record(app, study_id)
    assert record.checked_at is not None and record.stopped_at is None
    assert record.measured["counts"]["participants"] == 1
    assert "participants 1 of 16" in "\n".join(stopping.describe(record))


def _spec(**stop) -> RatingSpec:
    return RatingSpec(manifests=("m.json",), slug="s", name="s", **stop)


def test_no_blank_zero_or_thin_interval_meets_a_target():
    from decimal import Decimal

    counts = stopping.Counts(100, 10, 10, Decimal("5.00"), None)
    spec = _spec(halfwidth=0.5, min_workers=5)
    widths = (0.0, math.nan, math.inf, 1e-16, 0.3, 0.3)  # 1e-16: a degenerate interval's rounding
    workers = (9, 9, 9, 9, 4, 5)
    status = stopping.set_status(spec, np.array(widths), np.array(workers))
    assert status.meeting == 1 and status.too_few_workers == 1 and status.zero_width == 2
    one = SetPrecision("scene", tuple("abcdef"), widths, 40, workers=workers)
    m = stopping.evaluate(_spec(halfwidth=0.5, quantile=1 / 6), Precision("MOS points", (one,), 40), counts)
    assert m["target_met"] and m["sets"][0]["halfwidth"] == 0.3  # the one honest item meets a 1-in-6 quantile
    assert m["sets"][0]["not_counted"] == [
        "1 of 6 items does not count yet: fewer than 5 different workers who passed screening answered it "
        "([stopping] min_workers)",
        "2 of 6 items do not count: every kept answer agrees, and an interval of zero width never meets a target"]
    # Zero width everywhere, or the kept workers unknown: never met, whatever the half-width asked.
    zero = SetPrecision("scene", ("a", "b"), (0.0, 0.0), 40, workers=(20, 20))
    unknown = SetPrecision("scene", ("a", "b"), (0.1, 0.1), 40)
    for s in (zero, unknown):
        assert not stopping.evaluate(_spec(halfwidth=5.0), Precision("MOS points", (s,), 40), counts)["target_met"]
    # A named pair counts as resolved only when both items have their workers.
    pair = SetPrecision("scene", ("a", "b"), (0.1, 0.1), 40, {"a|b": True}, workers=(5, 2))
    assert stopping.evaluate(_spec(resolve=("a|b",)), Precision("u", (pair,), 40), counts)["sets"][0]["resolved"] \
        == {"a|b": False}
    # The projection never says "nothing still needed" for items that do not count yet.
    projected = stopping.projection(spec, Precision("MOS points", (zero,), 40), counts,
                                    dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    assert projected["responses"]["estimate"] > 0


def test_min_workers_is_declared_once_with_bounds(app, rating_manifest, tmp_path):
    from server.paradigms.params import DEFAULT_MIN_WORKERS, StoppingParams, declarations

    declared = {d.name: d for d in declarations(StoppingParams)}["min_workers"]
    assert declared.param.low == 2 and declared.param.section == "stopping" and declared.default() == 5
    assert DEFAULT_MIN_WORKERS == 5 and "5:" in declared.param.doc  # the default's reason is in its documentation
    with pytest.raises(StudyDefinitionError, match="stopping.min_workers"):
        create_rating_study(app, rating_manifest, tmp_path, stopping={"halfwidth": 0.5, "min_workers": 1}, **SMALL)
    with pytest.raises(StudyDefinitionError, match=r"ratings_per_stimulus \(3\) is below stopping.min_workers"):
        create_rating_study(app, rating_manifest, tmp_path, stopping={"halfwidth": 0.5}, **SMALL)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the results path: storage does not matter
def test_a_paired_study_of_one_kept_worker_prints_no_interval_and_meets_no_target(app, demo_stimuli, tmp_path):
    from click.testing import CliRunner

    from server.cli import cli
    from server.paradigms.paired import live_scales

    from .conftest import SMALL_STUDY, create_test_study
    from .simulated_votes import add_votes

    app.config["SERVER"]["live_scales_bootstrap"] = 40
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="one", stopping={"halfwidth": 5.0, "min_workers": 2},
                             **SMALL_STUDY)
    study_id, _ = _status(app, slug)
    add_votes(app, slug, honest=1, seed=2)  # one worker, every real pair
    live_scales.refresh_if_stale(app, study_id)  # the running estimate, which checks [stopping]
    record = _record(app, study_id)
    assert record.stopped_at is None and not record.measured["target_met"]
    shown = CliRunner().invoke(cli, ["results", slug, "--out", str(tmp_path / "results"), "--no-mturk", "--no-plots",
                                     "--bootstrap", "40", "--database-url", app.config["DATABASE_URL"]],
                               env={"PERCEPTLAB_SECRET_KEY": app.config["SECRET_KEY"]})
    assert shown.exit_code == 0, shown.output
    assert "0.00  " not in shown.output.split("95% CI")[1]  # before: "± 0.00" for every item
    assert "n/a: no interval of positive width (1 kept worker" in shown.output
    assert "[stopping] target: its half-width is in jod, this analysis in anchored" in shown.output
