"""PostgreSQL restarted under paced workers: what the clients were answered, what the log says, what was stored.

The setup of issue 38's row "PostgreSQL restarted twice under 30 paced workers": gunicorn (4 processes x 2
threads by default) on a PostgreSQL cluster of this run's own (benchmarks/own_postgres.py: ``initdb`` in a
temporary folder, its own port; the machine's shared server is never touched), ``perceptlab simulate``'s
workers voting at a pace, and the cluster stopped (``pg_ctl stop -m fast``) and started again twice. Printed:
the clients' answers by status (every 5xx should be a 503 with Retry-After, none a 500), the log's tracebacks
and outage lines, and votes sent, acknowledged and stored (nothing lost, nothing twice).

    .venv/bin/python benchmarks/outage.py            # 30 workers, pace 1 s, down 3 s at 6 s and 14 s
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import build_demo_stimuli  # noqa: E402
from benchmarks.own_postgres import OwnPostgres  # noqa: E402
from benchmarks.server_load import Gunicorn, create_study, free_port, verify  # noqa: E402


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=30, help="simulated workers, all at once")
    parser.add_argument("--pace", type=float, default=1.0, help="mean seconds between a worker's votes")
    parser.add_argument("--pages", type=int, default=2, help="pages of 20 pairs per worker")
    parser.add_argument("--outages", default="6,14", help="seconds into the run at which PostgreSQL stops")
    parser.add_argument("--down", type=float, default=3.0, help="seconds PostgreSQL stays down each time")
    parser.add_argument("--gunicorn-workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--scenes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args(argv)

    from server.simulate_client import run_simulation

    work = Path(tempfile.mkdtemp(prefix="perceptlab_outage_"))
    cluster = OwnPostgres()
    server = None
    try:
        secret = "outage-" + os.urandom(16).hex()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("PERCEPTLAB_")},
               "PERCEPTLAB_DATABASE_URL": cluster.url, "PERCEPTLAB_SERVER_DATABASE_URL": cluster.url,
               "PERCEPTLAB_SECRET_KEY": secret, "PERCEPTLAB_SERVER_LIVE_SCALES_INTERVAL": "0",
               "PERCEPTLAB_SERVER_ENTRY_LIMIT": "0", "PERCEPTLAB_SERVER_ADMISSION_RATE": "0",
               "PERCEPTLAB_SERVER_INSTANCE_PATH": str(work / "instance")}
        manifest = build_demo_stimuli(work / "stimuli", args.scenes)
        create_study(env, work, manifest, "outage", votes_per_pair=20, seed=args.seed)
        log = work / "gunicorn.log"
        server = Gunicorn(env, free_port(), args.gunicorn_workers, args.threads, log)
        server.start()
        box: dict = {}

        def simulate() -> None:
            try:
                box["report"] = run_simulation(server.url, "outage", workers=args.workers, concurrency=args.workers,
                                               pages=args.pages, pace=args.pace, spam=0.0, seed=args.seed,
                                               observer="latent", progress=False, max_retry_s=300.0)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                box["error"] = exc

        thread = threading.Thread(target=simulate, daemon=True)
        started = time.monotonic()
        thread.start()
        downs = []
        for at in (float(x) for x in args.outages.split(",")):
            time.sleep(max(0.0, started + at - time.monotonic()))
            cluster.stop()
            t0 = time.monotonic()
            time.sleep(args.down)
            cluster.start()
            downs.append(round(time.monotonic() - t0, 2))
            print(f"# PostgreSQL down {downs[-1]:.1f} s from {at:g} s into the run", flush=True)
        thread.join()
        if "error" in box:
            raise box["error"]
        report = box["report"]
        check = verify(cluster.dsn, "outage", report)
        text = log.read_text(errors="replace")
        statuses = {code: n for code, n in sorted(report.errors.items()) if code.startswith("http_5")}
        figures = {
            "workers": args.workers, "pace_s": args.pace, "gunicorn": f"{args.gunicorn_workers}x{args.threads}",
            "down_s": downs, "answers_5xx": statuses,
            "retries": report.retries, "tracebacks_in_log": text.count("Traceback (most recent call last)"),
            "outage_lines": text.count("database out of reach"), "recovery_lines": text.count("reachable again"),
            "votes_sent": len(report.sent_ids()), "votes_acknowledged": check.acknowledged,
            "votes_stored": check.in_db, "lost": check.lost, "duplicated": check.duplicated,
            "unresolved": check.unresolved,
        }
        for key, value in figures.items():
            print(f"{key:>20}: {value}")
        if args.json_out:
            args.json_out.write_text(json.dumps(figures, indent=2) + "\n")
    finally:
        if server is not None:
            server.stop()
        cluster.close()


if __name__ == "__main__":
    main()
