"""The window a study's pages need (server/paradigms/display.py): the pure function, the study file's
[display] policy, what `stimuli prepare`, `study create` and `study show --json` say, the State's
numbers and the entry pages' device check data. The browser's side (the same numbers in display.js,
the trial page at laptop windows, phones at entry) is tests/browser/test_display.py."""
from __future__ import annotations

import json
import re
from html import unescape

import pytest
from click.testing import CliRunner

from server.cli import cli
from server.paradigms import StudyDefinitionError, read_study_file
from server.paradigms.display import (LAPTOP_WINDOW, PHONE_SHORT_SIDE, TABLET_WINDOW, Layout, WindowRequirement,
                                      device_class, layout_window, mobile_user_agent)
from server.paradigms.paired.window import (PC_CHROME, pc_chrome_size, pc_layout, pc_requirement, pc_views,
                                            window_needed)
from server.services import app_services

from .conftest import SMALL_STUDY, WorkerClient, create_test_study, write_study_file

# Window sizes, what the pages state and check: the same numbers on any database.
pytestmark = pytest.mark.one_database
CROP = {"rank": 1, "width": 160, "height": 120, "zoom": 1.5, "display_width": 240, "display_height": 180}
BIG_CROP = {"rank": 2, "width": 512, "height": 384, "zoom": 1.5, "display_width": 768, "display_height": 576}
TEXTS = {"researcher": "Dr T. Est", "contact": "test@example.org"}


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


# ---------------------------------------------------------------- the pure function

def test_views_follow_the_policy():
    # fit: crops at their prepared display size (zoom); pixel_exact: 1:1 like the whole image.
    assert pc_views("fit", 512, 512, [BIG_CROP, CROP]) == [(512, 512), (240, 180), (768, 576)]
    assert pc_views("pixel_exact", 512, 512, [BIG_CROP, CROP]) == [(512, 512), (160, 120), (512, 384)]


def test_window_needed_is_the_panels_three_abreast_at_the_factor_plus_the_chrome():
    extra_w, extra_h = pc_chrome_size(1)
    assert (extra_w, extra_h) == (2 * 8 + 2 * 24 + 2, 45 + 8 + 36 + 8 + 2)
    assert pc_chrome_size(2)[1] == extra_h + PC_CHROME["views"]  # the row of view buttons
    assert window_needed([(512, 512)], 0.5) == (768 + extra_w, 256 + extra_h)
    assert window_needed([(512, 512)], 1.0) == (1536 + extra_w, 512 + extra_h)
    assert window_needed([(512, 512)], 0.5, floor=(1000, 600)) == (1000, 600)
    # A view's width and another's height: the window must hold every view.
    views = [(600, 400), (240, 180), (400, 600)]
    assert window_needed(views, 0.5) == (900 + extra_w, 300 + extra_h + PC_CHROME["views"])
    # pixel_exact on a sharper screen: a third of the pixels in CSS px, rounded up.
    assert window_needed([(512, 512)], 1 / 3) == (512 + extra_w, 171 + extra_h)


def test_a_layout_needs_its_content_at_the_factor_plus_its_chrome():
    layout = Layout(content=(1536, 512), chrome=(66, 99))
    assert layout_window(layout, 0.5) == (768 + 66, 256 + 99)
    assert layout_window(layout, 0.5, floor=(1000, 600)) == (1000, 600)
    assert layout_window(Layout(content=(1536, 512), chrome=(0, 0)), 1 / 3) == (512, 171)  # 170.67 rounded up
    # Paired comparison's views, one at a time: the widest view's three panels and the tallest view decide.
    views = [(600, 400), (240, 180), (400, 600)]
    assert pc_layout(views) == Layout(content=(1800, 600), chrome=pc_chrome_size(3))


