"""The CSV files the server writes (exports, the dashboard's downloads, ``codes check --out``) carry no cell a
spreadsheet would run, and the project's readers get every value back unchanged (stimuli/csv_safety.py)."""
from __future__ import annotations

import csv
import io

from click.testing import CliRunner

from analysis.formats import read_votes
from server import codes
from server.cli import cli
from stimuli.csv_safety import FORMULA_STARTS

from .conftest import SMALL_STUDY, WorkerClient, create_test_study

# Participant IDs a plain link admits (letters, digits and _.:@-); "-7" is a number and stays one.
HOSTILE_IDS = ("-abc", "@sum", "-7")


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def _no_formula(text: str) -> None:
    bad = [cell for row in _cells(text) for cell in row if cell.startswith(FORMULA_STARTS)
           and not _number(cell)]
    assert not bad, bad


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_exports_escape_hostile_participant_ids_and_analysis_reads_them_back(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="csv", **SMALL_STUDY)
    for participant in HOSTILE_IDS:
        worker = WorkerClient(app.test_client(), slug, worker_id=participant, platform="link")
        worker.start()
        worker.answer_page(worker.correct_side)  # the quiz: votes with the raw ID
    out = tmp_path / "export"
    result = CliRunner().invoke(cli, ["export", slug, "--out", str(out), "--raw-worker-ids",
                                      "--database-url", app.config["DATABASE_URL"]])
    assert result.exit_code == 0, result.output
    for name in ("votes.csv", "workers_meta.csv"):
        text = (out / name).read_text()
        _no_formula(text)
        assert "'-abc" in text and "'@sum" in text and "'-7" not in text, name
    meta = list(csv.DictReader(io.StringIO((out / "workers_meta.csv").read_text())))
    assert any(row["worker_id"] == "'-abc" for row in meta)
    votes = read_votes(out / "votes.csv")
    assert set(votes.worker_ids) == set(HOSTILE_IDS)


def test_codes_check_out_escapes_a_submitted_formula_and_reads_it_back(app, study, tmp_path):
    hyperlink = '=HYPERLINK("https://evil.example","click")'
    submitted = tmp_path / "submitted.csv"
    submitted.write_text('Participant id,Completion code\n-abc,"=HYPERLINK(""https://evil.example"",""click"")"\n'
                         "@who,+CODE\n")
    out = tmp_path / "checked.csv"
    result = CliRunner().invoke(cli, ["codes", "check", study, str(submitted), "--out", str(out),
                                      "--database-url", app.config["DATABASE_URL"]])
    assert result.exit_code == 1, result.output
    text = out.read_text()
    _no_formula(text)
    assert "'=HYPERLINK" in text and "'-abc" in text and "'+CODE" in text
    rows = codes.read_submitted(out.read_bytes())  # the checked file, read as a submitted one: exact
    assert [(r.participant, r.code) for r in rows] == [("-abc", hyperlink), ("@who", "+CODE")]
