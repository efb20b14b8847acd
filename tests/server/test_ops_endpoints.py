"""What an operator watches (server/metrics.py, server/views/ops.py): ``/metrics`` counts every answer by kind
and status (the fast lane's too), the admission gate, the pools, the stopping checks and background jobs;
``/healthz`` and ``/readyz``; request ids echoed and in the access log; under gunicorn, one ``/metrics`` for
every worker process (prometheus-client's multiprocess mode, deploy/gunicorn.conf.py)."""
from __future__ import annotations

import json
import logging
import os
import socket
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.services import app_services

from .conftest import SMALL_STUDY, WorkerClient, create_test_study, make_test_app


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of a Prometheus text answer."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def scrape(client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics")
    assert response.status_code == 200 and response.mimetype == "text/plain"
    return samples(response.get_data(as_text=True))


def value(found, name: str, **labels) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_answers_by_kind_and_status(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    client = app.test_client()
    before = scrape(client)
    worker = WorkerClient(client, slug)
    trials = worker.start()["page"]["trials"]
    for trial in trials[:3]:  # on PostgreSQL the first goes through Flask, the next through the fast lane
        assert worker.vote(trial["trial_id"], worker.correct_side(trial)).status_code == 201
    assert worker.vote(trials[0]["trial_id"], "left", vote_id=str(uuid.uuid4())).status_code == 409
    worker.state()
    assert client.get("/no/such/page").status_code == 404
    after = scrape(client)

    def more(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert more("perceptlab_responses_total", kind="votes", status="201") == 3
    assert more("perceptlab_responses_total", kind="votes", status="409") == 1
    assert more("perceptlab_responses_total", kind="api.get_state", status="200") == 1
    assert more("perceptlab_responses_total", kind="api.post_action", status="200") == 2
    assert more("perceptlab_responses_total", kind="unmatched", status="404") == 1
    assert more("perceptlab_request_seconds_count", kind="votes") == 4
    assert more("perceptlab_request_seconds_bucket", kind="votes", le="+Inf") == 4
    assert more("perceptlab_admission_total", outcome="admitted") == 1
    assert ("perceptlab_db_connections", (("pool", "orm"), ("state", "open"))) in after
    for family in ("perceptlab_stopping_checks", "perceptlab_background_jobs", "perceptlab_database_outages"):
        assert f"# TYPE {family}_total counter" in client.get("/metrics").get_data(as_text=True)


def test_deferred_entries_are_the_admission_queue(database_url, tmp_path, demo_stimuli, clock):
    app = make_test_app(database_url, tmp_path / "instance", clock=clock, admission_rate=0.5, admission_burst=1)
    try:
        slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
        client = app.test_client()
        before = scrape(client)
        WorkerClient(client, slug)
        busy = client.post(f"/api/v1/studies/{slug}/assignments", json={"platform": "link", "worker_id": "PX2"})
        assert busy.status_code == 429
        after = scrape(client)
        assert value(after, "perceptlab_admission_total", outcome="deferred") - value(
            before, "perceptlab_admission_total", outcome="deferred") == 1
        waits = value(after, "perceptlab_admission_wait_seconds_sum") - value(before,
                                                                             "perceptlab_admission_wait_seconds_sum")
        assert waits == pytest.approx(busy.json["retry_after_s"], abs=0.01)
    finally:
        app_services(app).engine.dispose()


def test_request_ids_are_echoed_and_logged(app, caplog):
    client = app.test_client()
    caplog.set_level(logging.INFO, logger="perceptlab.access")
    given = client.get("/healthz", headers={"X-Request-ID": "nginx-3f2a9c1b7d"})
    assert given.headers["X-Request-ID"] == "nginx-3f2a9c1b7d"
    made = client.get("/healthz")
    forged = client.get("/healthz", headers={"X-Request-ID": "x"})  # too short to be a proxy's: replaced
    assert len(made.headers["X-Request-ID"]) == 32 and forged.headers["X-Request-ID"] != "x"
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "perceptlab.access"]
    assert [line["request_id"] for line in lines] == [given.headers["X-Request-ID"], made.headers["X-Request-ID"],
                                                      forged.headers["X-Request-ID"]]
    assert lines[0] | {"ms": 0} == {"request_id": "nginx-3f2a9c1b7d", "method": "GET", "path": "/healthz",
                                    "status": 200, "kind": "ops.healthz", "ms": 0}


def test_healthz_and_readyz(app):
    client = app.test_client()
    health = client.get("/healthz")
    assert health.status_code == 200 and health.json["status"] == "ok"
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.json
    assert set(ready.json["checks"]) == {"database", "storage"}  # no Redis configured
    assert all(check["ok"] for check in ready.json["checks"].values())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


def test_readyz_names_what_is_down(sqlite_url, tmp_path):
    app = make_test_app(sqlite_url, tmp_path / "instance", redis_url=f"redis://127.0.0.1:{_closed_port()}/0")
    try:
        ready = app.test_client().get("/readyz")
        assert ready.status_code == 503 and ready.headers["Retry-After"] == "5"
        checks = ready.json["checks"]
        assert checks["database"]["ok"] and checks["storage"]["ok"]
        assert checks["redis"]["ok"] is False and "Traceback" not in checks["redis"]["error"]
    finally:
        app_services(app).engine.dispose()


def test_one_metrics_answer_for_every_gunicorn_worker(sqlite_url, tmp_path):
    """Two gunicorn worker processes (sync workers: one request at a time each, so concurrent requests reach
    both): /metrics, answered by either, counts the requests both answered."""
    from benchmarks.scale_out import Instance

    folder = tmp_path / "metrics"
    port = _closed_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("PERCEPTLAB_")}
    env = {**base, "PERCEPTLAB_DATABASE_URL": sqlite_url, "PERCEPTLAB_SECRET_KEY": "metrics-test",
           "PERCEPTLAB_SERVER_INSTANCE_PATH": str(tmp_path / "instance"), "PERCEPTLAB_SERVER_AUTO_MIGRATE": "false",
           "PERCEPTLAB_SERVER_LIVE_SCALES_INTERVAL": "0", "PROMETHEUS_MULTIPROC_DIR": str(folder)}
    instance = Instance("m", port, env, workers=2, threads=1, log=tmp_path / "gunicorn.log")
    config = os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "gunicorn.conf.py")
    instance.launch = _launch_with_config(instance, config)
    instance.launch()
    try:
        instance.wait_ready()
        from concurrent.futures import ThreadPoolExecutor

        def pid(_):
            with urllib.request.urlopen(f"{instance.url}/healthz", timeout=30) as answer:
                return json.loads(answer.read())["pid"]

        # Each worker imports the app after its fork, so on a busy machine the second may still be loading it
        # while the first answers hundreds of requests (CI once saw 400 go to one): ask in rounds of 40, with a
        # pause between them, until both have answered or the instance's readiness deadline has passed, and
        # count every request asked.
        pids, asked = set(), 0
        deadline = time.monotonic() + 120
        with ThreadPoolExecutor(8) as pool:
            while len(pids) < 2 and time.monotonic() < deadline:
                pids |= set(pool.map(pid, range(40)))
                asked += 40
                if len(pids) < 2:
                    time.sleep(0.25)
        with urllib.request.urlopen(f"{instance.url}/metrics", timeout=10) as answer:
            found = samples(answer.read().decode())
        assert len(pids) == 2, f"one worker answered every request: {instance.log_tail()}"
        assert value(found, "perceptlab_responses_total", kind="ops.healthz", status="200") == asked
    finally:
        instance.stop()


