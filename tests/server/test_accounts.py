"""Experimenter accounts under attack, cookies, security headers and outbound calls (issue 12, items 4-5):
failed-login throttling (per account, per client, per device cookie; usernames per client), Secure
cookies, server-side session invalidation, CSP frame-ancestors, and no request to the cloud metadata
service when AWS credentials are missing."""
from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from server import auth, login_throttle
from server.cli import cli
from server.login_throttle import ACCOUNT, CLIENT, DEVICE, MAX_USERNAMES_PER_CLIENT, USERNAME_WINDOW
from server.models import LoginSession
from server.services import app_services

from .admin_support import PASSWORD, csrf_of
from .conftest import WorkerClient, make_test_app

WRONG = "not the password"
MTURK_ORIGINS = ("https://www.mturk.com", "https://worker.mturk.com", "https://workersandbox.mturk.com")




def browser(app, address: str = "192.0.2.10"):
    """A test client (its own cookies: a browser) that connects from ``address``."""
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return client


def attempt(client, username: str = "alice", password: str = PASSWORD):
    token = csrf_of(client)
    return client.post("/admin/login", data={"username": username, "password": password, "csrf_token": token})


def _sessions(app) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(func.count()).select_from(LoginSession))


# ---------------------------------------------------------------- throttling

def test_an_attacker_waits_ever_longer_but_never_locks_the_account(app, user, clock):
    """Per account: free failures, then delays that double; a refused attempt is not even checked,
    and after the delay the right password works (a delay, not a lockout)."""
    attacker = [browser(app, f"198.51.100.{i}") for i in range(1, 60)]  # a botnet: a new address each time
    bots = iter(attacker)
    for _ in range(ACCOUNT.free):
        assert attempt(next(bots), password=WRONG).status_code == 401
    delays = []
    for _ in range(4):
        refused = attempt(next(bots), password=WRONG)
        assert refused.status_code == 429
        assert "Too many failed logins" in refused.get_data(as_text=True)
        delays.append(int(refused.headers["Retry-After"]))
        early = attempt(next(bots))  # even the right password is refused while the delay runs
        assert early.status_code == 429
        clock.advance(seconds=delays[-1])
        assert attempt(next(bots), password=WRONG).status_code == 401
    assert delays == [1, 2, 4, 8]
    assert int(attempt(next(bots), password=WRONG).headers["Retry-After"]) == 16
    assert _sessions(app) == 0  # no refused attempt logged anybody in
    clock.advance(seconds=16)
    owner = browser(app, "203.0.113.5")
    assert attempt(owner).status_code == 303  # the real user gets in once the delay is over


def test_delays_stop_growing_at_the_cap_and_are_forgotten(app, clock):
    with app.app_context():
        throttle = auth.throttle()  # the app's, on the injected clock
    waits = []
    for i in range(40):
        wait = throttle.acquire("bob", f"10.0.{i}.1")  # every attempt from a new address
        if wait > 0:
            waits.append(wait)
            clock.advance(seconds=wait)
    assert max(waits) == ACCOUNT.cap and waits == sorted(waits)
    clock.advance(seconds=login_throttle.FORGET_AFTER)
    assert all(throttle.acquire("bob", "10.9.9.9") == 0 for _ in range(ACCOUNT.free))


def test_the_owner_with_a_device_cookie_logs_in_during_an_attack(app, user, clock):
    owner = browser(app, "203.0.113.5")
    response = attempt(owner)
    assert response.status_code == 303
    cookie = next(h for h in response.headers.getlist("Set-Cookie") if h.startswith(auth.DEVICE_COOKIE + "="))
    assert "HttpOnly" in cookie and "Path=/admin" in cookie and "SameSite=Lax" in cookie
    owner.post("/admin/logout", data={"csrf_token": csrf_of(owner, "/admin/")})

    # The attack: from the owner's own address too (a shared NAT), until the account is deep in delays.
    for i in range(ACCOUNT.free + 6):
        bot = browser(app, "203.0.113.5" if i % 2 else f"198.51.100.{i}")
        status = attempt(bot, password=WRONG).status_code
        assert status in (401, 429)
        clock.advance(seconds=0.5)
    assert attempt(browser(app, "198.51.100.200")).status_code == 429  # a new browser must wait
    assert attempt(browser(app, "203.0.113.5")).status_code == 429

    assert attempt(owner).status_code == 303  # the owner's browser goes straight in
    assert owner.get("/admin/").status_code == 200

    # That browser is throttled on its own failures only.
    owner.post("/admin/logout", data={"csrf_token": csrf_of(owner, "/admin/")})
    for _ in range(DEVICE.free):
        assert attempt(owner, password=WRONG).status_code == 401
    refused = attempt(owner)
    assert refused.status_code == 429 and "from this browser" in refused.get_data(as_text=True)
    clock.advance(seconds=int(refused.headers["Retry-After"]))
    assert attempt(owner).status_code == 303


