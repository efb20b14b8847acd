"""CPU of the ``Instrumented`` middleware (server/metrics.py) per request, around an app that answers at once.

What every request pays under gunicorn beyond its view: the request id, the answer counted and timed (in
multiprocess mode each observation writes the metric files), the access log line. Measured with the logs
as deploy/gunicorn.conf.py configures them (``configure_logging``: one JSON line a request, here to
/dev/null) unless --no-logs, and the metrics in memory unless ``PROMETHEUS_MULTIPROC_DIR`` names an empty
folder (as under gunicorn). Prints the least and the median of --batches batches' CPU per request
(``time.thread_time``).

Run: PROMETHEUS_MULTIPROC_DIR=$(mktemp -d) .venv/bin/python benchmarks/middleware_cpu.py [--no-logs]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from server.metrics import MULTIPROCESS_VARIABLE, Instrumented, configure_logging  # noqa: E402

BODY = [b'{"status":"stored"}\n']
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(BODY[0]))),
           ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "same-origin"),
           ("Content-Security-Policy", "default-src 'self'")]


def answer_at_once(environ: dict, start_response) -> list[bytes]:
    """A vote's answer as the fast lane gives it, without the vote."""
    environ["perceptlab.kind"] = "votes"
    start_response("201 CREATED", HEADERS)
    return BODY


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-logs", action="store_true", help="the access log off (no handler at INFO)")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--requests", type=int, default=5000, help="requests a batch")
    args = parser.parse_args(argv)
    if not args.no_logs:
        configure_logging(stream=open(os.devnull, "w"))  # noqa: SIM115 - open for the process's life
    app = Instrumented(answer_at_once, lambda environ: environ.get("perceptlab.kind", "unmatched"),
                       lambda: {("orm", "in_use"): 1})

    def batch(n: int) -> float:
        started = time.thread_time()
        for _ in range(n):
            app({"REQUEST_METHOD": "POST", "PATH_INFO": "/api/v1/assignments/1/votes"}, lambda *_: None)
        return (time.thread_time() - started) / n * 1e6

    batch(args.requests)  # warm-up: the labelled children bound, the files made
    per_request = [batch(args.requests) for _ in range(args.batches)]
    print(f"logs {'off' if args.no_logs else 'JSON'}, metrics "
          f"{'multiprocess files' if os.environ.get(MULTIPROCESS_VARIABLE) else 'in memory'}: "
          f"least {min(per_request):.1f} us, median {statistics.median(per_request):.1f} us a request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
