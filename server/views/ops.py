"""For operators: ``/metrics`` (Prometheus, server/metrics.py), ``/healthz`` (the process answers) and
``/readyz`` (it can serve: the database, Redis when configured, the stimulus storage: the S3 bucket, or every
active study's stimulus folder).

None of them needs a login: ``/healthz`` and ``/readyz`` say nothing a worker could use (each check's name
and ``ok`` or one short reason), and the nginx recipe (deploy/nginx/perceptlab.conf) answers ``/metrics``
only to local addresses. A load balancer takes an instance out while ``/readyz`` answers 503 and back when it
answers 200; a process manager restarts one whose ``/healthz`` stops answering.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable

from flask import Blueprint, Response, jsonify
from sqlalchemy import select, text

from .. import metrics
from ..services import Services, app_services

bp = Blueprint("ops", __name__)
CHECK_TIMEOUT_S = 2.0  # a readiness check slower than this fails (a probe must answer quickly)


@bp.get("/metrics")
def prometheus_metrics():
    return Response(metrics.exposition(), mimetype=metrics.CONTENT_TYPE.split(";")[0],
                    headers={"Content-Type": metrics.CONTENT_TYPE, "Cache-Control": "no-store"})


@bp.get("/healthz")
def healthz():
    """The process is alive and answers (nothing else is asked: a database outage must not get it restarted)."""
    return jsonify({"status": "ok", "pid": os.getpid()}), 200, {"Cache-Control": "no-store"}


@bp.get("/readyz")
def readyz():
    """200 when every dependency answers, else 503 with ``Retry-After``; each check's result either way."""
    services = app_services()
    checks: dict[str, Callable[[], None]] = {"database": lambda: _database(services)}
    if services.shared_limits is not None:
        checks["redis"] = lambda: _redis(services)
    checks["storage"] = lambda: _storage(services)
    results = {}
    for name, check in checks.items():
        started = time.perf_counter()
        try:
            check()
            results[name] = {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 1)}
        except Exception as exc:  # noqa: BLE001 - every failure is a "not ready", said in one line
            results[name] = {"ok": False, "error": (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]}
    ready = all(r["ok"] for r in results.values())
    headers = {"Cache-Control": "no-store"} if ready else {"Cache-Control": "no-store", "Retry-After": "5"}
    return jsonify({"status": "ready" if ready else "unavailable", "checks": results}), 200 if ready else 503, headers


def _database(services: Services) -> None:
    with services.engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def _redis(services: Services) -> None:
    services.shared_limits.redis.ping()


def _storage(services: Services) -> None:
    storage = services.storage
    bucket = getattr(storage, "bucket", None)
    if bucket is not None:  # S3: the bucket answers with these credentials
        storage.client.head_bucket(Bucket=bucket)
        return
    from ..models import Study

    with services.sessions() as session:  # local: every active study's stimulus folder can be read
        roots = session.execute(select(Study.slug, Study.stimulus_root).where(Study.status == "active")).all()
    for slug, root in roots:
        if not os.path.isdir(root) or not os.access(root, os.R_OK | os.X_OK):
            raise OSError(f"study {slug}: its stimulus folder {root} is missing or unreadable")