def test_a_device_cookie_counts_only_for_its_own_account_and_only_when_signed(app, user, clock):
    with app_services(app).sessions() as session:
        auth.create_user(session, "bob", "bobs long password")
        session.commit()
    bob = browser(app, "203.0.113.7")
    assert attempt(bob, "bob", "bobs long password").status_code == 303
    bob.post("/admin/logout", data={"csrf_token": csrf_of(bob, "/admin/")})
    with app.app_context():
        throttle = auth.throttle()  # the app's, on the injected clock
    for i in range(ACCOUNT.free):
        throttle.acquire("alice", f"198.51.100.{i}")  # alice's account is under attack
    assert attempt(bob, "alice", PASSWORD).status_code == 429  # bob's cookie does not vouch for alice
    forged = browser(app, "203.0.113.8")
    forged.set_cookie(auth.DEVICE_COOKIE, "eyJ1IjoiYWxpY2UiLCJkIjoieCJ9.forged.sig", path="/admin")
    assert attempt(forged).status_code == 429


def test_one_client_may_fail_on_only_a_few_usernames(app, clock):
    sprayer, other = browser(app, "192.0.2.66"), browser(app, "192.0.2.67")
    names = [f"user{i}" for i in range(MAX_USERNAMES_PER_CLIENT)]
    for name in names:
        assert attempt(sprayer, name, WRONG).status_code == 401
    refused = attempt(sprayer, "one-more", WRONG)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) == USERNAME_WINDOW
    assert attempt(sprayer, names[0], WRONG).status_code == 401  # a username it tried already: allowed
    assert attempt(other, "one-more", WRONG).status_code == 401  # another client: unaffected
    clock.advance(seconds=USERNAME_WINDOW)
    assert attempt(sprayer, "one-more", WRONG).status_code == 401


def test_one_client_gets_growing_delays_across_usernames(app, clock):
    client = browser(app, "2001:db8:1:2::10")
    names = [f"user{i}" for i in range(MAX_USERNAMES_PER_CLIENT)]
    for k in range(CLIENT.free):  # two failures per username: no account reaches its own delays
        assert attempt(client, names[k % len(names)], WRONG).status_code == 401
    sibling = browser(app, "2001:db8:1:2::99")  # the same /64: the same client
    refused = attempt(sibling, names[0], WRONG)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    clock.advance(seconds=1)
    assert attempt(sibling, names[0], WRONG).status_code == 401
    assert attempt(client, names[1], WRONG).headers["Retry-After"] == "2"
    assert attempt(browser(app, "2001:db8:1:3::10"), names[0], WRONG).status_code == 401  # another /64


def test_a_success_refunds_the_attempt_and_resets_the_account(app, user, clock):
    client = browser(app)
    for _ in range(ACCOUNT.free - 1):
        assert attempt(client, password=WRONG).status_code == 401
    assert attempt(client).status_code == 303
    client.post("/admin/logout", data={"csrf_token": csrf_of(client, "/admin/")})
    client.delete_cookie(auth.DEVICE_COOKIE, path="/admin")  # as a new browser at the same address
    for _ in range(ACCOUNT.free - 1):
        assert attempt(client, password=WRONG).status_code == 401  # the count started afresh


# ---------------------------------------------------------------- cookies

def _cookies(response) -> dict[str, str]:
    return {h.split("=", 1)[0]: h for h in response.headers.getlist("Set-Cookie")}


def test_cookies_are_secure_over_https_in_auto_mode(app, user):
    secure = app.test_client()
    token = csrf_of(secure, "https://localhost/admin/login")
    response = secure.post("https://localhost/admin/login",
                           data={"username": "alice", "password": PASSWORD, "csrf_token": token})
    assert response.status_code == 303
    cookies = _cookies(response)
    assert "Secure" in cookies["session"] and "Secure" in cookies[auth.DEVICE_COOKIE]
    assert "HttpOnly" in cookies["session"]

    plain = attempt(app.test_client())
    assert plain.status_code == 303
    cookies = _cookies(plain)
    assert "Secure" not in cookies["session"] and "Secure" not in cookies[auth.DEVICE_COOKIE]


