"""A researcher's own images on real screens (issue 28, "display that is faithful and fits").

Three scikit-image scenes of different sizes (astronaut 512x512, coffee 600x400, chelsea 451x300),
each with JPEG, blur and noise versions, go through ``perceptlab launch SCENES --no-hits`` with its
defaults ([display] policy = "fit"). A worker at 1366x657 and one at 1280x600 walk the entry page,
consent, instructions, quiz and a whole page of trials in chromium: every view of every trial is in
the window at a scale >= min_image_scale, and none is blocked. The same stimuli under
``policy = "pixel_exact"``: ``study create`` states the window needed (and refuses it without
--allow-large-window); a worker whose window is smaller, or on a phone, is told at entry, before
consent; a large window shows the images one image pixel per device pixel.

Screenshots go to $PERCEPTLAB_SCREENSHOTS (the screenshot fixture).
"""
from __future__ import annotations

import io
import json
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from playwright.sync_api import expect
from sqlalchemy import func, select

from server.cli import cli
from server.models import Assignment
from server.paradigms.paired.models import Vote
from server.paradigms.display import LAPTOP_WINDOW
from server.paradigms.paired.window import PC_CHROME, pc_layout, pc_requirement, pc_views, window_needed
from server.services import app_services
from tests.server.conftest import gold_side, make_test_app

pytestmark = pytest.mark.timeout(600)

CONSENT = ("--researcher", "Dr T. Est, Test University", "--contact", "test@example.org")
SLUG = "own-scenes"
PIXEL_SLUG = "own-scenes-exact"
HITS = {SLUG: "H1", PIXEL_SLUG: "H2"}  # one HIT of each study (hit IDs are unique across studies)
# What could point the CLI at another instance, database or storage than the test's.
ENVIRONMENT = ("PERCEPTLAB_INSTANCE", "PERCEPTLAB_DATABASE_URL", "PERCEPTLAB_SECRET_KEY", "PERCEPTLAB_CONFIG",
               "PERCEPTLAB_SERVER_INSTANCE_PATH", "PERCEPTLAB_SERVER_DATABASE_URL", "PERCEPTLAB_STORAGE_BACKEND")
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True, "device_scale_factor": 3,
         "user_agent": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
                       "Gecko) Version/17.0 Mobile/15E148 Safari/604.1"}
TABLET = {"viewport": {"width": 1366, "height": 1000}, "has_touch": True, "device_scale_factor": 2,
          "user_agent": "Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
                        "Version/17.0 Mobile/15E148 Safari/604.1"}

# Where the images of the view on screen are, against the window, and at which scale.
VIEW_JS = """() => {
  const trial = document.querySelector('#trial');
  const plugin = window.assignmentDriver.plugin;
  const view = Number(trial.dataset.view);
  const [panelWidth, panelHeight] = plugin.trial.views[view];
  const images = [...trial.querySelectorAll('img')].filter((img) => !img.hidden).map((img) => {
    const b = img.getBoundingClientRect();
    return {alt: img.alt, left: b.left, top: b.top, right: b.right, bottom: b.bottom, width: b.width,
            height: b.height, natural: img.naturalWidth, loaded: img.complete && img.naturalWidth > 0};
  });
  return {trialId: trial.dataset.trialId, view, nViews: plugin.trial.views.length, panelWidth, panelHeight,
          scale: Number(trial.dataset.scale), images, innerWidth, innerHeight, dpr: devicePixelRatio,
          scrollWidth: document.documentElement.scrollWidth, scrollHeight: document.documentElement.scrollHeight,
          tooSmall: !document.querySelector('#window-too-small').hidden, referenceWidth: plugin.trial.reference.width};
}"""


