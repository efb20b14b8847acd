"""``perceptlab simulate``: simulated crowd workers against a running server (:mod:`server.simulate_client`)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from .base import UserError, cli, cli_secret_key


@cli.command("simulate")
@click.argument("study")
@click.option("--url", default="http://127.0.0.1:5000", show_default=True, metavar="URL",
              help="Base URL of the running perceptlab server.")
@click.option("--workers", default=20, show_default=True, type=click.IntRange(min=1),
              help="Simulated workers in all (each takes one assignment).")
@click.option("--spam", default=0.25, show_default=True, type=click.FloatRange(0, 1),
              help="Fraction of random clickers; the others are honest Thurstone observers.")
@click.option("--concurrency", default=20, show_default=True, type=click.IntRange(min=1),
              help="Workers running at the same time (and HTTP connections allowed).")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Random seed (worker IDs, worker types, choices, timings). Use a new seed for "
                   "each run against the same database, or the workers resume old assignments.")
@click.option("--pages", default=None, type=click.IntRange(min=1), metavar="N",
              help="Pages per worker [default: random between the study's min_pages and max_pages].")
@click.option("--pace", default=None, type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Open loop: mean seconds between a worker's votes (exponential gaps). "
                   "Default: closed loop, each vote sent as soon as the previous one is answered.")
@click.option("--observer", default="images", show_default=True, type=click.Choice(["images", "latent"]),
              help="How honest workers judge: 'images' downloads the stimuli and compares each "
                   "candidate's RMSE to the reference; 'latent' uses a seeded score per image URL "
                   "and downloads nothing (measures only the vote path).")
@click.option("--noise-rmse", default=None, type=click.FloatRange(min=0, min_open=True), metavar="RMSE",
              help="Observer noise in RMSE units (images in [0, 1]) for --observer images "
                   "[default: 0.01, calibrated on the demo study].")
@click.option("--json-out", default=None, type=click.Path(dir_okay=False, writable=True, path_type=Path),
              metavar="FILE", help="Also write the full report (latency percentiles, error codes) as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def simulate_command(study: str, url: str, workers: int, spam: float, concurrency: int, seed: int,
                     pages: int | None, pace: float | None, observer: str, noise_rmse: float | None,
                     json_out: Path | None, quiet: bool) -> None:
    """Drive the running server at --url with simulated workers doing STUDY (its slug).

    Each worker enters like an MTurk worker through the JSON API, consents,
    reads the instructions, answers quiz and trial pages vote by vote and
    continues or finishes at the end of a page. Failed requests (network
    errors, 5xx, 429) are retried with the same vote_id. Prints votes sent and
    acknowledged, duplicates, errors, votes/s, vote latency p50/p99 and how
    the workers ended.

    The workers are stored as simulated pilot participants (signed with this
    instance's secret key, which the server must share: name its instance
    folder with --instance): no time estimate, wage, payment plan, MTurk
    action, dashboard figure or pair target counts them, and export and
    results leave them out unless --include-pilot.
    """
    from server.pilot import pilot_signature
    from server.simulate_client import DEFAULT_NOISE_RMSE, SimulationError, run_simulation

    try:
        key = cli_secret_key()
    except UserError as error:
        raise UserError("simulate signs its workers as simulated with the server's secret key: "
                        + str(error.format_message())) from None
    try:
        report = run_simulation(url, study, workers=workers, spam=spam, concurrency=concurrency, seed=seed,
                                pages=pages, pace=pace, progress=not quiet, observer=observer,
                                noise_rmse=noise_rmse if noise_rmse is not None else DEFAULT_NOISE_RMSE,
                                pilot=pilot_signature(key, study))
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