def test_ordinary_scenes_fit_a_laptop_under_fit_but_not_pixel_exact():
    sets = [(512, 512, [CROP, BIG_CROP]), (600, 400, [CROP]), (451, 300, [])]
    fit = pc_requirement("fit", 0.5, (1000, 600), sets, names=["a", "b", "c"])
    assert fit.too_large == ()
    assert fit.fits(LAPTOP_WINDOW) and fit.fits((1280, 600)) and fit.policy == "fit"
    assert fit.min_window == (max(1000, 3 * 384 + 66), 600)
    exact = pc_requirement("pixel_exact", 0.5, (1000, 600), sets, names=["a", "b", "c"])
    assert exact.too_large == (("a", (1602, 647)), ("b", (1866, 600)), ("c", (1419, 600)))
    assert exact.min_window == (3 * 600 + 66, 512 + 45 + 36 + 8 + 36 + 8 + 2) and not exact.fits(LAPTOP_WINDOW)
    page = exact.to_page()
    # The entry pages get each geometry as a paradigm-neutral layout (no paired-comparison chrome by name).
    assert page["min_window"] == [1866, 647] and "chrome" not in page and "views" not in page
    assert page["layouts"] == [pc_layout(pc_views("pixel_exact", w, h, boxes)).to_page() for w, h, boxes in sets]
    assert page["layouts"][2] == [3 * 451, 300, 66, 45 + 8 + 36 + 8 + 2]
    assert "pixel_exact" in exact.describe() and "1866 x 647" in exact.describe()


# ---------------------------------------------------------------- the study file

def test_display_policy_is_read_and_checked(demo_stimuli, tmp_path):
    default = read_study_file(write_study_file(tmp_path, demo_stimuli, "default"))
    assert default.policy == "fit"
    exact = read_study_file(write_study_file(tmp_path, demo_stimuli, "exact", display={"policy": "pixel_exact"}))
    assert exact.policy == "pixel_exact"
    with pytest.raises(StudyDefinitionError, match=r"display\.policy must be 'fit' or 'pixel_exact', got 'exact'"):
        read_study_file(write_study_file(tmp_path, demo_stimuli, "bad", display={"policy": "exact"}))
    template = _cli("study", "template").output
    assert 'policy = "fit"' in template and "pixel_exact" in template and "--allow-large-window" in template


# ---------------------------------------------------------------- the commands

def test_study_create_states_the_window_refuses_a_large_one_and_show_json_reports_it(demo_stimuli, tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    ok = write_study_file(tmp_path, demo_stimuli, "fits", texts=TEXTS)
    created = _cli("study", "create", ok, "--database-url", url)
    assert created.exit_code == 0, created.output
    stated = re.search(r"window needed: (\d+) x (\d+) CSS px \(fit", created.output)
    assert stated and "fits a 1366 x 657 laptop window" in created.output
    shown = _cli("study", "show", "fits", "--json", "--database-url", url)
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    assert data["display"]["min_window"] == [int(stated[1]), int(stated[2])]
    assert data["display"]["policy"] == "fit" and data["display"]["fits_laptop"] is True
    assert data["slug"] == "fits" and data["kind"] == "pc" and "consent" not in data["settings"]
    assert "window needed:" in _cli("study", "show", "fits", "--database-url", url).output

    # A floor above the laptop's window (or images that need one): refused in one line, nothing stored.
    large = write_study_file(tmp_path, demo_stimuli, "large", texts=TEXTS, display={"min_window_width": 1400})
    refused = _cli("study", "create", large, "--database-url", url)
    assert refused.exit_code == 2, refused.output
    assert "at least 1400 x 600 CSS px" in refused.output and "--allow-large-window" in refused.output
    assert "no study 'large'" in _cli("study", "show", "large", "--database-url", url).output
    allowed = _cli("study", "create", large, "--allow-large-window", "--database-url", url)
    assert allowed.exit_code == 0, allowed.output
    assert "window needed: 1400 x 600 CSS px" in allowed.output and "LARGER than a 1366 x 657" in allowed.output
    assert json.loads(_cli("study", "show", "large", "--json", "--database-url", url).output)["display"] == {
        "policy": "fit", "min_window": [1400, 600], "needs_mouse": False, "laptop_window": [1366, 657],
        "fits_laptop": False}
    assert json.loads(_cli("study", "show", "large", "--json", "--database-url", url).output)["devices"] == ["desktop"]


def test_prepare_prints_the_window_of_each_policy(tmp_path, demo_stimuli):
    from stimuli.demo import SCENES_DIR

    scene = sorted(p for p in (demo_stimuli / SCENES_DIR).iterdir() if p.is_dir())[0]
    result = _cli("stimuli", "prepare", scene, "--out", tmp_path / "prepared", "--gold-pairs", "0")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "window needed:" in line]
    assert len(lines) == 2 and '"fit"' in lines[0] and '"pixel_exact"' in lines[1]


