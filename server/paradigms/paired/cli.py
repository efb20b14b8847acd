"""``perceptlab analyze``, ``simulate-votes`` and ``demo-analysis``: the analysis of paired-comparison votes.

The numerics live in :mod:`analysis.pipeline` (screening, scaling, bootstrap) and :mod:`analysis.simulate`; they
are imported inside the commands, so ``perceptlab --help`` stays fast. :mod:`server.cli` imports this module (it
imports every ``server/paradigms/<package>/cli.py``) and adds its :data:`COMMANDS` to the ``perceptlab`` group;
the commands are plain click commands built with :mod:`server.command_support`, so the package never imports
``server/cli/``. ``perceptlab results`` of a paired study runs :func:`analyze_command` (results.py).
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import click

from stimuli.csv_safety import dict_rows

from ...command_support import VIEWING_PASSED_HELP, FiniteFloatRange, UserError, cli_config, keep_viewing_passed


def _defaults() -> dict:
    """The [analysis] section of this run's configuration (the defaults of ``perceptlab analyze``)."""
    return cli_config()["analysis"]


def _keep(value: str) -> str | float:
    if value in ("auto", "none"):
        return value
    try:
        fraction = float(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither 'auto', 'none' nor a number") from None
    if not 0 < fraction <= 1:
        raise click.BadParameter(f"the kept fraction must be in (0, 1], got {fraction}")
    return fraction


def read_machine_errors(path: Path) -> dict[tuple[str, str], float]:
    """``{(set_id, item_id): error}`` from a CSV with those three columns (one line on any problem)."""
    from analysis.formats import read_csv_table

    def error(name, line, message):
        return UserError(f"{name}{'' if line is None else f', line {line}'}: {message}")

    name, _, rows, lines = read_csv_table(path, ("set_id", "item_id", "error"), (), error, strip=True)
    errors = {}
    for (set_id, item_id, text), line in zip(rows, lines):
        try:
            value = float(text)
        except ValueError:
            raise UserError(f"{name}, line {line}: error {text!r} is not a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise UserError(f"{name}, line {line}: error {text!r} is not a finite number")
        errors[(set_id, item_id)] = value
    return errors


def read_objective(path: Path, column: str | None) -> dict[str, float]:
    """``item_id`` plus one numeric column (``--objective-column``, else ``rank``, ``score`` or the second column)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames or []
            if "item_id" not in fields:
                raise UserError(f"{path}, line 1: objective ranking needs an item_id column (has: {', '.join(fields)})")
            value_column = column or next((c for c in ("rank", "score", "value") if c in fields),
                                          next((c for c in fields if c != "item_id"), None))
            if value_column not in fields:
                raise UserError(f"{path}, line 1: no column {value_column!r} (has: {', '.join(fields)})")
            values = {}
            for row in dict_rows(reader):  # as the project writes CSV (stimuli/csv_safety.py)
                try:
                    values[row["item_id"]] = float(row[value_column])
                except (TypeError, ValueError):
                    raise UserError(f"{path}, line {reader.line_num}: {value_column} "
                                    f"{row[value_column]!r} is not a number") from None
            return values
    except UnicodeDecodeError:
        raise UserError(f"{path}: not valid UTF-8") from None
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None


@click.command("analyze")
@click.argument("votes_csv", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for scales.csv, overall.csv, workers.csv, summary.json and plots.")
@click.option("--method", type=click.Choice(["mle", "ls"]), default=lambda: _defaults()["method"],
              show_default="mle", help="Thurstone Case V by maximum likelihood or least squares.")
@click.option("--keep", default=lambda: str(_defaults()["keep"]), show_default="auto",
              help="Worker screening: 'auto' (likelihood-ratio test against guessing), a fraction of votes "
                   "to keep (0.6 as in StudyMB 2.0), or 'none'.")
@click.option("--min-tpr", type=FiniteFloatRange(0, 1), default=None,
              help="Screen by a minimum TPR instead of --keep.")
@click.option("--no-anchors", is_flag=True,
              help="Fit without the virtual worst/best anchors (reported in z units unless --units says otherwise).")
@click.option("--units", type=click.Choice(["anchored", "jod", "z"]), default=None,
              help="Unit of scales.csv, overall.csv and the plots: 'anchored' (each set's virtual worst anchor 0, "
                   "best 1; the default with anchors), 'jod' (1 JOD = 75 % preference, as pwcmp) or 'z' "
                   "(Thurstone Case V, P = Phi(s_i - s_j); the default with --no-anchors). jod and z are "
                   "centred on each set's mean; intervals are converted with the values.")
@click.option("--anchor-votes", type=FiniteFloatRange(min=0, min_open=True),
              default=lambda: _defaults()["anchor_votes"], show_default="1",
              help="Virtual comparisons of each item against each anchor.")
@click.option("--prior", "prior_strength", type=FiniteFloatRange(min=0, min_open=True),
              default=lambda: _defaults()["prior_strength"], show_default="0.01",
              help="Ridge (prior precision) of the MLE, z units.")
@click.option("--bootstrap", "n_boot", type=click.IntRange(min=0), default=lambda: _defaults()["bootstrap"],
              show_default="1000", help="Bootstrap resamples for confidence intervals (0: none).")
@click.option("--bootstrap-unit", type=click.Choice(["worker", "vote"]),
              default=lambda: _defaults()["bootstrap_unit"], show_default="worker",
              help="Resample workers (all their votes) or individual votes.")
@click.option("--confidence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True),
              default=lambda: _defaults()["confidence"], show_default="0.95")
@click.option("--interval-method", type=click.Choice(["t", "basic", "percentile"]),
              default=lambda: _defaults().get("interval_method", "t"), show_default="t",
              help="Bootstrap interval: 't' (estimate +/- Student t x bootstrap SD, corrected for the "
                   "bootstrap's narrowness with few workers), 'basic' (reflected quantiles) or 'percentile' "
                   "(pwcmp's; too narrow with few workers).")
@click.option("--gold-accuracy", type=FiniteFloatRange(0, 1), default=lambda: _defaults()["gold_accuracy"],
              show_default="0.7", help="Exclude workers below this accuracy on the checks: the rows with a gold_winner "
                                       "(is_gold rows, and votes of design pairs shown as gold).")
@click.option("--no-gold", is_flag=True, help="Do not screen by gold questions.")
@click.option("--allow-disconnected", is_flag=True,
              help="Scale disconnected comparison graphs, tying components by the weak prior.")
@click.option("--objective", type=click.Path(dir_okay=False, path_type=Path),
              help="CSV with item_id and an objective score or rank (e.g. RMSE): writes rerank.csv.")
@click.option("--objective-column", help="Column of --objective to use (default: rank, score, value).")
@click.option("--higher-is-better", is_flag=True, help="The objective's higher values are better (default: lower).")
@click.option("--seed", type=int, default=lambda: _defaults()["seed"], show_default="0")
@click.option("--keep-biased", is_flag=True,
              help="Keep workers whose votes favour or disfavour one item (flagged in workers.csv, excluded by "
                   "default).")
@click.option("--no-bias-test", is_flag=True, help="Do not test workers for a bias for or against single items.")
@click.option("--no-soft-screening", is_flag=True,
              help="With --keep auto, scale the kept workers' votes alone, unweighted (by default every judged "
                   "worker's votes weigh its posterior of being careful: workers.csv, column vote_weight).")
@click.option("--no-sockpuppet-test", is_flag=True,
              help="Do not set aside the votes of short-lived identities on items they favour or disfavour as a "
                   "group (sock puppets).")
@click.option("--short-lived-votes", type=click.IntRange(min=1), default=30, show_default=True,
              help="Identities with at most this many scaling votes form the group of the sock-puppet test.")
@click.option("--bias-fdr", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=0.05,
              show_default=True, help="False discovery rate of the bias and machine-agreement tests.")
@click.option("--machine-errors", type=click.Path(dir_okay=False, path_type=Path),
              help="CSV of set_id,item_id,error (each image's error against its reference; `perceptlab results` "
                   "writes machine_errors.csv): flags workers who agree with the closer image beyond a person.")
@click.option("--workers", "workers_csv", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="The study's workers.csv (workers_meta.csv of an export): its address_group and agent_group "
                   "(keyed hashes of each worker's network and browser) are evidence for the sock-puppet test.")
@click.option("--viewing-passed", is_flag=True, help=VIEWING_PASSED_HELP)
@click.option("--no-plots", is_flag=True, help="Skip the plots (PNG at 200 dpi, each with a vector PDF beside it).")
def analyze_command(votes_csv, out, method, keep, min_tpr, no_anchors, units, anchor_votes, prior_strength, n_boot,
                    bootstrap_unit, confidence, interval_method, gold_accuracy, no_gold, allow_disconnected, objective,
                    objective_column, higher_is_better, seed, keep_biased, no_bias_test, no_soft_screening,
                    no_sockpuppet_test, short_lived_votes, bias_fdr, machine_errors, workers_csv, viewing_passed, no_plots):
    """Screen workers and scale the votes of VOTES_CSV (worker_id,set_id,item_a,item_b,winner)."""
    from analysis.formats import VotesFormatError, read_votes
    from analysis.pipeline import AnalysisOptions, analyze, write_results
    from analysis.scaling import ScalingOptions
    from analysis.sockpuppets import read_fingerprints
    from analysis.thurstone import DisconnectedDesignError

    keep = _keep(str(keep))
    if units == "anchored" and no_anchors:
        raise UserError("--units anchored needs the virtual anchors: drop --no-anchors, or use --units jod or z")
    objective_values = read_objective(objective, objective_column) if objective else None
    errors = read_machine_errors(machine_errors) if machine_errors else None
    try:
        fingerprints = read_fingerprints(workers_csv) if workers_csv else None
        votes = read_votes(votes_csv)
        if viewing_passed:
            votes = keep_viewing_passed(votes, workers_csv)
        if errors is not None and not set(errors) & set(zip(votes.set_ids[votes.item_set], votes.item_ids)):
            raise UserError(f"{machine_errors}: no set_id,item_id of it is in {votes_csv} (errors of another study?)")
        options = AnalysisOptions(
            scaling=ScalingOptions(method=method, anchors=not no_anchors, anchor_votes=anchor_votes,
                                   prior_strength=prior_strength, allow_disconnected=allow_disconnected,
                                   units=units),
            keep=keep, min_tpr=min_tpr, gold_threshold=None if no_gold else gold_accuracy, n_boot=n_boot,
            bootstrap_unit=bootstrap_unit, confidence=confidence, interval_method=interval_method, seed=seed,
            bias_test=not no_bias_test, exclude_biased=not keep_biased, bias_fdr=bias_fdr,
            soft_screening=not no_soft_screening,
            sockpuppet_test=not no_sockpuppet_test, short_lived_votes=short_lived_votes)
        result = analyze(votes, options, objective_values, objective_lower_is_better=not higher_is_better,
                         machine_errors=errors, fingerprints=fingerprints)
    except (VotesFormatError, DisconnectedDesignError) as exc:
        raise UserError(str(exc)) from None
    except ValueError as exc:
        raise UserError(f"{votes_csv}: {exc}") from None
    written = write_results(result, out, plots=not no_plots)
    s, w = result.summary["screening"], result.summary["workers"]
    click.echo(f"{len(votes)} votes, {result.summary['counts']['sets']} sets, {len(votes.worker_ids)} workers; "
               f"screening ({s['rule']}): kept {w['kept']} workers, "
               f"{100 * w['kept_vote_fraction']:.1f}% of votes, threshold TPR {s['threshold_tpr']:.4f}, "
               f"{s['iterations']} iteration(s){'' if s['converged'] else ' (did not converge)'}")
    weighting = result.summary["weighting"]
    if weighting.get("em_steps"):
        kept_weight, other_weight = weighting["mean_weight_kept"], weighting["mean_weight_not_kept"]
        click.echo(f"soft screening: {weighting['judged_workers']} judged workers' votes weighted by their posterior of "
                   f"being careful (mean {'-' if kept_weight is None else f'{kept_weight:.2f}'} kept, "
                   f"{'-' if other_weight is None else f'{other_weight:.2f}'} screened out; workers.csv vote_weight)")
    click.echo(f"scales in {result.summary['units']}")
    flagged = w["flagged"]
    notes = [f"{flagged[k]} {label}" for k, label in (("no_scaling_votes", "without scaling votes"),
                                                       ("gold_failed", "failed gold"),
                                                       ("screened_out", "screened out"),
                                                       ("targeted_bias", "with a targeted bias"
                                                        + ("" if keep_biased else " (excluded)")),
                                                       ("machine_agreement", "agreeing with the machine observer"))
             if flagged.get(k)]
    if notes:
        click.echo("workers flagged: " + ", ".join(notes) + " (why: workers.csv, column flags)")
    sock = result.summary.get("sockpuppets") or {}
    if sock.get("coordinated_items"):
        items = ", ".join(f"{i['direction']} {i['item_id']} (z {i['z']:.1f}"
                          + (f"; {i['identities']} sharing an {i['evidence']}" if i.get("evidence") else "") + ")"
                          for i in sock["coordinated_items"])
        click.echo(f"sock-puppet test: short-lived identities as a group {items}; {sock['set_aside_votes']} of their "
                   f"votes set aside (workers.csv flags set_aside:...)")
    click.echo(f"wrote {len(written)} files to {out}/: " + ", ".join(p.name for p in written))


@click.command("simulate-votes")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for votes.csv, truth.csv and workers_truth.csv.")
@click.option("--sets", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--items", type=click.IntRange(min=3), default=155, show_default=True, help="Items per set.")
@click.option("--degree", type=click.IntRange(min=2), default=6, show_default=True,
              help="Pairs per item (random regular design).")
@click.option("--votes-per-pair", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=300, show_default=True)
@click.option("--random-clickers", type=FiniteFloatRange(0, 1), default=0.25, show_default=True,
              help="Share of workers who click at random.")
@click.option("--left-clickers", type=FiniteFloatRange(0, 1), default=0.05, show_default=True,
              help="Share of workers who always click the left image.")
@click.option("--seed", type=int, default=0, show_default=True)
def simulate_votes_command(out, sets, items, degree, votes_per_pair, workers, random_clickers, left_clickers, seed):
    """Write a synthetic crowd study with known truth (honest Thurstone observers and spammers)."""
    from analysis.simulate import simulate_study, write_study
    try:
        study = simulate_study(sets, items, degree, votes_per_pair, workers, random_clickers, left_clickers,
                               seed=seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    paths = write_study(study, out)
    click.echo(f"simulated {len(study.votes)} votes from {workers} workers on {sets} sets x {items} items")
    click.echo("wrote " + ", ".join(str(p) for p in paths.values()))


@click.command("demo-analysis")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("demo_output/analysis-demo"),
              show_default=True, help="Folder for the simulated study and its analysis.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.pass_context
def demo_command(ctx, out, seed):
    """Simulate a StudyMB 2.0-sized crowd study, analyse it and report how well the truth was recovered."""
    import numpy as np

    from analysis.correlation import srocc
    from analysis.formats import read_table
    from analysis.simulate import simulate_study, write_study

    study = simulate_study(seed=seed)
    paths = write_study(study, out / "study")
    click.echo(f"1/2 simulated {len(study.votes)} votes (8 sets x 155 items, 25% random and 5% left clickers) "
               f"-> {paths['votes']}")
    ctx.invoke(analyze_command, votes_csv=paths["votes"], out=out / "analysis", seed=seed)
    rows = read_table(out / "analysis" / "scales.csv", ("set_id", "item_id", "scale"), numeric=("scale",))
    scores = []
    for set_id, truth in study.truth.items():
        estimated = {r["item_id"]: r["scale"] for r in rows if r["set_id"] == set_id}
        scores.append(srocc([estimated[i] for i in study.item_ids], truth))
    click.echo(f"2/2 mean SROCC against the true scales over {len(scores)} sets: {np.mean(scores):.4f}")
    click.echo(f"results: {(out / 'analysis').resolve()}")
    sys.stdout.flush()


#: What :mod:`server.cli` adds to the ``perceptlab`` group.
COMMANDS = (analyze_command, simulate_votes_command, demo_command)
