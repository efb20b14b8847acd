"""A worker in chromium loads the study's images from an S3 bucket (SeaweedFS, see
``tests/server/s3_fixture.py``): the app runs with ``[storage] backend = "s3"`` and hands out
presigned URLs; the browser fetches them from the bucket, not from this server."""
from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from server.models import Study
from server.paradigms.paired.models import Trial, Vote
from server.services import app_services
from server.stimulus_index import StimulusIndex
from tests.server.conftest import SMALL_STUDY, create_test_study
from tests.server.s3_fixture import seaweed_s3  # noqa: F401

pytestmark = pytest.mark.timeout(120)

# Every stimulus image on screen: its src and whether it loaded (naturalWidth > 0).
IMAGES_JS = """(selector) => [...document.querySelectorAll(selector)].map(
    (img) => ({src: img.currentSrc || img.src, complete: img.complete, width: img.naturalWidth}))"""
LOADED_JS = """(selector) => { const imgs = [...document.querySelectorAll(selector)];
    return imgs.length > 0 && imgs.every((img) => img.complete && img.naturalWidth > 0); }"""
TRIAL_IMAGES = "#trial img, #reference img"


@pytest.fixture
def s3_config(seaweed_s3, monkeypatch):  # noqa: F811
    """A full configuration with the S3 backend on SeaweedFS; credentials only in the environment."""
    from server.config import load_config

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweed_s3["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweed_s3["secret_key"])
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    config = load_config({"PERCEPTLAB_STORAGE_BACKEND": "s3", "PERCEPTLAB_STORAGE_BUCKET": seaweed_s3["bucket"],
                          "PERCEPTLAB_STORAGE_ENDPOINT_URL": seaweed_s3["endpoint_url"],
                          "PERCEPTLAB_STORAGE_PREFIX": f"browser-{uuid.uuid4().hex[:8]}"})
    return config


@pytest.fixture
def app(database_url, tmp_path, s3_config):
    from server import create_app

    app = create_app(s3_config, database_url=database_url, instance_path=str(tmp_path / "instance"),
                     secret_key="test-secret", testing=True)
    yield app
    app_services(app).engine.dispose()


@pytest.fixture
def study(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    with app_services(app).sessions() as session:
        index = StimulusIndex.build(session, session.scalar(select(Study).where(Study.slug == slug)),
                                    app.config["SECRET_KEY"])
    report = app_services(app).storage.upload_files(index.root, slug, index.paths, progress=False)
    assert report.uploaded and not report.skipped
    return slug


def _assert_from_s3(page, selector: str, prefix: str) -> list[dict]:
    page.wait_for_function(LOADED_JS, arg=selector)
    images = page.evaluate(IMAGES_JS, selector)
    assert images
    for image in images:
        assert image["src"].startswith(prefix), image["src"]
        assert re.fullmatch(r"[0-9a-f]{32}\.png", image["src"][len(prefix):].split("?")[0]), image["src"]  # opaque
        assert "X-Amz-Signature=" in image["src"]
        assert image["complete"] and image["width"] > 0, image
    return images


def test_trial_images_load_from_the_s3_bucket(page, app, live_server, study, seaweed_s3, screenshot):  # noqa: F811
    storage = app_services(app).storage
    prefix = f"{seaweed_s3['endpoint_url']}/{seaweed_s3['bucket']}/{storage.prefix}/{study}/"
    from_s3, from_app = [], []
    page.on("requestfinished", lambda r: (from_s3 if r.url.startswith(prefix) else from_app).append(r.url))

    page.goto(f"{live_server}/s/{study}?assignmentId=A1&hitId=H1&workerId=W1"
              f"&turkSubmitTo=https://workersandbox.mturk.com")
    expect(page.locator("main#consent")).to_be_visible()
    page.check("#agree")
    page.click("#btn-consent")
    expect(page.locator("main#instructions")).to_be_visible()
    _assert_from_s3(page, "main#instructions img", prefix)
    page.click("#btn-start")

    trial = page.locator("#trial")
    expect(trial).to_be_visible()
    expect(trial).to_have_attribute("data-accepting", "true")
    expect(trial).to_have_attribute("data-page-kind", "quiz")
    images = _assert_from_s3(page, TRIAL_IMAGES, prefix)
    screenshot(page, "s3-trial")
    assert len(page.screenshot(full_page=True)) > 10_000  # the bucket's images drawn, not blank boxes

    # A quiz trial: choose its right answer (read from the database: URLs tell nothing), the server says "correct".
    trial_id = trial.get_attribute("data-trial-id")
    with app_services(app).sessions() as session:
        row = session.get(Trial, int(trial_id))
        left = row.pair.stimulus_a_id if row.left_is_a else row.pair.stimulus_b_id
        side = "left" if left == row.pair.gold_winner_id else "right"
    page.click(f"#trial [data-side={side}]")
    expect(page.locator("#feedback")).to_have_attribute("data-kind", "correct")
    expect(page.locator("#pending")).to_have_attribute("data-pending", "0")
    with app_services(app).sessions() as session:
        votes = session.scalars(select(Vote)).all()
        assert [str(v.trial_id) for v in votes] == [trial_id]
    assert len(from_s3) >= len({i["src"] for i in images})
    assert not [url for url in from_app if "/stimuli/" in url], "no stimulus may come from the app server"
