"""``perceptlab simulate``: simulated crowd workers against a running server (:mod:`server.simulate_client`)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from .base import FiniteFloatRange, UserError, cli, cli_secret_key, cli_session


@cli.command("simulate")
@click.argument("study")
@click.option("--url", default="http://127.0.0.1:5000", show_default=True, metavar="URL",
              help="Base URL of the running perceptlab server.")
@click.option("--workers", default=20, show_default=True, type=click.IntRange(min=1),
              help="Simulated workers in all (each takes one assignment).")
@click.option("--spam", default=0.25, show_default=True, type=FiniteFloatRange(0, 1),
              help="Fraction of careless workers (random answers); the others are honest observers of the "
                   "study's paradigm.")
@click.option("--concurrency", default=20, show_default=True, type=click.IntRange(min=1),
              help="Workers running at the same time (and HTTP connections allowed).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Random seed (worker IDs, worker types, choices, timings), mixed with the study's slug: "
                   "another study may use the same seed. Use a new seed for each run on the same study, or "
                   "the workers resume their old assignments.")
@click.option("--pages", default=None, type=click.IntRange(min=1), metavar="N",
              help="Pages per worker of a paged study (paired comparison, ratings) [default: random between the "
                   "study's min_pages and max_pages].")
@click.option("--pace", default=None, type=FiniteFloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Open loop: mean seconds between a worker's responses (exponential gaps). "
                   "Default: closed loop, each response sent as soon as the previous one is answered.")
@click.option("--observer", default="images", show_default=True, type=click.Choice(["images", "latent"]),
              help="How honest workers judge: 'images' downloads the stimuli and judges them (each "
                   "paradigm's observer: RMSE to the reference, contrast, dot and frame motion); 'latent' uses "
                   "a seeded score per image URL and downloads nothing (measures only the response path; fails "
                   "quality checks).")
@click.option("--noise-rmse", default=None, type=FiniteFloatRange(min=0, min_open=True), metavar="RMSE",
              help="Paired comparison's observer noise in RMSE units (images in [0, 1]) for --observer "
                   "images [default: 0.01, calibrated on the demo study].")
@click.option("--json-out", default=None, type=click.Path(dir_okay=False, writable=True, path_type=Path),
              metavar="FILE", help="Also write the full report (latency percentiles, error codes) as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def simulate_command(study: str, url: str, workers: int, spam: float, concurrency: int, seed: int,
                     pages: int | None, pace: float | None, observer: str, noise_rmse: float | None,
                     json_out: Path | None, quiet: bool) -> None:
    """Drive the running server at --url with simulated workers doing STUDY (its slug), of any paradigm.

    Each worker enters like an MTurk worker through the JSON API, consents,
    reads the instructions and does the study as its paradigm's simulated
    worker: votes on pairs (paired comparison), ratings on the study's scale
    (ACR, DCR, CCR: a P.913-like rater) or a display calibration and motion
    responses (motion matching), page by page or block by block. Failed
    requests (network errors, 5xx, 429) are retried with the same response ID.
    Prints responses sent and acknowledged, duplicates, errors, responses/s,
    latency p50/p99 and how the workers ended.

    Exits with status 1 when any worker gave up, naming why (a count per
    reason); those workers' assignments are ended (stopped, with the reason)
    in this instance's database, so no simulated participant is left at a
    stage it will never leave.

    The workers are stored as simulated pilot participants (signed with this
    instance's secret key, which the server must share: name its instance
    folder with --instance): no time estimate, wage, payment plan, MTurk
    action, dashboard figure or pair target counts them, and export and
    results leave them out unless --include-pilot.

    A study's [viewing] checks are taken first, over the worker pages'
    routes: honest workers answer what the server drew (computed with the
    same secret key) and sit at the study's distance; careless ones answer
    at random and are mostly turned away.
    """
    from server.pilot import pilot_signature
    from server.simulate_client import SimulationError, run_simulation

    try:
        key = cli_secret_key()
    except UserError as error:
        raise UserError("simulate signs its workers as simulated with the server's secret key: "
                        + str(error.format_message())) from None
    try:
        report = run_simulation(url, study, workers=workers, spam=spam, concurrency=concurrency, seed=seed,
                                pages=pages, pace=pace, progress=not quiet, observer=observer,
                                noise_rmse=noise_rmse, pilot=pilot_signature(key, study), secret=key)
    except SimulationError as error:
        raise UserError(str(error)) from error
    for line in report.summary_lines():
        click.echo(line)
    if json_out is not None:
        try:
            json_out.write_text(json.dumps(report.to_dict(), indent=2, default=float) + "\n")
        except OSError as error:
            raise UserError(f"{json_out}: {error.strerror or error}") from error
        click.echo(f"report: {json_out}")
    if report.gave_up_count:
        click.echo(f"{_end_given_up(study, report)}", err=True)
        click.echo(f"error: {report.gave_up_count} of {report.workers} workers gave up ("
                   + ", ".join(f"{reason} {n}" for reason, n in report.gave_up.most_common()) + ")", err=True)
        raise SystemExit(1)


def _end_given_up(slug: str, report) -> str:
    """End the open assignments of the workers that gave up in this instance's database (the pilot rules:
    :func:`server.pilot.end_simulated`); a line saying what was done."""
    from sqlalchemy import select

    from server.models import Study
    from server.pilot import end_simulated

    reasons = ", ".join(f"{reason} {n}" for reason, n in report.gave_up.most_common())
    try:
        with cli_session() as session:
            found = session.scalar(select(Study).where(Study.slug == slug))
            if found is None:
                return (f"note: this instance's database has no study {slug!r}: the workers that gave up keep "
                        "their assignments on the server")
            ended = end_simulated(session, found, report.gave_up_workers,
                                  f"The simulated worker gave up ({reasons}).")
    except UserError as error:
        return f"note: the workers that gave up keep their assignments: {error.format_message()}"
    return f"ended {ended} assignment(s) of simulated workers that gave up (stage stopped)"
