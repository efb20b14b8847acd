"""Study parameters declared once: type, default, bounds and documentation of every key of a study file.

A paradigm's spec is a frozen, keyword-only dataclass. Each field that a study file sets is declared with
:func:`param` as its default; the field's annotation is its type. From that one declaration come

- the documented study file of ``perceptlab study template`` (:func:`study_template`),
- reading a parsed study file: sections, keys, types, required keys, defaults (:func:`parse_spec`),
- the simple checks: bounds, choices, patterns, amounts of money (:func:`check_spec`),

as a jsPsych plugin's ``info`` declares its parameters once. Rules that tie several parameters together
(``max_pages >= min_pages``) stay in a ``validate(self, fail)`` method of the spec class; :func:`check_spec`
calls the ``validate`` of every class of the spec's MRO that defines one, base classes first (so a mixin's
rules hold in every spec that inherits it, without ``super()`` calls).

The sections every study file shares are mixins that each spec inherits: :class:`StudyParams` (``[study]``
slug, name, seed), :class:`EntryParams` (``[entry]``), :class:`TextsParams` (``[texts]`` researcher and
contact) and :class:`MTurkParams` (the optional ``[mturk]`` table, kept whole as a dict: see
:class:`MTurkSettings`). The sections of paradigms that work in pages (``[pages]``, ``[quality]``,
``[display]``) are mixins too (:mod:`server.paradigms.sections`); a spec keeps a default of its own for a
mixin's key with :func:`redeclare` (same section, checks and place; another default, another doc), never
with a copy. Consent and instructions differ between paradigms, so each declares its own.

The template orders sections as ``[study]`` first, then the paradigm's own sections in the order of their
first field, then the shared sections of its mixins that name a ``SHARED_SECTION`` (in the order of its
bases), then :data:`TRAILING_SECTIONS` (``[entry]``, ``[texts]``, ``[stopping]``, ``[mturk]``); keys in field
order (a mixin's keys before the spec's own).
A ``SECTION_DOCS`` class variable (section -> text) of any class of the MRO adds comment lines under a
section's header.

Example
-------
A spec for a rating paradigm (the rating paradigm's package holds the real one)::

    from dataclasses import dataclass
    from pathlib import Path
    from typing import ClassVar

    from server.paradigms.params import (TEXT_PLACEHOLDER, EntryParams, MTurkParams, StudyParams,
                                         TextsParams, param, parse_spec, study_template)

    @dataclass(frozen=True, kw_only=True)
    class RatingSpec(StudyParams, EntryParams, TextsParams, MTurkParams):
        SECTION_DOCS: ClassVar[dict[str, str]] = {"session": "What one participant rates."}
        kind: str = param("rating", section="study", choices=("rating",), doc="the paradigm: rating")
        images: tuple[str, ...] = param(section="study", required=True, example=("images/manifest.json",),
                                        doc="image manifests, relative to this file")
        images_per_session: int = param(40, section="session", low=1, doc="images one session shows")
        scale_points: int = param(5, section="session", choices=(5, 7, 9), doc="points of the rating scale")
        reward_per_session: str = param("2.00", section="session", money=True, doc="the HIT's reward")
        consent: str = param("...", section="texts", placeholder=TEXT_PLACEHOLDER, doc="shown before the task")

        def validate(self, fail):        # rules between parameters only
            if self.images_per_session > 1000:
                fail("session.images_per_session above 1000 makes a session too long")

    TEMPLATE = study_template(RatingSpec, header="perceptlab rating study: `perceptlab study create study.toml`",
                              examples={"slug": "ratings-2026", "mturk": {"title": "Rate images"}})
    spec = parse_spec(RatingSpec, {"study": {"kind": "rating", "images": ["m.json"]}}, Path("s.toml"))
    assert spec.slug == "s" and spec.scale_points == 5

``parse_spec`` raises :class:`~server.paradigms.studyfile.StudyDefinitionError` naming the file and the key
(``s.toml: session.scale_points must be one of 5, 7, 9, got 4``).
"""
from __future__ import annotations

import json
import math
import re
import textwrap
import typing
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

from ..i18n import DEFAULT_LOCALE, shipped_locales
from .studyfile import (MAX_DOLLARS, RECRUITERS, StoredSpec, StudyDefinitionError, is_dollar_amount, slugify,
                        validate_recruiter)

# The metadata key of a declared field (dataclasses.Field.metadata).
PARAM_KEY = "perceptlab.param"
# Sections every template ends with, in this order (shared mixins); [study] always comes first.
LEADING_SECTIONS = ("study",)
TRAILING_SECTIONS = ("entry", "texts", "stopping", "questionnaire", "mturk")
TEMPLATE_WIDTH = 112     # characters per template line that wrapping aims for
COMMENT_COLUMN_CAP = 44  # a key line longer than this has its documentation on the lines below it
# What the template shows, commented out, for a long text left at its default (``placeholder=``).
TEXT_PLACEHOLDER = '"""..."""'