@pytest.mark.parametrize("setting, proxies, forwarded, secure", [
    ("always", 0, None, True),
    ("never", 0, None, False),
    ("auto", 0, "https", False),  # X-Forwarded-Proto from an untrusted client is ignored
    ("auto", 1, "https", True),   # ...and believed from a trusted proxy
    ("auto", 1, "http", False),
])
def test_secure_cookie_settings_and_trusted_proxies(sqlite_url, tmp_path, setting, proxies, forwarded, secure):
    app = make_test_app(sqlite_url, tmp_path / "instance", secure_cookies=setting, proxy_fix=proxies)
    try:
        headers = {"X-Forwarded-Proto": forwarded} if forwarded else {}
        response = app.test_client().get("/admin/login", headers=headers)
        assert ("Secure" in _cookies(response)["session"]) is secure
    finally:
        app_services(app).engine.dispose()


def test_a_misspelt_secure_cookies_setting_is_refused_at_start(sqlite_url, tmp_path):
    with pytest.raises(ValueError, match="secure_cookies"):
        make_test_app(sqlite_url, tmp_path / "instance", secure_cookies="sometimes")


def test_the_production_example_turns_secure_cookies_on():
    from server.config import PRODUCTION_EXAMPLE, load_config

    example = PRODUCTION_EXAMPLE
    config = load_config({"PERCEPTLAB_CONFIG": str(example)})
    assert auth.secure_cookie_mode(config["server"]) is True
    assert auth.secure_cookie_mode(load_config({})["server"]) == "auto"


# ---------------------------------------------------------------- sessions end on the server

def _copy_session(source, app):
    thief = app.test_client()
    thief.set_cookie("session", source.get_cookie("session").value)
    return thief


def test_a_copied_cookie_dies_with_logout(app, user):
    owner = browser(app)
    assert attempt(owner).status_code == 303
    thief = _copy_session(owner, app)
    assert thief.get("/admin/").status_code == 200
    assert _sessions(app) == 1
    assert owner.post("/admin/logout", data={"csrf_token": csrf_of(owner, "/admin/")}).status_code == 303
    assert _sessions(app) == 0
    assert thief.get("/admin/").status_code == 302
    assert thief.get("/admin/api/studies").status_code == 401


def test_a_password_change_ends_every_session(app, user):
    first, second = browser(app, "192.0.2.1"), browser(app, "192.0.2.2")
    assert attempt(first).status_code == 303 and attempt(second).status_code == 303
    thief = _copy_session(first, app)
    assert _sessions(app) == 2
    result = CliRunner().invoke(cli, ["user", "passwd", "alice", "--password-stdin", "--database-url",
                                      app.config["DATABASE_URL"]], input="a brand new password\n")
    assert result.exit_code == 0, result.output
    assert _sessions(app) == 0
    for client in (first, second, thief):
        assert client.get("/admin/").status_code == 302
    assert attempt(first, password="a brand new password").status_code == 303


def test_idle_sessions_end(app, user):
    import datetime as dt

    owner = browser(app)
    assert attempt(owner).status_code == 303
    with app_services(app).sessions() as session:
        row = session.scalar(select(LoginSession))
        row.last_seen_at = row.last_seen_at - auth.SESSION_IDLE - dt.timedelta(minutes=1)
        session.commit()
    assert owner.get("/admin/").status_code == 302


def test_worker_api_requests_have_no_login_session(app, user, study):
    """The worker API authenticates by bearer token alone: it gets Flask's null session, so an
    experimenter's login cookie is neither read nor renewed there and authorises nothing."""
    from flask import session
    from flask.sessions import NullSession

    experimenter = browser(app)
    assert attempt(experimenter).status_code == 303
    worker = WorkerClient(experimenter, study)  # the same browser, holding the login cookie
    state = experimenter.get(f"/api/v1/assignments/{worker.assignment_id}/state", headers=worker.headers)
    assert state.status_code == 200 and "Set-Cookie" not in state.headers
    cookie_only = experimenter.get(f"/api/v1/assignments/{worker.assignment_id}/state")
    assert cookie_only.status_code == 403 and cookie_only.json["error"] == "bad_token"
    with app.test_request_context(f"/api/v1/assignments/{worker.assignment_id}/state"):
        assert isinstance(session._get_current_object(), NullSession)
    with app.test_request_context("/admin/"):
        assert not isinstance(session._get_current_object(), NullSession)
    assert experimenter.get("/admin/").status_code == 200  # the login itself is untouched


