"""Browser tests of experiment_ui/static/js/response_queue.js (the worker's upload queue, here with votes).

A tiny threaded HTTP server serves the real module, a harness page and a fake
``POST /api/v1/assignments/A1/votes`` whose failures the test scripts (503,
429, dropped connections, "stored but the answer was lost").  Debian's
chromium runs the page.  What must hold: no vote is lost (they survive
failures, a reload and a closed page), none is stored twice, retries back
off, and a vote the server refuses for good is dropped and reported.
"""
from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.browser.conftest import ASSERTION_TIMEOUT_MS, pause_page_clock

REPO = Path(__file__).resolve().parents[2]
JS = REPO / "experiment_ui" / "static" / "js"  # the real modules, served as /static/js/<name>
TOKEN = "T0K"

# Without chromium the conftest's `browser` fixture skips (or fails in CI).
pytestmark = pytest.mark.timeout(180)

HARNESS = """<!doctype html>
<meta charset="utf-8">
<title>ResponseQueue harness</title>
<script type="module">
import { ResponseQueue, uuid4 } from "/static/js/response_queue.js";
import { backoffDelay, callApi } from "/static/js/assignment_api.js";
const VOTES = { path: "votes", idField: "vote_id" };  // the route of paired-comparison votes
const params = new URLSearchParams(location.search);
window.rejected = [];
window.delivered = [];
// ?jitter=F fixes the backoff's random factor (0.5 + 0.5 F), so the retry delays are exact.
const jitter = params.get("jitter");
window.onQueueChange = null;  // a test's hook on the queue's onChange
window.q = new ResponseQueue({
  apiBase: "/api/v1/", assignmentId: "A1", token: "%s",
  baseDelayMs: Number(params.get("base") || 40), maxDelayMs: Number(params.get("max") || 400),
  ...(jitter === null ? {} : { random: () => Number(jitter) }),
  onChange: (queue) => { if (window.onQueueChange) window.onQueueChange(queue); },
  onRejected: (vote, error) => window.rejected.push({ trial_id: vote.trial_id, ...error }),
  onDelivered: (vote, body) => window.delivered.push({ trial_id: vote.trial_id, status: body.status }),
});
window.lib = { backoffDelay, uuid4 };
// GET /state through callApi, as the assignment driver asks it; its waits on a 503 are noted.
window.waits = [];
window.getState = () => callApi({ apiBase: "/api/v1", assignmentId: "A1", token: "TOK_PLACEHOLDER",
                                  onWait: (ms) => window.waits.push(ms) }, "GET", "/state");
window.vote = (trial) => window.q.enqueue(VOTES, {
  trial_id: trial, choice: "left", rt_ms: 512, input: "mouse",
  client_time: new Date().toISOString(), window: { width: 1366, height: 657, dpr: 1 },
});
window.harnessReady = true;
</script>
""".replace("TOK_PLACEHOLDER", TOKEN) % TOKEN


class FakeVotes:
    """State of the fake vote endpoint: a script of failures, then the contract's answers."""

    def __init__(self):
        self.lock = threading.Lock()
        self.failures: list[str] = []   # consumed one per request: "503", "429", "drop", "store_then_503"
        self.fail_all = False
        self.state_unavailable = 0  # GET /state answers 503 with Retry-After: 1 this many times first
        self.state_attempts: list[int] = []
        self.stored: dict[str, str] = {}  # vote_id -> exact body
        self.attempts: list[tuple[float, str, int]] = []  # (time, vote_id, status)

    def reset(self):
        with self.lock:
            self.failures, self.fail_all = [], False
            self.state_unavailable, self.state_attempts = 0, []
            self.stored.clear()
            self.attempts.clear()

    def trial_ids(self):
        with self.lock:
            return sorted(json.loads(body)["trial_id"] for body in self.stored.values())