# Every integer key's implicit bound: PostgreSQL's integer columns (SQLite would store more; both refuse alike).
INT_LIMIT = 2**31 - 1

# What a spec's ``validate`` hook gets: ``fail(message)`` raises StudyDefinitionError naming the file.
Fail = Callable[[str], None]


@dataclass(frozen=True)
class Param:
    """What :func:`param` declares about one study-file key (stored in the field's metadata)."""
    section: str
    doc: str
    low: float | None = None
    high: float | None = None
    above: float | None = None
    below: float | None = None
    choices: tuple[Any, ...] | None = None
    example: Any = None
    required: bool = False
    money: bool = False
    pattern: tuple[str, str] | None = None
    fallback: Callable[[dict[str, Any], Path], Any] | None = None
    placeholder: str | None = None
    table: type | None = None


def param(default: Any = MISSING, *, section: str, doc: str, low: float | None = None, high: float | None = None,
          above: float | None = None, below: float | None = None, choices: tuple[Any, ...] | None = None,
          example: Any = None, required: bool = False, money: bool = False,
          pattern: tuple[str, str] | None = None, fallback: Callable[[dict[str, Any], Path], Any] | None = None,
          placeholder: str | None = None, table: type | None = None) -> Any:
    """Declare a study-file key as the default of a spec dataclass field (its annotation is its type).

    Parameters
    ----------
    default
        The value when the study file omits the key (and of specs built in code). A dict or list is copied
        for every spec. Omitted: the field has no default (``required`` keys, or keys with a ``fallback``).
    section
        The study file's table holding the key (``"design"`` for ``[design] votes_per_pair``).
    doc
        What the key means, for people: the template's comment. Required and non-empty.
    low, high
        Inclusive bounds of a number (``low=1``: at least 1). NaN fails every bound.
    above, below
        Exclusive bounds of a number (``above=0``: positive; ``low=0, below=1``: in [0, 1)).
    choices
        The values allowed.
    example
        The value the template shows instead of the default (``slug = "interp-2026"``); None: the default.
    required
        The study file must give the key, with a non-empty value.
    money
        A dollar amount kept as a string ("1.50"): a number in the file (``0.5``) is read as its text, so no
        binary fraction reaches a payment; at most two decimals, not negative.
    pattern
        ``(regular expression, what it means)``: a string value must match it whole (the message says the
        meaning: "1-64 lowercase letters, digits or '-'").
    fallback
        ``fallback(values, path) -> value`` when the file omits the key: ``values`` holds every value read or
        defaulted so far (fields in declaration order), ``path`` the study file. The default still serves
        specs built in code and stored configs.
    placeholder
        TOML text the template shows commented out (:data:`TEXT_PLACEHOLDER` for a long text): the key is documented
        but left at its default.
    table
        A dataclass whose :func:`param` fields are the keys of this section; the field (a ``dict``) keeps the
        keys a file gives, checked against them (the ``[mturk]`` table: :class:`MTurkSettings`). The template
        shows the section commented out.

    Returns
    -------
    dataclasses.Field
        To be assigned as the field's default.
    """
    if not doc.strip():
        raise TypeError(f"param in [{section}] needs its documentation (doc=...)")
    if default is MISSING and not required and fallback is None:
        raise TypeError(f"param in [{section}] needs a default, required=True or a fallback")
    meta = Param(section=section, doc=" ".join(doc.split()), low=low, high=high, above=above, below=below,
                 choices=tuple(choices) if choices is not None else None, example=example, required=required,
                 money=money, pattern=pattern, fallback=fallback, placeholder=placeholder, table=table)
    metadata = {PARAM_KEY: meta}
    if default is MISSING:
        return field(metadata=metadata)
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Declared:
    """One declared key of a spec class: the field's name, its type and its :class:`Param`."""
    name: str
    type: Any
    param: Param
    field: Field

    @property
    def key(self) -> str:
        """``section.key`` as messages name it."""
        return f"{self.param.section}.{self.name}"

    def default(self) -> Any:
        """The field's default (a fresh copy for a dict or list); MISSING when it has none."""
        if self.field.default_factory is not MISSING:
            return self.field.default_factory()
        return self.field.default


@cache
def declarations(spec_class: type) -> tuple[Declared, ...]:
    """Every field of ``spec_class`` declared with :func:`param`, in field order (base classes first)."""
    hints = typing.get_type_hints(spec_class)
    return tuple(Declared(f.name, hints[f.name], f.metadata[PARAM_KEY], f) for f in fields(spec_class)
                 if PARAM_KEY in f.metadata)


