"""``perceptlab codes check SLUG CODES.csv``: the completion codes a recruiter received, checked against the
database (:mod:`server.codes`)."""
from __future__ import annotations

from pathlib import Path

import click

from .base import UserError, cli
from .cmd_study import DATABASE_OPTION, _find


@cli.group("codes")
def codes_group() -> None:
    """Completion codes: check the ones participants submitted on their platform."""


@codes_group.command("check")
@click.argument("study")
@click.argument("codes_csv", metavar="CODES.csv", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the checked rows as CSV (line, participant, code, recruiter_status, result, detail).")
@DATABASE_OPTION
def check(study: str, codes_csv: Path, out: Path | None, database_url: str | None) -> None:
    """Check the submitted codes in CODES.csv against STUDY (its slug).

    CODES.csv is the recruiter's list of submissions: Prolific's export ("Participant id",
    "Completion code", "Status"), MTurk's batch results ("WorkerId", "Answer.completionCode") or any CSV
    with a participant and a code column. Each row is reported as valid, wrong code, unknown participant,
    not completed, duplicate or malformed, then a summary. Reads the database only.

    Exit status: 0 when every row is valid, 1 when some are not, 2 when the file cannot be read.
    """
    from analysis.formats import atomic_write_text
    from server.cli.base import cli_session
    from server.codes import MAX_CSV_BYTES, CodeFileError, check_codes, check_csv_text, read_submitted

    try:
        if codes_csv.stat().st_size > MAX_CSV_BYTES:  # refused before reading a huge file into memory
            raise CodeFileError(f"the file has {codes_csv.stat().st_size:,} bytes; at most {MAX_CSV_BYTES:,} are read")
        submitted = read_submitted(codes_csv.read_bytes())
    except OSError as exc:
        raise UserError(f"{codes_csv}: {exc.strerror or exc}") from None
    except CodeFileError as exc:
        raise UserError(f"{codes_csv}: {exc}") from None
    with cli_session(database_url) as session:
        result = check_codes(session, _find(session, study), submitted)
    _print_table(result.rows)
    click.echo(result.summary())
    if out is not None:
        atomic_write_text(out, check_csv_text(result))
        click.echo(f"wrote {out}")
    click.get_current_context().exit(0 if result.all_valid else 1)


def _print_table(rows) -> None:
    """The checked rows as aligned columns (long values are cut: --out has them whole)."""
    def cut(text: str, width: int) -> str:
        text = "".join(c if c.isprintable() else "?" for c in text)  # no terminal control sequences from the file
        return text if len(text) <= width else text[:width - 1] + "…"

    header = ("line", "participant", "code", "result", "detail")
    table = [header] + [(str(r.line), cut(r.participant, 28), cut(r.code, 16), r.result, cut(r.detail, 60))
                        for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        click.echo("  ".join(value.ljust(width) for value, width in zip(row, widths)).rstrip())
