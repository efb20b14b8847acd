"""Questionnaires before and after the task, for every paradigm: declared in the study file, validated on the
server, stored once per assignment and part, exported as ``questionnaire.csv``.

A study file declares them in ``[questionnaire]`` (:class:`QuestionnaireSettings`, the ``[mturk]`` kind of table
section): ``pre`` and ``post`` name ready-made sets (:data:`SETS`: ``demographics``, ``viewing``, ``comments``),
and ``[[questionnaire.items]]`` adds the study's own items (:class:`ItemParams`: a ``choice`` of one option, a
``multiple`` choice, a ``number`` within bounds or a ``text`` within a length), each in its ``part``::

    [questionnaire]
    pre = ["demographics"]
    post = ["viewing", "comments"]

    [[questionnaire.items]]
    name = "sharpness_noticed"
    part = "post"
    type = "choice"
    label = "Did some images look sharper than others?"
    options = ["yes", "no", "not sure"]
    required = true

The pre-task part is a worker page after consent, before the instructions; the post-task part comes after the
work, before the completion page (whose code was given when the work was complete: answers never change pay,
codes or any screening). Answers are validated as a whole (:func:`validate_answers`): a bad answer stores
nothing and names each field's problem.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from flask_babel import LazyString
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from analysis.formats import table_csv

from ..i18n import _, _l
from ..models import Assignment, QuestionnaireResponse, Study, Worker
from ..worker_records import iso_utc, pilot_filter, worker_label
from .params import Fail, declarations, param, value_problem
from .stages import Stage

PARTS = ("pre", "post")
KINDS = ("choice", "multiple", "number", "text")
NAME_PATTERN = (r"[a-z][a-z0-9_]{0,39}", "1-40 lowercase letters, digits or '_', starting with a letter")
MAX_ITEMS = 40            # items in one part: a page a worker can answer
MAX_OPTIONS = 30          # options of one choice
MAX_LABEL = 500           # characters of a label or an option
MAX_TEXT = 2000           # the longest text answer a study may allow
MAX_FORM_BYTES = 64_000   # a questionnaire's POST body (every answer at its longest fits)
QUESTIONNAIRE_COLUMNS = ("worker_id", "part", "item", "kind", "value", "answered_at")


@dataclass(frozen=True)
class StudyText:
    """A study file's own words (an item's label or option) with their translations: shown in the language of
    the page (the request's locale, server/i18n.py) where the study file gives one, else as written."""

    text: str
    translations: tuple[tuple[str, str], ...] = ()  # (locale, text)

    def __str__(self) -> str:
        from flask_babel import get_locale  # None outside a request: the text as written

        return dict(self.translations).get(str(get_locale() or ""), self.text)

    def __len__(self) -> int:
        return len(self.text)


@dataclass(frozen=True)
class Item:
    """One question: ``name`` (the export's ``item``), ``kind`` (:data:`KINDS`), the worker's ``label``,
    ``options`` as ``(value, label)`` pairs (choices; the value is stored), the bounds of a number
    (``low``, ``high``), the longest text (``max_length``) and whether an answer is ``required``."""

    name: str
    kind: str
    label: str | LazyString | StudyText
    options: tuple[tuple[str, str | LazyString | StudyText], ...] = ()
    low: float | None = None
    high: float | None = None
    max_length: int = 500
    required: bool = False


# Ready-made sets a study includes by name. Their values are stable English keys (the export's), their labels
# translated.
SETS: dict[str, tuple[Item, ...]] = {
    "demographics": (
        Item("age", "number", _l("Your age in years"), low=16, high=120, required=True),
        Item("gender", "choice", _l("Gender"), (
            ("female", _l("Female")), ("male", _l("Male")), ("diverse", _l("Non-binary or another gender")),
            ("not_said", _l("Prefer not to say")))),
        Item("vision", "choice", _l("Your eyesight while doing this task"), (
            ("normal", _l("Normal, without glasses or lenses")), ("corrected", _l("Corrected to normal (glasses or lenses worn)")),
            ("impaired", _l("Impaired, not fully corrected")), ("not_said", _l("Prefer not to say"))), required=True),
        Item("colour_vision", "choice", _l("Colour vision"), (
            ("normal", _l("Normal")), ("deficient", _l("A colour vision deficiency (colour blindness)")),
            ("unknown", _l("I do not know")))),
    ),
    "viewing": (
        Item("device", "choice", _l("What did you use for this task?"), (
            ("desktop", _l("A desktop computer with a separate monitor")), ("laptop", _l("A laptop")),
            ("tablet", _l("A tablet")), ("phone", _l("A phone"))), required=True),
        Item("screen_inches", "number", _l("Screen size (diagonal, in inches), if you know it"), low=3, high=120),
        Item("distance_cm", "number", _l("About how far were your eyes from the screen (cm)?"), low=10, high=300),
        Item("lighting", "choice", _l("The room's lighting"), (
            ("dark", _l("Dark")), ("dim", _l("Dim")), ("normal", _l("Normal indoor light")),
            ("bright", _l("Bright, or sunlight on the screen")))),
    ),
    "comments": (
        Item("comments", "text", _l("Any comments on the task (problems, what was unclear)?"), max_length=1000),
    ),
}


@dataclass(frozen=True, kw_only=True)
class ItemParams:
    """The keys of one ``[[questionnaire.items]]`` entry: the study's own question."""
    name: str = param(section="questionnaire.items", required=True, pattern=NAME_PATTERN,
                      doc="the item's name: the export's `item` column, unique in the study")
    part: str = param("post", section="questionnaire.items", choices=PARTS,
                      doc='"pre" (after consent, before the instructions) or "post" (after the work, before the code)')
    type: str = param(section="questionnaire.items", required=True, choices=KINDS,
                      doc='"choice" (one option), "multiple" (any options), "number" (within low..high) or "text"')
    label: str = param(section="questionnaire.items", required=True, doc="the question the worker reads")
    options: tuple[str, ...] = param((), section="questionnaire.items",
                                     doc="a choice's options, as the worker reads them and the export stores them")
    low: float = param(-1e9, section="questionnaire.items", doc="a number's smallest allowed answer")
    high: float = param(1e9, section="questionnaire.items", doc="a number's largest allowed answer")
    max_length: int = param(500, section="questionnaire.items", low=1, high=MAX_TEXT,
                            doc="a text's longest answer, in characters")
    required: bool = param(False, section="questionnaire.items", doc="whether the worker must answer it")
    translations: dict = param({}, section="questionnaire.items",
                               doc='the label and options in the study\'s other languages (of [study] languages): '
                                   '{de = {label = "...", options = ["...", ...]}}, the options in the order above; '
                                   "the export keeps the options as written")


@dataclass(frozen=True, kw_only=True)
class QuestionnaireSettings:
    """The keys of the optional ``[questionnaire]`` table."""
    pre: tuple[str, ...] = param((), section="questionnaire",
                                 doc=f"ready-made sets asked after consent, before the instructions: {', '.join(SETS)}")
    post: tuple[str, ...] = param((), section="questionnaire",
                                  doc="ready-made sets asked after the work, before the completion code")
    items: tuple[dict, ...] = param((), section="questionnaire",
                                    doc="the study's own items: [[questionnaire.items]] tables (name, part, type, "
                                        "label, options, low, high, max_length, required)")


@dataclass(frozen=True, kw_only=True)
class QuestionnaireParams:
    """The optional ``[questionnaire]`` table (a mixin of every paradigm's spec)."""
    SECTION_DOCS: ClassVar[dict[str, str]] = {
        "questionnaire": "Optional questions before (pre) and after (post) the task; answers never change pay or "
                         "codes. Own items: [[questionnaire.items]] tables, see docs/questionnaires.md."}
    questionnaire: dict[str, Any] = param({}, section="questionnaire", table=QuestionnaireSettings,
                                          doc="optional: a questionnaire before and/or after the task")

    def validate(self, fail: Fail) -> None:
        try:
            parts(self.questionnaire)
        except ValueError as exc:
            fail(f"questionnaire: {exc}")
            return
        languages = getattr(self, "languages", ())
        for language in sorted(translated_languages(self.questionnaire) - set(languages)):
            fail(f"questionnaire: items translated into {language!r}, which is not one of study.languages "
                 f"{list(languages)}")


def parts(settings: Mapping[str, Any] | None) -> dict[str, tuple[Item, ...]]:
    """The items of each part (``pre``, ``post``) of a ``[questionnaire]`` table: its sets, then its own items.

    Raises
    ------
    ValueError
        An unknown set, a malformed item, a name used twice, or a part with more than :data:`MAX_ITEMS` items.
    """
    settings = settings or {}
    found: dict[str, list[Item]] = {part: [] for part in PARTS}
    for part in PARTS:
        for name in settings.get(part, ()):
            if name not in SETS:
                raise ValueError(f"{part} names no ready-made set {name!r} (known: {', '.join(SETS)})")
            found[part].extend(SETS[name])
    for number, raw in enumerate(settings.get("items", ()), 1):
        item_part, item = _own_item(raw, number)
        found[item_part].append(item)
    names = [item.name for items in found.values() for item in items]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"item names must be unique, {', '.join(twice)} is used twice")
    for part, items in found.items():
        if len(items) > MAX_ITEMS:
            raise ValueError(f"{part} has {len(items)} items; at most {MAX_ITEMS} fit one page")
    return {part: tuple(items) for part, items in found.items()}


