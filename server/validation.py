"""Safe request JSON and the checks every worker input goes through.

Two layers, so that no input reaches a 500 or the database unchecked:

* :func:`read_json_body` reads a worker API body once per request (size-capped before reading,
  ``Content-Length`` required and reached), and :func:`loads_strict` parses it and every other
  request body (the app's :class:`StrictJSONProvider` routes every ``request.get_json`` through
  it). It refuses, as a :class:`JsonBodyError` (a ``ValueError``, so Flask answers 400), a key
  given twice in one object, nesting deeper than :data:`MAX_JSON_DEPTH` (checked
  by a linear scan *before* the recursive parser runs, so 50,000 ``[`` cost a scan, not a
  ``RecursionError``), the non-standard literals ``NaN``/``Infinity`` that Python's ``json``
  accepts, numbers that overflow to infinity (``1e999``) or exceed 64 bits, and strings with
  NUL or unpaired surrogates (which no database column can store).
* :func:`text`, :func:`number` and :func:`integer` check one field: type, finiteness,
  physical bounds (the constants below), length and control characters, raising the API's
  400 ``invalid_request`` naming the field.

The provider also serialises with ``allow_nan=False``: a response can never carry
``NaN``/``Infinity``, which browsers' ``JSON.parse`` refuses.
"""
from __future__ import annotations

import io
import json
import math
import re
from typing import Any

import numpy as np
from flask import request
from flask.json.provider import DefaultJSONProvider

from .errors import ApiError, invalid

MAX_JSON_DEPTH = 32          # the deepest legitimate body (a motion response's frame log) has 4 levels
MAX_JSON_INTEGER = 2**63 - 1  # nothing the API stores is larger; beyond it int -> float comparisons overflow

# Physical bounds of what a browser reports (CSS pixels, ratios, milliseconds). Generous enough
# for any real device (an 8K screen zoomed out to 25 %, a phone at 500 % zoom), tight enough
# that nonsense (negative, astronomically large, subnormal) is refused.
SIZE_PX = (1, 32_767)                 # window, screen and on-screen card sizes
DEVICE_PIXEL_RATIO = (0.1, 20.0)
REFRESH_HZ = (20.0, 500.0)            # a measured display refresh rate
RAF_INTERVAL_MS = (0.01, 10_000.0)    # one requestAnimationFrame interval (a stall may last seconds)
TIMESTAMP_MS = (0.0, 1e10)            # performance.now() values: up to ~115 days after page load
RT_MS = (0.0, 86_400_000.0)           # a response time: at most a day
CLIENT_TIME_LENGTH = 40
USER_AGENT_LENGTH = 400