def make_handler(fake: FakeVotes):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest output clean
            pass

        def _send(self, status, body=None, content_type="application/json", headers=()):
            data = body.encode() if isinstance(body, str) else (json.dumps(body).encode() if body is not None else b"")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            for key, value in headers:
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/harness.html":
                self._send(200, HARNESS, "text/html; charset=utf-8")
            elif path == "/api/v1/assignments/A1/state":
                with fake.lock:
                    down = fake.state_unavailable > 0
                    fake.state_unavailable -= down
                    fake.state_attempts.append(503 if down else 200)
                if down:
                    self._send(503, {"error": "unavailable", "message": "the database is out of reach",
                                     "retry_after_s": 1.0}, headers=[("Retry-After", "1")])
                else:
                    self._send(200, {"stage": "trials"})
            elif path.startswith("/static/js/") and (JS / path[len("/static/js/"):]).is_file():
                self._send(200, (JS / path[len("/static/js/"):]).read_text(encoding="utf-8"),
                           "text/javascript; charset=utf-8")
            else:
                self._send(404, {"error": "not_found", "message": path})

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            if self.path != "/api/v1/assignments/A1/votes":
                return self._send(404, {"error": "not_found", "message": self.path})
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._send(403, {"error": "bad_token", "message": "bad token"})
            body = json.loads(raw)
            vote_id = body["vote_id"]
            with fake.lock:
                action = "503" if fake.fail_all else (fake.failures.pop(0) if fake.failures else None)
                if action == "drop":
                    fake.attempts.append((time.monotonic(), vote_id, 0))
                elif action in ("503", "429"):
                    fake.attempts.append((time.monotonic(), vote_id, int(action)))
                else:
                    if body["trial_id"] == "bad":
                        fake.attempts.append((time.monotonic(), vote_id, 422))
                        action = "422"
                    elif vote_id in fake.stored:
                        status = 200 if fake.stored[vote_id] == raw else 409
                        fake.attempts.append((time.monotonic(), vote_id, status))
                        action = str(status)
                    else:
                        fake.stored[vote_id] = raw
                        fake.attempts.append((time.monotonic(), vote_id, 201))
                        action = "503" if action == "store_then_503" else "201"
            if action == "drop":
                # No response at all: the browser sees a network error.
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            elif action == "503":
                self._send(503, {"error": "unavailable", "message": "try later"})
            elif action == "429":
                self._send(429, {"error": "rate_limited", "message": "slow down"}, headers=[("Retry-After", "0")])
            elif action == "422":
                self._send(422, {"error": "invalid_request", "message": "trial_id is bad"})
            elif action == "409":
                self._send(409, {"error": "conflict", "message": "same vote_id, other payload"})
            else:
                self._send(int(action), {"vote_id": vote_id, "status": "stored" if action == "201" else "duplicate",
                                         "stage": "trials", "page_complete": False})

    return Handler


@pytest.fixture(scope="module")
def server():
    fake = FakeVotes()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield fake, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def page(browser, server):
    """A harness page in a fresh context of the session's chromium (tests/browser/conftest.py)."""
    fake, base = server
    fake.reset()
    context = browser.new_context()  # fresh localStorage per test
    page = context.new_page()
    page.set_default_timeout(ASSERTION_TIMEOUT_MS)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{base}/harness.html")
    page.wait_for_function("window.harnessReady === true")
    yield page
    context.close()
    assert not errors, errors


def stored_queue(page):
    return page.evaluate("JSON.parse(localStorage.getItem('perceptlab.responses.A1') || '[]')")


