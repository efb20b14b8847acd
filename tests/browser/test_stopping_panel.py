"""The study page's Stopping rule panel (server/stopping.py) in chromium: the target, each set's standing, what
is still needed, and the decision once a cap is reached, shown after the panel's Check now button."""
from __future__ import annotations

import re

from playwright.sync_api import expect
from sqlalchemy import select

from server import auth
from server.models import Study
from server.paradigms.paired import live_scales
from server.services import app_services
from tests.server.conftest import SMALL_STUDY, create_test_study
from tests.server.simulated_votes import add_votes

PASSWORD = "correct horse battery"


def test_the_stopping_panel_shows_the_target_and_the_decision(page, app, live_server, demo_stimuli, tmp_path,
                                                              screenshot):
    app.config["SERVER"]["live_scales_bootstrap"] = 40
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="stopper",
                             stopping={"halfwidth": 0.01, "quantile": 0.9, "max_votes": 400}, **SMALL_STUDY)
    with app_services(app).sessions() as session:
        auth.create_user(session, "alice", PASSWORD)
        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        session.commit()
    add_votes(app, slug, honest=3, seed=2, pairs_per_worker=60)
    live_scales.refresh_if_stale(app, study_id)  # the live re-analysis, which checks [stopping]
    page.goto(f"{live_server}/admin/login?next=/admin/studies/{slug}")
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{live_server}/admin/studies/{slug}")
    panel = page.locator("#stopping-panel")
    expect(panel.get_by_role("heading", name="Stopping rule")).to_be_visible()
    expect(page.locator("#stopping-decision")).to_have_text("Still recruiting.")
    expect(page.locator("#stopping-target")).to_contain_text("half-width at most 0.01 JOD")  # [stopping] units
    expect(page.locator("#stopping-sets thead")).to_contain_text("Half-width at the quantile (JOD)")
    # Each worker's 60 real votes and 4 gold ones: votes of design pairs (the demo's gold pairs are design pairs).
    expect(page.locator("#stopping-target")).to_contain_text(f"{3 * (60 + 4)} / 400 responses")
    expect(page.locator("#stopping-sets tbody tr")).to_have_count(4)
    expect(page.locator("#stopping-projection .projection-responses")).to_contain_text(
        re.compile(r"\d+ responses \(\d+–\d+\)"))
    screenshot(page, "stopping-recruiting")

    add_votes(app, slug, honest=4, seed=3, pairs_per_worker=60, prefix="MORE")
    page.click("#check-stopping-form button")
    expect(page.locator("#stopping-decision")).to_contain_text("Stopped taking new participants")
    expect(page.locator("#stopping-decision")).to_contain_text("the response cap is reached (448 of 400)")
    expect(page.locator("#study-status")).to_have_text("stopped")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    screenshot(page, "stopping-stopped")
