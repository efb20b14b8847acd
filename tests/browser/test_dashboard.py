"""The experimenter dashboard in chromium: log in, watch votes arrive without reloading."""
from __future__ import annotations

import re

from playwright.sync_api import expect
from sqlalchemy import select

from server import auth
from server.paradigms.paired import live_scales
from server.models import Study
from server.services import app_services
from tests.server.conftest import WorkerClient
from tests.server.simulated_votes import add_votes

PASSWORD = "correct horse battery"


def _add_user(app) -> None:
    with app_services(app).sessions() as session:
        auth.create_user(session, "alice", PASSWORD)
        session.commit()


def _log_in_to(page, live_server: str, path: str) -> None:
    """Log in as alice from the login page that leads on to ``path``."""
    page.goto(f"{live_server}/admin/login?next={path}")
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{live_server}{path}")


def _vote_one_page(app, study: str, worker_id: str) -> None:
    """Quiz and one page of trials over the API (3 quiz votes, 5 real ones and a hidden gold: 9 votes of design
    pairs, the demo's gold pairs being design pairs)."""
    worker = WorkerClient(app.test_client(), study, worker_id=worker_id)
    worker.start()
    worker.answer_page(worker.correct_side)
    worker.answer_page(worker.correct_side)


def test_logged_out_visitor_is_sent_to_login(page, live_server, study, screenshot):
    page.goto(f"{live_server}/admin/studies/{study}")
    expect(page).to_have_url(re.compile(r"/admin/login\?next=/admin/studies/demo$"))
    expect(page.get_by_role("heading", name="Experimenter log in")).to_be_visible()
    expect(page.locator("#dashboard")).to_have_count(0)
    screenshot(page, "login")


def test_login_and_live_vote_count(page, app, live_server, study, screenshot):
    _add_user(app)
    # Keep the test short: the page polls every second (default 5 s), and the running estimate may be
    # recomputed on demand once it is a second old (default: the background interval, 20 s).
    app.config["SERVER"].update(dashboard_refresh_seconds=1, live_scales_interval=1, live_scales_bootstrap=50)
    page.goto(f"{live_server}/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login"))
    page.fill("#username", "alice")
    page.fill("#password", "not it")
    page.click("button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("Wrong username or password")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{live_server}/admin/")
    expect(page.locator("#studies")).to_contain_text("Test study")
    screenshot(page, "studies")

    page.click("a.study-link")
    expect(page).to_have_url(f"{live_server}/admin/studies/{study}")
    expect(page.locator("#n-votes")).to_have_text("0")
    expect(page.locator("#fill-table tbody tr")).to_have_count(4)
    expect(page.locator("#design-sampling")).to_have_text("random regular design")
    expect(page.locator("#design-gain")).to_have_text("")
    # Pay and time: before anyone is paid, the reward ($0.50) at the time estimate (6 comparisons x 15 s
    # + 105 s of setup) pays $9.23/h, below the default floor of $12/h.
    expect(page.locator("#time-estimate")).to_contain_text("about 2 minutes per page of 6 comparisons")
    expect(page.locator("#wage-warning")).to_contain_text("estimated wage is $9.23/h")
    expect(page.locator("#median-wage")).to_have_text("–")
    page.evaluate("window.__noReload = true")  # gone if the page reloads

    # Waits for the page's polling and the server's estimate: generous limits for a loaded machine
    # (an expectation returns as soon as it holds).
    _vote_one_page(app, study, "BROWSERW1")
    expect(page.locator("#n-votes")).to_have_text("9", timeout=30_000)
    _vote_one_page(app, study, "BROWSERW2")
    expect(page.locator("#n-votes")).to_have_text("18", timeout=30_000)
    expect(page.locator("#n-workers")).to_have_text("2")
    expect(page.locator("#workers-table tbody tr")).to_have_count(2)
    # The running estimate appears by itself (the summary starts it): every set, a chart where votes are.
    expect(page.locator("#scales-status")).to_contain_text("from 18 votes", timeout=30_000)
    # The intervals name their method, level and resamples (the snapshot's "intervals", as in summary.json).
    expect(page.locator("#scales-status")).to_contain_text("95% t intervals")
    expect(page.locator("#scales-status")).to_contain_text("from 50 worker resamples")
    expect(page.locator("#scale-sets article.scale-set")).to_have_count(4)
    assert page.locator("#scale-sets svg.chart").count() >= 1
    assert page.evaluate("window.__noReload") is True
    assert "BROWSERW1" not in page.locator("#workers-table").inner_text()
    screenshot(page, "study")

    page.check("#raw-ids")
    expect(page.locator("#workers-table")).to_contain_text("BROWSERW1")
    assert page.get_attribute("#download-votes", "href").endswith("?raw_worker_ids=1")
    screenshot(page, "raw-ids")

    page.click("#pause-form button")
    expect(page.locator("#study-status")).to_have_text("paused")
    expect(page.locator("#resume-form button")).to_be_visible()
    page.click("#resume-form button")
    expect(page.locator("#study-status")).to_have_text("active")
    live_scales.wait_for_refreshes(app)


