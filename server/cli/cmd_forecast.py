"""``perceptlab forecast``: votes (or ratings), participants, dollars and hours a study needs to reach a target
interval half-width, forecast from a pilot: paired comparison by :mod:`analysis.forecast`, ratings (a MOS
half-width in rating points) by :mod:`analysis.rating_forecast`. The pilot's kind is read off its columns."""
from __future__ import annotations

from pathlib import Path

import click

from ..paradigms.studyfile import MAX_DOLLARS
from .base import FiniteFloatRange, UserError, cli
from .cmd_study import DATABASE_OPTION

RATING_COLUMNS = ("stimulus_id", "rating")
PAIRED_UNITS = ("jod", "z", "anchored")
RATING_UNITS = "points"
VOTES, RATINGS = "votes", "ratings"  # what a pilot holds (read off its columns), and what its study file's pages hold
# Pages and pay without a study file, by the pilot's kind: the defaults of each kind's study file.
DEFAULTS = {VOTES: {"pairs_per_page": 20, "gold_per_page": 2, "min_pages": 1, "max_pages": 10,
                    "reward_per_page": 1.50, "bonus_per_page": 1.00},
            RATINGS: {"pairs_per_page": 20, "gold_per_page": 2, "min_pages": 1, "max_pages": 10,
                      "reward_per_page": 0.90, "bonus_per_page": 0.60}}


@cli.command("forecast")
@click.argument("study_toml", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--pilot", "pilot_csv", type=click.Path(dir_okay=False, path_type=Path),
              help="The pilot's votes.csv (worker_id,set_id,item_a,item_b,winner) or ratings.csv (worker_id,"
                   "stimulus_id,rating): the kind is read off the columns; created_at or rt_ms give the time per "
                   "trial.")
@click.option("--study", "slug", help="Read the pilot participants' votes or ratings of this study from the database "
                                     "instead.")
@click.option("--halfwidth", type=FiniteFloatRange(min=0, min_open=True), required=True,
              help="Target half-width of every item's confidence interval, in --units.")
@click.option("--units", type=click.Choice([*PAIRED_UNITS, RATING_UNITS]), default=None,
              help="Unit of --halfwidth: paired comparison jod (default), z or anchored, as `perceptlab analyze "
                   "--units` reports scales; ratings points (the only one: a MOS half-width in rating points).")
@click.option("--quantile", "quantiles", type=FiniteFloatRange(0, 1, min_open=True), multiple=True,
              help="Share of items that must reach the target (repeatable; default: 1 and 0.9, both shown).")
@click.option("--sampling", type=click.Choice(["random", "active"]), default=None,
              help="How the study picks pairs (default: the study's [design] sampling, else random). Paired "
                   "comparison only: a rating study gives its stimuli ratings least-rated first.")
@click.option("--replicates", type=click.IntRange(min=1), default=None,
              help="Simulated studies; the band is their 10th to 90th percentile (default: 10 for votes, 200 for "
                   "ratings, whose replicates take milliseconds).")
@click.option("--bootstrap", "n_boot", type=click.IntRange(min=2), default=100, show_default=True,
              help="Worker-bootstrap resamples at each checkpoint of a simulated study (paired comparison; the MOS "
                   "t interval of ratings needs none).")
@click.option("--screen", is_flag=True,
              help="Ratings: leave out, at every checkpoint, the workers the correlation rule of `perceptlab "
                   "analyze-ratings` flags (default: every rating counts, as a rating study's [stopping] measures it).")