def _own_item(raw: Any, number: int) -> tuple[str, Item]:
    """One ``[[questionnaire.items]]`` table as ``(part, Item)``, its keys checked against :class:`ItemParams`."""
    where = f"items[{number}]"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a table")
    keys = {d.name: d for d in declarations(ItemParams)}
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]} (known: {', '.join(keys)})")
    values = {}
    for name, declared in keys.items():
        if name not in raw:
            if declared.param.required:
                raise ValueError(f"{where}.{name} is required ({declared.param.doc})")
            values[name] = declared.default()
            continue
        value = raw[name]
        problem = _type_problem(value, declared.type) or value_problem(value, declared.param)
        if problem:
            raise ValueError(f"{where}.{name} {problem}")
        values[name] = tuple(value) if isinstance(value, list) else value
    kind, options = values["type"], values["options"]
    if kind in ("choice", "multiple") and not 2 <= len(options) <= MAX_OPTIONS:
        raise ValueError(f"{where}: a {kind} needs 2 to {MAX_OPTIONS} options")
    if kind in ("choice", "multiple") and len(set(options)) != len(options):
        raise ValueError(f"{where}: options must differ")
    if kind not in ("choice", "multiple") and options:
        raise ValueError(f"{where}: only a choice has options")
    if not values["low"] <= values["high"]:
        raise ValueError(f"{where}: low must not exceed high")
    if any(len(text) > MAX_LABEL for text in (values["label"], *options)):
        raise ValueError(f"{where}: a label or option is longer than {MAX_LABEL} characters")
    labels, option_texts = _translated(values["translations"], len(options), where)
    item = Item(values["name"], kind, StudyText(values["label"], labels),
                tuple((o, StudyText(o, tuple((language, texts[k]) for language, texts in option_texts)))
                      for k, o in enumerate(options)),
                low=float(values["low"]), high=float(values["high"]), max_length=values["max_length"],
                required=values["required"])
    return values["part"], item


