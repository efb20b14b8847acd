"""What `launch` lets the researcher choose and what it says (original or amplified stimuli, the crops, the serve
line), and what the worker is told at the end of a page (whether another page exists)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from server.cli import cli
from server.cli.cmd_launch import serve_options
from server.models import Study
from server.paradigms.paired.models import Pair, Stimulus, StudySet
from server.paradigms.paired.study import default_instructions
from server.services import app_services

from .conftest import WorkerClient, make_noisy_scenes

# What launch writes and says: its commands run on their own SQLite instance, the page-end text on any database.
pytestmark = pytest.mark.one_database
CONSENT = ("--researcher", "Dr T. Est, Test University", "--contact", "test@example.org")


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> Path:
    """Two 160x120 scenes of four candidates, each noisier over the right two thirds of the frame."""
    return make_noisy_scenes(tmp_path_factory.mktemp("scenes") / "choices", seed=11)


def _study(instance: Path, slug: str):
    """The study's configuration, its stimuli's full-image paths, and the instructions its workers read."""
    from server.db import session_scope
    from server.paradigms import paradigm_for, spec_from_config

    with session_scope(f"sqlite:///{instance / 'perceptlab.db'}", migrate=False) as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        fulls = session.scalars(select(Stimulus.full).join(StudySet).where(StudySet.study_id == study.id)).all()
        shown = paradigm_for(study).instructions(session, study, spec_from_config(study.config))
        return dict(study.config), list(fulls), shown


def test_launch_passes_the_stimulus_and_the_preparation_through(instance, scenes):
    result = CliRunner().invoke(cli, ["launch", str(scenes), "--url", "http://127.0.0.1:5077", "--no-hits",
                                      "--stimulus", "original", "--top-k", "0", "--alpha", "1.8", "--zoom", "2",
                                      *CONSENT])
    assert result.exit_code == 0, result.output
    # The serve line makes the server answer where --url says (it lacked the port).
    assert "serve --port 5077" in result.output
    assert "preview:     http://127.0.0.1:5077/s/choices?pilot=" in result.output
    manifest = json.loads((instance / "stimuli" / "choices" / "prepared" / "scene_0" / "manifest.json").read_text())
    assert manifest["crops"] == [] and manifest["reference"]["crops"] == []
    assert (manifest["parameters"]["top_k"], manifest["parameters"]["alpha"], manifest["parameters"]["zoom"]) \
        == (0, 1.8, 2.0)
    config, fulls, shown = _study(instance, "choices")
    assert config["stimulus"] == "original" and all("/original/" in f or "/gold/" in f for f in fulls)
    assert not any("/amplified/" in f for f in fulls)
    # The instructions neither claim amplified differences nor point at crops that do not exist.
    assert shown == default_instructions("original", crops=False)
    assert "amplified" not in shown and "crops" not in shown

    # The same command again reuses what it made; another preparation of the same slug is refused.
    again = CliRunner().invoke(cli, ["launch", str(scenes), "--url", "http://127.0.0.1:5077", "--no-hits",
                                     "--stimulus", "original", "--top-k", "0", "--alpha", "1.8", "--zoom", "2",
                                     *CONSENT])
    assert again.exit_code == 0 and "up to date" in again.output, again.output
    changed = CliRunner().invoke(cli, ["launch", str(scenes), "--url", "http://127.0.0.1:5077", "--no-hits",
                                       "--stimulus", "original", "--top-k", "2", *CONSENT])
    assert changed.exit_code == 2 and "never replaced" in changed.output


def test_launch_defaults_show_amplified_images_and_say_so(instance, scenes):
    result = CliRunner().invoke(cli, ["launch", str(scenes), "--url", "https://lab.example.org", "--no-hits",
                                      "--slug", "amp", *CONSENT])
    assert result.exit_code == 0, result.output
    assert "serve   (or gunicorn" in result.output  # a public URL on its scheme's port: behind a proxy
    config, fulls, shown = _study(instance, "amp")
    assert config["stimulus"] == "amplified" and any("/amplified/" in f for f in fulls)
    assert "amplified so they are easier to see" in shown
    # These scenes are noisy over two thirds of the frame: the only crop would cover it all, and is not offered.
    manifest = json.loads((instance / "stimuli" / "amp" / "prepared" / "scene_0" / "manifest.json").read_text())
    assert manifest["crops"] == []
    assert "crops" not in shown


def test_prepare_accepts_top_k_zero_and_refuses_negative(scenes, tmp_path):
    refused = CliRunner().invoke(cli, ["stimuli", "prepare", str(scenes / "scene_0"), "--out", str(tmp_path / "a"),
                                       "--top-k", "-1"])
    assert refused.exit_code == 2 and "top_k must be >= 0 (0: no crops)" in refused.output


@pytest.mark.parametrize(("url", "options"), [
    ("http://127.0.0.1:5077", "--port 5077"), ("http://localhost", "--port 80"),
    ("http://127.0.0.2:8000/", "--host 127.0.0.2 --port 8000"), ("https://lab.example.org", ""),
    ("https://lab.example.org:8443", "--port 8443")])
def test_the_serve_line_answers_at_the_url(url, options):
    assert serve_options(url) == options


def test_instructions_follow_the_stimulus_and_the_crops():
    assert "amplified" in default_instructions("amplified") and "crops" in default_instructions("amplified")
    assert "amplified" not in default_instructions("original") and "crops" in default_instructions("original")
    assert "crops" not in default_instructions("amplified", crops=False)


def test_page_done_says_whether_another_page_exists(app, study):
    worker = WorkerClient(app.test_client(), study, worker_id="WNEXT1")
    worker.start()
    worker.answer_page(worker.correct_side)  # quiz
    assert "next_page" not in worker.state()["progress"]
    body = worker.answer_page(worker.correct_side)
    assert body["stage"] == "page_done"
    assert worker.state()["progress"]["next_page"] is True
    # Every pair filled by others: "continue" would find nothing, and the state says so.
    with app_services(app).sessions() as session:
        session.execute(update(Pair).values(n_votes=Pair.target_votes))
        session.commit()
    assert worker.state()["progress"]["next_page"] is False
    assert worker.action("finish").json["stage"] == "completed"
