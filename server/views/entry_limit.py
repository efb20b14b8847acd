"""The per-app limits on new assignments, as the worker pages and the worker API apply them to a request:
the admission rate (:class:`server.paradigms.entry.AdmissionGate`) and the rate limit per client address
(:class:`server.paradigms.entry.EntryLimiter`), counted in this process or, with ``[server] redis_url``,
in Redis for every process and instance (:mod:`server.limits`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from flask import current_app, request

from ..fingerprints import EntryFingerprint, entry_fingerprint
from ..limits import SharedAdmissionGate, SharedEntryLimiter, SharedStore
from ..models import Study
from ..paradigms.entry import (DEFAULT_ADMISSION_BURST, DEFAULT_ADMISSION_RATE, DEFAULT_ENTRY_LIMIT,
                               DEFAULT_ENTRY_WINDOW, AdmissionGate, EntryLimiter, rate_limited, server_busy)
from ..services import app_services

T = TypeVar("T")


def _seconds_clock() -> Callable[[], float] | None:
    """The app's injected clock (if any) as seconds, as the limiters take it."""
    return app_services().seconds_clock()


def shared_store() -> SharedStore | None:
    """The app's Redis store of shared limits (``[server] redis_url``), or None: limits count per process."""
    return app_services().shared_limits


def per_app(name: str, make: Callable[[dict], T]) -> T:
    """The app's limiter ``name``, made on first use from its ``[server]`` settings (shared by its threads:
    :meth:`server.services.Services.limiter`)."""
    return app_services().limiter(name, lambda: make(current_app.config["SERVER"]))


def _limiter(limit: int, window: float) -> Any:
    local = EntryLimiter(limit, window, _seconds_clock())
    store = shared_store()
    return local if store is None else SharedEntryLimiter(store, local)


def _window(server: dict) -> float:
    return float(server.get("entry_window_seconds", DEFAULT_ENTRY_WINDOW))


def app_limiter() -> EntryLimiter | SharedEntryLimiter:
    """The app's entry limiter, from ``[server] entry_limit`` and ``entry_window_seconds``."""
    return per_app("entry_limiter", lambda server: _limiter(
        int(server.get("entry_limit", DEFAULT_ENTRY_LIMIT)), _window(server)))


def study_limiter(limit: int) -> EntryLimiter | SharedEntryLimiter:
    """The entry limiter of studies with their own ``[entry] entry_limit`` of ``limit`` (their counts are
    kept per study and address: a lab's allowance in one study spends nothing of another's)."""
    return per_app(f"entry_limiter.{limit}", lambda server: _limiter(limit, _window(server)))


def app_gate() -> AdmissionGate | SharedAdmissionGate:
    """The app's admission gate, from ``[server] admission_rate`` and ``admission_burst`` (with Redis: one
    gate for the whole deployment)."""
    def make(server: dict) -> AdmissionGate | SharedAdmissionGate:
        local = AdmissionGate(float(server.get("admission_rate", DEFAULT_ADMISSION_RATE)),
                              float(server.get("admission_burst", DEFAULT_ADMISSION_BURST)), _seconds_clock())
        store = shared_store()
        return local if store is None else SharedAdmissionGate(store, local)
    return per_app("admission_gate", make)


def request_fingerprint(study: Study) -> EntryFingerprint:
    """This request's entry fingerprint (:mod:`server.fingerprints`): its client address (the proxies' one
    with ``[server] proxies``, as the per-address limit counts it) and its ``User-Agent`` header, hashed."""
    return entry_fingerprint(current_app.config["SECRET_KEY"], study.slug, request.remote_addr,
                             request.headers.get("User-Agent"))


def admission(study: Study, spec, platform: str, *, signed: bool = False) -> Callable[[], None]:
    """The ``admit_new`` of an entry into ``study`` on ``platform`` (called by
    :meth:`~server.paradigms.core.Paradigm.enter` once the entry's link or HIT was checked):
    :func:`admit_from_request` with the study's per-address rule.

    An entry whose signature the server checks cannot be invented, so it is not limited per address:
    a lab session of 40 behind one address all get in. That is every plain link of a study with
    ``signed_links`` (:func:`~server.paradigms.entry.check_link_entry` verifies it before), and any
    entry the caller says is ``signed`` (one whose signature it checked itself). A study with its own
    ``[entry] entry_limit`` counts its entries per study and address against it (0: no limit)."""
    own = int(spec.entry_limit)
    if own == 0 or signed or platform == "link" and spec.signed_links:
        return lambda: admit_from_request(None)
    if own > 0:
        return lambda: admit_from_request(study_limiter(own), key=f"study{study.id}:")
    return admit_from_request


_APP_LIMITER: Any = object()  # admit_from_request's default: the app's limiter ([server] entry_limit)


def admit_from_request(limiter: EntryLimiter | SharedEntryLimiter | None = _APP_LIMITER, key: str = "") -> None:
    """Count a new assignment, or raise the 429: ``rate_limited`` when this request's client address
    (counted under ``key`` + address) is over ``limiter``'s limit (default the app's, from ``[server]
    entry_limit``; None: not limited per address), ``busy`` while new workers arrive faster than the
    admission rate.

    The address is asked first, without counting: an address over its limit must not take the
    admission tokens others wait for (a script retrying in a loop would starve every newcomer),
    and a deferred worker's entry must not count against its address (it comes back for the same
    assignment)."""
    from ..metrics import ADMISSION, ADMISSION_WAIT

    if limiter is _APP_LIMITER:
        limiter = app_limiter()
    address = key + (request.remote_addr or "unknown")
    if limiter is not None:
        wait = limiter.admit(address, count=False)
        if wait > 0:
            ADMISSION.labels("rate_limited").inc()
            raise rate_limited(wait)
    wait = app_gate().admit()
    if wait > 0:
        ADMISSION.labels("deferred").inc()  # the admission queue: told to come back in ``wait`` s
        ADMISSION_WAIT.observe(wait)
        raise server_busy(wait)
    if limiter is not None:
        wait = limiter.admit(address)  # counted now (a concurrent entry from the address may have been first)
        if wait > 0:
            ADMISSION.labels("rate_limited").inc()
            raise rate_limited(wait)
    ADMISSION.labels("admitted").inc()