def _translated(translations: Mapping[str, Any], n_options: int,
                where: str) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """An item's ``translations`` table as ``((locale, label), ...)`` and ``((locale, options), ...)`` (a language
    that translates the options translates all of them, in their order)."""
    labels, options = [], []
    for language, texts in translations.items():
        if not isinstance(texts, Mapping) or set(texts) - {"label", "options"}:
            raise ValueError(f"{where}.translations.{language} must be a table of label and options")
        label, translated = texts.get("label"), texts.get("options")
        if label is not None:
            if not isinstance(label, str) or not label or len(label) > MAX_LABEL:
                raise ValueError(f"{where}.translations.{language}.label must be a text of 1 to {MAX_LABEL} characters")
            labels.append((language, label))
        if translated is not None:
            if (not isinstance(translated, (list, tuple)) or len(translated) != n_options
                    or not all(isinstance(t, str) and 0 < len(t) <= MAX_LABEL for t in translated)):
                raise ValueError(f"{where}.translations.{language}.options must be {n_options} texts, one per option")
            options.append((language, tuple(translated)))
    return tuple(labels), tuple(options)


def translated_languages(settings: Mapping[str, Any] | None) -> set[str]:
    """The languages the study's own items are translated into (each must be one of ``[study] languages``)."""
    return {language for raw in (settings or {}).get("items", ()) if isinstance(raw, Mapping)
            for language in (raw.get("translations") or {})}


