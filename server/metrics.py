"""What an operator watches: Prometheus metrics, request ids and the structured access log.

``GET /metrics`` (server/views/ops.py) serves, in Prometheus' text format (prometheus-client):

========================================== =====================================================================
``perceptlab_responses_total``             answers by ``kind`` (a worker response's kind such as ``votes``, else
                                           the Flask endpoint, e.g. ``api.state``, ``worker.entry``) and ``status``
``perceptlab_request_seconds``             latency histogram by ``kind``
``perceptlab_admission_total``             new workers at the admission gate by ``outcome`` (admitted, deferred:
                                           429 busy, rate_limited: over the per-address limit)
``perceptlab_admission_wait_seconds``      histogram of the waits told to deferred workers (the admission queue)
``perceptlab_db_connections``              database connections of each process by ``pool`` (orm, driver) and
                                           ``state`` (in_use, open)
``perceptlab_database_outages_total``      outages met (server/outages.py)
``perceptlab_stopping_checks_total``       ``[stopping]`` checks by ``outcome`` (checked, stopped, failed)
``perceptlab_background_jobs_total``       background jobs by ``job`` (forecast, live_scales) and ``outcome``
``perceptlab_background_jobs_running``     background jobs running now, by ``job``
``perceptlab_background_job_seconds``      how long they ran, by ``job``
========================================== =====================================================================

Under gunicorn every worker process counts for itself; set ``PROMETHEUS_MULTIPROC_DIR`` to an empty folder
(before gunicorn starts; emptied at each start) and load ``deploy/gunicorn.conf.py`` (its ``child_exit``
hook lets a dead worker's gauges go): the answer of ``/metrics`` then sums every process (prometheus-client's
multiprocess mode). Without it (one process, tests) the process's own registry is served.

Every request gets an id: the ``X-Request-ID`` it came with (a proxy's: nginx's ``$request_id``, if it looks
like one) or a new one; it is echoed in the answer's ``X-Request-ID`` and written in the access log line of
the request (logger ``perceptlab.access``, one JSON object a line: id, method, path, status, kind,
milliseconds), so a worker's complaint, nginx's log and the app's log meet on one id. :func:`configure_logging`
(deploy/gunicorn.conf.py) makes every log line of the app's loggers one JSON object with the request id of the
request it was written in (:class:`JsonLines`).
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # noqa: N811 - re-exported under our name

disable_created_metrics()  # no ``*_created`` series beside every counter: half the answer, of no use here

MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
REQUEST_ID_HEADER = "X-Request-ID"
ENVIRON_KEY = "perceptlab.request_id"
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{8,64}")  # a proxy's id is taken only in a shape that cannot inject
POOL_REFRESH_SECONDS = 1.0  # the pool gauges are read at most this often per process (not on every request)
# Latency buckets (seconds): a vote takes milliseconds; pages and exports up to seconds.
BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

access_log = logging.getLogger("perceptlab.access")

RESPONSES = Counter("perceptlab_responses", "HTTP answers by kind of request and status", ["kind", "status"])
LATENCY = Histogram("perceptlab_request_seconds", "Time to answer, by kind of request", ["kind"], buckets=BUCKETS)
ADMISSION = Counter("perceptlab_admission", "New workers at the admission gate, by outcome", ["outcome"])
ADMISSION_WAIT = Histogram("perceptlab_admission_wait_seconds", "Waits told to deferred new workers",
                           buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
DB_CONNECTIONS = Gauge("perceptlab_db_connections", "Database connections of the process, by pool and state",
                       ["pool", "state"], multiprocess_mode="livesum")
OUTAGES = Counter("perceptlab_database_outages", "Times the database went out of reach (server/outages.py)")
STOPPING_CHECKS = Counter("perceptlab_stopping_checks", "[stopping] checks by outcome", ["outcome"])
JOBS = Counter("perceptlab_background_jobs", "Background jobs by job and outcome", ["job", "outcome"])
JOBS_RUNNING = Gauge("perceptlab_background_jobs_running", "Background jobs running now", ["job"],
                     multiprocess_mode="livesum")
JOB_SECONDS = Histogram("perceptlab_background_job_seconds", "How long background jobs ran", ["job"],
                        buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))


def exposition() -> bytes:
    """The text ``/metrics`` answers: every process's metrics in multiprocess mode, else this process's."""
    if os.environ.get(MULTIPROCESS_VARIABLE):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    from prometheus_client import REGISTRY

    return generate_latest(REGISTRY)


class job:  # noqa: N801 - used as a context manager: ``with metrics.job("forecast") as outcome:``
    """Count one background job: running while inside, its duration, and its outcome (``done``, or what
    the block sets with :meth:`set`; ``failed`` when it raised)."""

    def __init__(self, name: str):
        self.name, self.outcome = name, "done"

    def set(self, outcome: str) -> None:
        self.outcome = outcome

    def __enter__(self) -> job:
        self.started = time.perf_counter()
        JOBS_RUNNING.labels(self.name).inc()
        return self

    def __exit__(self, kind, _value, _tb) -> None:
        JOBS_RUNNING.labels(self.name).dec()
        JOB_SECONDS.labels(self.name).observe(time.perf_counter() - self.started)
        JOBS.labels(self.name, "failed" if kind is not None else self.outcome).inc()


class _Ids:
    """New request ids, 32 hex digits: a random prefix drawn once per process (again after a fork: gunicorn's
    workers each draw their own) and a counter. As unique as ``uuid4().hex`` across processes and restarts,
    without a system call and a UUID object per request (a fork is noticed by its hook, not by asking the
    process id each time)."""

    def __init__(self):
        self.draw()
        os.register_at_fork(after_in_child=self.draw)

    def draw(self) -> None:
        self._prefix, self._count = uuid.uuid4().hex[:16], itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._count) & 0xFFFFFFFFFFFFFFFF:016x}"


new_request_id = _Ids()


def request_id(environ: dict) -> str:
    """The request's id: kept in the environ once chosen (the proxy's ``X-Request-ID`` when it looks like one,
    else a new one)."""
    found = environ.get(ENVIRON_KEY)
    if found is None:
        given = environ.get("HTTP_X_REQUEST_ID")
        found = environ[ENVIRON_KEY] = given if given and _REQUEST_ID.fullmatch(given) else new_request_id()
    return found


class Instrumented:
    """WSGI middleware, outermost (around the fast lane too): every answer counted and timed by kind and
    status, its request id echoed, one access log line, and the pool gauges refreshed now and then.

    Parameters
    ----------
    wsgi_app : callable
        The app inside.
    kind_of : callable
        ``kind_of(environ)``: the kind label of a request once answered (the app sets it in the environ).
    pools : callable
        ``pools()`` -> {(pool, state): count}: this process's database connections.
    """

    def __init__(self, wsgi_app: Callable[[dict, Callable], Iterable[bytes]], kind_of: Callable[[dict], str],
                 pools: Callable[[], dict[tuple[str, str], int]]):
        self.wsgi_app, self.kind_of, self.pools = wsgi_app, kind_of, pools
        self._next_pool_read = 0.0
        self._lock = threading.Lock()
        # The labelled children, bound once per kind (and status): ``labels()`` validates, converts and locks on
        # every call, a tenth of the middleware's cost per vote. As many entries as the metrics have series.
        self._answers: dict[tuple[str, str], Any] = {}
        self._latency: dict[str, Any] = {}

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        started = time.perf_counter()
        rid = request_id(environ)
        status = ["500"]  # an answer that never started is counted as a 500

        def start(line: str, headers: list[tuple[str, str]], exc_info=None):
            status[0] = line[:3]
            if any(name.lower() == "x-request-id" for name, _ in headers):  # ours replaces the app's own
                headers = [h for h in headers if h[0].lower() != "x-request-id"]
            headers = [*headers, (REQUEST_ID_HEADER, rid)]
            return start_response(line, headers, exc_info) if exc_info is not None else start_response(line, headers)

        try:
            return self.wsgi_app(environ, start)
        finally:
            self._record(environ, status[0], time.perf_counter() - started, rid)

    def _record(self, environ: dict, status: str, seconds: float, rid: str) -> None:
        kind = self.kind_of(environ)
        answers = self._answers.get((kind, status))
        if answers is None:
            answers = self._answers.setdefault((kind, status), RESPONSES.labels(kind, status))
        answers.inc()
        latency = self._latency.get(kind)
        if latency is None:
            latency = self._latency.setdefault(kind, LATENCY.labels(kind))
        latency.observe(seconds)
        if access_log.isEnabledFor(logging.INFO):
            fields = {"request_id": rid, "method": environ.get("REQUEST_METHOD"), "path": environ.get("PATH_INFO"),
                      "status": int(status), "kind": kind, "ms": round(seconds * 1000, 2)}
            # Written after the request's context is gone: its id travels with the record (JsonLines reads it).
            # Made and handled as Logger.info would, less its walk up the stack for a caller always this line.
            access_log.handle(access_log.makeRecord(access_log.name, logging.INFO, __file__, 0, AccessLine(fields),
                                                    None, None, "_record", {"request_id": rid, "fields": fields}))
        now = time.monotonic()
        if now >= self._next_pool_read and self._lock.acquire(blocking=False):
            try:
                self._next_pool_read = now + POOL_REFRESH_SECONDS
                for (pool, state), value in self.pools().items():
                    DB_CONNECTIONS.labels(pool, state).set(value)
            except Exception:  # noqa: BLE001 - a gauge must never fail a request
                pass
            finally:
                self._lock.release()


class AccessLine:
    """The message of an access log record: its fields as one JSON object, made only when a handler other than
    :class:`JsonLines` formats the record (a test's, a plain handler's). JsonLines writes the fields themselves at
    the top of its line and a short message, not the same object again as an escaped string inside it."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, Any]):
        self.fields = fields

    def __str__(self) -> str:
        return json.dumps(self.fields, separators=(",", ":"))

    def short(self) -> str:
        """``METHOD path status``: the line's message, for a reader scanning the messages."""
        return f"{self.fields['method']} {self.fields['path']} {self.fields['status']}"


