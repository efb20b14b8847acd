"""Worker pages in the worker's language (server/i18n.py, issue 39 item 3): the locale chosen at entry among the
study's languages (?lang=, the recruiter's ?locale=, Accept-Language, the study's default: first match wins),
stored with the worker and kept for later pages, the study's texts per language, the API's answers in the page's
language, and workers.csv's ``locale``."""
from __future__ import annotations

import csv
import io
import re

import pytest
from sqlalchemy import select
from werkzeug.datastructures import LanguageAccept

from server import exports
from server.i18n import choose_locale, text_direction
from server.models import Study, Worker
from server.paradigms import StudyDefinitionError, read_study_file
from server.services import app_services

from .conftest import SMALL_STUDY, WorkerClient, write_study_file

pytestmark = pytest.mark.one_database
LANGUAGES = ("en", "de", "ar")
GERMAN_CONSENT = "Mit Ihrer Teilnahme helfen Sie der Forschung von {researcher}. Vergütung: {pay}."


def _accept(header: str) -> LanguageAccept:
    from werkzeug.http import parse_accept_header
    return parse_accept_header(header, LanguageAccept)


def test_the_first_rule_that_names_a_study_language_wins():
    study = ("en", "de", "ar")
    assert choose_locale(study, "en") == "en"                                              # nothing: the default
    assert choose_locale(study, "de", accept_language=_accept("fr-FR,fr;q=0.9")) == "de"   # not offered: default
    assert choose_locale(study, "en", accept_language=_accept("fr;q=0.9,de-AT;q=0.8,ar;q=0.7")) == "de"  # by quality
    assert choose_locale(study, "en", recruiter="ar_EG", accept_language=_accept("de")) == "ar"
    assert choose_locale(study, "en", query="de", recruiter="ar", accept_language=_accept("ar")) == "de"
    assert choose_locale(study, "en", query="xx", recruiter="DE-de", accept_language=_accept("ar")) == "de"
    assert choose_locale(("en",), "en", query="de", accept_language=_accept("de")) == "en"  # not a study language
    assert text_direction("ar") == "rtl" and text_direction("de") == text_direction("en") == "ltr"


def _study(app, demo_stimuli, folder, slug="lang", languages=LANGUAGES, default="en", translated=True) -> str:
    from server.paradigms import create_study

    path = write_study_file(folder, demo_stimuli, slug, **SMALL_STUDY,
                            texts={"researcher": "Dr A. Lee", "contact": "a.lee@x.example"})
    text = path.read_text().replace('[pages]', f'languages = {list(languages)!r}\ndefault_language = "{default}"\n'
                                               '[pages]', 1)
    if translated:
        text += f'[texts.translations.de]\nconsent = "{GERMAN_CONSENT}"\n'
    path.write_text(text)
    with app_services(app).sessions() as session:
        study = create_study(session, read_study_file(path))
        session.commit()
        return study.slug


def _locales(app, slug) -> dict[str, str | None]:
    with app_services(app).sessions() as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        return dict(session.execute(select(Worker.external_id, Worker.locale).where(Worker.study_id == study_id)).all())


def _page(client, url, language=None):
    headers = {"Accept-Language": language} if language else {}
    response = client.get(url, headers=headers, follow_redirects=True)
    assert response.status_code == 200, response.status_code
    return response.request.path, response.get_data(as_text=True)


def _lang(html) -> tuple[str, str]:
    found = re.search(r'<html lang="([^"]+)" dir="([^"]+)">', html)
    return found.group(1), found.group(2)


