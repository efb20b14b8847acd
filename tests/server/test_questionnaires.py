"""Questionnaires (server/paradigms/questionnaire.py): the study file's declaration, the server's validation of
answers, the pages' place in the flow, storage, questionnaire.csv, and that answers never change pay or codes."""
from __future__ import annotations

import csv
import io

import pytest
from sqlalchemy import func, select
from werkzeug.datastructures import MultiDict

from server import payments
from server.exports import export_study
from server.models import Assignment, QuestionnaireResponse, Study
from server.paradigms import StudyDefinitionError, create_study, read_study_file
from server.paradigms.questionnaire import SETS, parts, validate_answers
from server.services import app_services

from .conftest import SMALL_STUDY, WorkerClient, write_study_file

# Pages, forms and messages: the same on any database.
pytestmark = pytest.mark.one_database

OWN_ITEMS = '''
[[questionnaire.items]]
name = "sharper"
part = "post"
type = "multiple"
label = "Which artefacts did you notice?"
options = ["blur", "noise", "blocks"]

[[questionnaire.items]]
name = "hours"
part = "pre"
type = "number"
label = "Hours a day at a screen"
low = 0
high = 24
required = true
'''


def _study(app, demo_stimuli, tmp_path, slug="quest", extra=OWN_ITEMS, **questionnaire):
    path = write_study_file(tmp_path, demo_stimuli, slug, **SMALL_STUDY,
                            questionnaire=questionnaire or {"pre": ["demographics"], "post": ["comments"]})
    path.write_text(path.read_text() + extra)
    spec = read_study_file(path)
    with app_services(app).sessions() as session:
        study = create_study(session, spec)
        session.commit()
        return study.slug


def _stored(app) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(func.count()).select_from(QuestionnaireResponse))


def test_parts_take_the_ready_made_sets_then_the_studys_own_items():
    found = parts({"pre": ["demographics"], "post": ["viewing", "comments"],
                   "items": [{"name": "extra", "type": "text", "label": "Anything else?", "max_length": 80}]})
    assert [i.name for i in found["pre"]] == [i.name for i in SETS["demographics"]]
    assert [i.name for i in found["post"]] == ["device", "screen_inches", "distance_cm", "lighting", "comments", "extra"]
    assert found["post"][-1].max_length == 80 and not found["post"][-1].required


@pytest.mark.parametrize("settings, problem", [
    ({"pre": ["hobbies"]}, "no ready-made set 'hobbies'"),
    ({"items": [{"name": "x", "type": "choice", "label": "L", "options": ["only"]}]}, "needs 2 to 30 options"),
    ({"items": [{"name": "x", "type": "number", "label": "L", "options": ["a", "b"]}]}, "only a choice has options"),
    ({"items": [{"name": "x", "type": "number", "label": "L", "low": 5, "high": 1}]}, "low must not exceed high"),
    ({"items": [{"name": "x", "type": "text", "label": "L", "max_length": 100000}]}, "max_length must be"),
    ({"items": [{"name": "X y", "type": "text", "label": "L"}]}, "name must be 1-40 lowercase"),
    ({"items": [{"name": "x", "type": "slider", "label": "L"}]}, "type must be 'choice', 'multiple'"),
    ({"items": [{"name": "x", "type": "text"}]}, "label is required"),
    ({"items": [{"name": "x", "type": "text", "label": "L", "colour": "red"}]}, "unknown key colour"),
    ({"pre": ["comments"], "items": [{"name": "comments", "type": "text", "label": "L"}]}, "comments is used twice"),
])
def test_a_malformed_questionnaire_is_one_line_of_the_study_file(settings, problem):
    with pytest.raises(ValueError, match=problem):
        parts(settings)


def test_study_create_refuses_a_bad_item_naming_the_file(demo_stimuli, tmp_path):
    path = write_study_file(tmp_path, demo_stimuli, "bad", questionnaire={"post": ["comments"]})
    path.write_text(path.read_text() + '[[questionnaire.items]]\nname = "n"\ntype = "number"\nlabel = "N"\nlow = 3\nhigh = 1\n')
    with pytest.raises(StudyDefinitionError, match=r"bad\.toml: questionnaire: items\[1\]: low must not exceed high"):
        read_study_file(path)


