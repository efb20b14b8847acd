"""``perceptlab forecast``: votes, participants, dollars and hours a paired-comparison study needs to reach a
target interval half-width, forecast from a pilot (:mod:`analysis.forecast`)."""
from __future__ import annotations

from pathlib import Path

import click

from .base import UserError, cli
from .cmd_study import DATABASE_OPTION

RATING_COLUMNS = ("stimulus_id", "rating")


@cli.command("forecast")
@click.argument("study_toml", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--pilot", "pilot_csv", type=click.Path(dir_okay=False, path_type=Path),
              help="The pilot's votes.csv (worker_id,set_id,item_a,item_b,winner; created_at or rt_ms give the time "
                   "per trial).")
@click.option("--study", "slug", help="Read the pilot participants' votes of this study from the database instead.")
@click.option("--halfwidth", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Target half-width of every item's confidence interval, in --units.")
@click.option("--units", type=click.Choice(["jod", "z", "anchored"]), default="jod", show_default=True,
              help="Unit of --halfwidth, as `perceptlab analyze --units` reports scales.")
@click.option("--quantile", "quantiles", type=click.FloatRange(0, 1, min_open=True), multiple=True,
              help="Share of items that must reach the target (repeatable; default: 1 and 0.9, both shown).")
@click.option("--sampling", type=click.Choice(["random", "active"]), default=None,
              help="How the study picks pairs (default: the study's [design] sampling, else random).")
@click.option("--replicates", type=click.IntRange(min=1), default=10, show_default=True,
              help="Simulated studies; the band is their 10th to 90th percentile.")
@click.option("--bootstrap", "n_boot", type=click.IntRange(min=2), default=100, show_default=True,
              help="Worker-bootstrap resamples at each checkpoint of a simulated study.")
@click.option("--confidence", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True)
@click.option("--max-votes", type=click.IntRange(min=1), default=None,
              help="Stop a simulated study here (default: 20 times the pilot's votes); targets not reached by then "
                   "are reported as not reached.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--pairs-per-page", type=click.IntRange(min=1), default=None, help="Trials per page (default: the "
              "study's, else 20).")
@click.option("--gold-per-page", type=click.IntRange(min=0), default=None,
              help="Hidden gold trials per page (default: the study's, else 2).")
@click.option("--min-pages", type=click.IntRange(min=1), default=None,
              help="Pages the reward covers (default: the study's, else 1).")
@click.option("--max-pages", type=click.IntRange(min=1), default=None,
              help="Most pages per participant (default: the study's, else 10).")
@click.option("--reward", type=click.FloatRange(min=0), default=None,
              help="Dollars per participant (default: the study's reward_per_page, else 1.50).")
@click.option("--bonus-per-page", type=click.FloatRange(min=0), default=None,
              help="Dollars per page after --min-pages (default: the study's, else 1.00).")
@click.option("--pages-per-worker", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Mean pages per participant (default: the pilot's). Simulated participants give as many votes: "
                   "give it when the pilot's participants did fewer pages than the study's will.")
@click.option("--platform-fee", type=click.FloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="The platform's commission as a share of pay (MTurk: 0.2).")
@click.option("--seconds-per-trial", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds per trial (default: the pilot's, from created_at or rt_ms).")
@click.option("--arrivals-per-hour", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Participants starting per hour, for the wall-clock time.")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the forecast as JSON (fields: README, perceptlab forecast).")
@DATABASE_OPTION
def forecast_command(study_toml, pilot_csv, slug, halfwidth, units, quantiles, sampling, replicates, n_boot,
                     confidence, max_votes, seed, pairs_per_page, gold_per_page, min_pages, max_pages, reward,
                     bonus_per_page, pages_per_worker, platform_fee, seconds_per_trial, arrivals_per_hour, json_out,
                     database_url):
    """Forecast how many votes, participants, dollars and hours reach a target interval half-width.

    The pilot (--pilot votes.csv, or --study SLUG for the study's pilot participants) gives the crowd's noise
    (careless workers, inconsistency, time per trial) and each set's scale; simulated studies continue it by
    random or active sampling and are analysed as `perceptlab analyze` would, until the share --quantile of
    the items reach --halfwidth. STUDY_TOML (optional) gives the pages, pay and sampling."""
    from tqdm.auto import tqdm

    from analysis.formats import atomic_write_text, json_text
    from analysis.forecast import ForecastInputError, StudyPlan, fit_pilot, forecast, report
    from analysis.threads import limited_blas_threads
    from analysis.thurstone import DisconnectedDesignError

    if (pilot_csv is None) == (slug is None):
        raise UserError("give the pilot: either --pilot votes.csv or --study SLUG")
    if slug is not None and study_toml is not None:
        raise UserError("--study reads the stored study's pages and pay; leave out STUDY_TOML")
    settings = _study_settings(study_toml) if study_toml is not None else {}
    if slug is not None:
        votes, rt_ms, settings = _study_pilot(slug, database_url)
    else:
        votes, rt_ms = _read_pilot(pilot_csv)
    sampling = sampling or {"active": "active"}.get(settings.get("sampling"), "random")
    try:
        plan = StudyPlan(
            pairs_per_page=_pick(pairs_per_page, settings, "pairs_per_page", 20),
            gold_per_page=_pick(gold_per_page, settings, "gold_per_page", 2),
            min_pages=_pick(min_pages, settings, "min_pages", 1), max_pages=_pick(max_pages, settings, "max_pages", 10),
            reward=float(_pick(reward, settings, "reward_per_page", 1.50)),
            bonus_per_page=float(_pick(bonus_per_page, settings, "bonus_per_page", 1.00)),
            pages_per_worker=pages_per_worker, platform_fee=platform_fee, seconds_per_trial=seconds_per_trial,
            arrivals_per_hour=arrivals_per_hour)
        quantiles = list(quantiles) or [1.0, 0.9]
        with limited_blas_threads():
            fit = fit_pilot(votes, units, n_boot=n_boot, confidence=confidence, seed=seed, rt_ms=rt_ms)
            with tqdm(total=replicates, desc="forecast", unit="study", leave=False, disable=None) as bar:
                per_worker = None if pages_per_worker is None else pages_per_worker * plan.votes_per_page
                result = forecast(fit, halfwidth, quantiles=quantiles, sampling=sampling, replicates=replicates,
                                  seed=seed, n_boot=n_boot, confidence=confidence, units=units, max_votes=max_votes,
                                  votes_per_worker=per_worker, on_replicate=bar.update)
    except (ForecastInputError, DisconnectedDesignError) as exc:
        raise UserError(str(exc)) from None
    except ValueError as exc:  # e.g. screening that would drop every worker
        raise UserError(f"{pilot_csv or 'study ' + slug}: {exc}") from None
    document = report(result, plan)
    if json_out is not None:
        try:
            atomic_write_text(json_out, json_text(document))
        except OSError as exc:
            raise UserError(f"{json_out}: {exc.strerror or exc}") from None
    _print(document)
    if json_out is not None:
        click.echo(f"wrote {json_out}")


def _pick(flag, settings: dict, key: str, default):
    """A command-line value, else the study's, else the default."""
    if flag is not None:
        return flag
    return settings.get(key, default)


def _read_pilot(path: Path):
    """The pilot's Votes and its rt_ms column (None when absent); one error line on bad input."""
    from analysis.formats import VotesFormatError, read_csv_table, read_votes

    try:
        votes = read_votes(path)
    except VotesFormatError as exc:
        if _is_ratings(path):
            raise UserError(f"{path}: a ratings file (worker_id,stimulus_id,rating); forecasts cover paired-comparison "
                            "votes only (worker_id,set_id,item_a,item_b,winner)") from None
        raise UserError(str(exc)) from None
    _, columns, rows, _ = read_csv_table(path, (), ("rt_ms",), VotesFormatError)
    rt_ms = [row[0] for row in rows] if columns == ["rt_ms"] else None
    return votes, rt_ms


def _is_ratings(path: Path) -> bool:
    import csv

    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            header = next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError):
        return False
    return all(c in header for c in RATING_COLUMNS) and "winner" not in header


def _study_settings(path: Path) -> dict:
    """``sampling``, ``pairs_per_page``, ``gold_per_page``, ``min_pages``, ``max_pages``, ``reward_per_page`` and
    ``bonus_per_page`` of a study file, read by its paradigm (the registry: ``[study] kind``)."""
    from server.paradigms import StudyDefinitionError, read_study_file

    try:
        spec = read_study_file(path)
    except StudyDefinitionError as exc:
        raise UserError(str(exc)) from None
    return _spec_settings(spec, str(path))


# What a forecast reads of a study's spec: the pages and pay of a paired-comparison study.
PLAN_FIELDS = ("sampling", "pairs_per_page", "gold_per_page", "min_pages", "max_pages", "reward_per_page",
               "bonus_per_page")


def _spec_settings(spec, where: str) -> dict:
    """The forecast's settings from a spec that has pages of pairs (else one error line naming ``where``)."""
    if not all(hasattr(spec, name) for name in PLAN_FIELDS):
        raise UserError(f"{where}: forecasts cover studies with pages of pairs (paired comparison) only")
    return {"sampling": "active" if spec.sampling == "active" else "random", "pairs_per_page": spec.pairs_per_page,
            "gold_per_page": spec.gold_per_page, "min_pages": spec.min_pages, "max_pages": spec.max_pages,
            "reward_per_page": float(spec.reward_per_page), "bonus_per_page": float(spec.bonus_per_page)}


def _study_pilot(slug: str, database_url: str | None):
    """The votes of a stored study's pilot participants (its paradigm's export with pilots, as `perceptlab export
    --include-pilot` writes it, only the pilots' rows kept), their rt_ms, and the study's settings."""
    import csv
    import io
    import tempfile

    from sqlalchemy import select

    from server.cli.base import cli_session
    from server.cli.cmd_study import _find
    from server.models import Worker
    from server.paradigms import paradigm_for, spec_from_config

    with cli_session(database_url) as session:
        study = _find(session, slug)
        settings = _spec_settings(spec_from_config(dict(study.config or {})), f"study {slug}")
        pilots = set(session.scalars(select(Worker.external_id).where(Worker.study_id == study.id, Worker.pilot)))
        files = paradigm_for(study).export(session, study.id, salt=None, include_pilot=True).files
    text = files.get("votes.csv")
    if text is None:
        raise UserError(f"study {slug}: its export has no votes.csv; forecasts cover paired comparison only")
    rows = list(csv.reader(io.StringIO(text)))
    column = rows[0].index("worker_id") if rows else -1
    kept = [row for row in rows[1:] if row and row[column].lstrip("'") in pilots]
    if not kept:
        raise UserError(f"study {slug!r} has no votes of pilot participants (perceptlab study links {slug} --preview, "
                        "perceptlab study pilot, or perceptlab simulate make some)")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{slug}-pilot-votes.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f, lineterminator="\n").writerows([rows[0], *kept])
        votes, rt_ms = _read_pilot(path)
    return votes, rt_ms, settings


def _money(x) -> str:
    return "-" if x is None else f"${x:,.0f}"


def _count(x) -> str:
    return "-" if x is None else f"{x:,}"


def _hours(x) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _band(d: dict, show) -> str:
    if d["total"] is None:
        return "not reached"
    low = show(d["low"]) if d["low"] is not None else "?"
    high = show(d["high"]) if d["high"] is not None else "not reached"
    return f"{show(d['total'])} ({low}-{high})"


def _print(doc: dict) -> None:
    p, t, a = doc["pilot"], doc["target"], doc["assumptions"]
    seconds = "unknown" if a["seconds_per_trial"] is None else f"{a['seconds_per_trial']:.1f} s ({a['seconds_source']})"
    click.echo(f"pilot: {p['votes']:,} votes of {p['workers']} workers in {p['sets']} set(s); careless workers "
               f"{100 * p['careless_share']:.0f} %, time per trial {seconds}")
    click.echo(f"target: half-width {t['halfwidth']:g} {t['units']} ({100 * t['confidence']:g} % t interval), "
               f"{t['sampling']} sampling, {doc['replicates']} simulated studies (band: 10th-90th percentile)")
    rows = [("items", "votes (band)", "participants", "dollars", "worker-hours", "wall-clock h", "inconsistency",
             "model only")]
    for f in doc["forecasts"]:
        rows.append((f"{100 * f['quantile']:g} %", _band(f["votes_needed"], _count), _band(f["participants"], _count),
                     _band(f["dollars"], _money), _band(f["worker_hours"], _hours),
                     _band(f["wall_clock_hours"], _hours) if f["wall_clock_hours"]["total"] is not None else "-",
                     f"{f['inconsistency']:.2f}", _band(f["votes_needed"]["model_only"], _count)))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    unreached = [f for f in doc["forecasts"] if f["votes_needed"]["reached"] < 1]
    for f in unreached:
        click.echo(f"{100 * f['quantile']:g} % of items: {100 * (1 - f['votes_needed']['reached']):.0f} % of the "
                   f"simulated studies did not reach the target by {doc['max_votes']:,} votes (--max-votes)")
