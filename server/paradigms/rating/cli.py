"""``perceptlab analyze-ratings`` and ``perceptlab compare-protocols``: the analysis of rating studies (ACR, DCR,
CCR) and the comparison of a rating study with a paired-comparison study of the same stimuli.

The numerics live in :mod:`analysis.ratings`, :mod:`analysis.rating_screening`, :mod:`analysis.rating_models`,
:mod:`analysis.rating_report` and :mod:`analysis.protocols`; they are imported inside the commands, so
``perceptlab --help`` stays fast. :mod:`server.cli` imports this module (it imports every
``server/paradigms/<package>/cli.py``) and adds its :data:`COMMANDS` to the ``perceptlab`` group; the commands
are plain click commands built with :mod:`server.command_support`, so the package never imports ``server/cli/``.
"""
from __future__ import annotations

from pathlib import Path

import click

from ...command_support import VIEWING_PASSED_HELP, FiniteFloatRange, UserError, keep_viewing_passed

# analysis.rating_screening.RULES (not imported: `perceptlab --help` stays fast)
SCREENING_RULES = ("bt500", "careless", "correlation", "straight_liner", "gold", "hidden_reference")


def _rules(value: str) -> tuple[str, ...]:
    names = tuple(r.strip() for r in value.split(",") if r.strip())
    unknown = [r for r in names if r not in SCREENING_RULES]
    if unknown:
        raise click.BadParameter(f"unknown rule {unknown[0]!r}; choose from {', '.join(SCREENING_RULES)}")
    return names


