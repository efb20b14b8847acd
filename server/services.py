"""What an app holds beside its configuration, in one typed object: the database engine and session
factory, the clock, the limits shared through Redis, the stimulus storage, and the per-app objects
made on first use (limiters, the login throttle, the stimulus index, a paradigm's process state).

The app factory builds a :class:`Services` and installs it with :func:`init_app`; views, the
request session (:func:`server.db.db_session`), the login code, the live scales and the tests reach
it with :func:`app_services`. A test injects a clock as before, through the app's configuration
(``create_app(clock=...)``): it becomes :attr:`Services.injected_clock`.

This module imports nothing of the app (only types): everything may import it.
"""
from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from flask import Flask, current_app

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from .limits import SharedLoginThrottle, SharedStore
    from .login_throttle import LoginThrottle
    from .stimulus_index import IndexCache
    from .storage import Storage

T = TypeVar("T")
EXTENSION = "perceptlab"  # the one key of app.extensions: this app's Services


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass
class Services:
    """One app's services.

    Attributes
    ----------
    engine : Engine
        The database engine.
    sessions : sessionmaker
        Sessions on ``engine`` (carrying the injected clock in their ``info``: server/allocation.py).
    injected_clock : callable or None
        A test's clock (aware datetimes), or None: the real one.
    shared_limits : SharedStore or None
        The Redis store of limits shared by every process (``[server] redis_url``), or None.
    storage : Storage
        Where stimuli are served from (a folder or an S3 bucket).
    login_throttle : LoginThrottle or SharedLoginThrottle or None
        Made on first use (server/auth.py).
    stimulus_index : IndexCache or None
        Made on first use (server/views/stimuli.py).
    limiters : dict
        Per-app limiters by name, made on first use (:meth:`limiter`: entry limits, admission, request rates).
    paradigm_state : dict
        A paradigm's per-app process state by its module's name (paired comparison's live scales).
    """
    engine: Engine
    sessions: sessionmaker[Session]
    injected_clock: Callable[[], dt.datetime] | None
    shared_limits: SharedStore | None
    storage: Storage
    login_throttle: LoginThrottle | SharedLoginThrottle | None = None
    stimulus_index: IndexCache | None = None
    limiters: dict[str, Any] = field(default_factory=dict)
    paradigm_state: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def clock(self) -> Callable[[], dt.datetime]:
        """The app's clock: the injected one, else the real UTC time."""
        return self.injected_clock or _utcnow

    def seconds_clock(self) -> Callable[[], float] | None:
        """The injected clock in seconds (as limiters take it), or None: their own real clock."""
        clock = self.injected_clock
        return None if clock is None else (lambda: clock().timestamp())

    def limiter(self, name: str, make: Callable[[], T]) -> T:
        """The app's limiter ``name``, made by ``make()`` on first use (one per app, shared by its threads)."""
        value = self.limiters.get(name)
        if value is None:
            with self._lock:
                value = self.limiters.get(name)
                if value is None:
                    value = self.limiters[name] = make()
        return value

    def made(self, attribute: str, make: Callable[[], T]) -> T:
        """The attribute (``login_throttle``, ``stimulus_index``), made by ``make()`` on first use."""
        value = getattr(self, attribute)
        if value is None:
            with self._lock:
                value = getattr(self, attribute)
                if value is None:
                    value = make()
                    setattr(self, attribute, value)
        return value

    def state_of(self, owner: str, make: Callable[[], T]) -> T:
        """The per-app process state of ``owner`` (a paradigm module's ``__name__``), made on first use."""
        value = self.paradigm_state.get(owner)
        if value is None:
            with self._lock:
                value = self.paradigm_state.setdefault(owner, make())
        return value


def init_app(app: Flask, services: Services) -> Services:
    """Install ``services`` as the app's (the app factory calls this once)."""
    app.extensions[EXTENSION] = services
    return services


def app_services(app: Flask | None = None) -> Services:
    """The services of ``app`` (default: the current app)."""
    return (app if app is not None else current_app).extensions[EXTENSION]
