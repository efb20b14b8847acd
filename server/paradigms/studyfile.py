"""What every study file shares, whatever its paradigm: TOML loading, the error it raises, the
``[entry]`` recruiter rules, and the spec <-> ``Study.config`` round trip.

A study file is TOML. Its ``[study] kind`` names the paradigm (paired comparison when absent,
``"motion"`` for motion matching); the paradigm's spec declares every section and key once
(:mod:`server.paradigms.params`, which also holds the sections every paradigm shares).
"""
from __future__ import annotations

import json
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

# Where plain-link participants come from, and what the end page does (server/paradigms/recruiters.py):
# link = show a completion code; prolific = Prolific's URL parameters and its completion redirect;
# redirect = send the participant to [entry] redirect_url. MTurk HITs work whatever the recruiter.
RECRUITERS = ("link", "prolific", "redirect")
PROLIFIC_COMPLETE_URL = "https://app.prolific.com/submissions/complete?cc={code}"
REDIRECT_PLACEHOLDERS = ("code", "participant")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
# A dollar amount of a study file: plain digits, at most two decimals, and at most this (a cap or a page's pay).
DOLLAR_PATTERN = re.compile(r"(?:[0-9]+(?:\.[0-9]{0,2})?|\.[0-9]{1,2})")
MAX_DOLLARS = Decimal("100000")
# The most of a study file and of a stimulus manifest read: a path to a huge file or a device (/dev/zero) is
# refused instead of filling the memory.
MAX_STUDY_FILE_BYTES = 1 << 20
MAX_MANIFEST_BYTES = 64 << 20


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
    data = read_capped(path, MAX_STUDY_FILE_BYTES, "study file", missing="no such file")
    try:
        # Editors on Windows start UTF-8 files with a byte-order mark, which TOML does not allow: dropped.
        return tomllib.loads(data.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise StudyDefinitionError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise StudyDefinitionError(f"{path}: not valid TOML: {exc}") from None


def read_capped(path: Path, limit: int, what: str, missing: str = "") -> bytes:
    """The bytes of the file ``path``, at most ``limit`` of them read: a larger file (or a device such as
    /dev/zero) is a :class:`StudyDefinitionError`, as is a folder or an unreadable file (``what`` names it;
    ``missing``: the message for a missing file, by default "no such <what>")."""
    try:
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise StudyDefinitionError(f"{path}: {missing or f'no such {what}'}") from None
    except IsADirectoryError:
        raise StudyDefinitionError(f"{path}: a folder, not a {what}") from None
    except OSError as exc:
        raise StudyDefinitionError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise StudyDefinitionError(f"{path}: larger than {limit // 2**20} MB, not a {what}")
    return data


def load_manifest_json(path: Path) -> dict:
    """A JSON manifest of prepared stimuli (a JSON object), read at most :data:`MAX_MANIFEST_BYTES` of it;
    :class:`StudyDefinitionError` naming the file for anything else."""
    data = read_capped(path, MAX_MANIFEST_BYTES, "manifest")
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise StudyDefinitionError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise StudyDefinitionError(f"{path}: not a manifest written by `perceptlab stimuli prepare`")
    if _holds_nul(manifest):  # no database column stores one (PostgreSQL refuses it)
        raise StudyDefinitionError(f"{path}: a NUL character (\\u0000) in a name or ID")
    return manifest


def _holds_nul(value: Any) -> bool:
    """Whether a parsed JSON value holds a string (or key) with a NUL character."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def check_resolve_items(resolve: tuple[str, ...], scenes: list[set[str]]) -> None:
    """Refuse a ``[stopping] resolve`` entry ("itemA|itemB") whose two items no one scene holds together (the
    target could never be met); ``scenes`` holds each scene's item IDs."""
    for entry in resolve:
        a, _, b = entry.partition("|")
        if not any(a in items and b in items for items in scenes):
            known = sorted({item for items in scenes for item in items})
            shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
            raise StudyDefinitionError(f"stopping.resolve names {entry!r}, but no scene holds both items (items: "
                                       f"{shown}): the target could never be met")


def file_kind(data: dict[str, Any]) -> str | None:
    """The ``[study] kind`` of parsed TOML, or None when the file names none."""
    study = data.get("study")
    kind = study.get("kind") if isinstance(study, dict) else None
    return kind


def slugify(text: str) -> str:
    """A URL-safe study slug made from a file name (lowercase letters, digits and '-')."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "study"


def validate_recruiter(spec, fail: Callable[[str], None]) -> None:
    """Check what ``[entry] recruiter`` needs of ``completion_code`` and ``redirect_url``, and the redirect
    URL itself; ``fail(message)`` raises. The recruiter's choices and the code's form are declared
    (:class:`server.paradigms.params.EntryParams`) and checked before."""
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
    """Whether ``text`` is a non-negative amount in plain digits with at most two decimals ("0.50", "2"), at
    most :data:`MAX_DOLLARS` (no exponent: "1e9" is refused, as is any amount no study pays)."""
    if not isinstance(text, str) or not DOLLAR_PATTERN.fullmatch(text):
        return False
    try:
        amount = Decimal(text)
    except InvalidOperation:
        return False
    return amount <= MAX_DOLLARS


def common_root(folders: list[Path]) -> Path:
    """The deepest folder that holds every one of ``folders`` (absolute paths)."""
    common = folders[0]
    for folder in folders[1:]:
        while common not in (folder, *folder.parents):
            common = common.parent
    return common
