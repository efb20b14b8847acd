"""The process that computes running scale estimates: ``python -m server.paradigms.paired.live_scales_child [NICE]``.

A server process starts one of these when it first needs a snapshot
(:class:`server.paradigms.paired.live_scales.ScaleProcess`) and sends it requests, one JSON object
per line on stdin; each gets one JSON line back:

``{"op": "compute", "database_url": ..., "study_id": ..., "bootstrap": ..., "seed": null, "interval_method": "t"}``
    Compute and store the study's snapshot (:func:`server.paradigms.paired.live_scales.compute_snapshot`);
    replies ``{"ok": true, "n_votes": ..., "seconds": ...}``.
``{"op": "info"}``
    Replies ``{"ok": true, "pid": ..., "niceness": ..., "blas_threads": ...}``.

A failed request replies ``{"ok": false, "error": "..."}`` (the traceback goes to stderr,
the server's log) and the process carries on. It lowers its own priority by NICE
(default 10) before importing numpy, so the votes' requests always come first, and
runs BLAS with one thread (the server sets ``OPENBLAS_NUM_THREADS=1`` and friends in
its environment). It exits when stdin closes: when the server process lets it go or
ends, however it ends (it ignores SIGINT: a Ctrl-C meant for the server reaches it too).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import traceback

DEFAULT_NICE = 10


def main(argv: list[str] | None = None) -> int:
    """Serve requests from stdin until it closes; return the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    # Ctrl-C in a terminal reaches the whole process group: the server stops on it, closes the pipe,
    # and this process ends with it (rather than with a KeyboardInterrupt traceback in the log).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    increment = int(argv[0]) if argv else DEFAULT_NICE
    if increment > 0 and hasattr(os, "nice"):
        os.nice(increment)  # first of all: the imports below already cost a second of CPU
    # The replies get their own copy of stdout; anything a library prints goes to stderr instead,
    # so it can never garble the protocol.
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    from server.db import make_engine, make_session_factory
    from server.paradigms.paired.live_scales import compute_snapshot

    factories = {}  # database URL -> (engine, session factory), kept for the process's life

    def sessions_for(url: str):
        if url not in factories:
            engine = make_engine(url)
            factories[url] = (engine, make_session_factory(engine))
        return factories[url][1]

    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                if request.get("op") == "info":
                    reply = {"ok": True, **_describe()}
                elif request.get("op") == "compute":
                    with sessions_for(request["database_url"])() as session:
                        payload = compute_snapshot(session, int(request["study_id"]),
                                                   bootstrap=int(request["bootstrap"]), seed=request.get("seed"),
                                                   interval_method=request.get("interval_method"))
                    reply = {"ok": True, "n_votes": payload["n_votes"], "seconds": payload.get("seconds")}
                else:
                    reply = {"ok": False, "error": f"unknown request {request.get('op')!r}"}
            except Exception as exc:  # noqa: BLE001 - one failed snapshot must not end the process
                traceback.print_exc()
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            try:
                replies.write(json.dumps(reply) + "\n")
            except BrokenPipeError:  # the server process is gone: nobody is waiting for this answer
                return 0
    finally:
        for engine, _ in factories.values():
            engine.dispose()
    return 0


def _describe() -> dict:
    from threadpoolctl import threadpool_info

    blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    niceness = os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else 0
    return {"pid": os.getpid(), "niceness": niceness, "blas_threads": max(blas, default=0)}


if __name__ == "__main__":
    sys.exit(main())
