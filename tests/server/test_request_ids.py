"""New request ids (server/metrics.py): 32 hex digits, never repeated within a process or across forked ones."""
from __future__ import annotations

import os
import re

from server import metrics


def test_new_ids_are_32_hex_digits_and_never_repeat():
    ids = metrics._Ids()
    made = [ids() for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", rid) for rid in made)
    assert len(set(made)) == len(made)


def test_a_forked_process_draws_its_own_prefix():
    ids = metrics._Ids()
    parent = ids()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child, as a gunicorn worker forked after the master's first id
        os.write(write, ids().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    assert re.fullmatch(r"[0-9a-f]{32}", child)
    assert child[:16] != parent[:16]  # the counter starts again there: only the prefix keeps ids apart
    assert ids()[:16] == parent[:16]  # the parent keeps its own


def test_a_proxy_id_is_kept_and_a_malformed_one_replaced():
    assert metrics.request_id({"HTTP_X_REQUEST_ID": "nginx-3f2a9c1b7d"}) == "nginx-3f2a9c1b7d"
    environ = {"HTTP_X_REQUEST_ID": "bad id\r\nX: 1"}
    made = metrics.request_id(environ)
    assert re.fullmatch(r"[0-9a-f]{32}", made) and metrics.request_id(environ) == made  # chosen once