# A JSON string literal (escapes included), unrolled so the regex engine never backtracks. The closing
# quote is optional: an unterminated string then runs to the end of the text in one match, instead
# of a failed match retried from every later quote (quadratic time on '"' followed by many '\\"').
_STRING_LITERAL = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_KEY = re.compile(r'"([^"\\]{1,100})"\s*:')
# Escapes that can decode to a NUL or to a (possibly unpaired) surrogate: only then are strings walked.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# Control characters (C0, DEL, C1) and surrogates: never part of a legitimate text field.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
# new Date().toISOString() and Python's isoformat(): 2026-11-21T10:00:00.000Z, +275760-09-13T00:00:00Z, ...
ISO_TIME = re.compile(r"[+-]?[0-9]{4,6}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,9})?)?"
                      r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?")


class JsonBodyError(ValueError):
    """A request body that is not acceptable JSON; ``str()`` says why, for the 400's message."""


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members as a dict; a key given twice is refused (Python's json keeps the last,
    another parser the first: a body must mean one thing to every reader)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return value


# ---------------------------------------------------------------- parsing

def json_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in JSON text, in one linear pass (no recursion).

    String literals are removed first, so brackets inside strings do not count.
    """
    structure = _STRING_LITERAL.sub("", text).encode("ascii", "ignore")
    codes = np.frombuffer(structure, dtype=np.uint8)
    steps = np.isin(codes, (0x5B, 0x7B)).astype(np.int64) - np.isin(codes, (0x5D, 0x7D)).astype(np.int64)
    return int(np.cumsum(steps).max(initial=0))


def loads_strict(data: bytes | bytearray | str) -> Any:
    """Parse a request body as strict JSON.

    Parameters
    ----------
    data : bytes or str
        The raw body (UTF-8, -16 or -32, as RFC 8259 allows).

    Returns
    -------
    Any
        The parsed value.

    Raises
    ------
    JsonBodyError
        Not text, not JSON, nested deeper than :data:`MAX_JSON_DEPTH`, a ``NaN``/``Infinity``
        literal or an out-of-range number, a key given twice in one object, or a string with NUL
        or an unpaired surrogate.
    """
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode(json.detect_encoding(data))
        except UnicodeDecodeError:
            raise JsonBodyError("the body is not valid UTF-8 text") from None
    else:
        text = data
    # The depth cannot exceed the number of opening brackets: small bodies (every vote) skip the scan.
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth(text) > MAX_JSON_DEPTH:
        raise JsonBodyError(f"the JSON is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = _DECODER.decode(text)
    except _BadNumber as exc:
        field = _field_holding(text, exc.literal)
        where = f"{field}: " if field else ""
        raise JsonBodyError(f"{where}{exc.literal[:30]} is refused: numbers must be finite (no NaN or Infinity) "
                            "and integers within 64 bits") from None
    except _DuplicateKey as exc:
        raise JsonBodyError(f"the key {exc.key[:40]!r} is given twice in one object") from None
    except RecursionError:  # unreachable after the depth check; kept so no body can ever give a 500
        raise JsonBodyError(f"the JSON is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise JsonBodyError(f"the body is not valid JSON ({exc})") from None
    if _SUSPECT_ESCAPE.search(text) and _has_unstorable_string(value):
        raise JsonBodyError("strings must not contain NUL characters or unpaired surrogates (\\ud800-\\udfff)")
    return value


class _BadNumber(ValueError):
    def __init__(self, literal: str):
        super().__init__(literal)
        self.literal = literal


def _refuse_constant(literal: str):
    raise _BadNumber(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _BadNumber(literal)
    return value


def _bounded_int(literal: str) -> int:
    if len(literal) > 20:  # also keeps int() away from its 4300-digit limit
        raise _BadNumber(literal)
    value = int(literal)
    if abs(value) > MAX_JSON_INTEGER:
        raise _BadNumber(literal)
    return value


# One decoder for every body (json.loads with hooks would build a decoder and its scanner per call).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int,
                            object_pairs_hook=_object_without_duplicates)


def _field_holding(text: str, literal: str) -> str | None:
    """The nearest object key before a refused number literal (for the message), or None."""
    token = re.compile(_STRING_LITERAL.pattern + "|(?<![0-9A-Za-z.])(" + re.escape(literal) + ")(?![0-9A-Za-z.])",
                       re.DOTALL)
    position = next((m.start(1) for m in token.finditer(text) if m.group(1)), None)
    if position is None:
        return None
    keys = list(_KEY.finditer(text, 0, position))
    return keys[-1].group(1) if keys else None


def _has_unstorable_string(value: Any) -> bool:
    # Recursion is bounded: the depth was checked before parsing.
    if isinstance(value, str):
        return _UNSTORABLE.search(value) is not None
    if isinstance(value, dict):
        return any(_has_unstorable_string(k) or _has_unstorable_string(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_unstorable_string(v) for v in value)
    return False


WORKER_BODY_BYTES = 64 * 1024
"""The largest body the worker API takes (a vote is about 300 bytes, a refresh calibration of 2,000
intervals about 16 kB); a response kind may declare its own bound (ResponseKind.max_body, server/paradigms/core.py:
the motion responses with their frame logs)."""
_BODY = "perceptlab.json_body"  # the environ's parsed body (or the error refusing it): parsed once per request


def read_json_body(environ: dict, max_bytes: int) -> Any:
    """The request's JSON body, read and parsed once per request (the fast lane and Flask's view share
    it through the environ), or the 4xx that refuses it, the same for every path that asks.

    The body must be JSON by its type, announce its size in ``Content-Length`` (a chunked body is
    refused: its size is known only once it has been read), be at most ``max_bytes`` long (refused
    before a byte is read), arrive whole (a client that hangs up early has sent a body it did not
    mean), and parse under :func:`loads_strict`. The raw bytes are put back as ``wsgi.input``.

    Raises
    ------
    ApiError
        400 ``invalid_request`` (not JSON, or refused by :func:`loads_strict`), 400 ``incomplete_body``,
        411 ``length_required``, 413 ``too_large``.
    """
    if _BODY not in environ:
        try:
            environ[_BODY] = (_read_json(environ, max_bytes), None)
        except ApiError as exc:
            environ[_BODY] = (None, exc)
    value, error = environ[_BODY]
    if error is not None:
        raise error
    return value


def _read_json(environ: dict, max_bytes: int) -> Any:
    mimetype = environ.get("CONTENT_TYPE", "").partition(";")[0].strip().lower()
    if not (mimetype == "application/json" or mimetype.startswith("application/") and mimetype.endswith("+json")):
        raise invalid("the body must be JSON (Content-Type: application/json)")
    length = environ.get("CONTENT_LENGTH", "").strip()
    if environ.get("HTTP_TRANSFER_ENCODING") or not length.isdigit():
        raise ApiError(411, "length_required", "the body must be sent whole with a Content-Length header "
                                               "(chunked bodies are refused)")
    size = int(length)
    if size > max_bytes:
        raise ApiError(413, "too_large", f"the body has {size} bytes; this endpoint takes at most {max_bytes}")
    stream, chunks, received = environ["wsgi.input"], [], 0
    while received < size:
        chunk = stream.read(size - received)
        if not chunk:
            break
        chunks.append(chunk)
        received += len(chunk)
    raw = b"".join(chunks)
    environ["wsgi.input"] = io.BytesIO(raw)
    if received < size:
        raise ApiError(400, "incomplete_body", f"the body ended after {received} of the {size} bytes its "
                                               "Content-Length announced")
    try:
        return loads_strict(raw)
    except JsonBodyError as exc:
        raise invalid(str(exc)) from None


def json_object_body(max_bytes: int = WORKER_BODY_BYTES) -> dict:
    """The request's JSON object body (:func:`read_json_body`); a 400 ``invalid_request`` for another value."""
    body = read_json_body(request.environ, max_bytes)
    if not isinstance(body, dict):
        raise invalid("the body must be a JSON object")
    return body


