"""What every study file shares, whatever its paradigm: TOML loading, typed sections, the
``[entry]`` and ``[mturk]`` tables, and the spec <-> ``Study.config`` round trip.

A study file is TOML. Its ``[study] kind`` names the paradigm (paired comparison when absent,
``"motion"`` for motion matching); the paradigm's module declares the other sections and their
keys (see :mod:`server.paradigms`).
"""
from __future__ import annotations

import re
import string
import tomllib
import typing
from dataclasses import asdict, fields
from decimal import Decimal, InvalidOperation
from functools import cache
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

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

# The optional [entry] table (server/paradigms/entry.py, server/paradigms/recruiters.py), read for every
# kind of study.
ENTRY_SECTION: dict[str, type] = {"allow_anonymous": bool, "signed_links": bool, "access_key": str,
                                  "external_hits": bool, "entry_limit": int, "recruiter": str, "completion_code": str,
                                  "redirect_url": str}
# The [entry] section of both paradigms' study templates (``perceptlab study template``): one text for
# the keys of ENTRY_SECTION.
ENTRY_TEMPLATE = '''\
[entry]
# Who may enter, by plain links (/s/<slug>?participant=ID) and MTurk HITs alike (and the JSON entry).
allow_anonymous = false   # true: a link without ?participant= starts under a generated anon-... ID
signed_links = false      # true: links also carry sig=... (print them: perceptlab study links SLUG ID...),
                          # so invented participant IDs are refused; MTurk entries carry the study's
                          # MTurk signature (perceptlab mturk launch puts it in the HIT's URL)
access_key = ""           # non-empty: links and HITs must carry key=<this> (one secret shared by all
                          # participants, e.g. appended to a Prolific study URL; launch adds it to the
                          # HIT's URL); 8+ letters, digits, _ or -
external_hits = false     # MTurk entries (?assignmentId=...&hitId=...&workerId=...) must name a HIT posted
                          # with perceptlab mturk launch, so a study without one refuses them; true: admit
                          # them while the study has none (HITs you post yourself with the URL that
                          # perceptlab study create prints)
entry_limit = -1          # new participants one network address may start in this study per [server]
                          # entry_window_seconds (a lab session behind one address: its size); 0 = no limit,
                          # -1 = the server's [server] entry_limit. Signed links are never limited per address.
recruiter = "link"        # "link": the end page shows a completion code; "prolific": Prolific's link
                          # (?PROLIFIC_PID=...&STUDY_ID=...&SESSION_ID=...) and its completion redirect;
                          # "redirect": the end page sends the worker to redirect_url. MTurk HITs work with any.
completion_code = ""      # the code the end page gives (Prolific: your study's completion code,
                          # required); "" = one random code per participant
redirect_url = ""         # recruiter = "redirect": https://... with {code} and {participant}
'''
# Where plain-link participants come from, and what the end page does (server/paradigms/recruiters.py):
# link = show a completion code; prolific = Prolific's URL parameters and its completion redirect;
# redirect = send the participant to [entry] redirect_url. MTurk HITs work whatever the recruiter.
RECRUITERS = ("link", "prolific", "redirect")
PROLIFIC_COMPLETE_URL = "https://app.prolific.com/submissions/complete?cc={code}"
REDIRECT_PLACEHOLDERS = ("code", "participant")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")

Sections = dict[str, dict[str, type]]


class StudyDefinitionError(ValueError):
    """The study file is malformed; the message names the file and the key."""


class StoredSpec:
    """``Study.config`` <-> spec, for the spec dataclasses of every paradigm: the config is the spec's
    fields as a dict; reading it back ignores unknown keys and restores the tuple fields (JSON lists)."""

    def to_config(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]):
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in config.items() if k in known}
        for name in _tuple_fields(cls):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)


@cache
def _tuple_fields(spec_class: type) -> tuple[str, ...]:
    """The fields of ``spec_class`` annotated as tuples (stored as JSON lists)."""
    hints = typing.get_type_hints(spec_class)
    return tuple(f.name for f in fields(spec_class) if (typing.get_origin(hints[f.name]) or hints[f.name]) is tuple)


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
    if spec.entry_limit < -1:
        fail("entry.entry_limit must be -1 (the server's [server] entry_limit), 0 (no limit) or more")
    if spec.reservation_minutes < 1:
        fail("reservation_minutes must be at least 1")
    validate_recruiter(spec, fail)


def validate_recruiter(spec, fail: Callable[[str], None]) -> None:
    """Check ``[entry] recruiter``, ``completion_code`` and ``redirect_url``; ``fail(message)`` raises."""
    if spec.recruiter not in RECRUITERS:
        fail(f"entry.recruiter must be one of {', '.join(RECRUITERS)}, got {spec.recruiter!r}")
    if spec.completion_code and not re.fullmatch(r"[A-Za-z0-9_-]{4,64}", spec.completion_code):
        fail("entry.completion_code must be 4-64 letters, digits, '_' or '-' (it goes into a URL)")
    if spec.recruiter == "prolific":
        if not spec.completion_code:
            fail('entry.recruiter = "prolific" needs entry.completion_code: the completion code of your Prolific '
                 'study (Prolific shows it under "study completion")')
        if spec.signed_links or spec.allow_anonymous:
            fail('entry.recruiter = "prolific" contradicts entry.signed_links and entry.allow_anonymous '
                 "(Prolific's link carries the participant's PROLIFIC_PID and no signature)")
    if spec.recruiter == "redirect" and not spec.redirect_url:
        fail('entry.recruiter = "redirect" needs entry.redirect_url (https://... with {code} and {participant})')
    if spec.redirect_url:
        if spec.recruiter != "redirect":
            fail('entry.redirect_url is used only with entry.recruiter = "redirect"')
        problem = redirect_url_problem(spec.redirect_url)
        if problem:
            fail(f"entry.redirect_url {spec.redirect_url!r}: {problem}")


def redirect_url_problem(template: str) -> str | None:
    """Why ``template`` cannot be a completion redirect, or None when it can.

    It must be an absolute ``https://`` URL (``http://`` only to this machine: localhost, 127.0.0.1,
    ::1) whose only placeholders are ``{code}`` and ``{participant}`` (both URL-quoted when filled in);
    ``{{`` and ``}}`` stand for literal braces.
    """
    if len(template) > 2000 or any(c.isspace() or ord(c) < 32 for c in template):
        return "must be one URL of at most 2000 characters, without spaces or control characters"
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)
                  if name is not None]
    except ValueError as exc:
        return f"unbalanced braces ({exc}); write {{{{ and }}}} for literal braces"
    for name, format_spec, conversion in fields:
        if name not in REDIRECT_PLACEHOLDERS or format_spec or conversion:
            return f"unknown placeholder {{{name}}} (known: {{code}}, {{participant}})"
    try:
        url = urlsplit(template.format(code="CODE", participant="ID"))
        url.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        return f"not a URL ({exc})"
    local = url.scheme == "http" and url.hostname in LOCAL_HOSTS
    if url.scheme != "https" and not local:
        return "must start with https:// (http:// only for localhost)"
    if not url.hostname or "@" in url.netloc:
        return "must name a host (and no user name)"
    return None


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