@click.command("analyze-ratings")
@click.argument("ratings_csv", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for scores.csv, workers.csv, summary.json and the plots.")
@click.option("--model", type=click.Choice(["mos", "p913", "mle"]), default="mos", show_default=True,
              help="Scores: the mean of the kept ratings (MOS; DCR: DMOS; CCR: CMOS), the ITU-T P.913 "
                   "clause 12.6 model's quality of an average worker (bias and inconsistency removed), or "
                   "that model with an ambiguity per content (sureal's MLE; content = reference_id).")
@click.option("--interval", type=click.Choice(["t", "bootstrap"]), default="t", show_default=True,
              help="Intervals: Student t with a moderated variance over each stimulus' ratings (with --model "
                   "p913: of a jackknife over workers; mle: the model's normal interval), or a bootstrap over "
                   "workers (percentile); always inside the scale, blank below 2 workers (scores.csv ci_reason).")
@click.option("--n-boot", type=click.IntRange(min=2), default=1000, show_default=True,
              help="Bootstrap resamples (with --interval bootstrap).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--confidence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True)
@click.option("--scale", type=click.Choice(["auto", "acr", "dcr", "ccr"]), default="auto", show_default=True,
              help="The rating scale (ACR 1..5, DCR 1..5, CCR -3..3); auto: the file's scale column, else CCR "
                   "when a rating is below 1, else ACR.")
@click.option("--dmos", is_flag=True,
              help="ACR with hidden references (P.910 ACR-HR): score DV = V(test) - V(reference) + 5, the "
                   "reference named by reference_id and rated by the same worker.")
@click.option("--rules", default=",".join(SCREENING_RULES), show_default=True,
              help="Screening rules that exclude workers, comma-separated (every rule is computed and shown "
                   "in workers.csv either way).")
@click.option("--no-screening", is_flag=True, help="Keep every worker (the rules are still reported).")
@click.option("--careless-posterior", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.5,
              show_default=True,
              help="Careless rule: flag a worker whose posterior of rating uniformly at random (against the P.913 "
                   "model's honest raters) is above this.")
@click.option("--correlation-threshold", type=FiniteFloatRange(-1, 1), default=0.0, show_default=True,
              help="Correlation rule: flag a worker whose correlation with the others' MOS is significantly below "
                   "this (one-sided Fisher z test at --correlation-alpha).")
@click.option("--correlation-alpha", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True,
              help="Correlation rule: the test's level; 0.5 compares r itself with the threshold (VQEG HDTV's fixed "
                   "rule is --correlation-threshold 0.75 --correlation-alpha 0.5).")
@click.option("--min-common", type=click.IntRange(min=3), default=5, show_default=True,
              help="Correlation rule: stimuli a worker must share with others for a correlation.")
@click.option("--gold-accuracy", type=FiniteFloatRange(0, 1), default=0.7, show_default=True,
              help="Gold rule: flag a worker with a smaller share of gold answers inside gold_low..gold_high.")
@click.option("--min-ratings", type=click.IntRange(min=2), default=10, show_default=True,
              help="Straight-liner rule: ratings a worker needs before a near-constant answer is flagged.")
@click.option("--workers", "workers_csv", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="The study's workers.csv (workers_meta.csv of an export), for --viewing-passed.")
@click.option("--viewing-passed", is_flag=True, help=VIEWING_PASSED_HELP)
@click.option("--no-plots", is_flag=True, help="Skip the plots (PNG at 200 dpi, each with a vector PDF beside it).")
def analyze_ratings_command(ratings_csv, out, model, interval, n_boot, seed, confidence, scale, dmos, rules,
                            no_screening, careless_posterior, correlation_threshold, correlation_alpha, min_common,
                            gold_accuracy, min_ratings, workers_csv, viewing_passed, no_plots):
    """Screen the workers and score the stimuli of RATINGS_CSV (worker_id,stimulus_id,rating)."""
    from analysis.rating_report import RatingOptions, analyze_ratings, write_rating_results
    from analysis.rating_screening import ScreeningOptions
    from analysis.ratings import RatingsFormatError, read_ratings

    screening = ScreeningOptions(rules=() if no_screening else _rules(rules),
                                 careless_posterior=careless_posterior, correlation_threshold=correlation_threshold,
                                 correlation_alpha=correlation_alpha, min_common=min_common,
                                 gold_accuracy=gold_accuracy, min_ratings=min_ratings)
    try:
        options = RatingOptions(model=model, interval=interval, n_boot=n_boot, confidence=confidence, seed=seed,
                                dmos=dmos, screening=screening)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    try:
        ratings = read_ratings(ratings_csv, None if scale == "auto" else scale)
        if viewing_passed:
            ratings = keep_viewing_passed(ratings, workers_csv)
        result = analyze_ratings(ratings, options)
    except RatingsFormatError as exc:
        raise UserError(str(exc)) from None
    except ValueError as exc:
        raise UserError(f"{ratings_csv}: {exc}") from None
    written = write_rating_results(result, out, plots=not no_plots)
    s, c = result.summary, result.summary["counts"]
    flagged = ", ".join(f"{n} {rule}" for rule, n in s["screening"]["flagged"].items() if n)
    click.echo(f"{c['ratings']} ratings ({c['gold_ratings']} gold) of {c['stimuli']} stimuli by {c['workers']} "
               f"workers, {ratings.scale.upper()} scale; kept {c['kept_workers']} workers "
               f"({c['kept_ratings']} ratings)" + (f"; flagged: {flagged}" if flagged else ""))
    click.echo(f"scores: {s['score']}, {s['intervals']['confidence']:.0%} {s['intervals']['method']} intervals, "
               f"{c['scored_stimuli']} stimuli")
    click.echo(f"wrote {len(written)} files to {out}/: " + ", ".join(p.name for p in written))


@click.command("compare-protocols")
@click.option("--pc", "scales_csv", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="scales.csv of a paired-comparison analysis (`perceptlab analyze`).")
@click.option("--ratings", "scores_csv", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="scores.csv of a rating analysis (`perceptlab analyze-ratings`).")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for comparison.csv, summary.json and the plot.")
@click.option("--map", "map_csv", type=click.Path(dir_okay=False, path_type=Path),
              help="CSV stimulus_id,set_id,item_id naming the item of each rated stimulus (default: a stimulus "
                   "SCENE/METHOD is item METHOD of set SCENE, else stimulus_id = item_id).")
@click.option("--n-boot", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Bootstrap resamples of the items for the correlations' intervals (0: Fisher z only).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--confidence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.95,
              show_default=True)
@click.option("--no-plots", is_flag=True, help="Skip the plot (PNG at 200 dpi with a vector PDF beside it).")
def compare_protocols_command(scales_csv, scores_csv, out, map_csv, n_boot, seed, confidence, no_plots):
    """Correlate a paired-comparison study's scales with a rating study's scores of the same stimuli."""
    from analysis.protocols import ProtocolInputError, compare_protocols, join_studies, write_comparison

    try:
        joined = join_studies(scales_csv, scores_csv, map_csv)
        result = compare_protocols(joined, n_boot=n_boot, confidence=confidence, seed=seed)
    except ProtocolInputError as exc:
        raise UserError(str(exc)) from None
    except ValueError as exc:
        raise UserError(f"{scores_csv}: {exc}") from None
    written = write_comparison(result, out, plots=not no_plots)
    s = result.summary
    click.echo(f"{s['n']} stimuli joined ({s['join']['rule']}; unmatched: {s['join']['pc_items_unmatched']} PC items, "
               f"{s['join']['stimuli_unmatched']} rated stimuli)")
    for name in ("srocc", "plcc"):
        e = s[name]
        boot = (f", bootstrap [{e['bootstrap_low']:.3f}, {e['bootstrap_high']:.3f}]"
                if e["bootstrap_low"] is not None else "")
        click.echo(f"{name.upper()} {e['r']:.3f} (Fisher z [{e['fisher_low']:.3f}, {e['fisher_high']:.3f}]{boot})")
    m = s["mapping"]
    click.echo(f"mapping: {m['kind']}" + (f" ({m['fallback_reason']})" if m["fallback_reason"] else "")
               + f"; RMSE {s['rmse']:.4f}")
    click.echo(f"wrote {len(written)} files to {out}/: " + ", ".join(p.name for p in written))


#: What :mod:`server.cli` adds to the ``perceptlab`` group.
COMMANDS = (analyze_ratings_command, compare_protocols_command)