def sections(spec_class: type) -> list[str]:
    """The study file's sections in template order: [study], the paradigm's own, the shared sections its
    mixins declare as ``SHARED_SECTION`` (in the order of its bases: ``[pages]``, ``[quality]``, ``[display]``
    of server/paradigms/sections.py), then :data:`TRAILING_SECTIONS`."""
    found = list(dict.fromkeys(d.param.section for d in declarations(spec_class)))
    leading = [s for s in LEADING_SECTIONS if s in found]
    trailing = [s for s in TRAILING_SECTIONS if s in found]
    shared = [s for s in dict.fromkeys(cls.__dict__.get("SHARED_SECTION") for cls in spec_class.__mro__)
              if s in found and s not in leading and s not in trailing]
    return leading + [s for s in found if s not in leading + shared + trailing] + shared + trailing


def redeclare(mixin: type, name: str, default: Any = MISSING, **changes: Any) -> Any:
    """A mixin's key declared again in a spec with its own ``default`` (and other :func:`param` arguments,
    ``doc=`` among them): a paradigm keeps its default without a copy of the declaration. The field keeps its
    place (dataclasses keep a redefined field where its base declared it), its section and its checks.

    Example: ``quiz_size: int = redeclare(QualityParams, "quiz_size", 4)`` in the rating spec.
    """
    declared = next(d for d in declarations(mixin) if d.name == name)
    arguments = {f.name: getattr(declared.param, f.name) for f in fields(Param)} | changes
    return param(declared.default() if default is MISSING else default, **arguments)


def section_of(spec_class: type) -> dict[str, str]:
    """Field name -> the section of its key, for every declared key of ``spec_class``."""
    return {d.name: d.param.section for d in declarations(spec_class)}


def defaults(spec_class: type) -> dict[str, Any]:
    """Field name -> default of every declared key that has one (a table's defaults: :data:`MTURK_DEFAULTS`)."""
    return {d.name: d.default() for d in declarations(spec_class) if d.default() is not MISSING}


def section_docs(spec_class: type) -> dict[str, str]:
    """Section -> its comment: the ``SECTION_DOCS`` of every class of the MRO, subclasses winning."""
    docs: dict[str, str] = {}
    for cls in reversed(spec_class.__mro__):
        docs.update(cls.__dict__.get("SECTION_DOCS", {}))
    return docs


# ---------------------------------------------------------------- reading a study file

def parse_spec(spec_class: type, data: Mapping[str, Any], path: Path, *, kind: str | None = None):
    """The validated spec of parsed TOML ``data`` read from ``path``.

    Every section and key must be declared, every value of its type (an int is read as a float where a
    float is declared; a list as a tuple); required keys must be given, the others take their default or
    fallback. A ``base_dir`` field (undeclared) gets the file's folder, for paths relative to the file.
    Then :func:`check_spec`.

    Parameters
    ----------
    spec_class
        A frozen, keyword-only dataclass whose file keys are declared with :func:`param`.
    data
        The parsed study file (:func:`~server.paradigms.studyfile.load_study_toml`).
    path
        The study file: named in every message; its name gives fallbacks such as the slug.
    kind
        The paradigm's kind when the spec declares no ``kind`` field: ``[study] kind`` may then name it (the
        registry chose the spec by it) and is not stored.

    Raises
    ------
    StudyDefinitionError
        ``"<path>: <section>.<key> ..."``: an unknown section or key, a wrong type, a missing required key,
        a value out of bounds, or a broken rule between parameters.
    """
    declared = declarations(spec_class)
    by_section: dict[str, dict[str, Declared]] = {}
    for d in declared:
        by_section.setdefault(d.param.section, {})[d.name] = d
    known_sections = sections(spec_class)
    values: dict[str, Any] = {}
    for section, content in data.items():
        if section not in by_section:
            raise StudyDefinitionError(f"{path}: unknown section [{section}] (known: {', '.join(known_sections)})")
        if not isinstance(content, dict):
            raise StudyDefinitionError(f"{path}: [{section}] must be a table")
        table = next((d for d in by_section[section].values() if d.param.table is not None), None)
        if table is not None:
            values[table.name] = _read_table(table, content, path)
            continue
        for key, value in content.items():
            if section == "study" and key == "kind" and kind is not None and "kind" not in by_section[section]:
                if value != kind:
                    raise StudyDefinitionError(f"{path}: study.kind must be {kind!r} here, got {value!r}")
                continue
            found = by_section[section].get(key)
            if found is None:
                raise StudyDefinitionError(f"{path}: unknown key {section}.{key}")
            values[found.name] = _typed(value, found.type, found.param, found.key, path)
    for d in declared:
        if d.param.required and (d.name not in values or values[d.name] in ("", (), [], {})):
            raise StudyDefinitionError(f"{path}: {d.key} is required ({d.param.doc})")
    known = {d.name: d.default() for d in declared if d.default() is not MISSING} | values
    for d in declared:
        if d.name not in values and d.param.fallback is not None:
            values[d.name] = known[d.name] = d.param.fallback(known, path)
    if "base_dir" in {f.name for f in fields(spec_class)}:
        values["base_dir"] = str(path.parent.resolve())
    spec = spec_class(**values)
    check_spec(spec, str(path))
    return spec