def _launch_with_config(instance, config: str):
    """:meth:`Instance.launch` with ``-c deploy/gunicorn.conf.py`` (the recipe's hooks)."""
    import subprocess

    from benchmarks.scale_out import ROOT, VENV_BIN

    def launch() -> None:
        with instance.log.open("ab") as log:
            instance.process = subprocess.Popen(
                [str(VENV_BIN / "gunicorn"), "-c", config, "server:create_app()", "-k", "sync", "--workers",
                 str(instance.workers), "-b", f"127.0.0.1:{instance.port}"],
                cwd=ROOT, env=instance.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
    return launch


def test_structured_log_lines_carry_the_request_id(app):
    import io
    import logging

    from server.metrics import LOGGERS, configure_logging

    stream = io.StringIO()
    saved = {name: (logging.getLogger(name).level, logging.getLogger(name).propagate) for name in LOGGERS}
    handler = configure_logging(stream=stream)
    try:
        app.test_client().get("/healthz", headers={"X-Request-ID": "req-0123456789"})
        with app.test_request_context("/", environ_base={"perceptlab.request_id": "req-abcdef0123"}):
            logging.getLogger("server.stopping").warning("study %s stops", "demo")
        logging.getLogger("perceptlab.outages").warning("outside a request")
    finally:
        for name, (level, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["logger"], line["request_id"]) for line in lines] == [
        ("perceptlab.access", "req-0123456789"), ("server.stopping", "req-abcdef0123"), ("perceptlab.outages", None)]
    assert lines[1]["message"] == "study demo stops" and lines[1]["level"] == "WARNING"
    assert lines[0]["path"] == "/healthz" and lines[0]["status"] == 200  # the access log's fields, at the top
    assert lines[0]["message"] == "GET /healthz 200"  # once: not the fields again as a JSON string

