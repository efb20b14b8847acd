"""``perceptlab replay-active``: how active pair sampling would have done on a recorded study."""
from __future__ import annotations

import json
from pathlib import Path

import click

from .base import FiniteFloatRange, UserError, cli


def _budgets(value: str) -> list[float]:
    try:
        budgets = [float(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of numbers (e.g. 0.5,1,2,3,5)") from None
    if not budgets or any(not b > 0 or b == float("inf") for b in budgets):
        raise click.BadParameter(f"budgets must be positive numbers of standard trials, got {value!r}")
    return budgets


@cli.command("replay-active")
@click.argument("votes_csv", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--budgets", default="0.5,1,2,3,5", show_default=True,
              help="Budgets in standard trials (one comparison of every pair of a set), comma-separated.")
@click.option("--repeats", type=click.IntRange(min=1), default=20, show_default=True,
              help="Replayed studies per set and strategy.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help="Comparisons per batch (default: items in the set - 1).")
@click.option("--min-coverage", type=FiniteFloatRange(0, 1, min_open=True), default=0.5, show_default=True,
              help="Least share of a set's pairs that must have votes.")
@click.option("--no-pair-limit", is_flag=True,
              help="Let active sampling choose a pair more often than it was recorded (redrawing the same votes).")
@click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the figures as JSON to this file.")
def replay_active_command(votes_csv: Path, budgets: str, repeats: int, seed: int, batch_size: int | None,
                          min_coverage: float, no_pair_limit: bool, json_out: Path | None) -> None:
    """Replay the densely compared sets of VOTES_CSV with random and with active pair sampling.

    The scale of all of a set's votes is the reference. Each replayed study picks pairs in batches
    (random: uniformly among the set's observed pairs; active: analysis.active), draws each chosen
    comparison's outcome from the recorded votes of that pair (with replacement), scales the sampled
    votes (Thurstone MLE, z units) and records SROCC and RMSE against the reference at every budget.
    Active sampling chooses a pair at most as often as it was recorded while other pairs remain.
    Prints the mean over sets and repeats.
    """
    from analysis.active_replay import ReplayInputError, replay_votes
    from analysis.formats import VotesFormatError, read_votes
    from analysis.thurstone import DisconnectedDesignError

    budget_list = _budgets(budgets)
    try:
        votes = read_votes(votes_csv)
        result = replay_votes(votes, budget_list, repeats, seed, batch_size=batch_size, min_coverage=min_coverage,
                              pair_limit=not no_pair_limit, progress=None)
    except (VotesFormatError, DisconnectedDesignError) as exc:
        raise UserError(str(exc)) from None
    except ReplayInputError as exc:
        raise UserError(f"{votes_csv}: {exc}") from None
    click.echo(f"{len(result.sets)} set(s), {repeats} repeat(s) per strategy, seed {seed}; "
               "mean over sets and repeats (SROCC and RMSE in z units against the scale of all votes)")
    click.echo(_table(result))
    click.echo(f"active selection: {result.selection_ms_per_batch:.1f} ms per batch ({result.batches} batches)")
    resampled = result.resampled_sets()
    if resampled:
        click.echo(f"note: {len(resampled)} set(s) ({', '.join(resampled[:5])}{', ...' if len(resampled) > 5 else ''}) "
                   f"have fewer than {2 * result.budgets[-1]:g} votes per pair: at {result.budgets[-1]:g} standard "
                   "trials the replay mostly redraws the reference's own votes, which favours random sampling",
                   err=True)
    if json_out is not None:
        try:
            json_out.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise UserError(f"{json_out}: {exc.strerror or exc}") from None
        click.echo(f"wrote {json_out}")


def _table(result) -> str:
    header = ["standard trials"] + [f"{s} SROCC" for s in result.srocc] + [f"{s} RMSE" for s in result.rmse]
    rows = [[f"{b:g}"] + [f"{result.srocc[s][k]:.4f}" for s in result.srocc]
            + [f"{result.rmse[s][k]:.4f}" for s in result.rmse] for k, b in enumerate(result.budgets)]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).rjust(w) for x, w in zip(r, widths)) for r in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
