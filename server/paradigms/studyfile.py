"""What every study file shares, whatever its paradigm: TOML loading, typed sections, the
``[entry]`` and ``[mturk]`` tables, and the spec <-> ``Study.config`` round trip.

A study file is TOML. Its ``[study] kind`` names the paradigm (paired comparison when absent,
``"motion"`` for motion matching); the paradigm's module declares the other sections and their
keys (see :mod:`server.paradigms`).
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, fields
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable

# The optional [mturk] table of a study file and its defaults (server/mturk.py reads them).
MTURK_DEFAULTS: dict[str, Any] = {
    "title": "Compare the quality of images",
    "description": "Look at pairs of images and choose the one that looks better (closer to the reference).",
    "keywords": "image, quality, comparison, perception, survey",
    "assignment_duration_minutes": 120,
    "auto_approval_days": 3,
    "min_approval_rate": 98,
    "min_approved_hits": 1000,
    "locales": ["US"],           # country codes; empty = anywhere
    "masters": False,
    "took_part_scope": "lab",    # lab: one "took part" type blocks repeaters across studies; study: per study
    "require_screening": 0,      # >0: only workers whose motion-screening score (r x 100) is at least this
}

# The optional [entry] table (server/paradigms/entry.py), read for every kind of study.
ENTRY_SECTION: dict[str, type] = {"allow_anonymous": bool, "signed_links": bool, "access_key": str}

Sections = dict[str, dict[str, type]]


class StudyDefinitionError(ValueError):
    """The study file is malformed; the message names the file and the key."""


class StoredSpec:
    """``Study.config`` <-> spec, for the spec dataclasses of every paradigm: the config is the spec's
    fields as a dict; reading it back ignores unknown keys and restores the one tuple field."""
    _TUPLE_FIELD = ""

    def to_config(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]):
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in config.items() if k in known}
        values[cls._TUPLE_FIELD] = tuple(values.get(cls._TUPLE_FIELD, ()))
        return cls(**values)


def load_study_toml(path: Path) -> dict[str, Any]:
    """The parsed TOML of a study file; :class:`StudyDefinitionError` when missing or malformed."""
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise StudyDefinitionError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise StudyDefinitionError(f"{path}: not valid TOML: {exc}") from None


def file_kind(data: dict[str, Any]) -> str | None:
    """The ``[study] kind`` of parsed TOML, or None when the file names none."""
    study = data.get("study")
    kind = study.get("kind") if isinstance(study, dict) else None
    return kind


def read_sections(data: dict[str, Any], sections: Sections, path: Path) -> dict[str, Any]:
    """Flatten a study file's tables into spec values, checking every section, key and type.

    Amounts of money may be written as numbers (``0.5``); they are kept as strings ("0.5") so
    that no binary fraction reaches a payment. The optional ``[mturk]`` table is kept whole as
    ``values["mturk"]`` (see :data:`MTURK_DEFAULTS`).
    """
    values: dict[str, Any] = {}
    for section, content in data.items():
        if section not in sections and section != "mturk":
            raise StudyDefinitionError(f"{path}: unknown section [{section}] (known: {', '.join(sections)}, mturk)")
        if not isinstance(content, dict):
            raise StudyDefinitionError(f"{path}: [{section}] must be a table")
        if section == "mturk":
            values["mturk"] = _mturk_settings(content, path)
            continue
        for key, value in content.items():
            expected = sections[section].get(key)
            if expected is None:
                raise StudyDefinitionError(f"{path}: unknown key {section}.{key}")
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if expected is str and key.startswith(("reward_", "bonus_")) and isinstance(value, (int, float)) \
                    and not isinstance(value, bool):
                value = str(value)
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise StudyDefinitionError(f"{path}: {section}.{key} must be {expected.__name__}, got {value!r}")
            values[key] = value
    return values


def _mturk_settings(content: dict[str, Any], path: Path) -> dict[str, Any]:
    """The ``[mturk]`` table, each key checked against the type of its default."""
    for key, value in content.items():
        if key not in MTURK_DEFAULTS:
            raise StudyDefinitionError(f"{path}: unknown key mturk.{key} (known: {', '.join(MTURK_DEFAULTS)})")
        expected = type(MTURK_DEFAULTS[key])
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)) or (
                expected is list and not all(isinstance(item, str) for item in value)):
            raise StudyDefinitionError(f"{path}: mturk.{key} must be {expected.__name__}, got {value!r}")
    if content.get("took_part_scope", "lab") not in ("lab", "study"):
        raise StudyDefinitionError(f"{path}: mturk.took_part_scope must be \"lab\" or \"study\"")
    return dict(content)


def slugify(text: str) -> str:
    """A URL-safe study slug made from a file name (lowercase letters, digits and '-')."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "study"


def validate_slug(spec, fail: Callable[[str], None]) -> None:
    """Check ``spec.slug``: 1-64 lowercase letters, digits or '-'; ``fail(message)`` raises."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", spec.slug):
        fail(f"study.slug {spec.slug!r} must be 1-64 lowercase letters, digits or '-'")


def validate_entry(spec, fail: Callable[[str], None]) -> None:
    """Check the ``[entry]`` values of any paradigm's spec; ``fail(message)`` raises."""
    if spec.allow_anonymous and spec.signed_links:
        fail("entry.allow_anonymous contradicts entry.signed_links (a signed link names its participant)")
    if spec.access_key and not re.fullmatch(r"[A-Za-z0-9_-]{8,200}", spec.access_key):
        fail("entry.access_key must be 8-200 letters, digits, '_' or '-' (it goes into links)")
    if spec.reservation_minutes < 1:
        fail("reservation_minutes must be at least 1")


def is_dollar_amount(text: str) -> bool:
    """Whether ``text`` is a non-negative amount with at most two decimals ("0.50", "2")."""
    try:
        amount = Decimal(text)
    except InvalidOperation:
        return False
    return amount.is_finite() and amount >= 0 and amount.as_tuple().exponent >= -2


def common_root(folders: list[Path]) -> Path:
    """The deepest folder that holds every one of ``folders`` (absolute paths)."""
    common = folders[0]
    for folder in folders[1:]:
        while common not in (folder, *folder.parents):
            common = common.parent
    return common