def test_the_locale_is_chosen_at_entry_stored_and_kept(app, demo_stimuli, tmp_path):
    slug = _study(app, demo_stimuli, tmp_path)
    client = app.test_client()
    _, html = _page(client, f"/s/{slug}?participant=BROWSER", "de-DE,de;q=0.9,en;q=0.5")
    assert _lang(html) == ("de", "ltr") and "Bevor Sie beginnen" in html and "Before you start" not in html
    assert "Mit Ihrer Teilnahme helfen Sie der Forschung von Dr A. Lee." in html   # the study's German consent
    assert "Vergütung: $0.50 für 1 Seite, und einen Bonus von $0.40 für jede weitere Seite" in html  # {pay} too

    _, html = _page(app.test_client(), f"/s/{slug}?participant=RECRUITED&locale=ar_EG", "de")
    assert _lang(html) == ("ar", "rtl") and "قبل أن تبدأ" in html
    # No Arabic consent: the default language's, filled in its language and set left to right in the RTL page.
    assert '<div class="study-text" lang="en" dir="ltr">' in html and "It pays $0.50 for 1 page" in html
    _, html = _page(app.test_client(), f"/s/{slug}?participant=ASKED&lang=de&locale=ar", "ar")
    assert _lang(html) == ("de", "ltr")
    _, html = _page(app.test_client(), f"/s/{slug}?participant=NOONE", "fr-FR,fr;q=0.9")
    assert _lang(html) == ("en", "ltr") and "Before you start" in html
    assert _locales(app, slug) == {"BROWSER": "de", "RECRUITED": "ar", "ASKED": "de", "NOONE": "en"}

    # Later pages keep the stored language, whatever the browser says; ?lang= switches it for good.
    path, _ = _page(client, f"/s/{slug}?participant=BROWSER", "de")
    assert _lang(_page(client, path, "en")[1])[0] == "de"
    assert _lang(_page(client, f"{path}?lang=ar", "de")[1]) == ("ar", "rtl")
    assert _lang(_page(client, path, "de")[1])[0] == "ar" and _locales(app, slug)["BROWSER"] == "ar"
    assert _lang(_page(client, f"{path}?lang=fr")[1])[0] == "ar"   # not a study language: ignored


def test_a_study_in_english_only_shows_english_to_everyone(app, study):
    _, html = _page(app.test_client(), f"/s/{study}?participant=P1&lang=de", "de")
    assert _lang(html) == ("en", "ltr") and "Before you start" in html


def test_the_api_answers_in_the_pages_language(app, demo_stimuli, tmp_path):
    """A stop's reason is written in the language of the page whose request caused it (the header the browser's
    API calls carry), so the worker reads it in theirs."""
    slug = _study(app, demo_stimuli, tmp_path)
    worker = WorkerClient(app.test_client(), slug, worker_id="QUIZFAIL")
    worker.client.environ_base["HTTP_X_PERCEPTLAB_LOCALE"] = "de"
    worker.start()
    body = worker.answer_page(worker.wrong_side)
    state = worker.state()
    assert state["stage"] == "disqualified", body
    assert state["message"].startswith("Sie haben 0 von 3 Quizfragen richtig beantwortet")
    worker.client.environ_base["HTTP_X_PERCEPTLAB_LOCALE"] = "xx"   # not a catalog: English
    assert worker.client.get("/api/v1/assignments/0/state").json["message"].startswith("missing worker token")


def test_workers_csv_has_the_locale_of_every_worker(app, demo_stimuli, tmp_path):
    slug = _study(app, demo_stimuli, tmp_path)
    _page(app.test_client(), f"/s/{slug}?participant=WDE", "de")
    _page(app.test_client(), f"/s/{slug}?participant=WAR&lang=ar")
    WorkerClient(app.test_client(), slug, worker_id="WAPI")   # the JSON entry: no page seen yet
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        text, _ = exports.workers_csv_text(session, study, salt=None)
    rows = {row["worker_id"]: row for row in csv.DictReader(io.StringIO(text))}
    assert "locale" in exports.LOCALE_COLUMNS
    assert {w: rows[w]["locale"] for w in rows} == {"WDE": "de", "WAR": "ar", "WAPI": ""}


@pytest.mark.parametrize(("languages", "default", "extra", "message"), [
    (["en", "xx"], "en", "", "study.languages has no catalog for xx"),
    (["en", "de"], "ar", "", "study.default_language 'ar' must be one of study.languages"),
    (["en"], "en", '[texts.translations.de]\nconsent = "Hallo"\n', "'de' is not one of study.languages"),
    (["en", "de"], "en", '[texts.translations.de]\nquiz = "Hallo"\n', "only the texts consent, instructions"),
])
def test_the_study_file_declares_only_shipped_languages(demo_stimuli, tmp_path, languages, default, extra, message):
    path = write_study_file(tmp_path, demo_stimuli, "bad")
    path.write_text(path.read_text().replace("[entry]", f"languages = {languages!r}\ndefault_language = "
                                                       f'"{default}"\n[entry]', 1) + extra)
    with pytest.raises(StudyDefinitionError, match=re.escape(message)):
        read_study_file(path)