@click.option("--confidence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True)
@click.option("--max-votes", type=click.IntRange(min=1), default=None,
              help="Stop a simulated study here (default: 20 times the pilot's votes or ratings, for ratings at least "
                   "200 per stimulus); targets not reached by then are reported as not reached.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--pairs-per-page", type=click.IntRange(min=1), default=None, help="Trials per page (default: the "
              "study's pairs_per_page or ratings_per_page, else 20).")
@click.option("--gold-per-page", type=click.IntRange(min=0), default=None,
              help="Hidden gold trials per page (default: the study's, else 2).")
@click.option("--min-pages", type=click.IntRange(min=1), default=None,
              help="Pages the reward covers (default: the study's, else 1).")
@click.option("--max-pages", type=click.IntRange(min=1), default=None,
              help="Most pages per participant (default: the study's, else 10).")
@click.option("--reward", type=FiniteFloatRange(0, float(MAX_DOLLARS)), default=None,
              help="Dollars per participant (default: the study's reward_per_page, else 1.50 for votes, 0.90 for "
                   "ratings).")
@click.option("--bonus-per-page", type=FiniteFloatRange(0, float(MAX_DOLLARS)), default=None,
              help="Dollars per page after --min-pages (default: the study's, else 1.00 for votes, 0.60 for "
                   "ratings).")
@click.option("--pages-per-worker", type=FiniteFloatRange(0, 10_000, min_open=True), default=None,
              help="Mean pages per participant (default: the pilot's). Simulated participants give as many votes "
                   "or ratings: give it when the pilot's participants did fewer pages than the study's will.")
@click.option("--platform-fee", type=FiniteFloatRange(0, 1, max_open=True), default=0.0, show_default=True,
              help="The platform's commission as a share of pay (MTurk: 0.2).")
@click.option("--seconds-per-trial", type=FiniteFloatRange(0, 86_400, min_open=True), default=None,
              help="Seconds per trial (default: the pilot's, from created_at or rt_ms; without usable pilot times, "
                   "a median under 0.5 s among them, the study's time estimate, else unknown, with a warning).")
@click.option("--arrivals-per-hour", type=FiniteFloatRange(0, 1e6, min_open=True), default=None,
              help="Participants starting per hour, for the wall-clock time.")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the forecast as JSON (fields: docs/analysis.md, perceptlab forecast).")
@DATABASE_OPTION
def forecast_command(study_toml, pilot_csv, slug, halfwidth, units, quantiles, sampling, replicates, n_boot,
                     screen, confidence, max_votes, seed, pairs_per_page, gold_per_page, min_pages, max_pages, reward,
                     bonus_per_page, pages_per_worker, platform_fee, seconds_per_trial, arrivals_per_hour, json_out,
                     database_url):
    """Forecast how many votes (or ratings), participants, dollars and hours reach a target interval half-width.

    The pilot (--pilot votes.csv or ratings.csv, or --study SLUG for the study's pilot participants) gives the
    crowd's noise (careless workers, inconsistency, time per trial) and the items' scale or qualities; simulated
    studies continue it until the share --quantile of the items reach --halfwidth. Paired comparison: random or
    active sampling, analysed as `perceptlab analyze` would. Ratings: least-rated stimuli first, each stimulus'
    MOS t interval in rating points, as a rating study's [stopping] measures it. STUDY_TOML (optional) gives
    the pages, pay and sampling."""
    from tqdm.auto import tqdm

    from analysis.formats import atomic_write_text, json_text
    from analysis.forecast import (DEFAULT_REPLICATES, ForecastInputError, StudyPlan, fit_pilot, forecast, report,
                                   share_refits_for, with_study_time)
    from analysis.rating_forecast import RATING_REPLICATES, fit_rating_pilot, forecast_ratings
    from analysis.threads import limited_blas_threads
    from analysis.thurstone import DisconnectedDesignError

    if (pilot_csv is None) == (slug is None):
        raise UserError("give the pilot: either --pilot votes.csv (or ratings.csv) or --study SLUG")
    if slug is not None and study_toml is not None:
        raise UserError("--study reads the stored study's pages and pay; leave out STUDY_TOML")
    settings = _study_settings(study_toml) if study_toml is not None else {}
    if slug is not None:
        kind, pilot, rt_ms, settings = _study_pilot(slug, database_url)
    else:
        kind, pilot, rt_ms = _read_pilot(pilot_csv)
    where = pilot_csv or f"study {slug}"
    if settings and settings["kind"] != kind:
        raise UserError(f"{study_toml}: a {_KIND_NAMES[settings['kind']]} study file, and {where} holds "
                        f"{_KIND_NAMES[kind]} data: give the pilot of the same kind")
    units = _units(kind, units)
    if kind == RATINGS and sampling is not None:
        raise UserError("--sampling is for paired comparison: a rating study gives its stimuli ratings least-rated "
                        "first")
    if kind == VOTES and screen:
        raise UserError("--screen is for ratings: paired comparison's analysis screens its workers itself")
    sampling = sampling or {"active": "active"}.get(settings.get("sampling"), "random")
    defaults = DEFAULTS[kind]
    try:
        plan = StudyPlan(
            pairs_per_page=_pick(pairs_per_page, settings, "pairs_per_page", defaults),
            gold_per_page=_pick(gold_per_page, settings, "gold_per_page", defaults),
            min_pages=_pick(min_pages, settings, "min_pages", defaults),
            max_pages=_pick(max_pages, settings, "max_pages", defaults),
            reward=float(_pick(reward, settings, "reward_per_page", defaults)),
            bonus_per_page=float(_pick(bonus_per_page, settings, "bonus_per_page", defaults)),
            pages_per_worker=pages_per_worker, platform_fee=platform_fee, seconds_per_trial=seconds_per_trial,
            arrivals_per_hour=arrivals_per_hour)
        quantiles = list(quantiles) or [1.0, 0.9]
        per_worker = None if pages_per_worker is None else pages_per_worker * plan.votes_per_page
        if kind == RATINGS:
            fit = fit_rating_pilot(pilot, rt_ms=rt_ms, screen=screen, confidence=confidence)
            result = forecast_ratings(fit, halfwidth, quantiles=quantiles, replicates=replicates or RATING_REPLICATES,
                                      seed=seed, confidence=confidence, max_ratings=max_votes,
                                      ratings_per_worker=per_worker, screen=screen)
        else:
            with limited_blas_threads():
                fit = fit_pilot(pilot, units, n_boot=n_boot, confidence=confidence, seed=seed, rt_ms=rt_ms,
                                share_refits=share_refits_for(sampling))
                replicates = replicates or DEFAULT_REPLICATES
                with tqdm(total=replicates, desc="forecast", unit="study", leave=False, disable=None) as bar:
                    result = forecast(fit, halfwidth, quantiles=quantiles, sampling=sampling, replicates=replicates,
                                      seed=seed, n_boot=n_boot, confidence=confidence, units=units,
                                      max_votes=max_votes, votes_per_worker=per_worker, on_replicate=bar.update)
        # no usable pilot times (none, or a bot's): the study's own estimate, the paradigm's time prior
        plan = with_study_time(plan, fit, settings.get("seconds_prior"))
    except (ForecastInputError, DisconnectedDesignError) as exc:
        raise UserError(str(exc)) from None
    except ValueError as exc:  # e.g. screening that would drop every worker
        raise UserError(f"{where}: {exc}") from None
    document = report(result, plan)
    if json_out is not None:
        try:
            atomic_write_text(json_out, json_text(document))
        except OSError as exc:
            raise UserError(f"{json_out}: {exc.strerror or exc}") from None
    _print(document)
    if json_out is not None:
        click.echo(f"wrote {json_out}")


_KIND_NAMES = {VOTES: "paired-comparison", RATINGS: "rating"}


def _units(kind: str, units: str | None) -> str:
    """The target's unit: each kind's default, or one error line for the other kind's."""
    if kind == RATINGS:
        if units not in (None, RATING_UNITS):
            raise UserError(f"--units {units}: a rating study's half-width is a MOS half-width in rating points "
                            f"(--units {RATING_UNITS}, the default for ratings)")
        return RATING_UNITS
    if units == RATING_UNITS:
        raise UserError(f"--units {RATING_UNITS} is the unit of ratings; votes give scales in "
                        f"{', '.join(PAIRED_UNITS)}")
    return units or "jod"


def _pick(flag, settings: dict, key: str, defaults: dict):
    """A command-line value, else the study's, else the default of the pilot's kind."""
    if flag is not None:
        return flag
    return settings.get(key, defaults[key])


def _read_pilot(path: Path):
    """``(kind, pilot, rt_ms)``: ``VOTES`` and its Votes, or ``RATINGS`` and its Ratings (read off the header), and
    its rt_ms column (None when absent); one error line on bad input."""
    from analysis.formats import VotesFormatError, read_csv_table, read_votes
    from analysis.ratings import RatingsFormatError, read_ratings

    if _is_ratings(path):
        try:
            ratings = read_ratings(path)
        except RatingsFormatError as exc:
            raise UserError(str(exc)) from None
        _, columns, rows, _ = read_csv_table(path, (), ("rt_ms",), RatingsFormatError)
        return RATINGS, ratings, [row[0] for row in rows] if columns == ["rt_ms"] else None
    try:
        votes = read_votes(path)
    except VotesFormatError as exc:
        raise UserError(str(exc)) from None
    _, columns, rows, _ = read_csv_table(path, (), ("rt_ms",), VotesFormatError)
    rt_ms = [row[0] for row in rows] if columns == ["rt_ms"] else None
    return VOTES, votes, rt_ms


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


# What a forecast reads of a study's spec: the pages and pay of a paired-comparison study or a rating study.
PLAN_FIELDS = {VOTES: ("sampling", "pairs_per_page", "gold_per_page", "min_pages", "max_pages", "reward_per_page",
                       "bonus_per_page"),
               RATINGS: ("ratings_per_page", "gold_per_page", "min_pages", "max_pages", "reward_per_page",
                         "bonus_per_page")}


def _spec_settings(spec, where: str) -> dict:
    """The forecast's settings from a spec with pages of pairs or of ratings (else one error line naming
    ``where``); ``kind`` says which."""
    kind = next((k for k, names in PLAN_FIELDS.items() if all(hasattr(spec, n) for n in names)), None)
    if kind is None:
        raise UserError(f"{where}: forecasts cover studies with pages of pairs or of ratings (paired comparison, "
                        "ratings) only")
    from server.paradigms import paradigm_of_spec

    trials = spec.pairs_per_page if kind == VOTES else spec.ratings_per_page
    # the paradigm's documented pace (server/worker_time.py's estimate before measurements), per trial
    prior = paradigm_of_spec(spec).time_prior(spec)
    return {"kind": kind, "seconds_prior": prior.unit_s / trials, "sampling": "active" if getattr(spec, "sampling", "") == "active" else "random",
            "pairs_per_page": trials, "gold_per_page": spec.gold_per_page, "min_pages": spec.min_pages,
            "max_pages": spec.max_pages, "reward_per_page": float(spec.reward_per_page),
            "bonus_per_page": float(spec.bonus_per_page)}


def _study_pilot(slug: str, database_url: str | None):
    """``(kind, pilot, rt_ms, settings)``: the votes or ratings of a stored study's pilot participants (its
    paradigm's export with pilots, as `perceptlab export --include-pilot` writes it, only the pilots' rows kept),
    their rt_ms, and the study's settings."""
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
    name = "ratings.csv" if settings["kind"] == RATINGS else "votes.csv"
    text = files.get(name)
    if text is None:
        raise UserError(f"study {slug}: its export has no {name}")
    rows = list(csv.reader(io.StringIO(text)))
    column = rows[0].index("worker_id") if rows else -1
    kept = [row for row in rows[1:] if row and row[column].lstrip("'") in pilots]
    what = settings["kind"]
    if not kept:
        raise UserError(f"study {slug!r} has no {what} of pilot participants (perceptlab study links {slug} --preview, "
                        "perceptlab study pilot, or perceptlab simulate make some)")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{slug}-pilot-{name}"
        with path.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f, lineterminator="\n").writerows([rows[0], *kept])
        kind, pilot, rt_ms = _read_pilot(path)
    return kind, pilot, rt_ms, settings


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
    unit = doc.get("work_unit", "votes")
    seconds = "unknown" if a["seconds_per_trial"] is None else f"{a['seconds_per_trial']:.1f} s ({a['seconds_source']})"
    click.echo(f"pilot: {p['votes']:,} {unit} of {p['workers']} workers in {p['sets']} set(s); careless workers "
               f"{100 * p['careless_share']:.0f} %, time per trial {seconds}")
    interval = "t interval" if unit == "votes" else t["interval"]
    how = f"{t['sampling']} sampling" if unit == "votes" else f"stimuli rated {t['sampling']}"
    click.echo(f"target: half-width {t['halfwidth']:g} {t['units']} ({100 * t['confidence']:g} % {interval}), "
               f"{how}, {doc['replicates']} simulated studies (band: 10th-90th percentile)")
    rows = [("items", f"{unit} (band)", "participants", "dollars", "worker-hours", "wall-clock h", "inconsistency",
             "model only")]
    for f in doc["forecasts"]:
        rows.append((f"{100 * f['quantile']:g} %", _band(f["votes_needed"], _count), _band(f["participants"], _count),
                     _band(f["dollars"], _money), _band(f["worker_hours"], _hours),
                     _band(f["wall_clock_hours"], _hours) if f["wall_clock_hours"]["total"] is not None else "-",
                     f"{f['inconsistency']:.2f}", _band(f["votes_needed"]["model_only"], _count)))
    widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    for line in doc.get("model", []):
        click.echo(f"assumes: {line}")
    for warning in doc.get("warnings", []):
        click.echo(f"warning: {warning}")
    unreached = [f for f in doc["forecasts"] if f["votes_needed"]["reached"] < 1]
    for f in unreached:
        click.echo(f"{100 * f['quantile']:g} % of items: {100 * (1 - f['votes_needed']['reached']):.0f} % of the "
                   f"simulated studies did not reach the target by {doc['max_votes']:,} {unit} (--max-votes)")
    if unit != "votes":
        click.echo(f"counts are {unit} (the JSON's votes_needed and max_votes count them); inconsistency: the pilot's "
                   "half-widths over those of its simulated replay (1: the fitted crowd reproduces the pilot)")
