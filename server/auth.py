"""Experimenter accounts: password hashes, login sessions, CSRF tokens, login throttling, cookies.

Experimenters log in with a username and password (``perceptlab user add``). A login stores a
row in ``login_session`` (the SHA-256 of a random session ID, the user, created/last seen);
the Flask session cookie (signed with the app's secret key) carries that ID and a random CSRF
token. A request is logged in only while its row exists: logging out deletes the row, a
password change deletes all the user's rows, so a copied cookie stops working everywhere at
once. Sessions unused for :data:`SESSION_IDLE` end too.

Every state-changing admin request must echo the CSRF token, as the form field ``csrf_token``
or the header ``X-CSRF-Token``; the SameSite=Lax cookie alone does not stop a same-site page
(another app on a sibling subdomain) from posting.

Failed logins are throttled by :mod:`server.login_throttle` (growing delays per account, per
client address and per device; a limit on usernames per client). A successful login also
sets a signed long-lived *device cookie* (:data:`DEVICE_COOKIE`, only sent to ``/admin``)
that lets this browser skip the per-account and per-client delays on later logins, so an
attack on the account from elsewhere does not lock its owner out.

Cookies are ``HttpOnly``, ``SameSite=Lax`` and ``Secure`` per ``[server] secure_cookies``:
"auto" (default) when the request came over HTTPS (behind a TLS-terminating proxy set
``[server] proxy_fix`` so that ``X-Forwarded-Proto`` counts), "always" or "never".
"""
from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
import time
from functools import wraps
from urllib.parse import urlsplit

from flask import (Flask, Response, abort, current_app, g, has_request_context, jsonify, redirect, request, session,
                   url_for)
from flask.sessions import SecureCookieSessionInterface
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, object_session
from werkzeug.security import check_password_hash, generate_password_hash

from .db import db_session
from .limits import SharedLoginThrottle
from .login_throttle import LoginThrottle
from .models import LoginSession, User, as_utc, utcnow
from .services import app_services

MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024  # scrypt on megabytes of "password" would be a cheap denial of service
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
_USERNAME = re.compile(r"[A-Za-z0-9_.@-]{1,100}")
SESSION_KEY = "sid"                          # the Flask session's key for the login session ID
SESSION_IDLE = dt.timedelta(days=7)          # a login session unused this long ends
TOUCH_EVERY = dt.timedelta(minutes=5)        # last_seen_at is written at most this often
DEVICE_COOKIE = "perceptlab_device"
DEVICE_COOKIE_MAX_AGE = 365 * 24 * 3600      # seconds
DEVICE_COOKIE_PATH = "/admin"
SECURE_COOKIE_MODES = {"auto": "auto", "always": True, "true": True, "never": False, "false": False}
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
    """Replace ``user``'s password and end all their login sessions; the caller commits.

    Raises
    ------
    AccountError
        The password is too short (or absurdly long).
    """
    validate_password(password)
    user.password_hash = generate_password_hash(password)
    end_sessions(object_session(user), user.id)
    return user


def end_sessions(db: Session, user_id: int) -> int:
    """Delete every login session of the user (they are logged out everywhere); the caller commits.

    Returns
    -------
    int
        How many sessions ended.
    """
    return db.execute(delete(LoginSession).where(LoginSession.user_id == user_id)).rowcount or 0


def find_user(session: Session, username: str) -> User | None:
    """The user with this name, ignoring case (so "Alice" and "alice" are one account)."""
    if not _USERNAME.fullmatch(username):
        return None  # no account has such a name; and PostgreSQL refuses NUL in a query (a 500)
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


# ---------------------------------------------------------------- throttling and device cookies

def throttle() -> LoginThrottle | SharedLoginThrottle:
    """The app's login throttle (one per app, so tests with fresh apps start clean): in this process, or
    with ``[server] redis_url`` on counts in Redis shared by every process (:mod:`server.limits`). It
    runs on the app's injected clock (``create_app(clock=...)``, aware datetimes; tests) when there is one."""
    services = app_services()

    def make() -> LoginThrottle | SharedLoginThrottle:
        local = LoginThrottle(clock=services.seconds_clock() or time.monotonic)
        return local if services.shared_limits is None else SharedLoginThrottle(services.shared_limits, local)
    return services.made("login_throttle", make)


def _device_serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.config["SECRET_KEY"], salt="perceptlab.device-cookie")


def device_for(username: str) -> str | None:
    """The ID of this request's device cookie when it is valid and was set by a login as ``username``."""
    value = request.cookies.get(DEVICE_COOKIE)
    if not value:
        return None
    try:
        payload = _device_serializer().loads(value, max_age=DEVICE_COOKIE_MAX_AGE)
    except BadSignature:
        return None
    if not isinstance(payload, dict) or payload.get("u") != username.lower() or not isinstance(payload.get("d"), str):
        return None
    return payload["d"]


