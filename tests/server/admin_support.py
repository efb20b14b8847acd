"""The experimenter's login in tests: the test password, the CSRF token of a form page, logging in.

A support module, not a test module: test modules import it (they never import each other); the
``user`` and ``admin`` fixtures built on it live in tests/server/conftest.py.
"""
from __future__ import annotations

import re

PASSWORD = "correct horse battery"


def csrf_of(client, path: str = "/admin/login") -> str:
    html = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def log_in(client, username: str = "alice", password: str = PASSWORD, next_: str | None = None):
    data = {"username": username, "password": password, "csrf_token": csrf_of(client)}
    if next_ is not None:
        data["next"] = next_
    return client.post("/admin/login", data=data)