def _read_table(table: Declared, content: dict[str, Any], path: Path) -> dict[str, Any]:
    """A table section (``[mturk]``) as the dict of the keys it gives, each of its declared type."""
    keys = {d.name: d for d in declarations(table.param.table)}
    read = {}
    for key, value in content.items():
        if key not in keys:
            raise StudyDefinitionError(f"{path}: unknown key {table.param.section}.{key} (known: {', '.join(keys)})")
        read[key] = _typed(value, keys[key].type, keys[key].param, f"{table.param.section}.{key}", path)
    return read


def _typed(value: Any, expected: Any, declared: Param, key: str, path: Path) -> Any:
    """``value`` as the declared type: ints as floats, lists as tuples, numbers as money text."""
    origin = typing.get_origin(expected) or expected
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin in (tuple, list):
        item_type = typing.get_args(expected)[0] if typing.get_args(expected) else str
        if not isinstance(value, list) or not all(isinstance(v, item_type) and v != "" for v in value):
            raise StudyDefinitionError(f"{path}: {key} must be a list of {_type_name(item_type)}s, got {value!r}")
        return origin(value)
    if expected is float and is_number:
        return float(value)
    if expected is str and declared.money and is_number:
        return str(value)
    if expected is int and is_number and isinstance(value, int):
        return value
    if expected in (str, bool, dict) and isinstance(value, expected):
        return value
    if expected in (int, float, str, bool, dict):
        raise StudyDefinitionError(f"{path}: {key} must be {_type_name(expected)}, got {value!r}")
    raise TypeError(f"{key}: no reading for the declared type {expected!r}")


def _type_name(expected: Any) -> str:
    return {dict: "a table"}.get(expected, getattr(expected, "__name__", str(expected)))


# ---------------------------------------------------------------- checking a spec

def check_spec(spec, where: str = "study") -> None:
    """Check every declared bound, choice, pattern and amount of ``spec``, then the ``validate`` rules of
    its classes (base classes first).

    Raises
    ------
    StudyDefinitionError
        ``"<where>: <section>.<key> ..."`` for the first impossible value.
    """
    def fail(message: str) -> None:
        raise StudyDefinitionError(f"{where}: {message}")

    for d in declarations(type(spec)):
        value = getattr(spec, d.name)
        if d.param.table is not None:
            _check_table(d, value, fail)
        else:
            problem = value_problem(value, d.param)
            if problem:
                fail(f"{d.key} {problem}")
    for cls in reversed(type(spec).__mro__):
        rule = cls.__dict__.get("validate")
        if rule is not None:
            rule(spec, fail)


def _check_table(table: Declared, content: Mapping[str, Any], fail: Fail) -> None:
    keys = {d.name: d for d in declarations(table.param.table)}
    for key, value in content.items():
        if key not in keys:
            fail(f"unknown key {table.param.section}.{key} (known: {', '.join(keys)})")
        problem = value_problem(value, keys[key].param)
        if problem:
            fail(f"{table.param.section}.{key} {problem}")


def value_problem(value: Any, declared: Param) -> str | None:
    """Why ``value`` breaks the simple rules of its declaration ("must be at least 1, got 0"), or None.

    Beyond its declared bounds, every number must be finite, every integer fit :data:`INT_LIMIT` and no text
    hold a NUL character (no database column stores one)."""
    if declared.choices is not None and value not in declared.choices:
        return f"must be {_one_of(declared.choices)}, got {value!r}"
    if declared.money and not (isinstance(value, str) and is_dollar_amount(value)):
        return f'must be a dollar amount like "0.50" (at most {MAX_DOLLARS}), got {value!r}'
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_LIMIT:
        side, limit = ("most", INT_LIMIT) if value > 0 else ("least", -INT_LIMIT)
        return f"must be at {side} {limit}, got {value!r}"
    if any(isinstance(v, str) and "\x00" in v for v in (value if isinstance(value, (tuple, list)) else (value,))):
        return "must not hold a NUL character (\\u0000)"
    if declared.pattern is not None and not (isinstance(value, str) and re.fullmatch(declared.pattern[0], value)):
        return f"must be {declared.pattern[1]}, got {value!r}"
    bounds = (declared.low, declared.high, declared.above, declared.below)
    if any(b is not None for b in bounds) and isinstance(value, (int, float)) and not _within(value, declared):
        return f"must be {_range_text(declared)}, got {value!r}"
    if isinstance(value, float) and not math.isfinite(value):  # within its bounds: inf above a lower one
        return f"must be a finite number, got {value!r}"
    return None