# ---------------------------------------------------------------- State and entry pages

def test_state_sends_the_numbers_the_trial_page_computes_the_window_from(app, study):
    from server.paradigms import paradigm_named

    worker = WorkerClient(app.test_client(), study, worker_id="D1", platform="link")
    worker.start()
    state = worker.state()
    assert state["display"] == {"policy": "fit", "min_image_scale": 0.5, "floor": [1000, 600], "chrome": PC_CHROME}
    with app_services(app).sessions() as session:
        from sqlalchemy import select

        from server.models import Study
        from server.paradigms.paired.models import StudySet
        study_row = session.scalar(select(Study).where(Study.slug == study))
        set_views = [[list(v) for v in pc_views("fit", s.image_width, s.image_height, s.crops["boxes"])]
                     for s in session.scalars(select(StudySet).where(StudySet.study_id == study_row.id))]
        requirement = paradigm_named("pc").window_requirement(session, study_row)
    for trial in state["page"]["trials"]:
        assert trial["views"] in set_views  # the set's views (the demo's sets are one size, their crops differ)
        assert trial["views"][0] == [trial["reference"]["width"], trial["reference"]["height"]]
        need = window_needed(trial["views"], 0.5, (1000, 600))
        assert need[0] <= requirement.min_window[0] and need[1] <= requirement.min_window[1]
    assert isinstance(requirement, WindowRequirement) and requirement.fits()


def _requirement_of_page(html: str) -> dict:
    found = re.search(r"data-requirement='([^']*)'", html)
    assert found, "no device check on the page"
    return json.loads(unescape(found[1]))


def test_entry_pages_state_and_check_the_requirement_before_consent(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, "exact", display={"policy": "pixel_exact"}, **SMALL_STUDY)
    client = app.test_client()
    preview = client.get(f"/s/{slug}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1").get_data(as_text=True)
    consent = client.get(f"/s/{slug}?participant=E1", follow_redirects=True).get_data(as_text=True)
    for html, where in ((preview, "preview"), (consent, "consent")):
        requirement = _requirement_of_page(html)
        w, h = requirement["min_window"]
        assert requirement["policy"] == "pixel_exact" and requirement["layouts"]
        assert f'data-where="{where}"' in html
        assert re.search(rf"window of at least\s+<strong>{w} &times; {h} pixels</strong>", html)
        assert "1000 &times; 600" not in html or (w, h) == (1000, 600)
    assert 'id="consent"' in consent and "<form data-needs-device" in consent
    assert 'data-platform="link"' in consent


# ---------------------------------------------------------------- the device rule

def test_the_device_classes_a_study_admits_follow_its_window():
    assert WindowRequirement(min_window=(1366, 657)).devices() == ("desktop",)
    assert WindowRequirement(min_window=(1000, 600)).devices() == ("desktop", "tablet")
    assert WindowRequirement(min_window=TABLET_WINDOW).devices() == ("desktop", "tablet")
    assert WindowRequirement(min_window=(1025, 600)).devices() == ("desktop",)
    assert WindowRequirement(min_window=(360, 560)).devices() == ("desktop", "tablet", "phone")
    assert WindowRequirement(min_window=(390, 560)).devices() == ("desktop", "tablet")
    assert WindowRequirement(min_window=(360, 480), needs_mouse=True).devices() == ("desktop",)
    # A [viewing] check that draws the card at its real size (85.6 mm): wider than any phone, fine on a tablet.
    assert WindowRequirement(min_window=(360, 480), needs_card=True).devices() == ("desktop", "tablet")


