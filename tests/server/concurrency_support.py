"""Workers over real HTTP for the concurrency tests: OpenAPI-checked ``requests`` calls
(:func:`checked`), a thread-safe :class:`HttpWorker`, and :func:`together`, which releases calls at one moment.

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import requests

from .api_support import response_errors

TIMEOUT = 30


def checked(method: str, url: str, response: requests.Response) -> requests.Response:
    """The response, after checking it against the OpenAPI document."""
    mimetype = response.headers.get("Content-Type", "").split(";")[0]
    body = response.json() if mimetype == "application/json" else response.content
    problems = response_errors(method, url, response.status_code, mimetype, body)
    assert not problems, f"{method} {url} -> {response.status_code} {body!r}: {problems}"
    return response


class HttpWorker:
    """One worker over HTTP; thread-safe (no shared connection)."""

    def __init__(self, base: str, slug: str, worker_id: str | None = None):
        self.base = base
        url = f"{base}/api/v1/studies/{slug}/assignments"
        response = checked("post", url, requests.post(url, timeout=TIMEOUT, json={
            "platform": "link", "worker_id": worker_id or f"P{uuid.uuid4().hex[:10]}"}))
        assert response.status_code == 201, response.text
        self.assignment_id = response.json()["assignment_id"]
        self.headers = {"Authorization": f"Bearer {response.json()['token']}"}

    def url(self, endpoint: str) -> str:
        return f"{self.base}/api/v1/assignments/{self.assignment_id}/{endpoint}"

    def action(self, action: str) -> requests.Response:
        return checked("post", self.url("actions"), requests.post(
            self.url("actions"), headers=self.headers, json={"action": action}, timeout=TIMEOUT))

    def state(self) -> dict:
        response = checked("get", self.url("state"), requests.get(self.url("state"), headers=self.headers,
                                                                   timeout=TIMEOUT))
        assert response.status_code == 200, response.text
        return response.json()

    def vote(self, body: dict) -> requests.Response:
        return checked("post", self.url("votes"), requests.post(self.url("votes"), headers=self.headers, json=body,
                                                                 timeout=TIMEOUT))


def together(n: int, func, *args_list):
    """``[func(*args) for args in args_list]`` on ``n`` threads, the first ``n`` calls released at one moment."""
    go = threading.Event()
    arrived = threading.Semaphore(0)

    def run(args):
        arrived.release()
        go.wait(TIMEOUT)
        return func(*args)

    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(run, args) for args in args_list]
        for _ in range(min(n, len(args_list))):  # every thread at the gate (not a guess at how long that takes)
            assert arrived.acquire(timeout=TIMEOUT), "a thread never reached the gate"
        go.set()
        return [future.result() for future in futures]