def _within(value: float, p: Param) -> bool:
    # Written so that NaN fails every bound.
    return ((p.low is None or value >= p.low) and (p.high is None or value <= p.high)
            and (p.above is None or value > p.above) and (p.below is None or value < p.below)
            and not (isinstance(value, float) and math.isnan(value)))


def _range_text(p: Param) -> str:
    lower = (p.low, "[") if p.low is not None else (p.above, "(") if p.above is not None else None
    upper = (p.high, "]") if p.high is not None else (p.below, ")") if p.below is not None else None
    if lower and upper:
        return f"in {lower[1]}{lower[0]:g}, {upper[0]:g}{upper[1]}"
    if lower:
        return f"at least {lower[0]:g}" if lower[1] == "[" else f"above {lower[0]:g}"
    return f"at most {upper[0]:g}" if upper[1] == "]" else f"below {upper[0]:g}"


def allowed_values(declared: Param) -> str:
    """What :func:`value_problem` lets through, for people ("in [0, 1]", "one of 5, 7 or 9", a pattern's
    meaning, a dollar amount); "" when only the type is checked. The study file reference (docs/) shows it."""
    parts = []
    if declared.choices is not None:
        parts.append(f"{'one of ' if len(declared.choices) > 1 else ''}{_one_of(declared.choices)}")
    if any(b is not None for b in (declared.low, declared.high, declared.above, declared.below)):
        parts.append(_range_text(declared))
    if declared.money:
        parts.append(f'a dollar amount like "0.50" (at most {MAX_DOLLARS})')
    if declared.pattern is not None:
        parts.append(declared.pattern[1])
    return "; ".join(parts)


def _one_of(choices: tuple[Any, ...]) -> str:
    shown = [repr(c) for c in choices]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


# ---------------------------------------------------------------- the documented template

def study_template(spec_class: type, *, header: str, examples: Mapping[str, Any] | None = None,
                   mturk: Mapping[str, Any] | None = None, width: int = TEMPLATE_WIDTH) -> str:
    """The documented study file of ``perceptlab study template``: every declared key at its default (or
    ``example``) with its documentation; keys with a ``placeholder`` or a ``fallback`` (and no ``example``)
    and table sections commented out, so that they keep their default.

    Parameters
    ----------
    spec_class
        The spec whose declarations make the file.
    header
        The file's first comment (lines become ``# ...`` lines).
    examples
        Field name -> the value shown instead of its declared ``example`` (or default): a paradigm's own
        ``slug`` and ``name``; for a table field, the keys shown over the table's defaults (a paradigm's HIT
        texts, ``Paradigm.mturk_settings``, over :data:`MTURK_DEFAULTS`).
    mturk
        The paradigm's HIT texts shown in the ``[mturk]`` table: the same as ``examples={"mturk": ...}``.
    width
        The line width documentation is wrapped to.

    Returns
    -------
    str
        TOML that :func:`parse_spec` reads back to the defaults (and the examples).
    """
    declared = declarations(spec_class)
    docs = section_docs(spec_class)
    examples = {**(examples or {}), **({"mturk": mturk} if mturk else {})}
    lines = [f"# {line}" for line in header.splitlines()]
    for section in sections(spec_class):
        keys = [d for d in declared if d.param.section == section]
        table = next((d for d in keys if d.param.table is not None), None)
        if table is not None:
            shown = {**defaults(table.param.table), **examples.get(table.name, {})}
            entries = [(f"{d.name} = {toml_value(shown[d.name])}", d.param.doc)
                       for d in declarations(table.param.table)]
            lines += ["", *_key_lines([(f"[{section}]", docs.get(section, table.param.doc))], width, "# ")]
            lines += _key_lines(entries, width, "# ")
            continue
        lines += ["", f"[{section}]"]
        if section in docs:
            lines += [f"# {text}" for text in textwrap.wrap(docs[section], width - 2)]
        entries = []
        for d in keys:
            example = examples.get(d.name, d.param.example)
            if d.param.placeholder is not None or (d.param.fallback is not None and example is None):
                # Left to its default or fallback: documented, commented out.
                shown = d.param.placeholder if d.param.placeholder is not None else toml_value(d.default())
                entries.append((f"# {d.name} = {shown}", d.param.doc))
            else:
                value = example if example is not None else d.default()
                entries.append((f"{d.name} = {toml_value(value)}", d.param.doc))
        lines += _key_lines(entries, width, "")
    return "\n".join(lines) + "\n"