def _make_scenes(root: Path) -> Path:
    """Three scenes from scikit-image's data, each a reference and its JPEG (q 15), blurred (sigma 2) and
    noisy (sigma 12) versions."""
    import skimage.data
    from PIL import Image
    from scipy.ndimage import gaussian_filter

    from stimuli.io import write_png

    rng = np.random.default_rng(28)
    images = {"astronaut": skimage.data.astronaut(), "coffee": skimage.data.coffee(), "chelsea": skimage.data.chelsea()}
    for name, reference in images.items():
        folder = root / name
        folder.mkdir(parents=True)
        write_png(folder / "reference.png", reference)
        buffer = io.BytesIO()
        Image.fromarray(reference).save(buffer, "JPEG", quality=15)
        write_png(folder / "jpeg.png", np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")))
        write_png(folder / "blur.png", np.clip(gaussian_filter(reference.astype(float), (2, 2, 0)), 0, 255)
                  .astype(np.uint8))
        write_png(folder / "noise.png", np.clip(reference + rng.normal(0, 12, reference.shape), 0, 255)
                  .astype(np.uint8))
    return root


@pytest.fixture(scope="module")
def lab(tmp_path_factory, sqlite_template):
    """``perceptlab launch SCENES --no-hits`` (defaults: fit) and a pixel_exact study of the same stimuli made
    with ``study create``, in one instance and database, served over HTTP."""
    from werkzeug.serving import make_server

    folder = tmp_path_factory.mktemp("display-lab")
    scenes = _make_scenes(folder / SLUG)
    database = folder / "perceptlab.db"
    shutil.copyfile(sqlite_template, database)
    url = f"sqlite:///{database}"
    outputs = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in ENVIRONMENT:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("PERCEPTLAB_INSTANCE", str(folder / "lab"))
        runner = CliRunner()
        launched = runner.invoke(cli, ["launch", str(scenes), "--url", "http://127.0.0.1:5077", "--no-hits",
                                       *CONSENT, "--database-url", url])
        assert launched.exit_code == 0, launched.output
        outputs["launch"] = launched.output
        manifest = folder / "lab" / "stimuli" / SLUG / "prepared" / "manifest.json"
        study_file = folder / "exact.toml"
        study_file.write_text(f'[study]\nslug = "{PIXEL_SLUG}"\nmanifests = ["{manifest.as_posix()}"]\n'
                              f'[display]\npolicy = "pixel_exact"\n[texts]\nresearcher = "Dr T. Est"\n'
                              f'contact = "test@example.org"\n')
        outputs["refused"] = runner.invoke(cli, ["study", "create", str(study_file), "--database-url", url])
        created = runner.invoke(cli, ["study", "create", str(study_file), "--allow-large-window", "--database-url", url])
        assert created.exit_code == 0, created.output
        outputs["create"] = created.output
        for slug in (SLUG, PIXEL_SLUG):
            shown = runner.invoke(cli, ["study", "show", slug, "--json", "--database-url", url])
            assert shown.exit_code == 0, shown.output
            outputs[f"show {slug}"] = json.loads(shown.output)
    # Each study gets a HIT, as `perceptlab mturk launch` records it: MTurk entries name one of the study's HITs.
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from server.models import MTurkHit, Study

    engine = create_engine(url)
    with Session(engine) as db:
        for slug in (SLUG, PIXEL_SLUG):
            db.add(MTurkHit(study_id=db.scalar(select(Study.id).where(Study.slug == slug)), hit_id=HITS[slug],
                            unique_request_token=f"t-{slug}", launch_id="L", batch_index=0, max_assignments=9,
                            reward="0.50", status="Assignable", sandbox=True))
        db.commit()
    engine.dispose()
    app = make_test_app(url, folder / "instance")
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield {"app": app, "url": f"http://127.0.0.1:{server.server_port}", "outputs": outputs, "manifest": manifest}
    server.shutdown()
    thread.join(timeout=10)
    app_services(app).engine.dispose()


def _stated(output: str) -> tuple[int, int]:
    """The window a command printed: "window needed: W x H CSS px"."""
    found = re.search(r"window needed: (\d+) x (\d+) CSS px", output)
    assert found, output
    return int(found[1]), int(found[2])


def _manifest_sets(manifest: Path) -> list:
    top = json.loads(manifest.read_text())
    scenes = [json.loads((manifest.parent / s["manifest"]).read_text()) for s in top["scenes"]]
    return [(m["image_size"]["width"], m["image_size"]["height"], m["crops"]) for m in scenes]


# ---------------------------------------------------------------- the commands

def test_launch_and_create_state_the_window_and_refuse_a_large_one(lab):
    outputs = lab["outputs"]
    sets = _manifest_sets(lab["manifest"])
    assert sorted((w, h) for w, h, _ in sets) == [(451, 300), (512, 512), (600, 400)]
    # launch's defaults: fit, and a window that a 1366x768 laptop has.
    fit = pc_requirement("fit", 0.5, (1000, 600), sets)
    assert _stated(outputs["launch"]) == fit.min_window
    assert "fits a 1366 x 657 laptop window" in outputs["launch"]
    assert fit.fits(LAPTOP_WINDOW) and fit.fits((1280, 600))
    show = outputs[f"show {SLUG}"]
    assert show["display"]["min_window"] == list(fit.min_window) and show["display"]["policy"] == "fit"
    # pixel_exact: three 600-px images side by side need more than a laptop: refused, then allowed.
    exact = pc_requirement("pixel_exact", 0.5, (1000, 600), sets)
    assert exact.min_window == (3 * 600 + 2 * 8 + 2 * 24 + 2, 512 + 45 + 36 + 8 + 36 + 8 + 2)
    refused = outputs["refused"]
    assert refused.exit_code == 2, refused.output
    assert f"at least {exact.min_window[0]} x {exact.min_window[1]} CSS px" in refused.output
    assert "--allow-large-window" in refused.output and len(refused.output.strip().splitlines()) == 1
    # ... naming the scenes that need more than the laptop's window (every one: 3 x 451 + 66 > 1366).
    assert "(scenes: " in refused.output and "coffee 1866 x 600" in refused.output
    assert "astronaut 1602 x 647" in refused.output and "chelsea 1419 x 600" in refused.output
    assert _stated(outputs["create"]) == exact.min_window
    assert outputs[f"show {PIXEL_SLUG}"]["display"]["min_window"] == list(exact.min_window)


# ---------------------------------------------------------------- a worker at laptop windows (fit)

def _check_view(page, min_scale: float) -> dict:
    """The view on screen: every image loaded, inside the window, at one scale >= min_scale; no scrolling."""
    view = page.evaluate(VIEW_JS)
    assert not view["tooSmall"], view
    assert len(view["images"]) == 3 and all(image["loaded"] for image in view["images"]), view
    for image in view["images"]:
        assert image["left"] >= 0 and image["top"] >= 0, view
        assert image["right"] <= view["innerWidth"] and image["bottom"] <= view["innerHeight"], view
        assert image["width"] == pytest.approx(view["panelWidth"] * view["scale"], abs=0.6), view
        assert image["height"] == pytest.approx(view["panelHeight"] * view["scale"], abs=0.6), view
    assert min_scale <= view["scale"] <= 1, view
    assert view["scrollWidth"] <= view["innerWidth"] and view["scrollHeight"] <= view["innerHeight"], view
    return view


def _wait_trial_or_done(page, after: str | None) -> str:
    page.wait_for_function("""(after) => {
      const panel = document.querySelector('#page-done');
      if (panel && !panel.hidden) return true;
      const t = document.querySelector('#trial');
      return t && !t.hidden && t.dataset.accepting === 'true' && t.dataset.trialId !== after;
    }""", arg=after)
    panel = page.locator("#page-done")
    return "done" if panel.count() and panel.is_visible() else page.locator("#trial").get_attribute("data-trial-id")


def _enter_and_consent(page, lab, slug: str, participant: str) -> None:
    page.goto(f"{lab['url']}/s/{slug}?participant={participant}")
    expect(page.locator("#device-check")).to_have_attribute("data-device", "ok")
    page.check("#agree")
    page.click("#btn-consent")
    expect(page.locator("#device-check")).to_have_attribute("data-device", "ok")
    page.click("#btn-start")


@pytest.mark.parametrize("size", [(1366, 657), (1280, 600)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_trial_of_launch_defaults_fits_a_laptop_window(page, lab, screenshot, size):
    """Entry, consent, instructions, the quiz and a whole page: every view of every trial visible, none blocked."""
    width, height = size
    page.set_viewport_size({"width": width, "height": height})
    _enter_and_consent(page, lab, SLUG, f"W{width}")
    kinds, seen_512, trial_id, n_trials = set(), False, None, 0
    while True:
        trial_id = _wait_trial_or_done(page, trial_id)
        if trial_id == "done":
            break
        state = page.evaluate("window.assignmentDriver.state")
        kinds.add(state["page"]["kind"])
        first = _check_view(page, min_scale=0.5)
        for view in range(1, first["nViews"]):  # each zoom region: keys 2, 3, ... (never a vote)
            page.keyboard.press(str(view + 1))
            expect(page.locator("#trial")).to_have_attribute("data-view", str(view))
            _check_view(page, min_scale=0.5)
        page.keyboard.press("1")
        expect(page.locator("#trial")).to_have_attribute("data-view", "0")
        if n_trials == 0 and first["nViews"] > 1:  # the buttons switch views too, and never take the focus
            page.click('.pc-view[data-view="1"]')
            expect(page.locator("#trial")).to_have_attribute("data-view", "1")
            assert page.evaluate("document.activeElement === document.body")
            page.click('.pc-view[data-view="0"]')
            expect(page.locator("#trial")).to_have_attribute("data-view", "0")
        if first["referenceWidth"] == 512 and not seen_512 and state["page"]["kind"] == "trials":
            seen_512 = True
            screenshot(page, f"fit-512-{width}x{height}")
        # The quiz and hidden gold are answered right (else the worker is stopped); real pairs either way.
        side = gold_side(lab["app"], {"trial_id": trial_id}) or "left"
        page.keyboard.press("ArrowLeft" if side == "left" else "ArrowRight")
        n_trials += 1
    assert kinds == {"quiz", "trials"}
    assert seen_512, "no trial of the 512x512 scene on the page"
    assert n_trials >= 5 + 10
    # Every arrow press was one vote; the view keys and buttons none.
    with app_services(lab["app"]).sessions() as session:
        votes = session.scalar(select(func.count()).select_from(Vote).join(Assignment, Vote.assignment_id == Assignment.id)
                               .where(Assignment.external_id == f"W{width}"))
    assert votes == n_trials


def test_the_browser_computes_the_servers_window(page, lab):
    """The trial page's window.js (paired/static, served under /static/paradigms/pc/) and the entry check's
    display.js give the window paired/window.py gives for the same numbers."""
    page.goto(f"{lab['url']}/s/{SLUG}?participant=J1")
    sets = _manifest_sets(lab["manifest"])
    for policy, factor in (("fit", 0.5), ("fit", 0.37), ("pixel_exact", 1.0), ("pixel_exact", 1 / 1.25),
                           ("pixel_exact", 1 / 3)):
        for width, height, boxes in sets:
            views = pc_views(policy, width, height, boxes)
            for floor in ((0, 0), (1000, 600)):
                browser = page.evaluate("""async ([views, factor, floor, chrome, layout]) => {
                  const { windowNeeded } = await import('/static/paradigms/pc/window.js');
                  const { layoutWindow } = await import('/static/js/display.js');
                  return [windowNeeded(views, factor, floor, chrome), layoutWindow(layout, factor, floor)];
                }""", [views, factor, list(floor), PC_CHROME, pc_layout(views).to_page()])
                for found in browser:
                    assert (found["width"], found["height"]) == window_needed(views, factor, floor)


# ---------------------------------------------------------------- pixel_exact, small windows, phones

def test_pixel_exact_tells_small_windows_and_phones_at_entry_before_consent(browser, lab, screenshot):
    exact = lab["outputs"][f"show {PIXEL_SLUG}"]["display"]["min_window"]
    # A laptop window: told at entry, the consent form hidden until the window is large enough.
    context = browser.new_context(viewport={"width": 1366, "height": 657}, screen={"width": 2560, "height": 1440})
    page = context.new_page()
    page.goto(f"{lab['url']}/s/{PIXEL_SLUG}?participant=S1")
    check = page.locator("#device-check")
    expect(check).to_have_attribute("data-device", "window_too_small")
    expect(page.locator("#device-needs")).to_contain_text(f"at least {exact[0]} × {exact[1]} pixels")
    expect(page.locator(".device-problem")).to_contain_text(
        f"Your browser window is 1366 × 657 pixels inside; this study needs at least {exact[0]} × {exact[1]}.")
    expect(page.locator("form[data-needs-device]")).to_be_hidden()
    screenshot(page, "pixel-exact-consent-1366x657")
    page.goto(f"{lab['url']}/s/{PIXEL_SLUG}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId={HITS[PIXEL_SLUG]}")
    expect(page.locator("#device-needs")).to_contain_text(f"at least {exact[0]} × {exact[1]} pixels")
    expect(page.locator(".device-problem")).to_contain_text("If your screen cannot show a window this large: "
                                                            "Please do not accept this HIT on this device.")
    screenshot(page, "pixel-exact-preview-1366x657")
    page.goto(f"{lab['url']}/s/{PIXEL_SLUG}?participant=S1")
    page.set_viewport_size({"width": exact[0], "height": exact[1]})
    expect(check).to_have_attribute("data-device", "ok")
    expect(page.locator("#btn-consent")).to_be_visible()
    context.close()

    # A phone: told at entry (link and MTurk), never shown the consent form.
    for slug in (PIXEL_SLUG, SLUG):
        context = browser.new_context(**PHONE)
        page = context.new_page()
        page.goto(f"{lab['url']}/s/{slug}?participant=P-{slug}")
        expect(page.locator("main#consent")).to_be_visible()
        expect(page.locator("#device-check")).to_have_attribute("data-device", "phone")
        # The pixel_exact study needs a computer; the launch defaults' 1000 x 600 a tablet too.
        expect(page.locator(".device-problem")).to_contain_text(
            "cannot be done on a phone or tablet" if slug == PIXEL_SLUG
            else "cannot be done on a phone: it needs a computer or a tablet")
        expect(page.locator(".device-problem")).to_contain_text("You cannot take part on this device")
        expect(page.locator("form[data-needs-device]")).to_be_hidden()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        box = page.locator(".device-problem").bounding_box()
        assert box["y"] + box["height"] <= 844, "the message is below the phone's first screen"
        if slug == SLUG:
            screenshot(page, "phone-entry")
        # The HIT preview: do not accept; after accepting: return the HIT.
        page.goto(f"{lab['url']}/s/{slug}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId={HITS[slug]}")
        expect(page.locator(".device-problem")).to_contain_text("Please do not accept this HIT")
        page.goto(f"{lab['url']}/s/{slug}?assignmentId=A{len(slug)}PHONE&hitId={HITS[slug]}&workerId=WPHONE&turkSubmitTo=https://"
                  "workersandbox.mturk.com")
        expect(page.locator("#device-check")).to_have_attribute("data-device", "phone")
        expect(page.locator(".device-problem")).to_contain_text("Please return this HIT")
        context.close()


def test_a_tablet_that_fits_is_admitted_and_a_phone_is_refused_with_the_reason(browser, lab, screenshot):
    """The device rule (WindowRequirement.devices): a tablet (iPad user agent, touch, 1366x1000) enters the launch
    defaults' study, whose 1000 x 600 fits a tablet, but not the pixel_exact one, which needs a computer; a phone
    is refused from the 1000 x 600 study, told why and what it needs."""
    shown = lab["outputs"][f"show {SLUG}"]
    assert shown["display"]["min_window"] == [1000, 600] and shown["devices"] == ["desktop", "tablet"]
    assert lab["outputs"][f"show {PIXEL_SLUG}"]["devices"] == ["desktop"]
    context = browser.new_context(**TABLET)
    page = context.new_page()
    page.goto(f"{lab['url']}/s/{SLUG}?participant=TAB1")
    expect(page.locator("#device-check")).to_have_attribute("data-device", "ok")
    expect(page.locator(".device-problem")).to_be_hidden()
    expect(page.locator("#btn-consent")).to_be_visible()
    expect(page.locator("#device-needs")).to_contain_text("Needs a computer or a tablet (no phone)")
    screenshot(page, "tablet-consent-1366x1000")
    # The browser classes devices as the server's device_class does, from the data the page carries.
    from server.paradigms.display import device_class

    envs = [(mobile, touch, screen) for mobile in (False, True) for touch in (False, True)
            for screen in ((390, 844), (1366, 1000), (599, 960), (600, 960))]
    classes = page.evaluate("""async (envs) => {
      const { deviceClass } = await import('/static/js/device_check.js');
      const rule = JSON.parse(document.getElementById('device-check').dataset.requirement);
      return envs.map(([mobile, touchOnly, [screenWidth, screenHeight]]) =>
        deviceClass({ ...rule, mobile_ua: mobile }, { touchOnly, screenWidth, screenHeight }));
    }""", [[m, t, list(s)] for m, t, s in envs])
    assert classes == [device_class(m, t, s) for m, t, s in envs]
    assert set(classes) == {"desktop", "tablet", "phone"}
    # The same tablet at a study that needs more than a tablet's window: refused as a tablet.
    page.goto(f"{lab['url']}/s/{PIXEL_SLUG}?participant=TAB2")
    expect(page.locator("#device-check")).to_have_attribute("data-device", "tablet")
    expect(page.locator(".device-problem")).to_contain_text("cannot be done on a phone or tablet")
    expect(page.locator("form[data-needs-device]")).to_be_hidden()
    context.close()

    context = browser.new_context(**PHONE)
    page = context.new_page()
    page.goto(f"{lab['url']}/s/{SLUG}?participant=PH1")
    expect(page.locator("#device-check")).to_have_attribute("data-device", "phone")
    expect(page.locator(".device-problem")).to_contain_text(
        "This study cannot be done on a phone: it needs a computer or a tablet with a browser window of at least "
        "1000 × 600 pixels.")
    expect(page.locator(".device-problem")).to_contain_text("You cannot take part on this device")
    expect(page.locator("form[data-needs-device]")).to_be_hidden()
    context.close()


def test_pixel_exact_shows_one_image_pixel_per_device_pixel(browser, lab, screenshot):
    """Past consent in a large window, the 512x512 scene's trials show each image pixel on one device pixel
    (at ratio 1 and 1.25); a 1366x657 window at ratio 1 is too small for it and says by how much."""
    exact = lab["outputs"][f"show {PIXEL_SLUG}"]["display"]["min_window"]
    for dpr in (1, 1.25):
        context = browser.new_context(viewport={"width": exact[0], "height": exact[1]}, device_scale_factor=dpr)
        page = context.new_page()
        _enter_and_consent(page, lab, PIXEL_SLUG, f"X{dpr}")
        trial_id, seen = None, 0
        while seen < 30:
            trial_id = _wait_trial_or_done(page, trial_id)
            assert trial_id != "done"
            view = page.evaluate(VIEW_JS)
            for image in view["images"]:  # whole images: one image pixel per device pixel
                assert image["width"] * dpr == pytest.approx(image["natural"], abs=0.01), view
            if view["referenceWidth"] == 512 and view["images"][0]["natural"] == 512 \
                    and page.evaluate("window.assignmentDriver.state.page.kind") == "trials":
                break
            side = gold_side(lab["app"], {"trial_id": trial_id}) or "left"
            page.keyboard.press("ArrowLeft" if side == "left" else "ArrowRight")
            seen += 1
        else:
            raise AssertionError("no trial of the 512x512 scene")
        page.keyboard.press("2")  # a zoom region, 1:1 as well
        expect(page.locator("#trial")).to_have_attribute("data-view", "1")
        region = page.evaluate(VIEW_JS)
        assert all(image["width"] * dpr == pytest.approx(image["natural"], abs=0.01) for image in region["images"])
        page.keyboard.press("1")
        # The laptop window: at ratio 1 the 512x512 scene needs 1602 px; at 1.25, 3 x 410 + 66 fits.
        page.set_viewport_size({"width": 1366, "height": 657})
        need = window_needed([[512, 512], *[[b["width"], b["height"]] for b in _crops_of_512(lab)]], 1 / dpr,
                             (1000, 600))
        if need[0] <= 1366 and need[1] <= 657:
            expect(page.locator("#window-too-small")).to_be_hidden()
            view = page.evaluate(VIEW_JS)
            assert view["scrollWidth"] <= 1366 and all(i["right"] <= 1366 for i in view["images"])
        else:
            too_small = page.locator("#window-too-small")
            expect(too_small).to_be_visible()
            expect(too_small).to_contain_text(f"needed at least {need[0]} × {need[1]}")
            screenshot(page, f"pixel-exact-512-too-small-dpr{dpr}")
            page.set_viewport_size({"width": exact[0], "height": exact[1]})
            expect(too_small).to_be_hidden()
        screenshot(page, f"pixel-exact-512-dpr{dpr}")
        context.close()


def _crops_of_512(lab) -> list[dict]:
    return next(boxes for w, h, boxes in _manifest_sets(lab["manifest"]) if (w, h) == (512, 512))
