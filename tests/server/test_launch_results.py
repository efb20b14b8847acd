"""`perceptlab launch` and `perceptlab results` end to end: small generated scenes, a real SeaweedFS bucket
(tests/server/s3_fixture.py) and a real boto3 MTurk client under botocore's Stubber (every MTurk request's
parameters checked, none left over)."""
from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from botocore.stub import ANY
from click.testing import CliRunner
from sqlalchemy import select

from server.cli import cli, cmd_mturk
from server.config import load_config
from server.models import Assignment, MTurkAssignment, MTurkHit, Study
from server.services import app_services

from . import simulated_votes
from .conftest import WorkerClient, make_noisy_scenes
from .instance_support import ENVIRONMENT
from .mturk_support import _assignment, _expect_hit_type, _hit
from .s3_fixture import s3_client, seaweed_s3  # noqa: F401 - the session's SeaweedFS
from .simulated_votes import add_votes

CONSENT = ("--researcher", "Dr T. Est, Test University", "--contact", "test@example.org")
# The pay in round figures (the template's defaults meet the wage floor for pages of 20 comparisons).
SMALL = ("--pairs-per-page", "6", "--votes-per-pair", "3", "--max-pages", "3", "--reward-per-page", "0.50",
         "--bonus-per-page", "0.40", *CONSENT)


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> Path:
    """Two 160x120 scenes of four candidates each: a reference and noisier copies (prepared in about 3 s)."""
    return make_noisy_scenes(tmp_path_factory.mktemp("scenes") / "interp-test", seed=7)