# ---------------------------------------------------------------- headers

def _csp(response) -> dict[str, str]:
    policy = response.headers["Content-Security-Policy"]
    return {part.split()[0]: part.split(None, 1)[1] if " " in part.strip() else ""
            for part in (p.strip() for p in policy.split(";")) if part}


def test_admin_pages_cannot_be_framed(app, user):
    client = browser(app)
    for path in ("/admin/login", "/admin/no-such-page"):
        response = client.get(path)
        assert _csp(response)["frame-ancestors"] == "'none'", path
        assert response.headers["X-Frame-Options"] == "DENY"


def test_worker_pages_may_be_framed_by_mturk_only(app, study):
    client = app.test_client()
    preview = client.get(f"/s/{study}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1")
    entry = client.get(f"/s/{study}?participant=P1")
    pages = [preview, client.get(entry.location) if entry.status_code in (302, 303) else entry,
             client.get("/s/no-such-study")]
    for response in pages:
        csp = _csp(response)
        assert set(csp["frame-ancestors"].split()) == {"'self'", *MTURK_ORIGINS}
        assert csp["object-src"] == "'none'" and csp["base-uri"] == "'self'"
        assert "img-src" not in csp and "default-src" not in csp  # stimuli may come from S3 or a CDN
        assert "X-Frame-Options" not in response.headers
    assert preview.status_code == 200


# ---------------------------------------------------------------- no outbound surprises

@pytest.fixture
def no_aws(monkeypatch, tmp_path):
    """No AWS credentials anywhere: no AWS_* variables, HOME and the AWS files point at empty files."""
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    for name in ("config", "credentials"):
        (home / name).write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "credentials"))


@pytest.fixture
def outbound(monkeypatch):
    """Every attempt to open a network connection from Python, recorded and refused."""
    attempts: list = []

    def refuse_connect(sock, address, *args):
        attempts.append(address)
        raise OSError("outbound connection refused by the test")

    def refuse_create(address, *args, **kwargs):
        attempts.append(address)
        raise OSError("outbound connection refused by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse_connect)
    monkeypatch.setattr(socket, "create_connection", refuse_create)
    return attempts


def test_the_guard_sees_botocores_default_metadata_probe(no_aws, outbound):
    """The control: without our restriction, botocore's chain does try the metadata service."""
    import boto3

    assert boto3.session.Session().get_credentials() is None
    assert any("169.254.169.254" in str(address) for address in outbound)


def test_mturk_page_without_credentials_makes_no_network_call(app, study, user, no_aws, outbound):
    client = browser(app)
    assert attempt(client).status_code == 303
    html = client.get(f"/admin/mturk/studies/{study}").get_data(as_text=True)
    assert "Balance unavailable" in html and "AWS_ACCESS_KEY_ID" in html and "AWS_SECRET_ACCESS_KEY" in html
    assert outbound == []


def test_mturk_balance_command_without_credentials_makes_no_network_call(app, no_aws, outbound):
    result = CliRunner().invoke(cli, ["mturk", "balance", "--database-url", app.config["DATABASE_URL"]])
    assert result.exit_code == 2
    assert "no AWS credentials found" in result.output and "AWS_ACCESS_KEY_ID" in result.output
    assert outbound == []


def test_s3_storage_without_credentials_makes_no_network_call(no_aws, outbound):
    from server.storage import S3Storage, StorageError

    storage = S3Storage("bucket", region="eu-west-1")
    with pytest.raises(StorageError, match="AWS_ACCESS_KEY_ID"):
        storage.presign("stimuli/demo/x.png")
    assert outbound == []


def test_clients_use_environment_credentials_without_network(no_aws, outbound, monkeypatch):
    from server.mturk import check_credentials, make_client
    from server.storage import S3Storage

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    check_credentials()
    assert make_client().meta.region_name == "us-east-1"
    assert "X-Amz-Credential=AKIDENV" in S3Storage("bucket").presign("stimuli/demo/x.png")
    assert outbound == []


def test_instance_metadata_only_when_configured(no_aws, outbound):
    from server.aws import boto3_session

    assert boto3_session().get_credentials() is None and outbound == []
    assert boto3_session(use_instance_metadata=True).get_credentials() is None
    assert any("169.254.169.254" in str(address) for address in outbound)