def test_validation_names_every_problem_and_keeps_good_answers():
    items = parts({"pre": ["demographics"], "post": ["comments"], "items": [
        {"name": "seen", "part": "post", "type": "multiple", "label": "L", "options": ["a", "b", "c"]}]})
    good, errors = validate_answers(items["pre"], MultiDict([("age", " 34 "), ("gender", "female"), ("vision", "normal")]))
    assert errors == {} and good == {"age": 34, "gender": "female", "vision": "normal", "colour_vision": None}
    _, errors = validate_answers(items["pre"], MultiDict([("age", "15"), ("gender", "robot"), ("colour_vision", "normal"),
                                                           ("colour_vision", "unknown")]))
    assert set(errors) == {"age", "gender", "vision", "colour_vision"}
    assert "16 to 120" in errors["age"] and errors["vision"] == "Please answer this question."
    for bad in ("nan", "inf", "1e999", "thirty", "3" * 40):
        assert "age" in validate_answers(items["pre"], MultiDict([("age", bad), ("vision", "normal")]))[1]
    assert validate_answers(items["pre"], MultiDict([("age", "20,5"), ("vision", "normal")]))[0]["age"] == 20.5
    post = items["post"]
    answers, errors = validate_answers(post, MultiDict([("comments", "x" * 1000), ("seen", "c"), ("seen", "a")]))
    assert errors == {} and answers["seen"] == ["a", "c"]  # in the options' order
    assert "at most 1000" in validate_answers(post, MultiDict([("comments", "x" * 1001)]))[1]["comments"]
    assert "control" in validate_answers(post, MultiDict([("comments", "a\x00b")]))[1]["comments"]
    assert "seen" in validate_answers(post, MultiDict([("seen", "a"), ("seen", "a")]))[1]
    assert "seen" in validate_answers(post, MultiDict([("seen", "z")]))[1]


def _consent(client, token):
    assert client.post(f"/w/{token}/consent", data={"agree": "yes"}).status_code == 303


def test_the_pre_task_part_comes_before_the_instructions_and_bad_answers_store_nothing(app, demo_stimuli, tmp_path):
    slug = _study(app, demo_stimuli, tmp_path)
    client = app.test_client()
    worker = WorkerClient(client, slug)
    _consent(client, worker.token)
    page = client.get(f"/w/{worker.token}/")
    assert page.status_code == 200 and b'id="questionnaire" data-part="pre"' in page.data
    assert b'name="hours"' in page.data and b'name="age"' in page.data and b'name="comments"' not in page.data
    # Neither the instructions button nor the API skips it.
    assert client.post(f"/w/{worker.token}/instructions").status_code == 303
    refused = worker.action("instructions_done")
    assert refused.status_code == 409 and refused.json["error"] == "questionnaire_first"
    assert worker.state()["stage"] == "instructions"
    # A bad answer: 422, the page again with each field's problem and what was entered; nothing stored.
    bad = client.post(f"/w/{worker.token}/questionnaire", data={"age": "200", "hours": "5", "vision": "normal"})
    assert bad.status_code == 422 and b'id="q-age"' in bad.data and b"16 to 120" in bad.data
    assert b'value="5"' in bad.data and _stored(app) == 0
    as_json = client.post(f"/w/{worker.token}/questionnaire", data={"hours": "25"}, headers={"Accept": "application/json"})
    assert as_json.status_code == 422 and as_json.json["error"] == "invalid_answers"
    assert set(as_json.json["fields"]) == {"age", "vision", "hours"} and _stored(app) == 0
    too_big = client.post(f"/w/{worker.token}/questionnaire", data={"age": "1" * 70_000})
    assert too_big.status_code == 413 and _stored(app) == 0
    done = client.post(f"/w/{worker.token}/questionnaire", data={"age": "41", "hours": "7.5", "vision": "corrected"})
    assert done.status_code == 303 and _stored(app) == 1
    assert b'id="questionnaire"' not in client.get(f"/w/{worker.token}/").data  # the instructions now
    again = client.post(f"/w/{worker.token}/questionnaire", data={"age": "99", "hours": "1", "vision": "normal"})
    assert again.status_code == 303 and _stored(app) == 1  # answered once: the first answers stay
    assert worker.action("instructions_done").status_code == 200