def _type_problem(value: Any, expected: Any) -> str | None:
    if expected is dict:
        return None if isinstance(value, Mapping) else f"has the wrong type: {value!r}"
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif expected is str:
        ok = isinstance(value, str)
    else:  # a tuple of strings
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value)
    return None if ok else f"has the wrong type: {value!r}"


def study_parts(spec) -> dict[str, tuple[Item, ...]]:
    """The questionnaire of a study's spec (none for a spec without ``[questionnaire]``)."""
    return parts(getattr(spec, "questionnaire", None))


# ---------------------------------------------------------------- answers

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def validate_answers(items: Sequence[Item], form: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The answers a submitted form gives to ``items`` and the problems of each field, ``(answers, errors)``.

    ``form`` maps a field name to its values (a werkzeug MultiDict, or a dict of lists). An answer is a string
    (choice, text), a number, a list of strings (multiple) or None (not answered). Fields that name no item are
    ignored. Errors (field name -> a message for the worker, in their language) leave nothing to store.
    """
    answers: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for item in items:
        given = [v.strip() for v in _values(form, item.name) if isinstance(v, str)]
        given = [v for v in given if v]
        values = dict(item.options)
        if not given:
            answers[item.name] = None
            if item.required:
                errors[item.name] = _("Please answer this question.")
            continue
        if item.kind == "multiple":
            if len(set(given)) != len(given) or not set(given) <= set(values):
                errors[item.name] = _("Please choose among the options shown.")
            else:
                answers[item.name] = [value for value, _label in item.options if value in given]
            continue
        if len(given) > 1:
            errors[item.name] = _("Please give one answer.")
        elif item.kind == "choice":
            if given[0] not in values:
                errors[item.name] = _("Please choose one of the options shown.")
            else:
                answers[item.name] = given[0]
        elif item.kind == "number":
            number = _number(given[0])
            if number is None:
                errors[item.name] = _("Please enter a number.")
            elif not item.low <= number <= item.high:
                # The bounds are formatted before the call: Babel cannot extract an f-string argument.
                low, high = format(item.low, "g"), format(item.high, "g")
                errors[item.name] = _("Please enter a number from %(low)s to %(high)s.", low=low, high=high)
            else:
                answers[item.name] = int(number) if number.is_integer() else number
        else:
            text = given[0].replace("\r\n", "\n")
            if len(text) > item.max_length:
                errors[item.name] = _("Please write at most %(n)s characters.", n=item.max_length)
            elif _CONTROL.search(text):
                errors[item.name] = _("Please remove the control characters from this answer.")
            else:
                answers[item.name] = text
    return answers, errors


def _values(form: Mapping[str, Any], name: str) -> list[Any]:
    if hasattr(form, "getlist"):
        return form.getlist(name)
    value = form.get(name)
    return list(value) if isinstance(value, (list, tuple)) else ([] if value is None else [value])


def _number(text: str) -> float | None:
    if len(text) > 32:
        return None
    try:
        number = float(text.replace(",", "."))  # a decimal comma, as many locales write it
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def answered(session: Session, assignment_id: int, part: str) -> bool:
    """Whether the assignment's ``part`` was answered (stored)."""
    return session.scalar(select(QuestionnaireResponse.id).where(
        QuestionnaireResponse.assignment_id == assignment_id, QuestionnaireResponse.part == part)) is not None


def pending_part(session: Session, assignment: Assignment, spec) -> str | None:
    """The part the worker answers now, or None: ``pre`` at the instructions (before them) and ``post`` once
    the work is complete (before the completion page), while the study has items there and the assignment
    has not answered them yet. Simulated participants (``perceptlab simulate``) are never asked."""
    part = {Stage.INSTRUCTIONS: "pre", Stage.COMPLETED: "post"}.get(assignment.stage)
    if part is None or not study_parts(spec)[part] or assignment.worker.simulated:
        return None
    return None if answered(session, assignment.id, part) else part


def check_pre_answered(session: Session, assignment: Any, spec, action: str) -> None:
    """Refuse the action ``instructions_done`` (409 ``questionnaire_first``) while the assignment (an object or a
    row) still owes the pre-task part: the instructions come after it, however the action is sent."""
    from ..errors import ApiError

    if action != "instructions_done" or assignment.stage != Stage.INSTRUCTIONS or not study_parts(spec)["pre"]:
        return
    if pending_part(session, session.get(Assignment, assignment.id), spec) == "pre":
        raise ApiError(409, "questionnaire_first", "answer the questionnaire before the instructions")


def store_answers(session: Session, assignment: Assignment, part: str, answers: dict[str, Any]) -> bool:
    """Store the (validated) answers of the assignment's ``part``; False when it was answered already (the first
    answers are kept: a repeated submit changes nothing). The caller commits."""
    try:
        with session.begin_nested():
            session.add(QuestionnaireResponse(study_id=assignment.study_id, worker_id=assignment.worker_id,
                                              assignment_id=assignment.id, part=part, answers=answers))
    except IntegrityError:
        return False
    return True


# ---------------------------------------------------------------- export

def questionnaire_rows(session: Session, study: Study, *, salt: bytes | None,
                       include_pilot: bool = False) -> list[dict[str, Any]]:
    """questionnaire.csv's rows: one per participant's answered part and item (in the order the study asks
    them), ``value`` blank when not answered, a multiple choice's options joined by ``;``."""
    kinds = {item.name: item.kind for items in study_parts_of(study).values() for item in items}
    order = {name: k for k, name in enumerate(kinds)}
    rows = []
    for raw_id, part, answers, created in session.execute(
            select(Worker.external_id, QuestionnaireResponse.part, QuestionnaireResponse.answers,
                   QuestionnaireResponse.created_at)
            .join(Worker, Worker.id == QuestionnaireResponse.worker_id)
            .where(QuestionnaireResponse.study_id == study.id, pilot_filter(include_pilot))
            .order_by(QuestionnaireResponse.id)):
        for name in sorted(answers, key=lambda n: order.get(n, len(order))):
            value = answers[name]
            rows.append({"worker_id": worker_label(raw_id, salt), "part": part, "item": name,
                         "kind": kinds.get(name, ""), "value": _cell(value), "answered_at": iso_utc(created)})
    return rows


def study_parts_of(study: Study) -> dict[str, tuple[Item, ...]]:
    """The questionnaire of a stored study (its config's ``questionnaire`` table)."""
    try:
        return parts(study.config.get("questionnaire"))
    except ValueError:  # stored before a rule changed: export what was stored, kinds unknown
        return {part: () for part in PARTS}


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list):
        return ";".join(value)
    return value


def questionnaire_csv_text(session: Session, study: Study, *, salt: bytes | None, include_pilot: bool = False) -> str:
    """questionnaire.csv of a study (ARCHITECTURE.md, File formats)."""
    return table_csv(QUESTIONNAIRE_COLUMNS, questionnaire_rows(session, study, salt=salt, include_pilot=include_pilot))