def test_a_device_is_classed_by_its_input_and_its_screen():
    iphone = {"User-Agent": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148 Safari/604.1"}
    android_tablet = {"User-Agent": "Mozilla/5.0 (Linux; Android 14; SM-X710) Chrome/120.0 Safari/537.36"}
    mac = {"User-Agent": "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) Safari/605.1.15"}
    assert mobile_user_agent(iphone) and mobile_user_agent(android_tablet) and not mobile_user_agent(mac)
    assert mobile_user_agent({**mac, "Sec-CH-UA-Mobile": "?1"}) and not mobile_user_agent({})
    assert device_class(False, False, (390, 844)) == "desktop"      # a small desktop window is a desktop
    assert device_class(True, False, (390, 844)) == "phone"
    assert device_class(True, False, (844, 390)) == "phone"         # in landscape too
    assert device_class(True, False, (1366, 1000)) == "tablet"
    assert device_class(False, True, (1024, 1366)) == "tablet"      # iPadOS posing as a Mac: touch only
    assert device_class(True, True, (PHONE_SHORT_SIDE, 960)) == "tablet"
    assert device_class(True, True, (PHONE_SHORT_SIDE - 1, 960)) == "phone"


# The study's [display] window -> the classes it admits (the demo's images, at min_image_scale 0.2, need less
# than each floor).
DEVICE_STUDIES = {"desk": ((1300, 680), ("desktop",)), "tab": ((1000, 600), ("desktop", "tablet")),
                  "any": ((360, 560), ("desktop", "tablet", "phone")),
                  # the same window with the acuity check: its card does not fit a phone (sections.needs_card)
                  "card": ((360, 560), ("desktop", "tablet"))}


def test_prolific_study_show_and_the_entry_pages_admit_the_same_devices(app, database_url, demo_stimuli, tmp_path):
    from server.prolific import devices as prolific_devices

    client = app.test_client()
    for slug, ((width, height), admitted) in DEVICE_STUDIES.items():
        checks = {"viewing": {"checks": ["brightness", "acuity"]}} if slug == "card" else {}
        create_test_study(app, demo_stimuli, tmp_path, slug, **SMALL_STUDY, display={
            "min_window_width": width, "min_window_height": height, "min_image_scale": 0.2}, **checks)
        shown = json.loads(_cli("study", "show", slug, "--json", "--database-url", database_url).output)
        assert shown["display"]["min_window"] == [width, height]
        assert tuple(shown["devices"]) == admitted
        assert f"devices admitted: {', '.join(admitted)}" in _cli("study", "show", slug, "--database-url",
                                                                  database_url).output
        with app_services(app).sessions() as session:
            from sqlalchemy import select

            from server.models import Study
            from server.paradigms import paradigm_for
            study_row = session.scalar(select(Study).where(Study.slug == slug))
            requirement = paradigm_for(study_row).window_requirement(session, study_row)
        assert prolific_devices(requirement) == tuple("mobile" if d == "phone" else d for d in admitted)
        consent = client.get(f"/s/{slug}?participant=D-{slug}", follow_redirects=True).get_data(as_text=True)
        assert tuple(_requirement_of_page(consent)["devices"]) == admitted
        if slug == "card":  # the checks come before consent, and check the device first
            assert 'id="viewing"' in consent
            continue
        stated = {1: "a computer (no phone or tablet)", 2: "a computer or a tablet (no phone)",
                  3: "a computer, a tablet or a phone"}[len(admitted)]
        assert stated in consent


def test_the_entry_pages_carry_the_servers_verdict_on_the_user_agent(app, study):
    client = app.test_client()
    rules = {}
    for name, agent in (("ipad", "Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) Mobile/15E148 Safari/604.1"),
                        ("desktop", "Mozilla/5.0 (X11; Linux x86_64) Chrome/120.0 Safari/537.36")):
        html = client.get(f"/s/{study}?participant=U-{name}", follow_redirects=True,
                          headers={"User-Agent": agent}).get_data(as_text=True)
        rules[name] = _requirement_of_page(html)
    assert rules["ipad"]["mobile_ua"] is True and rules["desktop"]["mobile_ua"] is False
    assert rules["ipad"]["phone_short_side"] == PHONE_SHORT_SIDE


def test_a_paradigm_packages_browser_code_is_served_under_its_kind(app):
    client = app.test_client()
    served = client.get("/static/paradigms/pc/window.js")
    assert served.status_code == 200 and served.mimetype == "text/javascript"
    assert b"export function windowNeeded" in served.data
    # The shared scripts import it relative to their own folder: /static/js/../paradigms/pc/window.js.
    assert b"from '../paradigms/pc/window.js'" in client.get("/static/js/pc_trial.js").data
    for missing in ("/static/paradigms/pc/nothing.js", "/static/paradigms/nokind/window.js",
                    "/static/paradigms/pc/..%2Fwindow.py", "/static/paradigms/motion/window.js"):
        assert client.get(missing).status_code == 404, missing
