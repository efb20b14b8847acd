"""The per-app limits on new assignments, as the worker pages and the worker API apply them to a request:
this process's admission rate (:class:`server.paradigms.entry.AdmissionGate`) and its rate limit per
client address (:class:`server.paradigms.entry.EntryLimiter`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from flask import current_app, request

from ..paradigms.entry import (DEFAULT_ADMISSION_BURST, DEFAULT_ADMISSION_RATE, DEFAULT_ENTRY_LIMIT,
                               DEFAULT_ENTRY_WINDOW, AdmissionGate, EntryLimiter, rate_limited, server_busy)

T = TypeVar("T")


def _seconds_clock() -> Callable[[], float] | None:
    """The app's injected clock (if any) as seconds, as the limiters take it."""
    clock = current_app.config["SERVER"].get("clock")
    return (lambda: clock().timestamp()) if clock is not None else None


def _per_app(name: str, make: Callable[[dict], T]) -> T:
    """The app's one ``name`` object, made on first use from its ``[server]`` settings (shared by its threads)."""
    value = current_app.extensions.get(name)
    if value is None:
        value = current_app.extensions.setdefault(name, make(current_app.config["SERVER"]))
    return value


def app_limiter() -> EntryLimiter:
    """The app's entry limiter, from ``[server] entry_limit`` and ``entry_window_seconds``."""
    return _per_app("perceptlab.entry_limiter", lambda server: EntryLimiter(
        int(server.get("entry_limit", DEFAULT_ENTRY_LIMIT)),
        float(server.get("entry_window_seconds", DEFAULT_ENTRY_WINDOW)), _seconds_clock()))


def app_gate() -> AdmissionGate:
    """The app's admission gate, from ``[server] admission_rate`` and ``admission_burst``."""
    return _per_app("perceptlab.admission_gate", lambda server: AdmissionGate(
        float(server.get("admission_rate", DEFAULT_ADMISSION_RATE)),
        float(server.get("admission_burst", DEFAULT_ADMISSION_BURST)), _seconds_clock()))


def admit_from_request() -> None:
    """Count a new assignment, or raise the 429: ``rate_limited`` when this request's client address is
    over its entry limit, ``busy`` while new workers arrive faster than the admission rate.

    The address is asked first, without counting: an address over its limit must not take the
    admission tokens others wait for (a script retrying in a loop would starve every newcomer),
    and a deferred worker's entry must not count against its address (it comes back for the same
    assignment)."""
    limiter, address = app_limiter(), request.remote_addr or "unknown"
    wait = limiter.admit(address, count=False)
    if wait > 0:
        raise rate_limited(wait)
    wait = app_gate().admit()
    if wait > 0:
        raise server_busy(wait)
    wait = limiter.admit(address)  # counted now (a concurrent entry from the address may have been first)
    if wait > 0:
        raise rate_limited(wait)