def _complete(worker) -> None:
    worker.answer_page(worker.correct_side)  # the quiz
    body = worker.answer_page(worker.correct_side)
    assert body["stage"] == "page_done"
    assert worker.action("finish").json["stage"] == "completed"


def test_the_post_task_part_comes_after_the_work_and_never_changes_pay_or_code(app, demo_stimuli, tmp_path, admin):
    slug = _study(app, demo_stimuli, tmp_path, extra=OWN_ITEMS.replace('part = "pre"', 'part = "post"'),
                  post=["comments"])
    client = app.test_client()
    worker = WorkerClient(client, slug, worker_id="WQUEST1")
    worker.start()  # no pre-task part: straight on
    _complete(worker)
    before = _pay_and_code(app, worker)
    page = client.get(f"/w/{worker.token}/")
    assert b'data-part="post"' in page.data and b'id="done"' not in page.data
    answered = client.post(f"/w/{worker.token}/questionnaire",
                           data=MultiDict([("comments", "=cmd|' /C calc'!A0"), ("sharper", "noise"),
                                           ("sharper", "blur"), ("hours", "3")]))
    assert answered.status_code == 303
    assert b'id="done"' in client.get(f"/w/{worker.token}/").data
    assert _pay_and_code(app, worker) == before
    page = admin.get(f"/admin/studies/{slug}").get_data(as_text=True)
    assert "after the task · parts answered: 1" in page and 'id="download-questionnaire"' in page
    # questionnaire.csv: one row per item answered, in the study's order; a formula is kept as text.
    text = admin.get(f"/admin/studies/{slug}/questionnaire.csv").get_data(as_text=True)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["part"], r["item"], r["kind"]) for r in rows] == [
        ("post", "comments", "text"), ("post", "sharper", "multiple"), ("post", "hours", "number")]
    assert rows[1]["value"] == "blur;noise" and rows[2]["value"] == "3"
    assert rows[0]["value"] != "=cmd|' /C calc'!A0" and "cmd|" in rows[0]["value"]  # a formula cell is escaped
    assert rows[0]["worker_id"].startswith("w_") and "WQUEST1" not in text
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        export = export_study(session, study, salt=None)
    assert "questionnaire.csv" in export.files and "WQUEST1" in export.files["questionnaire.csv"]


def _pay_and_code(app, worker) -> tuple:
    """The assignment's code, stage and units, what it earns and the study's payment plan."""
    with app_services(app).sessions() as session:
        assignment = session.get(Assignment, int(worker.assignment_id))
        return (assignment.completion_code, assignment.stage, assignment.pages_completed,
                payments.assignment_earnings(assignment.study, assignment),
                repr(payments.payment_plan(session, assignment.study)))


def test_a_study_without_a_questionnaire_asks_nothing_and_exports_no_file(app, study, admin):
    client = app.test_client()
    worker = WorkerClient(client, study)
    _consent(client, worker.token)
    assert b'id="questionnaire"' not in client.get(f"/w/{worker.token}/").data
    assert client.post(f"/w/{worker.token}/questionnaire", data={"age": "30"}).status_code == 303
    assert _stored(app) == 0
    assert 'id="download-questionnaire"' not in admin.get(f"/admin/studies/{study}").get_data(as_text=True)
    text = admin.get(f"/admin/studies/{study}/questionnaire.csv").get_data(as_text=True)
    assert text.splitlines() == ["worker_id,part,item,kind,value,answered_at"]