def wait_until(predicate, timeout=60.0):
    """Until ``predicate()`` holds; ``timeout`` (real seconds) only turns a condition never met into a failure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_retries_through_failures_without_losing_or_duplicating(page, server):
    fake, _ = server
    fake.failures = ["503", "drop", "429", "503", "store_then_503"]
    page.evaluate("['t1', 't2', 't3'].forEach((t) => window.vote(t))")
    # Written to localStorage before the first attempt returns.
    assert [json.loads(e["body"])["trial_id"] for e in stored_queue(page)] == ["t1", "t2", "t3"]
    page.wait_for_function("window.q.pending === 0")

    assert fake.trial_ids() == ["t1", "t2", "t3"]
    assert stored_queue(page) == []
    # "store_then_503" lost the server's answer: the identical resend was answered 200 "duplicate".
    statuses = [status for _, _, status in fake.attempts]
    assert statuses.count(201) == 3 and statuses.count(200) == 1 and 409 not in statuses
    assert page.evaluate("window.delivered.map((d) => d.trial_id)") == ["t1", "t2", "t3"]
    # Delivered in the order they were made.
    first_success = {}
    for _, vote_id, status in fake.attempts:
        if status == 201:
            first_success.setdefault(vote_id, len(first_success))
    order = [json.loads(fake.stored[v])["trial_id"] for v in sorted(first_success, key=first_success.get)]
    assert order == ["t1", "t2", "t3"]


# Resolves, when the queue has scheduled its next retry, with that retry's delay in ms. Event-driven
# (the queue's onChange), so it needs no polling: a paused page clock also stops Playwright's own
# animation-frame polling of wait_for_function.
NEXT_RETRY_DELAY_JS = """() => new Promise((resolve) => {
  const check = (queue) => {
    if (!queue.retrying) return;
    window.onQueueChange = null;
    resolve(queue.nextRetryAt - Date.now());
  };
  window.onQueueChange = check;
  check(window.q);
})"""


def test_backoff_grows_and_is_capped(page, server):
    """The retry delays, read off the page's paused clock: base 40 ms doubling per failure up to the
    400 ms cap, times the jitter factor (fixed at 0.75 here), and no retry a millisecond early."""
    fake, base = server
    page.clock.install()
    page.goto(f"{base}/harness.html?jitter=0.5")
    page.wait_for_function("window.harnessReady === true")
    # From here the page's time moves only when the test runs it.
    pause_page_clock(page)
    fake.failures = ["503"] * 6
    page.evaluate("() => { window.vote('t1'); }")
    delays = []
    for failure in range(1, 7):
        delay = page.evaluate(NEXT_RETRY_DELAY_JS)
        delays.append(delay)
        assert len(fake.attempts) == failure
        page.clock.run_for(delay - 1)
        assert page.evaluate("window.q.retrying") is True and len(fake.attempts) == failure  # not yet
        page.clock.run_for(1)  # due: the retry goes out (the next loop sees its attempt)
    # 0.75 x min(400, 40 x 2^(n-1)): growing, then capped.
    assert delays == [30, 60, 120, 240, 300, 300]
    page.evaluate("() => window.q.whenIdle()")
    assert [status for _, _, status in fake.attempts] == [503] * 6 + [201]
    assert fake.trial_ids() == ["t1"]

    # A success resets the backoff: the next failure waits the first delay again.
    fake.failures = ["503"]
    page.evaluate("() => { window.vote('t2'); }")
    assert page.evaluate(NEXT_RETRY_DELAY_JS) == 30
    page.clock.run_for(30)
    page.evaluate("() => window.q.whenIdle()")
    assert fake.trial_ids() == ["t1", "t2"]

    delays = page.evaluate("""() => {
      const out = [];
      for (const r of [0, 0.999999]) for (let a = 1; a <= 40; a++)
        out.push(window.lib.backoffDelay(a, { baseDelayMs: 1000, maxDelayMs: 30000, random: () => r }));
      return out;
    }""")
    assert max(delays) <= 30000
    assert delays[0] == 500 and delays[40] == 1000   # attempt 1: 0.5..1 x base
    assert delays[39] == 15000                       # capped, low jitter
    assert all(b >= a for a, b in zip(delays[:40], delays[1:40]))


def test_queued_votes_survive_a_reload(page, server):
    fake, base = server
    fake.fail_all = True
    page.evaluate("['r1', 'r2', 'r3'].forEach((t) => window.vote(t))")
    assert wait_until(lambda: len(fake.attempts) >= 2)
    before = [e["id"] for e in stored_queue(page)]
    assert len(before) == 3

    page.reload()
    page.wait_for_function("window.harnessReady === true")
    assert [e["id"] for e in stored_queue(page)] == before
    assert page.evaluate("window.q.pending") == 3
    fake.fail_all = False  # the new page's queue is backing off and retries on its own
    page.wait_for_function("window.q.pending === 0")
    assert sorted(fake.stored) == sorted(before)
    assert fake.trial_ids() == ["r1", "r2", "r3"]
    assert stored_queue(page) == []


def test_rejected_vote_is_dropped_and_reported(page, server):
    fake, _ = server
    result = page.evaluate("""async () => {
      const bad = window.vote('bad').then(() => 'delivered', (e) => e.error);
      window.vote('ok1');
      // A guard against a hang (reported, not waited out by the module's timeout); no deadline.
      const timeout = new Promise((resolve) => setTimeout(() => resolve('timed out'), 30000));
      return await Promise.race([bad, timeout]);
    }""")
    assert result == "invalid_request"
    page.wait_for_function("window.q.pending === 0")
    assert page.evaluate("window.rejected") == [
        {"trial_id": "bad", "status": 422, "error": "invalid_request", "message": "trial_id is bad"}]
    assert fake.trial_ids() == ["ok1"]
    assert stored_queue(page) == []


def test_pagehide_sends_pending_votes_with_keepalive(page, server):
    fake, base = server
    # One failure, then a backoff on the page's paused clock: the retry never comes, however long the
    # machine takes, so only the pagehide send can deliver.
    page.clock.install()
    page.goto(f"{base}/harness.html?base=20000&max=30000")
    page.wait_for_function("window.harnessReady === true")
    pause_page_clock(page)
    fake.failures = ["503"]
    page.evaluate("() => { window.vote('k1'); }")  # not awaiting the delivery promise
    assert wait_until(lambda: len(fake.attempts) == 1, timeout=60), fake.attempts
    page.goto("about:blank")
    assert wait_until(lambda: fake.trial_ids() == ["k1"], timeout=60)


def test_uuid4_fallback_without_random_uuid(page):
    ids = page.evaluate("""() => {
      const original = crypto.randomUUID;
      crypto.randomUUID = undefined;   // as in a non-secure context
      try { return Array.from({ length: 50 }, () => window.lib.uuid4()); }
      finally { crypto.randomUUID = original; }
    }""")
    pattern = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
    assert all(pattern.match(i) for i in ids)
    assert len(set(ids)) == 50


def test_one_queue_for_every_route(page, server):
    """Each response names its route: a route without an id field (the calibration's: the server is
    idempotent by the body) sends the body as given, and shares the one queue, in order, with the votes.
    A refusal has the API's error shape."""
    fake, _ = server
    queued = page.evaluate("""() => {
      const calibration = window.q.enqueue({ path: "calibration", idField: null }, { card_width_px: 323.5 });
      window.refusal = calibration.then(() => null, (e) => ({ status: e.status, error: e.error, message: e.message,
                                                               name: e.name }));
      window.vote("after");
      return JSON.parse(localStorage.getItem("perceptlab.responses.A1"));
    }""")
    assert [e["path"] for e in queued] == ["calibration", "votes"]
    assert json.loads(queued[0]["body"]) == {"card_width_px": 323.5}   # no id added
    assert json.loads(queued[1]["body"])["vote_id"] == queued[1]["id"]
    # The fake server knows no /calibration: a 404, refused for good; the vote behind it goes through.
    assert page.evaluate("window.refusal") == {"status": 404, "error": "not_found",
                                               "message": "/api/v1/assignments/A1/calibration", "name": "ApiError"}
    page.wait_for_function("window.q.pending === 0")
    assert fake.trial_ids() == ["after"]


