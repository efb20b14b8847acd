"""Worker pages in the worker's language, in chromium (issue 39 item 3): a German worker (the browser's
Accept-Language) walks a whole paired-comparison study and a whole rating study, from consent to the completion
code, and no English string shows on any page on the way; an Arabic page is laid out right to left, while a
pair keeps its screen sides, so that "left" in a vote is the panel on the left.

"No English": each page's visible text is checked against every English msgid of the catalogs (its words
outside placeholders, where the German differs) and a list of common English words. The studies give their
consent and instructions in German ([texts.translations.de]); everything else comes from the catalogs.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from playwright.sync_api import expect
from sqlalchemy import select

from server import i18n_catalogs
from server.paradigms import create_study, read_study_file
from server.services import app_services
from tests.browser._rating_support import SMALL_RATING_STUDY, RatingWalker, assignment_of
from tests.browser._worker_support import Walker, _any_side, _votes, correct_side
from tests.server.conftest import SMALL_STUDY, write_study_file

from .conftest import tick_until

pytestmark = pytest.mark.timeout(240)

LAPTOP = {"width": 1366, "height": 657}
SMALL_LAPTOP = {"width": 1280, "height": 600}
GERMAN_TEXTS = ('[texts.translations.de]\n'
                'consent = "Willkommen zu dieser Studie. Sie wird von {researcher} durchgeführt. Vergütung: {pay}. '
                'Dauer: {time}.\\n\\nIhre Antworten werden anonym gespeichert."\n'
                'instructions = "Bitte lesen Sie die folgenden Schritte sorgfältig."\n')
ARABIC_TEXTS = ('[texts.translations.ar]\n'
                'consent = "هذه المهمة جزء من دراسة بحثية عن إدراك جودة الصور، يجريها {researcher}. الأجر: {pay}. '
                'المدة: {time}.\\n\\nالمشاركة طوعية: يمكنك التوقف في أي وقت بإعادة المهمة."\n')
# Common English words that no German page should show (whole words, any case).
ENGLISH_WORDS = ("the", "and", "please", "your", "you", "click", "page", "pages", "image", "images", "loading",
                 "of", "to", "with", "which", "closer", "continue", "submit", "thank", "finish", "completed",
                 "next", "rate", "quality", "how", "trial", "correct", "saving", "answer", "answers", "before",
                 "start", "reference", "left", "right", "practice", "worse", "better", "excellent", "good")


@pytest.fixture(scope="module")
def english_fragments() -> list[str]:
    """Every stretch of English words (two or more, outside placeholders and markup) of the catalogs' msgids
    whose German translation does not contain it."""
    fragments = set()
    for domain in i18n_catalogs.DOMAINS:
        german = {m.id: m.string for m in i18n_catalogs.read_catalog("de", domain) if m.id}
        for msgid, translated in german.items():
            texts = msgid if isinstance(msgid, tuple) else (msgid,)
            shown = " ".join(translated) if isinstance(translated, tuple) else translated
            for text in texts:
                for piece in re.split(r"%\(\w+\)s|<[^>]+>|&\w+;|[()…·:;,.!?]", text):
                    piece = " ".join(piece.split())
                    if len(piece.split()) >= 2 and piece not in shown:
                        fragments.add(piece)
    return sorted(fragments)


def _english_on(page, fragments) -> list[str]:
    text = " ".join(page.locator("body").inner_text().split())
    found = [f for f in fragments if f in text]
    found += [w for w in ENGLISH_WORDS if re.search(rf"(?<![\w-]){w}(?![\w-])", text, re.IGNORECASE)]
    return found


def _check_german(page, fragments, where: str, seen: set[str]) -> None:
    expect(page.locator("html")).to_have_attribute("lang", "de")
    found = _english_on(page, fragments)
    assert not found, f"English on the German {where}: {found}\n{page.locator('body').inner_text()}"
    seen.add(where)


def _with_languages(path: Path, languages: list[str], german: bool = True) -> Path:
    text = path.read_text().replace("[study]\n", f"[study]\nlanguages = {languages!r}\n", 1)
    path.write_text(text + (GERMAN_TEXTS if german else ""))
    return path


def _create(app, path: Path) -> str:
    with app_services(app).sessions() as session:
        study = create_study(session, read_study_file(path))
        session.commit()
        return study.slug


@pytest.fixture
def german_page(browser):
    context = browser.new_context(viewport=LAPTOP, locale="de-DE")   # Accept-Language: de-DE
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.mark.usefixtures("gold_answer_key")
def test_a_german_worker_walks_a_whole_paired_study_without_english(german_page, app, live_server, demo_stimuli,
                                                                    tmp_path, english_fragments, screenshot):
    page, seen = german_page, set()
    path = write_study_file(tmp_path, demo_stimuli, "pc-de", **SMALL_STUDY,
                            texts={"researcher": "Dr. A. Lee", "contact": "a.lee@x.example"})
    slug = _create(app, _with_languages(path, ["en", "de"]))
    page.goto(f"{live_server}/s/{slug}?participant=DE1")
    expect(page.locator("main#consent")).to_be_visible()
    expect(page.locator("main#consent")).to_contain_text("Willkommen zu dieser Studie")
    _check_german(page, english_fragments, "consent", seen)
    page.set_viewport_size(SMALL_LAPTOP)   # the longer German still leaves the button in a 1280 x 600 window
    assert _box(page, "#btn-consent")["y"] + _box(page, "#btn-consent")["height"] <= SMALL_LAPTOP["height"]
    page.set_viewport_size(LAPTOP)
    page.check("#agree")
    page.click("#btn-consent")
    expect(page.locator("main#instructions")).to_be_visible()
    _check_german(page, english_fragments, "instructions", seen)
    page.click("#btn-start")

    walker = Walker(page, "mouse")
    for _ in range(3):   # the quiz, with the server's feedback
        assert walker.status() == "trial"
        side = correct_side(page)
        walker.answer(lambda p: side)
        expect(page.locator("#feedback")).to_have_attribute("data-kind", "correct")
        expect(page.locator("#feedback")).to_have_text("Richtig")
        _check_german(page, english_fragments, "quiz feedback", seen)
    assert walker.status() == "trial"
    expect(page.locator("#progress")).to_have_text("Paar 1 von 6 · Seite 1")
    expect(page.locator("#instruction")).to_contain_text("Welches Bild ist der Referenz näher?")
    _check_german(page, english_fragments, "trial", seen)
    screenshot(page, "trial")
    page.set_viewport_size(SMALL_LAPTOP)   # the German bar still leaves the pair room at 1280 x 600
    expect(page.locator("#trial")).to_be_visible()
    pair = _box(page, "#trial [data-side=right]")
    assert pair["x"] + pair["width"] <= SMALL_LAPTOP["width"] and pair["y"] + pair["height"] <= SMALL_LAPTOP["height"]
    page.set_viewport_size(LAPTOP)
    assert walker.run(_any_side, kind="trials") == "page_done"
    expect(page.locator("#page-done")).to_contain_text("Sie haben 1 Seite abgeschlossen")
    _check_german(page, english_fragments, "page done", seen)
    page.click("#btn-continue")
    expect(page.locator("#page-done")).to_be_hidden()
    assert walker.run(_any_side, kind="trials") == "page_done"
    expect(page.locator("#page-done")).to_contain_text("Sie haben 2 Seiten abgeschlossen")
    page.click("#btn-finish")
    expect(page.locator("main#done")).to_be_visible()
    expect(page.locator("main#done")).to_contain_text("Sie haben 2 Seiten abgeschlossen.")
    expect(page.locator("#btn-copy-code")).to_have_text("Code kopieren")
    _check_german(page, english_fragments, "done", seen)
    assert seen == {"consent", "instructions", "quiz feedback", "trial", "page done", "done"}
    with app_services(app).sessions() as session:
        from server.models import Worker
        assert session.scalar(select(Worker.locale).where(Worker.external_id == "DE1")) == "de"


def test_a_german_worker_walks_a_whole_rating_study_without_english(german_page, app, live_server, demo_stimuli,
                                                                    tmp_path, english_fragments, screenshot):
    from tests.server.rating_support import copy_prepared, write_rating_study

    page, seen = german_page, set()
    tables = {name: dict(values) for name, values in SMALL_RATING_STUDY.items()}
    tables["rating"].update(method="dcr")
    tables["texts"] = {"researcher": "Dr. A. Lee", "contact": "a.lee@x.example"}
    path = write_rating_study(tmp_path, copy_prepared(demo_stimuli, tmp_path / "dcr-de"), "dcr-de", **tables)
    slug = _create(app, _with_languages(path, ["en", "de"]))
    page.goto(f"{live_server}/s/{slug}?participant=DE2")
    expect(page.locator("main#consent")).to_be_visible()
    _check_german(page, english_fragments, "consent", seen)
    page.check("#agree")
    page.click("#btn-consent")
    expect(page.locator("main#instructions")).to_be_visible()
    expect(page.locator("main#instructions")).to_contain_text("Vergleichen Sie das Testbild (rechts)")
    _check_german(page, english_fragments, "instructions", seen)
    page.click("#btn-start")

    walker = RatingWalker(page, app, "dcr", [5, 3, 1, 4, 2])
    for _ in range(2):   # the training
        assert walker.status() == "trial"
        expect(page.locator("#progress")).to_contain_text("Übung")
        expect(page.locator("#rating-question")).to_have_text("Wie schneidet das zweite Bild im Vergleich zur "
                                                              "Referenz ab?")
        _check_german(page, english_fragments, "training", seen)
        walker.answer()
        expect(page.locator("#feedback")).to_have_text("Richtig")
    assert walker.status() == "trial"
    expect(page.locator(".rating-option").first).to_contain_text("Nicht wahrnehmbar")
    _check_german(page, english_fragments, "trial", seen)
    screenshot(page, "trial")
    assert walker.run(kind="trials") == "page_done"
    _check_german(page, english_fragments, "page done", seen)
    page.click("#btn-continue")
    expect(page.locator("#page-done")).to_be_hidden()
    assert walker.run(kind="trials") == "done"
    expect(page.locator("main#done")).to_be_visible()
    _check_german(page, english_fragments, "done", seen)
    assert seen == {"consent", "instructions", "training", "trial", "page done", "done"}
    assert {tuple(labels) for labels in walker.labels.values()} == {("Referenz", "Test")}
    assert assignment_of(app, "DE2").pages_completed == 2


def _brightness_counts(app, external_id: str) -> list[int]:
    """The shape counts the server expects of worker ``external_id`` in the brightness check."""
    from server.models import Study, Worker
    from server.paradigms import viewing
    from server.paradigms.core import spec_for

    with app_services(app).sessions() as session:
        worker = session.scalars(select(Worker).where(Worker.external_id == external_id)).one()
        study = session.get(Study, worker.study_id)
        return viewing.expected(app.config["SECRET_KEY"], study, worker.id, "brightness", spec_for(session, study.id))


def _enter_german_checks(page, app, live_server, demo_stimuli, tmp_path, checks: list[str], participant: str) -> None:
    """A study in English and German with the [viewing] ``checks`` (before consent), entered by ``participant``."""
    path = write_study_file(tmp_path, demo_stimuli, f"viewing-{participant.lower()}", **SMALL_STUDY,
                            viewing={"checks": checks})
    page.goto(f"{live_server}/s/{_create(app, _with_languages(path, ['en', 'de']))}?participant={participant}")


def test_the_german_brightness_and_colour_checks_show_no_english(german_page, app, live_server, demo_stimuli,
                                                                 tmp_path, english_fragments, screenshot):
    """The [viewing] checks' page in German: the brightness patches, a colour plate, and the reason a worker who
    read no plate is turned away (on the checks' page and on the page that ends the study)."""
    page, seen = german_page, set()
    _enter_german_checks(page, app, live_server, demo_stimuli, tmp_path, ["brightness", "colour"], "DE3")
    expect(page.locator("#viewing-brightness")).to_be_visible()
    expect(page.locator("#viewing h1")).to_have_text("Bevor Sie beginnen: Ihr Bildschirm und Ihre Augen")
    _check_german(page, english_fragments, "brightness check", seen)
    screenshot(page, "viewing-brightness")
    for index, count in enumerate(_brightness_counts(app, "DE3")):
        page.click(f"#viewing-count-{index} button[data-value='{count}']")
    page.click("#viewing-next")
    expect(page.locator("#viewing-colour p").first).to_contain_text("Tafel 1 von 2")
    _check_german(page, english_fragments, "colour check", seen)
    page.click("#viewing-no-digit")
    expect(page.locator("#viewing-colour p").first).to_contain_text("Tafel 2 von 2")
    page.click("#viewing-no-digit")
    expect(page.locator("#viewing-outcome")).to_have_attribute("data-outcome", "failed")
    expect(page.locator("#viewing-message")).to_contain_text("Zahlen in den farbigen Punkten")
    _check_german(page, english_fragments, "colour failed", seen)
    page.click("#viewing-leave")
    expect(page.locator("main#stopped")).to_contain_text("Zahlen in den farbigen Punkten")
    _check_german(page, english_fragments, "stopped", seen)
    assert seen == {"brightness check", "colour check", "colour failed", "stopped"}


def test_the_german_card_and_blind_spot_steps_show_no_english(browser, app, live_server, demo_stimuli, tmp_path,
                                                              english_fragments, screenshot):
    """The shared calibration steps (calibration.js, blind_spot.js) in German, through the [viewing] distance
    check: the card, the blind spot's sweeps and the measured distance, and the reason of a worker too far away."""
    context = browser.new_context(viewport=LAPTOP, locale="de-DE")
    page, seen = context.new_page(), set()
    page.set_default_timeout(15_000)
    page.clock.install()   # the refresh measure and the blind spot's dot run on the page's clock
    try:
        _enter_german_checks(page, app, live_server, demo_stimuli, tmp_path, ["distance"], "DE4")
        expect(page.locator("#calibration h2")).to_have_text("Bildschirmkalibrierung")
        tick_until(page, lambda: page.locator("#calib-continue").is_enabled())
        expect(page.locator("#calib-refresh")).to_contain_text("pro Sekunde aktualisiert")
        _check_german(page, english_fragments, "card step", seen)
        screenshot(page, "card")
        page.locator("#calib-continue").click()
        expect(page.locator("#calibration h2")).to_have_text("Bildschirmkalibrierung: Sehabstand")
        _check_german(page, english_fragments, "blind spot", seen)
        for _ in range(5):   # each sweep stopped after 3 s (85 mm from the square): about 35 cm, not the study's 60
            page.locator("#bs-start").click()
            page.clock.run_for(3000)
            page.keyboard.press(" ")
        expect(page.locator("#bs-message")).to_contain_text("Sie sitzen etwa")
        _check_german(page, english_fragments, "distance measured", seen)
        screenshot(page, "blind-spot")
        page.locator("#calib-continue").click()
        expect(page.locator("#viewing-message")).to_contain_text("Aus dieser Entfernung können Sie nicht teilnehmen")
        _check_german(page, english_fragments, "distance failed", seen)
    finally:
        context.close()
    assert seen == {"card step", "blind spot", "distance measured", "distance failed"}


def _box(page, selector: str) -> dict:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, selector
    return box


@pytest.mark.usefixtures("gold_answer_key")
def test_the_arabic_pages_are_mirrored_but_a_pair_keeps_its_sides(browser, app, live_server, demo_stimuli, tmp_path,
                                                                  english_fragments, screenshot):
    path = write_study_file(tmp_path, demo_stimuli, "pc-ar", **SMALL_STUDY,
                            texts={"researcher": "Dr. A. Lee", "contact": "a.lee@x.example"})
    _with_languages(path, ["en", "ar"], german=False)
    path.write_text(path.read_text() + ARABIC_TEXTS)
    slug = _create(app, path)
    boxes = {}
    for language in ("en", "ar"):
        context = browser.new_context(viewport=LAPTOP)
        page = context.new_page()
        page.goto(f"{live_server}/s/{slug}?participant=P{language.upper()}&lang={language}")
        expect(page.locator("main#consent")).to_be_visible()
        boxes[language] = {name: _box(page, selector) for name, selector in {
            "main": "main#consent", "heading": "main#consent h1", "box": "#agree",
            "label": "label.check", "button": "#btn-consent"}.items()}
        if language == "en":   # the check of the German pages finds English where there is some
            assert {"Before you start", "I have read the above and agree to take part", "continue"} <= set(
                _english_on(page, english_fragments))
        if language == "ar":
            expect(page.locator("html")).to_have_attribute("dir", "rtl")
            # The study's own Arabic consent, its {pay} filled in Arabic, set right to left.
            expect(page.locator("main#consent .study-text")).to_have_attribute("dir", "rtl")
            expect(page.locator("main#consent .study-text")).to_contain_text("$0.50 مقابل 1 صفحة")
            expect(page.locator("main#consent h1")).to_have_text("قبل أن تبدأ")
            screenshot(page, "consent")
            page.check("#agree")
            page.click("#btn-consent")
            page.click("#btn-start")
            walker = Walker(page, "keys")
            assert walker.status() == "trial"
            left, right, reference = (_box(page, f"#trial {s}") for s in ("[data-side=left]", "[data-side=right]",
                                                                           "#reference"))
            progress, pending = _box(page, "#progress"), _box(page, "#pending")
            screenshot(page, "trial")
            # The pair keeps its screen sides; the bar around it is mirrored.
            assert left["x"] + left["width"] <= reference["x"] < reference["x"] + reference["width"] <= right["x"]
            assert progress["x"] > pending["x"] + pending["width"]
            chosen = walker.answer(lambda p: "left")   # the key ←: the panel on the left, stored as left
            expect(page.locator("#feedback")).to_be_visible()
            assignment = page.evaluate("JSON.parse(document.querySelector('[data-config]').dataset.config)")
            vote = _votes(app, int(assignment["assignmentId"]))[chosen]
            assert vote.chose_left
        context.close()
    en, ar = boxes["en"], boxes["ar"]
    for name in ("heading", "label", "button"):   # English: from the left edge; Arabic: from the right edge
        assert en[name]["x"] - en["main"]["x"] == pytest.approx(
            ar["main"]["x"] + ar["main"]["width"] - (ar[name]["x"] + ar[name]["width"]), abs=2), name
    # The checkbox comes first in reading order: left of its label in English, right of it in Arabic.
    assert en["box"]["x"] < en["label"]["x"] + 30 and ar["box"]["x"] > ar["label"]["x"] + ar["label"]["width"] - 30
    # At 1366 x 657 the mirrored consent still fits: its button is inside the window.
    assert ar["button"]["y"] + ar["button"]["height"] <= LAPTOP["height"]


def test_the_german_questionnaire_fits_a_laptop_and_shows_no_english(german_page, app, live_server, demo_stimuli,
                                                                     tmp_path, english_fragments, screenshot):
    """The ready-made questionnaire sets in German (its longer words), as a study asks them before and after the
    task (here both before, so that no work is needed in between): no English, and each part fits 1366x657 and
    1280x600 with its button in view, unscrolled."""
    page, seen = german_page, set()
    for part, sets in (("pre", ["demographics"]), ("post", ["viewing", "comments"])):
        path = write_study_file(tmp_path, demo_stimuli, f"asked-{part}", **SMALL_STUDY, questionnaire={"pre": sets})
        page.set_viewport_size(LAPTOP)
        page.goto(f"{live_server}/s/{_create(app, _with_languages(path, ['en', 'de']))}?participant=DEQ-{part}")
        page.check("#agree")
        page.click("#btn-consent")
        expect(page.locator("main#questionnaire[data-part=pre]")).to_be_visible()
        _check_german(page, english_fragments, f"{part} questionnaire", seen)
        for width, height in ((1366, 657), (1280, 600)):
            page.set_viewport_size({"width": width, "height": height})
            page.evaluate("window.scrollTo(0, 0)")
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            box = page.locator("#btn-questionnaire").bounding_box()
            assert box["y"] + box["height"] <= height, (part, width, height, box)
        screenshot(page, f"questionnaire-{part}-de")
        page.click("#btn-questionnaire")  # nothing answered: each required question says so, in German
        expect(page.locator("#questionnaire-errors")).to_be_visible()
        _check_german(page, english_fragments, f"{part} questionnaire refused", seen)
    assert len(seen) == 4