class StrictJSONProvider(DefaultJSONProvider):
    """Flask's JSON provider with :func:`loads_strict` for parsing and no ``NaN``/``Infinity`` on output.

    Installed by the app factory, so ``request.get_json()`` anywhere is depth-limited and strict,
    and a non-finite number in a response is a server error (logged), never invalid JSON.
    """

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return loads_strict(s)

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        kwargs.setdefault("allow_nan", False)
        return super().dumps(obj, **kwargs)


# ---------------------------------------------------------------- fields

def text(value: Any, name: str, *, max_length: int, required: bool = False,
         pattern: re.Pattern[str] | None = None, what: str = "a string") -> str | None:
    """A text field: a string of at most ``max_length`` characters, without control characters
    or surrogates, matching ``pattern`` (whole string) when given; None when absent and optional.

    Raises
    ------
    ApiError
        400 ``invalid_request`` naming ``name``.
    """
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value and required:
        raise invalid(f"{name} must be {what}")
    if len(value) > max_length:
        raise invalid(f"{name} must have at most {max_length} characters")
    if _CONTROL.search(value):
        raise invalid(f"{name} must not contain control characters, NUL or unpaired surrogates")
    if pattern is not None and not pattern.fullmatch(value):
        raise invalid(f"{name} must be {what}")
    return value


def number(value: Any, name: str, low: float, high: float, *, required: bool = True) -> float | None:
    """A finite JSON number (not a boolean) in ``[low, high]``, as a float; None when absent and optional.

    Raises
    ------
    ApiError
        400 ``invalid_request`` naming ``name`` and the bounds.
    """
    if value is None and not required:
        return None
    if not _is_number_in(value, low, high):
        raise invalid(f"{name} must be a finite number in [{low:g}, {high:g}]")
    return float(value)


def number_list(values: list, name: str, low: float, high: float) -> list[float]:
    """Every item a finite JSON number in ``[low, high]`` (milliseconds), as floats.

    Raises
    ------
    ApiError
        400 ``invalid_request`` naming ``name`` and the bounds.
    """
    if not all(_is_number_in(x, low, high) for x in values):
        raise invalid(f"{name} must hold finite numbers of milliseconds in [{low:g}, {high:g}]")
    return [float(x) for x in values]


def _is_number_in(value: Any, low: float, high: float) -> bool:
    # Bounds are compared before any float conversion: float(10**400) would overflow.
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and (not isinstance(value, float) or math.isfinite(value)) and low <= value <= high)


def integer(value: Any, name: str, low: int, high: int, *, required: bool = True) -> int | None:
    """A JSON integer (not a boolean, not 1.0) in ``[low, high]``; None when absent and optional.

    Raises
    ------
    ApiError
        400 ``invalid_request`` naming ``name`` and the bounds.
    """
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(f"{name} must be an integer in [{low}, {high}]")
    return value


def client_time(value: Any, name: str = "client_time") -> str | None:
    """The browser's clock as an ISO-8601 string (``new Date().toISOString()``), or None."""
    return text(value, name, max_length=CLIENT_TIME_LENGTH, pattern=ISO_TIME,
                what="an ISO-8601 time such as 2026-11-21T10:00:00.000Z")


def size_object(value: Any, name: str, *, with_dpr: bool) -> dict[str, float | int]:
    """A ``{"width", "height"[, "dpr"]}`` object of a browser window or screen (absent: ``{}``).

    Sizes are integers in :data:`SIZE_PX`, ``dpr`` a number in :data:`DEVICE_PIXEL_RATIO`;
    null members are dropped.

    Raises
    ------
    ApiError
        400 ``invalid_request`` naming the member (e.g. ``window.dpr``).
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(f"{name} must be an object")
    keys = ("width", "height", "dpr") if with_dpr else ("width", "height")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise invalid(f"unknown field(s) of {name}: {', '.join(k[:40] for k in unknown)}")
    clean: dict[str, float | int] = {}
    for key in ("width", "height"):
        if value.get(key) is not None:
            clean[key] = integer(value[key], f"{name}.{key}", *SIZE_PX)
    if with_dpr and value.get("dpr") is not None:
        clean["dpr"] = number(value["dpr"], f"{name}.dpr", *DEVICE_PIXEL_RATIO)
    return clean
