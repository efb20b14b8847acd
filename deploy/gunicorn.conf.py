"""gunicorn settings for perceptlab (``gunicorn -c deploy/gunicorn.conf.py 'server:create_app()' ...``).

Each worker writes the app's logs as JSON lines with request ids to stderr (server/metrics.py,
``configure_logging``): the access log, outages, stopping decisions, background jobs.

With ``PROMETHEUS_MULTIPROC_DIR`` set, every worker process writes its metrics to files in that folder and
``/metrics`` sums them (server/metrics.py). The folder is emptied when gunicorn starts (files of an earlier
run would be counted again) and a dead worker's live gauges are dropped when it exits.
"""
import os
import shutil


def on_starting(_server):
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder, exist_ok=True)


def post_fork(_server, _worker):
    from server.metrics import configure_logging

    configure_logging()


def child_exit(server, worker):
    from server.metrics import child_exit as drop_dead_worker

    drop_dead_worker(server, worker)