def _key_lines(entries: list[tuple[str, str]], width: int, prefix: str) -> list[str]:
    """``key = value  # doc`` lines, documentation aligned in one column and wrapped; the documentation of a
    key line too long for the column starts on the line below it."""
    fitting = [len(prefix + code) for code, _ in entries if len(prefix + code) <= COMMENT_COLUMN_CAP]
    column = max(fitting, default=len(prefix)) + 2
    indent = prefix.ljust(column) if prefix else " " * column
    out = []
    for code, doc in entries:
        line = prefix + code
        wrapped = textwrap.wrap(doc, max(width - column - 2, 30))
        if len(line) > COMMENT_COLUMN_CAP:
            out += [line] + [f"{indent}# {text}" for text in wrapped]
            continue
        out.append(f"{line.ljust(column)}# {wrapped[0]}")
        out += [f"{indent}# {text}" for text in wrapped[1:]]
    return out


def toml_value(value: Any) -> str:
    """A TOML literal of a str, bool, int, float or a list or tuple of those (strings as basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


# ---------------------------------------------------------------- the sections every study file shares

@dataclass(frozen=True, kw_only=True)
class MTurkSettings:
    """The keys of the optional ``[mturk]`` table (``perceptlab mturk launch``; server/mturk.py reads them)."""
    title: str = param("Compare the quality of images", section="mturk", doc="the HIT's title")
    description: str = param(
        "Look at pairs of images and choose the one that looks better (closer to the reference).",
        section="mturk", doc="the HIT's description, as workers see it in the list of HITs")
    keywords: str = param("image, quality, comparison, perception, survey", section="mturk",
                          doc="the HIT's search keywords, comma-separated")
    assignment_duration_minutes: int = param(120, section="mturk", low=1,
                                             doc="how long a worker may hold the HIT once accepted")
    auto_approval_days: int = param(3, section="mturk", low=0,
                                    doc="days after which MTurk approves a submitted assignment by itself")
    min_approval_rate: int = param(98, section="mturk", low=0, high=100,
                                   doc="workers need at least this percentage of approved HITs")
    min_approved_hits: int = param(1000, section="mturk", low=0, doc="... and at least this many approved HITs")
    locales: list[str] = param(["US"], section="mturk", doc="workers' country codes; empty = anywhere")
    masters: bool = param(False, section="mturk", doc="true: MTurk Masters only")
    took_part_scope: str = param("lab", section="mturk", choices=("lab", "study"),
                                 doc='"lab": one "took part" qualification keeps repeaters out across the lab\'s '
                                     'studies; "study": one per study')
    require_screening: int = param(0, section="mturk", low=0, high=100,
                                   doc="above 0: only workers whose screening score (r x 100, the lab's screening "
                                       "qualification) is at least this (e.g. 90)")


# The [mturk] defaults, over which a paradigm's HIT texts and a study file's [mturk] table go (server/mturk.py).
MTURK_DEFAULTS: dict[str, Any] = defaults(MTurkSettings)

SLUG_PATTERN = ("[a-z0-9][a-z0-9-]{0,63}", "1-64 lowercase letters, digits or '-'")


@dataclass(frozen=True, kw_only=True)
class StudyParams(StoredSpec):
    """``[study]`` slug, name and seed: every study file's."""
    slug: str = param(section="study", pattern=SLUG_PATTERN, example="study-2026",
                      fallback=lambda values, path: slugify(path.stem),
                      doc="URL-safe name used in worker links (default: the file's name)")
    name: str = param(section="study", example="My study",
                      fallback=lambda values, path: values["slug"],
                      doc="the study's title for people (default: the slug)")
    seed: int = param(0, section="study", low=0, doc="seed of every random choice the study makes")
    languages: tuple[str, ...] = param(
        (DEFAULT_LOCALE,), section="study",
        doc="the languages workers may see the study in, each a shipped catalog (docs/languages.md); a worker's "
            "is chosen at entry: ?lang=, the recruiter's ?locale=, the browser's languages, then default_language")
    default_language: str = param(DEFAULT_LOCALE, section="study",
                                  doc="one of languages: the language of [texts], and of workers no other rule places")

    def validate(self, fail: Fail) -> None:
        """Every language has a shipped catalog; the default is one of them."""
        unknown = [language for language in self.languages if language not in shipped_locales()]
        if unknown:
            fail(f"study.languages has no catalog for {', '.join(unknown)} (shipped: {', '.join(shipped_locales())})")
        if self.default_language not in self.languages:
            fail(f"study.default_language {self.default_language!r} must be one of study.languages "
                 f"{list(self.languages)}")