def test_queues_of_an_earlier_release_are_taken_over(page, server):
    """Votes that a page of the previous release left in its own localStorage queue are not lost when
    the new page loads: they join the one queue, oldest first, and are delivered."""
    fake, _ = server
    old = [{"vote_id": f"00000000-0000-4000-8000-00000000000{i}", "queued_at": i,
            "body": json.dumps({"vote_id": f"00000000-0000-4000-8000-00000000000{i}", "trial_id": f"old{i}",
                                "choice": "left", "rt_ms": 500, "input": "mouse"})} for i in (1, 2)]
    fake.fail_all = True  # hold them in the queue until the test has looked
    page.evaluate("(old) => localStorage.setItem('perceptlab.votes.A1', old)", json.dumps(old))
    page.reload()
    page.wait_for_function("window.harnessReady === true")
    assert page.evaluate("localStorage.getItem('perceptlab.votes.A1')") is None
    assert [(e["id"], e["path"]) for e in stored_queue(page)] == [(e["vote_id"], "votes") for e in old]
    fake.fail_all = False
    page.wait_for_function("window.q.pending === 0")
    assert fake.trial_ids() == ["old1", "old2"]
    assert sorted(fake.stored) == [e["vote_id"] for e in old]


def test_requests_wait_out_a_503_with_retry_after(page, server):
    """GET /state (and every action: both go through callApi) meets the server's 503 with Retry-After: 1 twice,
    waits the second asked each time, never earlier, tells the page, and resumes."""
    fake, base = server
    page.clock.install()
    page.goto(f"{base}/harness.html")
    page.wait_for_function("window.harnessReady === true")
    pause_page_clock(page)
    fake.state_unavailable = 2
    page.evaluate("() => { window.answer = null; window.getState().then((s) => { window.answer = s; }); }")
    waits_told = lambda n: wait_until(lambda: len(page.evaluate("window.waits")) == n)  # noqa: E731
    # The page tells its wait just before it sleeps: only then is the retry's timer on the paused clock, and
    # advancing the clock earlier (the 503 still on its way to the page) would leave the timer in the future.
    assert wait_until(lambda: len(fake.state_attempts) == 1) and waits_told(1)
    page.clock.run_for(999)
    assert len(fake.state_attempts) == 1  # not a millisecond before Retry-After
    page.clock.run_for(1001)  # Retry-After plus at most a second of jitter
    assert wait_until(lambda: len(fake.state_attempts) == 2) and waits_told(2)
    page.clock.run_for(2000)
    assert wait_until(lambda: page.evaluate("window.answer") is not None)  # (the paused clock stops page polling)
    assert fake.state_attempts == [503, 503, 200]
    assert page.evaluate("window.answer") == {"stage": "trials"}
    assert page.evaluate("window.waits") == [1000, 1000, 0]