class JsonLines(logging.Formatter):
    """One JSON object per log record: time, level, logger, process, the request id of the request it was logged
    in (None outside one), the message and, for an error, its traceback in one field; an access log record's
    fields (:class:`AccessLine`) at the top of its line, each once."""

    _stamp = (-1, "")  # the last second formatted and its time field: one strftime a second, not one a line

    def format(self, record: logging.LogRecord) -> str:
        second, stamp = self._stamp
        if int(record.created) != second:  # one tuple, read and replaced whole: safe from any thread
            stamp = self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z")
            self._stamp = (int(record.created), stamp)
        message = record.msg.short() if isinstance(record.msg, AccessLine) else record.getMessage()
        line = {"time": stamp, "level": record.levelname, "logger": record.name, "pid": record.process,
                "request_id": getattr(record, "request_id", None) or _current_request_id(),
                "message": message, **getattr(record, "fields", {})}
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line, separators=(",", ":"))


def _current_request_id() -> str | None:
    from flask import has_request_context, request

    return request.environ.get(ENVIRON_KEY) if has_request_context() else None


LOGGERS = ("perceptlab", "server")  # the app's own loggers (perceptlab.access, perceptlab.outages, server.stopping...)


def configure_logging(level: int = logging.INFO, stream=None) -> logging.Handler:
    """Structured logs for a server process (deploy/gunicorn.conf.py calls it in each worker): the app's loggers
    write :class:`JsonLines` to stderr at ``level``, the access log among them. Returns the handler."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLines())
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.addHandler(handler)
        logger.propagate = False
    return handler


def child_exit(_server, worker) -> None:
    """gunicorn's ``child_exit`` hook (deploy/gunicorn.conf.py): a dead worker's live gauges are dropped."""
    if os.environ.get(MULTIPROCESS_VARIABLE):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