@dataclass(frozen=True, kw_only=True)
class EntryParams:
    """The ``[entry]`` table: who may enter, and what the end page does (server/paradigms/entry.py,
    server/paradigms/recruiters.py)."""
    SECTION_DOCS: ClassVar[dict[str, str]] = {
        "entry": "Who may enter, by plain links (/s/<slug>?participant=ID) and MTurk HITs alike (and the JSON "
                 "entry)."}
    allow_anonymous: bool = param(False, section="entry",
                                  doc="true: a link without ?participant= starts under a generated anon-... ID")
    signed_links: bool = param(
        False, section="entry",
        doc="true: links also carry sig=... (print them: perceptlab study links SLUG ID...), so invented "
            "participant IDs are refused; MTurk entries carry the study's MTurk signature (perceptlab mturk "
            "launch puts it in the HIT's URL)")
    access_key: str = param(
        "", section="entry", pattern=("|[A-Za-z0-9_-]{8,200}",
                                      "8-200 letters, digits, '_' or '-' (it goes into links), or empty"),
        doc="non-empty: links and HITs must carry key=<this> (one secret shared by all participants, e.g. "
            "appended to a Prolific study URL; launch adds it to the HIT's URL); 8+ letters, digits, _ or -")
    external_hits: bool = param(
        False, section="entry",
        doc="MTurk entries (?assignmentId=...&hitId=...&workerId=...) must name a HIT posted with perceptlab "
            "mturk launch, so a study without one refuses them; true: admit them while the study has none (HITs "
            "you post yourself with the URL that perceptlab study create prints)")
    entry_limit: int = param(
        -1, section="entry", low=-1,
        doc="new participants one network address may start in this study per [server] entry_window_seconds "
            "(a lab session behind one address: its size); 0 = no limit, -1 = the server's [server] "
            "entry_limit. Signed links are never limited per address.")
    recruiter: str = param(
        "link", section="entry", choices=RECRUITERS,
        doc='"link": the end page shows a completion code; "prolific": Prolific\'s link (?PROLIFIC_PID=...'
            '&STUDY_ID=...&SESSION_ID=...) and its completion redirect; "redirect": the end page sends the '
            "worker to redirect_url. MTurk HITs work with any.")
    completion_code: str = param(
        "", section="entry", pattern=("|[A-Za-z0-9_-]{4,64}", "4-64 letters, digits, '_' or '-' (it goes into a "
                                                              "URL), or empty"),
        doc='the code the end page gives (Prolific: your study\'s completion code, required); "" = one random '
            "code per participant")
    redirect_url: str = param("", section="entry",
                              doc='recruiter = "redirect": https://... with {code} and {participant}')

    def validate(self, fail: Fail) -> None:
        """Entry rules between keys: anonymous links cannot be signed; the recruiter's needs."""
        if self.allow_anonymous and self.signed_links:
            fail("entry.allow_anonymous contradicts entry.signed_links (a signed link names its participant)")
        validate_recruiter(self, fail)


# The [texts] keys a study file may give per language ([texts.translations.<language>]).
TRANSLATED_TEXTS = ("consent", "instructions")


@dataclass(frozen=True, kw_only=True)
class TextsParams:
    """``[texts]`` researcher and contact: the default consents' ``{researcher}`` and ``{contact}``
    (server/paradigms/consent.py). Each paradigm declares its own consent and instructions."""
    researcher: str = param("", section="texts",
                            doc='REQUIRED by the default consent: who runs the study ("Dr A. Lee, Univ. of X")')
    contact: str = param("", section="texts", doc='REQUIRED by the default consent: whom workers may ask '
                                                  '("a.lee@x.edu")')
    translations: dict = param(
        {}, section="texts", placeholder='{de = {consent = "..."}}',
        doc="the texts in the study's other languages: [texts.translations.de] consent = \"...\", instructions = "
            "\"...\" (any of TRANSLATED_TEXTS); a text a language lacks is shown in default_language")

    def validate(self, fail: Fail) -> None:
        """Translated texts only for the study's other languages, and only of the texts that have translations."""
        languages = getattr(self, "languages", (DEFAULT_LOCALE,))
        for language, texts in self.translations.items():
            if language not in languages:
                fail(f"texts.translations.{language}: {language!r} is not one of study.languages {list(languages)}")
            if not isinstance(texts, dict):
                fail(f"texts.translations.{language} must be a table of texts")
            for key, text in texts.items():
                if key not in TRANSLATED_TEXTS or not isinstance(text, str):
                    fail(f"texts.translations.{language}.{key}: only the texts {', '.join(TRANSLATED_TEXTS)} "
                         "can be translated, each a string")

    def text_language(self, key: str, locale: str) -> str:
        """The language the ``[texts]`` text ``key`` ("consent", "instructions") is shown in to a worker of
        ``locale``: ``locale`` where the study file translates it, else its default language."""
        return locale if self.translations.get(locale, {}).get(key) else getattr(self, "default_language",
                                                                                  DEFAULT_LOCALE)

    def text_in(self, key: str, locale: str) -> str:
        """The ``[texts]`` text ``key`` in ``locale``: its translation, else the default language's."""
        return self.translations.get(locale, {}).get(key) or getattr(self, key)


