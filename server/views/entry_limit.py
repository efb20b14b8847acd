"""The per-app rate limit on new assignments (:class:`server.paradigms.entry.EntryLimiter`), as the
worker pages and the worker API apply it to the request's client address."""
from __future__ import annotations

from flask import current_app, request

from ..paradigms.entry import DEFAULT_ENTRY_LIMIT, DEFAULT_ENTRY_WINDOW, EntryLimiter, rate_limited


def app_limiter() -> EntryLimiter:
    """The app's entry limiter, made on first use from ``[server] entry_limit`` and ``entry_window_seconds``
    (and the app's injected clock, if any)."""
    limiter = current_app.extensions.get("perceptlab.entry_limiter")
    if limiter is None:
        server = current_app.config["SERVER"]
        clock = server.get("clock")
        limiter = EntryLimiter(int(server.get("entry_limit", DEFAULT_ENTRY_LIMIT)),
                               float(server.get("entry_window_seconds", DEFAULT_ENTRY_WINDOW)),
                               (lambda: clock().timestamp()) if clock is not None else None)
        limiter = current_app.extensions.setdefault("perceptlab.entry_limiter", limiter)
    return limiter


def admit_from_request() -> None:
    """Count a new assignment for this request's client address, or raise the 429."""
    wait = app_limiter().admit(request.remote_addr or "unknown")
    if wait > 0:
        raise rate_limited(wait)