@pytest.mark.parametrize("kind", ["rating", "motion"])
def test_every_paradigm_asks_the_pre_task_part_before_its_instructions(app, kind, request, tmp_path):
    if kind == "rating":
        from .rating_support import SMALL, create_rating_study

        slug = create_rating_study(app, request.getfixturevalue("rating_manifest"), tmp_path, **SMALL,
                                   questionnaire={"pre": ["viewing"], "post": ["comments"]})
    else:
        from .motion_support import SMALL, create_motion_study

        slug = create_motion_study(app, request.getfixturevalue("motion_clips"), tmp_path, **SMALL,
                                   questionnaire={"pre": ["viewing"], "post": ["comments"]})
    client = app.test_client()
    worker = WorkerClient(client, slug)
    _consent(client, worker.token)
    assert b'data-part="pre"' in client.get(f"/w/{worker.token}/").data
    assert worker.action("instructions_done").json["error"] == "questionnaire_first"
    assert client.post(f"/w/{worker.token}/questionnaire", data={"device": "laptop"}).status_code == 303
    assert worker.action("instructions_done").status_code == 200 and _stored(app) == 1


TRANSLATED_ITEM = '''
[[questionnaire.items]]
name = "artefact"
part = "pre"
type = "choice"
label = "Which artefact did you notice most?"
options = ["blur", "noise"]
required = true
translations = {de = {label = "Welches Artefakt fiel Ihnen am meisten auf?", options = ["Unschärfe", "Rauschen"]}}
'''


def _bilingual(tmp_path, demo_stimuli, item=TRANSLATED_ITEM, languages='["en", "de"]'):
    path = write_study_file(tmp_path, demo_stimuli, "quest-de", **SMALL_STUDY, questionnaire={"post": ["comments"]})
    path.write_text(path.read_text().replace("[study]\n", f"[study]\nlanguages = {languages}\n", 1) + item)
    return path


def test_a_studys_own_items_are_asked_in_the_workers_language_and_stored_as_written(app, demo_stimuli, tmp_path):
    with app_services(app).sessions() as session:
        slug = create_study(session, read_study_file(_bilingual(tmp_path, demo_stimuli))).slug
        session.commit()
    client = app.test_client()
    worker = WorkerClient(client, slug)
    _consent(client, worker.token)
    german = client.get(f"/w/{worker.token}/?lang=de").get_data(as_text=True)
    assert "Welches Artefakt fiel Ihnen am meisten auf?" in german and "Unschärfe" in german
    assert "Which artefact" not in german and 'value="blur"' in german  # the value sent is the option as written
    english = client.get(f"/w/{worker.token}/?lang=en").get_data(as_text=True)
    assert "Which artefact did you notice most?" in english and "Unschärfe" not in english
    refused = client.post(f"/w/{worker.token}/questionnaire?lang=de", data={"artefact": "Unschärfe"})
    assert refused.status_code == 422 and _stored(app) == 0  # an option is its value, not its translation
    assert client.post(f"/w/{worker.token}/questionnaire", data={"artefact": "blur"}).status_code == 303
    with app_services(app).sessions() as session:
        assert session.scalar(select(QuestionnaireResponse.answers)) == {"artefact": "blur"}


@pytest.mark.parametrize("item, languages, problem", [
    (TRANSLATED_ITEM, '["en"]', "items translated into 'de', which is not one of study.languages"),
    (TRANSLATED_ITEM.replace('["Unschärfe", "Rauschen"]', '["Unschärfe"]'), '["en", "de"]',
     "translations.de.options must be 2 texts, one per option"),
    (TRANSLATED_ITEM.replace('label = "Welches', 'title = "Welches'), '["en", "de"]',
     "translations.de must be a table of label and options"),
])
def test_a_bad_translation_of_an_item_is_refused(demo_stimuli, tmp_path, item, languages, problem):
    with pytest.raises(StudyDefinitionError, match=problem):
        read_study_file(_bilingual(tmp_path, demo_stimuli, item, languages))