def set_device_cookie(response: Response, user: User) -> None:
    """Give this browser a fresh device cookie for ``user`` (after a successful login)."""
    value = _device_serializer().dumps({"u": user.username.lower(), "d": secrets.token_urlsafe(16)})
    response.set_cookie(DEVICE_COOKIE, value, max_age=DEVICE_COOKIE_MAX_AGE, path=DEVICE_COOKIE_PATH,
                        httponly=True, samesite="Lax", secure=cookies_secure())


# ---------------------------------------------------------------- cookies

def secure_cookie_mode(server: dict) -> bool | str:
    """``[server] secure_cookies`` as True, False or "auto"; raises ValueError for anything else."""
    value = server.get("secure_cookies", "auto")
    key = str(value).lower()  # TOML true/false arrive as bools, environment values as strings
    if key not in SECURE_COOKIE_MODES:
        raise ValueError(f"[server] secure_cookies must be \"auto\", \"always\" or \"never\", got {value!r}")
    return SECURE_COOKIE_MODES[key]


def cookies_secure() -> bool:
    """Whether this response's cookies get the ``Secure`` flag (see :func:`secure_cookie_mode`)."""
    mode = secure_cookie_mode(current_app.config["SERVER"])
    if mode == "auto":
        return has_request_context() and request.is_secure
    return bool(mode)


class SessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, with the ``Secure`` flag decided per request.

    The worker API (:data:`STATELESS_PREFIXES`) authenticates by bearer token alone: its requests
    get Flask's null session (no cookie read, verified or written; writing to it raises), so a
    login cookie can never authorise a worker request and a vote costs no session work.
    """

    STATELESS_PREFIXES = ("/api/",)

    def open_session(self, app: Flask, request):
        if request.path.startswith(self.STATELESS_PREFIXES):
            return None  # Flask then installs make_null_session() and never saves it
        return super().open_session(app, request)

    def get_cookie_secure(self, app: Flask) -> bool:
        return cookies_secure()


# ---------------------------------------------------------------- sessions

def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def log_in(db: Session, user: User) -> None:
    """Start a fresh session for ``user``: a new login-session row, session ID and CSRF token (no
    session fixation); ends the user's sessions idle for longer than :data:`SESSION_IDLE`. The
    caller commits."""
    db.execute(delete(LoginSession).where(LoginSession.user_id == user.id,
                                          LoginSession.last_seen_at < utcnow() - SESSION_IDLE))
    token = secrets.token_urlsafe(32)
    db.add(LoginSession(token_hash=_digest(token), user_id=user.id))
    session.clear()
    session[SESSION_KEY] = token
    session[CSRF_FIELD] = secrets.token_urlsafe(32)


def log_out(db: Session) -> None:
    """End this request's login session on the server (its row goes) and clear the cookie; the caller commits."""
    token = session.get(SESSION_KEY)
    if isinstance(token, str):
        db.execute(delete(LoginSession).where(LoginSession.token_hash == _digest(token)))
    session.clear()


def current_user(db: Session) -> User | None:
    """The logged-in user of this request, or None (no session, or it ended: logout, password change, idle)."""
    if "current_user" in g:
        return g.current_user
    g.current_user = _session_user(db)
    return g.current_user


def _session_user(db: Session) -> User | None:
    token = session.get(SESSION_KEY)
    if not isinstance(token, str):
        return None
    row = db.scalar(select(LoginSession).where(LoginSession.token_hash == _digest(token)))
    if row is None:
        return None
    now = utcnow()
    if now - as_utc(row.last_seen_at) > SESSION_IDLE:
        return None
    if now - as_utc(row.last_seen_at) > TOUCH_EVERY:
        _touch(row.id, now)
    return db.get(User, row.user_id)


def _touch(session_id: int, now: dt.datetime) -> None:
    """Record activity in a separate short transaction (the request's own stays read-only here)."""
    with app_services().sessions() as db:
        db.execute(update(LoginSession).where(LoginSession.id == session_id).values(last_seen_at=now))
        db.commit()


def login_required(view):
    """Refuse anonymous requests: a redirect to the login page, or a 401 JSON under ``/admin/api/``."""
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
    # Compared as bytes: compare_digest refuses str with non-ASCII characters (a TypeError, a 500).
    if not expected or not hmac.compare_digest(str(sent).encode("utf-8", "surrogatepass"),
                                               str(expected).encode("utf-8", "surrogatepass")):
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
