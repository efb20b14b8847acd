"""New request ids (server/metrics.py): 32 hex digits, never repeated within a process or across forked ones."""
from __future__ import annotations

import re

from server import metrics


def test_new_ids_are_32_hex_digits_and_never_repeat():
    ids = metrics._Ids()
    made = [ids() for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", rid) for rid in made)
    assert len(set(made)) == len(made)


def test_a_forked_process_draws_its_own_prefix(monkeypatch):
    ids = metrics._Ids()
    parent = ids()
    monkeypatch.setattr(metrics.os, "getpid", lambda: -2)  # as in a gunicorn worker forked after the first id
    child = ids()
    assert child[:16] != parent[:16]  # the counter starts again there: only the prefix keeps ids apart
    assert child != parent


def test_a_proxy_id_is_kept_and_a_malformed_one_replaced():
    assert metrics.request_id({"HTTP_X_REQUEST_ID": "nginx-3f2a9c1b7d"}) == "nginx-3f2a9c1b7d"
    environ = {"HTTP_X_REQUEST_ID": "bad id\r\nX: 1"}
    made = metrics.request_id(environ)
    assert re.fullmatch(r"[0-9a-f]{32}", made) and metrics.request_id(environ) == made  # chosen once
