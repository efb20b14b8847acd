"""The production recipe (``deploy/nginx/perceptlab.conf``) run as it is, by Debian's nginx, in front of
gunicorn on loopback with a certificate made for the test: TLS, HSTS, the client's address passed on
(proxy_fix), the worker API's JSON 413 at the door, 32 slow clients that stall gunicorn served
directly but not an honest worker's votes through nginx, and stimulus files (images and clips) that the
app authorises and nginx streams (``[storage] accel_redirect``), with nothing in their headers naming them.

nginx is installed by the test set-up (``make nginx``, a dependency of ``make test``). Without
``/usr/sbin/nginx`` these tests skip with the reason, except when ``PERCEPTLAB_REQUIRE_NGINX=1``
(``.ci/run``): then they fail. The latency figures themselves are ``benchmarks/slow_clients.py``'s.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from benchmarks.slow_clients import ACCEL_LOCATION, NGINX, HonestWorker, Stack

from .rating_support import write_rating_study
from .stimulus_support import PATH_WORDS

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

SLOW_CLIENTS = 32
VOTES = 15
# Seconds an honest vote may take while the slow clients are held: far above a loaded machine's vote (tens of
# milliseconds), far below the slow clients' hold (until the test lets them go).
STALL_GUARD_S = 20.0


@pytest.fixture(scope="module")
def stack(postgres_template, demo_stimuli, tmp_path_factory):
    """One running stack for the module's tests (gunicorn, nginx, a certificate, the study created by the CLI: a
    few seconds of CPU each time). The tests do not disturb one another on it: each enters with workers of its
    own, the slow clients are let go at the end of theirs, and the video study is another slug."""
    if not NGINX.exists():
        message = f"{NGINX} is missing (make nginx installs Debian's nginx)"
        if os.environ.get("PERCEPTLAB_REQUIRE_NGINX") == "1":
            pytest.fail(message + " (PERCEPTLAB_REQUIRE_NGINX=1)")
        pytest.skip(message)
    # The demo's images and a video study's clips under one folder, which the recipe's internal stimulus
    # location aliases ([storage] accel_root).
    work = tmp_path_factory.mktemp("nginx-stack")
    stimuli = work / "stimuli"
    shutil.copytree(demo_stimuli / "prepared", stimuli / "images")
    database_url = postgres_template.copy()
    try:
        # One gunicorn process with 4 threads: far fewer than the slow clients, as in production (4 x 2).
        with Stack(work / "stack", stimuli / "images" / "manifest.json", database_url=database_url,
                   workers=1, threads=4, accel_root=stimuli) as running:
            yield running
    finally:
        postgres_template.release(database_url)


def test_the_recipe_serves_over_tls_with_hsts_and_passes_the_client_on(stack):
    import requests

    worker = stack.worker(through_nginx=True)
    answer = worker.http.get(worker.url("state"), timeout=30)
    assert answer.status_code == 200 and answer.json()["stage"] == "trials"
    assert answer.headers["Strict-Transport-Security"].startswith("max-age=63072000")
    # nginx's request id reaches the app and comes back; /metrics answers a loopback scraper.
    assert len(answer.headers["X-Request-ID"]) == 32
    metrics = worker.http.get(f"{stack.nginx_url}/metrics", timeout=30)
    assert metrics.status_code == 200 and 'perceptlab_responses_total{kind="api.get_state",status="200"}' in metrics.text
    # Plain HTTP only redirects to HTTPS.
    plain = requests.Session()
    plain.trust_env = False  # loopback: no proxy from the environment
    plain = plain.get(f"http://127.0.0.1:{stack.http_port}/s/slow", allow_redirects=False, timeout=30)
    assert plain.status_code == 301 and plain.headers["Location"].startswith("https://")
    # X-Forwarded-Proto reaches the app (proxy_fix): its login cookie is Secure through nginx, not directly.
    for base, secure in ((stack.nginx_url, True), (stack.direct_url, False)):
        browser = requests.Session()
        browser.trust_env, browser.verify = False, str(stack.cert)
        cookie = browser.get(f"{base}/admin/login", timeout=30).headers["Set-Cookie"]
        assert ("; Secure" in cookie) == secure, (base, cookie)
    # The worker API's size limit at the door, in the API's own JSON shape.
    big = worker.http.post(worker.url("motion-responses"), data=b"{" + b" " * (300 << 10) + b"}",
                           headers={"Content-Type": "application/json"}, timeout=30)
    assert big.status_code == 413 and big.json()["error"] == "too_large"
    # A chunked body is read whole by nginx and reaches gunicorn with its length.
    vote = worker.http.post(worker.url("votes"), timeout=30, headers={"Content-Type": "application/json"},
                            data=iter([b'{"vote_id": "6f1f6c36-8a39-4a57-a0a1-2f4b6c1f0b01", ',
                                       f'"trial_id": "{worker.state["page"]["trials"][0]["trial_id"]}", '.encode(),
                                       b'"choice": "left", "rt_ms": 700, "input": "mouse"}']))
    assert vote.status_code == 201, vote.text


def test_slow_clients_do_not_stall_votes_through_nginx(stack):
    # Through nginx, an honest worker's votes are all stored while 32 slow clients are held: nginx buffers
    # their bodies, so none of gunicorn's 4 threads waits on them. Without buffering
    # (`proxy_request_buffering off`) the slow clients, which trickle for as long as they are held, take every
    # thread, and the first honest vote gets no answer within STALL_GUARD_S: vote() raises. The guard is a
    # bound on a stall, not a speed figure; how fast votes are with and without the slow clients is
    # benchmarks/slow_clients.py's to measure (a loaded machine blurs it; it failed a 2x median bound once).
    honest, attacker = stack.worker(through_nginx=True), stack.worker(through_nginx=True)
    honest.votes(3)  # warm up: connections, the study known to the process
    with stack.slow_clients(SLOW_CLIENTS, through_nginx=True, token_of=attacker) as slow:
        stored = [honest.vote(timeout=STALL_GUARD_S) for _ in range(VOTES)]  # each a 201, else it raises
        held = slow.held()
    assert len(stored) == VOTES
    assert held == SLOW_CLIENTS  # nginx still holds every one of them: none gave up or was answered


def test_stimuli_are_authorised_by_the_app_and_streamed_by_nginx(stack, video_clips, tmp_path):
    import requests

    root = stack.accel_root
    clips = shutil.copytree(video_clips, root / "videos") / "manifest.json"  # prepared once per run
    stack.add_study(write_rating_study(tmp_path, clips, "clips", pages={"ratings_per_page": 4},
                                       rating={"method": "dcr"}, quality={"quiz_size": 0, "gold_rate": 0.0},
                                       texts={"researcher": "the nginx test", "contact": "t@perceptlab.invalid"})
                    .read_text(), "clips")
    images = stack.worker(through_nginx=True).state["page"]["trials"][0]
    videos = HonestWorker(stack.nginx_url, "clips", verify=str(stack.cert)).state["page"]["trials"][0]
    direct = requests.Session()
    direct.trust_env = False
    for url, mimetype in ((images["left"]["full"], "image/png"), (videos["images"][1]["url"], "video/mp4")):
        # Directly, gunicorn answers with where nginx finds the file, and no bytes: it sends none of them.
        authorised = direct.get(stack.direct_url + url, timeout=30)
        internal = authorised.headers["X-Accel-Redirect"]
        assert authorised.status_code == 200 and authorised.content == b"" and internal.startswith(ACCEL_LOCATION)
        path = root / internal[len(ACCEL_LOCATION):]
        data = path.read_bytes()
        etag = f'"{hashlib.blake2b(data, digest_size=16).hexdigest()}"'

        worker = stack.worker(through_nginx=True).http  # TLS to nginx, this run's certificate
        whole = worker.get(stack.nginx_url + url, timeout=30)
        assert whole.status_code == 200 and whole.content == data, url
        assert whole.headers["Content-Type"] == mimetype and whole.headers["Content-Length"] == str(len(data))
        assert whole.headers["ETag"] == etag and whole.headers["Cache-Control"] == "public, max-age=86400"
        assert whole.headers["Accept-Ranges"] == "bytes"
        assert whole.headers["Strict-Transport-Security"].startswith("max-age=63072000")
        assert_names_nothing(whole.headers, path)

        part = worker.get(stack.nginx_url + url, headers={"Range": "bytes=100-199"}, timeout=30)
        assert part.status_code == 206 and part.content == data[100:200]
        assert part.headers["Content-Range"] == f"bytes 100-199/{len(data)}"
        assert_names_nothing(part.headers, path)
        cached = worker.get(stack.nginx_url + url, headers={"If-None-Match": etag}, timeout=30)
        assert cached.status_code == 304 and cached.content == b"" and cached.headers["ETag"] == etag
        assert_names_nothing(cached.headers, path)

        # The internal location is nginx's alone: asked for directly, by its path, it is a 404.
        assert worker.get(stack.nginx_url + internal, timeout=30).status_code == 404
        # Only the study's names are authorised: another is the app's plain 404, through nginx too.
        other = url.rsplit("/", 1)[0] + "/" + "0" * 32 + url[url.rindex("."):]
        assert worker.get(stack.nginx_url + other, timeout=30).status_code == 404


def assert_names_nothing(headers, path: Path) -> None:
    """No header names the file or its folder, dates it, or carries nginx's own (mtime-size) ETag."""
    assert not {"Content-Disposition", "Last-Modified", "Expires", "X-Accel-Redirect"} & set(headers.keys())
    text = " ".join(f"{k}: {v}" for k, v in headers.items() if k != "Content-Security-Policy").lower()
    assert path.stem.lower() not in text and path.parent.name.lower() not in text, text
    assert not [word for word in PATH_WORDS if word in text], text
    assert f"{int(path.stat().st_mtime):x}" not in text and str(int(path.stat().st_mtime)) not in text