@dataclass(frozen=True, kw_only=True)
class MTurkParams:
    """The optional ``[mturk]`` table, kept as the keys a file gives (over :data:`MTURK_DEFAULTS` and the
    paradigm's HIT texts: server/mturk.py)."""
    mturk: dict[str, Any] = param({}, section="mturk", table=MTurkSettings,
                                  doc="optional: HIT settings for `perceptlab mturk launch` (defaults shown; "
                                      "reward: the study's pay)")


# [stopping] units of paired comparison: the units `perceptlab analyze --units` reports (analysis/scaling.py UNITS).
SCALE_UNITS = ("jod", "z", "anchored")
RESOLVE_PATTERN = re.compile(r"[^|\s][^|]*\|[^|\s][^|]*")
# [stopping] min_workers' default: the fewest distinct kept workers of an item before it can meet a target.
DEFAULT_MIN_WORKERS = 5


@dataclass(frozen=True, kw_only=True)
class StoppingParams:
    """The ``[stopping]`` table: recruit until the numbers are good enough, within a budget (server/stopping.py).

    A paradigm that inherits it reports its precision through ``Paradigm.precision`` in the unit ``units`` names:
    paired comparison offers :data:`SCALE_UNITS` (JOD by default, as ``perceptlab forecast --units``); a paradigm
    with one unit redefines the field with its own default and single choice (ratings: ``"points"`` of the rating
    scale, a MOS half-width), so another value is the study file's one error line."""
    SECTION_DOCS: ClassVar[dict[str, str]] = {
        "stopping": "When the study stops taking new participants by itself: a precision target met, or a budget "
                    "cap reached (a cap always wins). Workers already in finish and are paid as usual; MTurk HITs "
                    "are expired and the Prolific study stopped, once. 0 = no target / no cap."}
    halfwidth: float = param(0.0, section="stopping", low=0,
                             doc="stop when the 95 % interval half-width of the items is at most this, in units; "
                                 "0 = no target")
    units: str = param("jod", section="stopping", choices=SCALE_UNITS,
                       doc='the unit of halfwidth: "jod" (a difference of 1 JOD means 75 % of observers prefer the '
                           'higher item; perceptlab forecast\'s default), "z" (Thurstone z, JOD / 1.4826) or '
                           '"anchored" (each set\'s virtual worst anchor 0, best 1)')
    quantile: float = param(1.0, section="stopping", above=0, high=1,
                            doc="the share of items (per set) that must meet halfwidth, in (0, 1]; 1 = every item")
    resolve: tuple[str, ...] = param((), section="stopping", example=(),
                                     doc='pairs of items that must be resolved ("itemA|itemB": the 95 % interval of '
                                         "their difference excludes 0, in every set holding both)")
    min_workers: int = param(DEFAULT_MIN_WORKERS, section="stopping", low=2, high=1000,
                             doc="an item counts toward halfwidth only once this many different workers who passed "
                                 "screening and their checks answered it (its interval comes from the same "
                                 "screening as perceptlab results); fewer, or an interval of zero width, never "
                                 "meets the target. 5: two or three people who agree cannot stop a study, and a "
                                 "t interval of 5 ratings (4 degrees of freedom) is no longer degenerate; "
                                 "the rating standards ask for 15 or more per stimulus, so a real target is met "
                                 "later anyway")
    max_votes: int = param(0, section="stopping", low=0,
                           doc="cap: stop at this many responses (votes or ratings, non-pilot, non-gold); 0 = none")
    max_participants: int = param(0, section="stopping", low=0,
                                  doc="cap: stop once this many participants (non-pilot) have consented; 0 = none "
                                      "(entries that never consent do not count)")
    max_cost: str = param("0", section="stopping", money=True,
                          doc='cap: stop once the pay earned so far reaches this many dollars ("0" = none)')
    notify_only: bool = param(False, section="stopping",
                              doc="true: record and show that the study would stop, change nothing")

    def validate(self, fail: Fail) -> None:
        """Each ``resolve`` entry names two different items."""
        for entry in self.resolve:
            if not RESOLVE_PATTERN.fullmatch(entry) or len(set(entry.split("|"))) != 2:
                fail(f'stopping.resolve entries must be "itemA|itemB" (two different items), got {entry!r}')

    @property
    def stopping_configured(self) -> bool:
        """True when the study file sets a target or a cap."""
        return bool(self.halfwidth > 0 or self.resolve or self.max_votes or self.max_participants
                    or float(self.max_cost) > 0)