def test_active_study_shows_its_design_phase_and_expected_gain(page, app, live_server, demo_stimuli, tmp_path,
                                                               screenshot):
    """An active study's Design card names the sampling and its phase, and once the warm-up is over, the
    precision the next chosen pairs should add beside that of as many random pairs."""
    from tests.server.conftest import create_test_study
    from tests.server.allocation_support import work

    slug = create_test_study(app, demo_stimuli, tmp_path, slug="active", design={
        "degree": 2, "votes_per_pair": 3, "sampling": "active", "warmup_votes_per_pair": 1},
        pages={"pairs_per_page": 20, "min_pages": 1, "max_pages": 3}, quality={"quiz_size": 0, "gold_rate": 0.1})
    _add_user(app)
    app.config["SERVER"].update(dashboard_refresh_seconds=1, live_scales_interval=1, live_scales_bootstrap=20)
    _log_in_to(page, live_server, f"/admin/studies/{slug}")
    # 4 x 55 candidate pairs; the budget is the regular design's: 3 votes x 11 pairs x 4 sets.
    expect(page.locator("#n-pairs")).to_have_text("220")
    expect(page.locator("#target-votes")).to_have_text("132")
    sampling = page.locator("#design-sampling")
    expect(sampling).to_have_text("active sampling, warm-up (4 of 4 sets)")
    expect(sampling).to_have_attribute("data-phase", "warm-up")
    expect(page.locator("#design-gain")).to_have_text("warm-up: 1 vote per design pair first")
    screenshot(page, "active-warmup")

    work(WorkerClient(app.test_client(), slug), pages=3)  # 54 votes: the warm-up (44) and 10 chosen
    expect(sampling).to_have_text("active sampling, active phase", timeout=30_000)
    expect(sampling).to_have_attribute("data-phase", "active")
    gain = page.locator("#design-gain")
    expect(gain).to_contain_text(re.compile(r"next \d+ votes: \+\d+% precision \(random pairs: \+\d+%\)"))
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    screenshot(page, "active-phase")
    live_scales.wait_for_refreshes(app)


def test_workers_with_a_targeted_bias_are_shown_excluded_with_the_item(page, app, live_server, study, screenshot):
    """Two workers answer like the honest ones except that they always pick the worst method: the
    workers table says they were excluded and for which item, and the scales' status counts them."""
    _add_user(app)
    ids = add_votes(app, study, honest=8, biased=2)
    with app_services(app).sessions() as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == study))
        live_scales.compute_snapshot(session, study_id, bootstrap=20, seed=0)
    page.goto(f"{live_server}/admin/login")
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    page.goto(f"{live_server}/admin/studies/{study}")
    page.check("#raw-ids")
    for worker_id in ids[8:]:
        cell = page.locator(f"#workers-table tbody tr:has-text('{worker_id}') td").last
        expect(cell).to_have_text("excluded (favours zero_flow)")
        expect(cell.locator("span")).to_have_attribute("title", "favours:zero_flow")
    expect(page.locator("#workers-table tbody tr:has-text('SIM0X000') td").last).to_have_text("kept")
    expect(page.locator("#scales-status")).to_contain_text(
        "Screening kept 8 of 10 workers (80% of the votes); 2 favoured or disfavoured one item and are left out.")
    screenshot(page, "targeted-bias")


def test_the_study_page_shows_the_viewing_checks(page, app, live_server, demo_stimuli, tmp_path, screenshot):
    """A study with [viewing] checks: its page counts the workers who passed and failed each check, with the
    median distance measured and the logMAR the Cs tested (server/paradigms/viewing.py dashboard_summary)."""
    from tests.server.conftest import SMALL_STUDY, create_test_study
    from tests.server.viewing_support import ALL_CHECKS, Viewer

    slug = create_test_study(app, demo_stimuli, tmp_path, slug="viewed", **SMALL_STUDY,
                             viewing={"checks": ALL_CHECKS})
    client = app.test_client()
    for distance in (58.0, 64.0):  # two workers pass everything, at 58 and 64 cm
        worker = Viewer(app, client, slug)
        for check in ("brightness", "colour"):
            assert worker.answer(check, worker.truth(check)).json["passed"]
        assert worker.screen(distance).json == {"accepted": True}
        assert worker.answer("acuity", worker.truth("acuity")).json["passed"]
    careless = Viewer(app, client, slug)  # one miscounts the shapes, and is turned away there
    assert not careless.answer("brightness", [(n + 1) % 7 for n in careless.truth("brightness")]).json["passed"]

    _add_user(app)
    page.set_viewport_size({"width": 1280, "height": 600})
    _log_in_to(page, live_server, f"/admin/studies/{slug}")
    panel = page.locator("#viewing-panel")
    expect(panel.get_by_role("heading", name="Viewing checks")).to_be_visible()
    expect(page.locator("#viewing-summary")).to_contain_text("3 workers took the checks (before consent), 2 passed")
    expect(page.locator("#viewing-median-distance")).to_have_text("61 cm")
    expect(page.locator("#viewing-median-logmar")).to_have_text(re.compile(r"^0\.\d\d logMAR$"))
    rows = page.locator("#viewing-checks tbody tr")
    expect(rows).to_have_count(4)
    expected = {"brightness": ("2", "1"), "colour": ("2", "0"), "distance": ("2", "0"), "acuity": ("2", "0")}
    for check, (passed, failed) in expected.items():
        row = page.locator(f"#viewing-checks tr[data-check={check}]")
        expect(row.locator(".passed")).to_have_text(passed)
        expect(row.locator(".failed")).to_have_text(failed)
    panel.scroll_into_view_if_needed()
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    screenshot(page, "viewing-checks")
