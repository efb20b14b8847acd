"""Experimenter accounts: password hashes, login sessions, CSRF tokens, a login rate limit.

Experimenters log in with a username and password (``perceptlab user add``);
the Flask session cookie (signed with the app's secret key) then carries the
user's ID, a fingerprint of the password hash (changing the password logs out
every other session) and a random CSRF token. Every state-changing admin
request must echo that token, as the form field ``csrf_token`` or the header
``X-CSRF-Token``; the SameSite=Lax cookie alone does not stop a same-site
page (another app on a sibling subdomain) from posting.

Failed logins are counted per username in process memory: after
:data:`MAX_FAILURES` failures within :data:`FAILURE_WINDOW` seconds that
username is refused (even with the right password) until the window has
passed. With several server processes each keeps its own count, so the
effective limit is a small multiple of it; that is still far too slow for
guessing a password of 8 or more characters.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import deque
from functools import wraps
from urllib.parse import urlsplit

from flask import abort, current_app, g, jsonify, redirect, request, session, url_for
from sqlalchemy import select
from sqlalchemy.orm import Session
from werkzeug.security import check_password_hash, generate_password_hash

from .models import User

MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024  # scrypt on megabytes of "password" would be a cheap denial of service
MAX_FAILURES = 10
FAILURE_WINDOW = 600.0  # seconds
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
_USERNAME = re.compile(r"[A-Za-z0-9_.@-]{1,100}")
_dummy_hash: str | None = None


class AccountError(ValueError):
    """Bad account input (username taken, password too short); ``str()`` says what to fix."""


# ---------------------------------------------------------------- accounts

def validate_password(password: str) -> None:
    """Raise :class:`AccountError` unless ``password`` is acceptable (8 to 1024 characters)."""
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"the password must have at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise AccountError(f"the password must have at most {MAX_PASSWORD_LENGTH} characters")


def create_user(session: Session, username: str, password: str) -> User:
    """Add an experimenter account; the caller commits.

    Parameters
    ----------
    session : Session
    username : str
        1-100 letters, digits or ``_.@-``; unique (case-insensitively).
    password : str
        At least :data:`MIN_PASSWORD_LENGTH` characters; stored as a scrypt hash.

    Raises
    ------
    AccountError
        The username is malformed or taken, or the password is too short.
    """
    if not _USERNAME.fullmatch(username):
        raise AccountError("the username must be 1-100 letters, digits or _.@- characters")
    validate_password(password)
    if find_user(session, username) is not None:
        raise AccountError(f"a user named {username!r} exists already")
    user = User(username=username, password_hash=generate_password_hash(password))
    session.add(user)
    session.flush()
    return user


def set_password(user: User, password: str) -> User:
    """Replace ``user``'s password (which logs out their other sessions); the caller commits.

    Raises
    ------
    AccountError
        The password is too short (or absurdly long).
    """
    validate_password(password)
    user.password_hash = generate_password_hash(password)
    return user


def find_user(session: Session, username: str) -> User | None:
    """The user with this name, ignoring case (so "Alice" and "alice" are one account)."""
    return session.scalar(select(User).where(User.username.ilike(_escape_like(username), escape="\\")))


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def verify_password(user: User | None, password: str) -> bool:
    """Check a password; an unknown user costs the same time as a wrong password (no username probing)."""
    global _dummy_hash
    if user is None:
        if _dummy_hash is None:
            _dummy_hash = generate_password_hash(secrets.token_hex(16))
        check_password_hash(_dummy_hash, password)
        return False
    if len(password) > MAX_PASSWORD_LENGTH:
        return False
    return check_password_hash(user.password_hash, password)


# ---------------------------------------------------------------- rate limit

class LoginLimiter:
    """Failed logins per username within a sliding window (thread-safe, in memory)."""

    def __init__(self, max_failures: int = MAX_FAILURES, window: float = FAILURE_WINDOW):
        self.max_failures, self.window = max_failures, window
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._failures.get(key, deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        return times

    def retry_after(self, username: str, now: float | None = None) -> float:
        """Seconds until ``username`` may try again (0 when it may try now)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._recent(username.lower(), now)
            if len(times) < self.max_failures:
                return 0.0
            return times[-self.max_failures] + self.window - now

    def failed(self, username: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            if len(self._failures) > 10_000:  # bound memory under a spray of invented usernames
                self._failures = {k: v for k, v in self._failures.items() if self._recent(k, now)}
            times = self._recent(username.lower(), now)
            times.append(now)
            self._failures[username.lower()] = times

    def succeeded(self, username: str) -> None:
        with self._lock:
            self._failures.pop(username.lower(), None)


def limiter() -> LoginLimiter:
    """The app's login limiter (one per app, so tests with fresh apps start clean)."""
    return current_app.extensions.setdefault("perceptlab.login_limiter", LoginLimiter())


# ---------------------------------------------------------------- sessions

def _fingerprint(user: User) -> str:
    """A keyed digest of the password hash: changes with the password, reveals nothing about it."""
    key = current_app.config["SECRET_KEY"].encode()
    return hmac.new(key, user.password_hash.encode(), hashlib.sha256).hexdigest()[:24]


def log_in(user: User) -> None:
    """Start a fresh session for ``user`` (a new session and CSRF token: no session fixation)."""
    session.clear()
    session["user_id"] = user.id
    session["pw"] = _fingerprint(user)
    session[CSRF_FIELD] = secrets.token_urlsafe(32)


def log_out() -> None:
    session.clear()


def current_user(db: Session) -> User | None:
    """The logged-in user of this request, or None (also when their password changed since)."""
    if "current_user" in g:
        return g.current_user
    user = None
    user_id = session.get("user_id")
    if isinstance(user_id, int):
        user = db.get(User, user_id)
        if user is not None and not hmac.compare_digest(session.get("pw", ""), _fingerprint(user)):
            user = None
    g.current_user = user
    return user


def login_required(view):
    """Refuse anonymous requests: a redirect to the login page, or a 401 JSON under ``/admin/api/``."""
    from .app import db_session

    @wraps(view)
    def wrapper(*args, **kwargs):
        if current_user(db_session()) is None:
            if request.path.startswith("/admin/api/"):
                return jsonify({"error": "login_required", "message": "Log in at /admin/login first."}), 401
            return redirect(url_for("admin.login", next=request.full_path.rstrip("?")))
        return view(*args, **kwargs)
    return wrapper


# ---------------------------------------------------------------- CSRF

def csrf_token() -> str:
    """This session's CSRF token (made on first use, also for the anonymous login form)."""
    token = session.get(CSRF_FIELD)
    if not token:
        token = session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return token


def check_csrf() -> None:
    """Abort with 400 unless a state-changing request carries this session's token."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    expected = session.get(CSRF_FIELD)
    sent = request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD) or ""
    if not expected or not hmac.compare_digest(str(sent), str(expected)):
        abort(400, description="The security token of this form is missing or out of date. "
                               "Reload the page and try again.")


# ---------------------------------------------------------------- redirects

def safe_next(target: str | None, default: str = "/admin/") -> str:
    """``target`` if it is a path on this site, else ``default`` (no open redirect).

    Accepts only absolute paths; refuses scheme- or host-carrying URLs
    (``https://evil``, ``//evil``, ``/\\evil``, which browsers read as hosts)
    and control characters.
    """
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return default
    if any(ord(c) < 32 or c == "\\" for c in target):
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return default
    return target