@pytest.fixture
def environment(monkeypatch, seaweed_s3, tmp_path):  # noqa: F811
    """An instance folder in tmp_path, S3 storage on the session's SeaweedFS under a prefix of its own."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweed_s3["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweed_s3["secret_key"])
    monkeypatch.setenv("PERCEPTLAB_STORAGE_BACKEND", "s3")
    monkeypatch.setenv("PERCEPTLAB_STORAGE_BUCKET", seaweed_s3["bucket"])
    monkeypatch.setenv("PERCEPTLAB_STORAGE_ENDPOINT_URL", seaweed_s3["endpoint_url"])
    prefix = f"launch-{tmp_path.name[-12:]}".lower().replace("_", "-")
    monkeypatch.setenv("PERCEPTLAB_STORAGE_PREFIX", prefix)
    monkeypatch.setenv("PERCEPTLAB_INSTANCE", str(tmp_path / "lab"))
    return {**seaweed_s3, "prefix": prefix, "instance": tmp_path / "lab"}


def _run(monkeypatch, client, *args: str, input: str | None = None):
    monkeypatch.setattr(cmd_mturk, "client_factory", lambda live: client)
    return CliRunner().invoke(cli, list(args), input=input)


def _expect_hits(stubber, slug: str, sizes: list[int], create_qual: bool = True) -> None:
    _expect_hit_type(stubber, create_qual=create_qual)
    for i, n in enumerate(sizes):
        stubber.add_response("create_hit_with_hit_type", {"HIT": _hit(f"HIT{i + 1}", f"t{i}", n)}, {
            "HITTypeId": "HT1", "MaxAssignments": n, "LifetimeInSeconds": 7 * 86400,
            "Question": ANY, "RequesterAnnotation": ANY, "UniqueRequestToken": ANY})


def _objects(s3, prefix: str) -> set[str]:
    pages = s3_client(s3["endpoint_url"]).get_paginator("list_objects_v2").paginate(Bucket=s3["bucket"],
                                                                                    Prefix=prefix)
    return {item["Key"] for page in pages for item in page.get("Contents", [])}


def test_launch_prepares_creates_uploads_and_posts_then_results_reconciles_exports_and_analyses(
        monkeypatch, client, environment, scenes, tmp_path):
    s3, lab, slug = environment, environment["instance"], "interp-test"
    _expect_hits(client.stubber, slug, [9, 1])
    result = _run(monkeypatch, client, "launch", str(scenes), "--url", "https://lab.example.org",
                  "--assignments", "10", *SMALL)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "sandbox: 10 assignments in 2 HIT(s)" in out and "= $6.00" in out  # 10 x $0.50 + 20% fee
    assert re.search(r"1/4 stimuli: prepared 2 scene\(s\), 8 candidates, \d+ pairs", out)
    assert f"2/4 study: created '{slug}' from {lab / 'studies' / (slug + '.toml')}" in out
    uploaded = int(re.search(r"3/4 storage: (\d+) uploaded", out).group(1))
    # At least each scene's reference and 4 candidates (and their crops, when a crop covers under half the image).
    assert uploaded >= 2 * (1 + 4) and len(_objects(s3, f"{s3['prefix']}/{slug}/")) == uploaded
    assert "HIT1  9 assignments" in out and "HIT2  1 assignments" in out
    assert f"--instance {lab} results {slug}" in out
    study_file = (lab / "studies" / f"{slug}.toml").read_text()
    assert 'researcher = "Dr T. Est, Test University"' in study_file and "pairs_per_page = 6" in study_file
    assert (lab / "stimuli" / slug / "prepared" / "manifest.json").is_file()

    # The same command again: everything reused, nothing uploaded or posted twice (no create call queued).
    _expect_hit_type(client.stubber, create_qual=False)
    again = _run(monkeypatch, client, "launch", str(scenes), "--url", "https://lab.example.org",
                 "--assignments", "10", *SMALL)
    assert again.exit_code == 0, again.output
    assert "1/4 stimuli: up to date" in again.output
    assert "exists already with these stimuli and settings" in again.output
    assert f"3/4 storage: 0 uploaded (0 B), {uploaded} unchanged" in again.output
    assert re.search(r"launch ID (\S+)", again.output).group(1) == re.search(r"launch ID (\S+)", out).group(1)
    client.stubber.assert_no_pending_responses()

    # Other settings under the same slug are refused, before anything is done.
    changed = _run(monkeypatch, client, "launch", str(scenes), "--url", "https://lab.example.org", *SMALL,
                   "--reward-per-page", "0.60")
    assert changed.exit_code == 2 and "exists already with other settings: reward_per_page '0.50' (now '0.60')" \
        in changed.output

    # Workers take part (one through the MTurk entry of HIT1, a few straight into the database), then results.
    worker_id = _take_part(lab, slug, monkeypatch)
    client.stubber.add_response("get_hit", {"HIT": _hit("HIT1", "t0", 9, "Assignable")}, {"HITId": "HIT1"})
    client.stubber.add_response("list_assignments_for_hit", {"Assignments": [
        {**_assignment(1), "AssignmentId": worker_id[1], "WorkerId": worker_id[0]}]},
        {"HITId": "HIT1", "AssignmentStatuses": ANY, "MaxResults": 100})
    client.stubber.add_response("associate_qualification_with_worker", {}, {
        "QualificationTypeId": "QT-TOOK-PART", "WorkerId": worker_id[0], "IntegerValue": 1,
        "SendNotification": False})
    client.stubber.add_response("get_hit", {"HIT": _hit("HIT2", "t1", 1, "Assignable")}, {"HITId": "HIT2"})
    client.stubber.add_response("list_assignments_for_hit", {"Assignments": []},
                                {"HITId": "HIT2", "AssignmentStatuses": ANY, "MaxResults": 100})
    results = tmp_path / "results"
    result = _run(monkeypatch, client, "results", slug, "--out", str(results), "--bootstrap", "20")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "1/3 MTurk: sandbox: 2 HIT(s), 1 submitted assignment(s) (1 new); owed: rewards $" in out
    assert f"2/3 export -> {results}" in out and "votes.csv:" in out
    assert f"3/3 analysis of votes.csv -> {results / 'analysis'}" in out
    assert re.search(r"^\s+1\s+method_0\s+", out, re.M)  # the least noisy candidate ranks first
    assert "plots (3): analysis/scales.png" in out
    assert {p.name for p in (results / "analysis").iterdir()} >= {"scales.csv", "overall.csv", "scales.png"}
    # The shown images' errors against their references, and each worker's agreement with that machine answer.
    errors = list(csv.DictReader((results / "machine_errors.csv").open()))
    assert "machine_errors.csv: " in out and errors and all(float(r["error"]) > 0 for r in errors)
    assert {r["item_id"] for r in errors} == {r["item_id"] for r in csv.DictReader((results / "analysis" / "scales.csv").open())}
    voted = [r for r in csv.DictReader((results / "analysis" / "workers.csv").open()) if int(r["n_votes"])]
    assert voted and all(0 <= float(r["machine_agreement"]) <= 1 for r in voted)
    with _session(lab) as session:
        linked = session.scalar(select(MTurkAssignment).where(MTurkAssignment.assignment_id == worker_id[1]))
        assert linked.local_assignment_id is not None and linked.status == "Submitted"

    # Offline: no MTurk call at all (nothing is queued on the Stubber).
    offline = _run(monkeypatch, client, "results", slug, "--out", str(tmp_path / "offline"), "--no-mturk",
                   "--bootstrap", "0", "--no-plots", "--top", "3", "--units", "jod")
    assert offline.exit_code == 0 and "1/3 MTurk: skipped (--no-mturk)" in offline.output, offline.output
    assert len(re.findall(r"^\s+\d\s+method_", offline.output, re.M)) == 3
    assert "scales in JOD: a difference of 1 means 75 %" in offline.output
    assert "unit\n" in (tmp_path / "offline" / "analysis" / "scales.csv").read_text().splitlines(True)[0]
    assert (tmp_path / "offline" / "analysis" / "scales.csv").read_text().splitlines()[1].endswith(",jod")


def test_live_launch_shows_the_cost_with_fees_and_asks_first(monkeypatch, client, environment, scenes):
    lab = environment["instance"]
    result = _run(monkeypatch, client, "launch", str(scenes), "--url", "https://lab.example.org", "--live",
                  "--slug", "live-test", "--assignments", "9", *SMALL, input="n\n")
    assert result.exit_code == 1 and "LIVE: 9 assignments in 1 HIT(s)" in result.output
    assert "Post these HITs on the LIVE marketplace for $5.40?" in result.output  # 9 x $0.50 + 20%
    assert not (lab / "stimuli" / "live-test").exists() and not (lab / "studies" / "live-test.toml").exists()
    with _session(lab) as session:
        assert session.scalar(select(Study).where(Study.slug == "live-test")) is None
        assert session.scalar(select(MTurkHit)) is None


def test_launch_errors_are_one_line_and_leave_nothing(monkeypatch, client, environment, scenes, tmp_path):
    lab = environment["instance"]
    cases = [
        (("launch", str(tmp_path / "missing"), "--url", "https://h.org"), "no such folder"),
        (("launch", str(scenes), "--url", "http://h.org"), "must start with https://"),
        (("launch", str(scenes), "--url", "https://h.org", "--slug", "Bad Slug", *CONSENT),
         "study.slug must be 1-64 lowercase letters, digits or '-', got 'Bad Slug'"),
        (("launch", str(scenes), "--url", "https://h.org", "--reward-per-page", "lots", *CONSENT),
         "reward_per_page must be a dollar amount"),
        (("launch", str(scenes), "--url", "https://h.org", "--no-hits"), "researcher"),
    ]
    for args, message in cases:
        result = _run(monkeypatch, client, *args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert not (lab / "stimuli").exists() and not list(lab.glob("studies/*"))


def test_launch_without_hits_uses_a_prepared_folder_as_it_is(monkeypatch, client, environment, demo_stimuli):
    """A folder `perceptlab stimuli prepare` wrote is used where it is; --no-hits makes no MTurk call."""
    lab = environment["instance"]
    result = _run(monkeypatch, client, "launch", str(demo_stimuli / "prepared"), "--url", "https://lab.example.org",
                  "--no-hits", "--slug", "plain", "--title", "Plain links", *SMALL)
    assert result.exit_code == 0, result.output
    assert f"1/4 stimuli: {demo_stimuli / 'prepared'} was prepared already: used as it is" in result.output
    assert "4/4 MTurk: skipped (--no-hits)" in result.output
    assert "worker link: https://lab.example.org/s/plain?participant=ID" in result.output
    assert not (lab / "stimuli" / "plain").exists()
    with _session(lab) as session:
        study = session.scalar(select(Study).where(Study.slug == "plain"))
        assert study.name == "Plain links" and study.stimulus_root == str(demo_stimuli / "prepared")


# ---------------------------------------------------------------- helpers

def _session(instance: Path):
    from server.db import session_scope

    return session_scope(f"sqlite:///{instance / 'perceptlab.db'}", migrate=False)


def _take_part(instance: Path, slug: str, monkeypatch) -> tuple[str, str]:
    """One MTurk worker through the app on the instance (quiz and a page), and honest workers inserted for
    every pair; returns the API worker's (WorkerId, AssignmentId)."""
    from server import create_app

    for k, quality in enumerate([1.5, 0.5, -0.5, -1.5]):  # the less noise, the better
        monkeypatch.setitem(simulated_votes.QUALITY, f"method_{k}", quality)

    app = create_app(load_config(instance=instance), testing=True, entry_limit=0, live_scales_process=False)
    try:
        worker = WorkerClient(app.test_client(), slug)
        worker.start()
        worker.answer_page(worker.correct_side)
        worker.answer_page(worker.correct_side)
        add_votes(app, slug, honest=4, seed=3)
        with app_services(app).sessions() as session:
            external = session.scalar(select(Assignment.external_id).where(
                Assignment.id == int(worker.assignment_id)))
    finally:
        app_services(app).engine.dispose()
    return worker.worker_id, external
