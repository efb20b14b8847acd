"""CSV cells a spreadsheet would run are written escaped and read back unchanged (stimuli/csv_safety.py), by
every writer and reader of the analysis (votes.csv, the output tables)."""
from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from analysis.formats import (SCALES_COLUMNS, build_votes, read_table, read_votes, table_csv, votes_csv,
                              write_votes)
from stimuli.csv_safety import FORMULA_STARTS, csv_text, escape_cell, unescape_cell

HOSTILE = ["=HYPERLINK(\"https://evil.example\",\"x\")", "-abc", "+abc", "@SUM(A1)", "\tx", "\rx", "-", "=",
           "'=x", "''", "'-1", "'", "'abc", "-2+3", "+1-1", "-1.5e", "--1", "=1", "@", "a=b", "", "plain"]
NUMBERS = ["-1.5", "+2", "-3e-05", "-0.25", "12", "-7", ".5", "-.5", "1E+10"]


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


@pytest.mark.parametrize("value", HOSTILE + NUMBERS)
def test_every_value_comes_back_exactly(value):
    assert unescape_cell(escape_cell(value)) == value


@pytest.mark.parametrize("value", HOSTILE)
def test_no_written_cell_starts_a_formula(value):
    written = escape_cell(value)
    assert not written.startswith(FORMULA_STARTS), written


@pytest.mark.parametrize("value", NUMBERS + ["abc", "'abc", "'", "a=b"])
def test_numbers_and_harmless_text_are_written_as_they_are(value):
    assert escape_cell(value) == value


def test_random_strings_round_trip():
    rng = np.random.default_rng(5)
    alphabet = list("=+-@'\t\r aZ0.,\"\n")
    for _ in range(2000):
        value = "".join(rng.choice(alphabet, size=rng.integers(0, 6)))
        assert unescape_cell(escape_cell(value)) == value
        assert not escape_cell(value).startswith(FORMULA_STARTS) or _is_number(value)


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return value.strip() == value and value.lower().lstrip("+-") not in ("inf", "nan", "infinity")


def test_csv_text_escapes_cells_and_csv_quoting_still_applies():
    text = csv_text(("worker_id", "n"), [["=cmd|' /C calc'!A0", -3], ["a,b", 2.5]])
    assert _cells(text) == [["worker_id", "n"], ["'=cmd|' /C calc'!A0", "-3"], ["a,b", "2.5"]]


def test_votes_csv_round_trip_with_hostile_ids(tmp_path):
    workers = ["-abc", "=HYPERLINK(\"x\")", "@w", "'=w", "plain"]
    votes = build_votes(worker_id=workers, set_id=["+s"] * 5, item_a=["-a"] * 5, item_b=["=b"] * 5,
                        winner=["-a", "=b", "-a", "=b", "-a"])
    path = tmp_path / "votes.csv"
    write_votes(path, votes)
    raw = path.read_text()
    assert "'-abc" in raw and "'=HYPERLINK" in raw and "''=w" in raw and "'+s" in raw
    assert not any(cell.startswith(FORMULA_STARTS) for row in _cells(raw) for cell in row)
    again = read_votes(path)
    assert list(again.worker_ids[again.worker]) == workers
    assert set(again.item_ids) == {"-a", "=b"} and list(again.set_ids) == ["+s"]
    assert votes_csv(again) == raw


def test_output_tables_keep_negative_numbers_as_numbers(tmp_path):
    record = {"set_id": "-scene", "item_id": "@m", "scale": -0.5, "ci_low": -1.25, "ci_high": 0.0, "rank": 1,
              "n_votes": 4, "rank_ci_low": 1, "rank_ci_high": 2, "unit": "z", "n_workers": 3, "ci_reason": ""}
    text = table_csv(SCALES_COLUMNS, [record])
    cells = dict(zip(*_cells(text)))
    assert cells["set_id"] == "'-scene" and cells["item_id"] == "'@m"
    assert cells["scale"] == "-0.5" and cells["ci_low"] == "-1.25"  # a spreadsheet reads numbers
    path = tmp_path / "scales.csv"
    path.write_text(text)
    back = read_table(path, SCALES_COLUMNS, numeric=("scale", "ci_low", "ci_high"))
    assert back[0]["set_id"] == "-scene" and back[0]["item_id"] == "@m" and back[0]["scale"] == -0.5
