import numpy as np
import pytest

from analysis.formats import (OVERALL_COLUMNS, SCALES_COLUMNS, VotesFormatError, build_votes, read_table,
                              read_votes, table_csv, votes_csv, write_votes)

HEADER = "worker_id,set_id,item_a,item_b,winner\n"


def write(tmp_path, text, name="votes.csv", mode="w"):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_reads_quoted_ids_and_optional_columns(tmp_path):
    path = write(tmp_path, 'worker_id,set_id,item_a,item_b,winner,position_a,is_gold,gold_winner,extra\n'
                 'w1,"Set, one","a ""x""",b,b,left,0,,ignored\n'
                 'w2,"Set, one",b,ref,ref,right,1,ref,\n')
    v = read_votes(path)
    assert list(v.set_ids) == ["Set, one"]
    assert sorted(v.item_ids) == ['a "x"', "b", "ref"]
    assert v.is_gold.tolist() == [False, True] and v.gold_correct.tolist() == [False, True]
    assert v.extra["position_a"].tolist() == ["left", "right"]
    assert v.line.tolist() == [2, 3]


def test_a_vote_with_a_gold_winner_is_a_check_and_still_a_vote(tmp_path):
    """A perceptlab study's gold trial of a design pair: ``is_gold`` 0 (a vote of the pair, scaled) with a
    ``gold_winner`` (its known answer, which gold screening scores); a gold_winner that is neither item is
    refused on such a row as on a gold row."""
    path = write(tmp_path, 'worker_id,set_id,item_a,item_b,winner,is_gold,gold_winner\n'
                 'w1,s,a,b,a,0,\nw1,s,b,c,c,0,b\nw2,s,b,c,b,0,b\nw2,s,x,y,x,1,x\n')
    v = read_votes(path)
    assert v.is_gold.tolist() == [False, False, False, True]
    assert v.is_check.tolist() == [False, True, True, True]
    assert v.gold_correct.tolist() == [False, False, True, True]
    write_votes(tmp_path / "again.csv", v)
    assert (tmp_path / "again.csv").read_text() == path.read_text()
    with pytest.raises(VotesFormatError, match="line 3: gold_winner 'z' is neither item_a 'b' nor item_b 'c'"):
        read_votes(write(tmp_path, 'worker_id,set_id,item_a,item_b,winner,is_gold,gold_winner\n'
                         'w1,s,a,b,a,0,\nw1,s,b,c,c,0,z\n', "bad.csv"))
    # Without a gold_winner column nothing but the gold rows is a check.
    plain = read_votes(write(tmp_path, 'worker_id,set_id,item_a,item_b,winner,is_gold\nw,s,a,b,a,0\nw,s,a,b,b,1\n',
                             "plain.csv"))
    assert plain.is_check.tolist() == [False, True]


def test_votes_round_trip(tmp_path):
    path = write(tmp_path, 'worker_id,set_id,item_a,item_b,winner,position_a,trial_id,is_gold,gold_winner\n'
                 'w1,s1,a,b,a,left,t1,0,\nw2,s1,b,c,c,right,t2,1,c\nw1,s2,a,"b,2","b,2",left,t3,0,\n')
    first = read_votes(path)
    write_votes(tmp_path / "again.csv", first)
    second = read_votes(tmp_path / "again.csv")
    assert votes_csv(first) == votes_csv(second)
    assert (tmp_path / "again.csv").read_text() == path.read_text()


def test_output_tables_round_trip(tmp_path):
    rows = [{"set_id": "s", "item_id": "m,1", "scale": 0.1 + 0.2, "ci_low": float("nan"), "ci_high": 1.0,
             "rank": 1, "n_votes": 3, "rank_ci_low": 1, "rank_ci_high": 2, "unit": "anchored", "n_workers": 2,
             "ci_reason": ""}]
    (tmp_path / "scales.csv").write_text(table_csv(SCALES_COLUMNS, rows))
    back = read_table(tmp_path / "scales.csv", SCALES_COLUMNS, numeric=("scale", "ci_low", "ci_high", "rank"))
    assert back[0]["item_id"] == "m,1" and back[0]["scale"] == 0.1 + 0.2  # exact float round trip
    assert np.isnan(back[0]["ci_low"]) and back[0]["rank"] == 1.0
    with pytest.raises(ValueError, match="missing column"):
        read_table(tmp_path / "scales.csv", OVERALL_COLUMNS)


@pytest.mark.parametrize("text, line, fragment", [
    ("worker_id,set_id,item_a,winner\nw,s,a,a\n", 1, "missing column item_b"),
    (HEADER + "w1,s,a,b,a\nw1,s,a,b,c\n", 3, "winner 'c' is neither item_a 'a' nor item_b 'b'"),
    (HEADER + "w1,s,a,b,a\nw1,t,x,x,x\n", 3, "set 't' has only one item ('x')"),
    (HEADER + "w1,s,a,b,a\nw1,s,a,a,a\nw,s,c,a,c\n", 3, "same item 'a'"),
    (HEADER + "w1,s,a,b,a\n,s,a,b,a\n", 3, "empty worker_id"),
    (HEADER + "w1,s,a,b\n", 2, "4 fields, the header has 5"),
    ("worker_id,set_id,item_a,item_b,winner,is_gold\nw,s,a,b,a,maybe\n", 2, "is_gold 'maybe' is not a boolean"),
    ("worker_id,set_id,item_a,item_b,winner,is_gold,gold_winner\nw,s,a,b,a,0,\nw,s,a,b,a,1,z\n", 3,
     "gold_winner 'z' is neither item_a 'a' nor item_b 'b'"),
])
def test_bad_rows_name_the_line(tmp_path, text, line, fragment):
    with pytest.raises(VotesFormatError) as err:
        read_votes(write(tmp_path, text))
    assert err.value.line == line
    assert fragment in str(err.value)
    assert f"line {line}" in str(err.value) and "\n" not in str(err.value)


def test_empty_and_header_only_files(tmp_path):
    with pytest.raises(VotesFormatError, match="file is empty"):
        read_votes(write(tmp_path, ""))
    with pytest.raises(VotesFormatError, match="no votes"):
        read_votes(write(tmp_path, HEADER))


def test_non_utf8_bytes_name_the_line(tmp_path):
    path = write(tmp_path, (HEADER + "w1,s,a,b,a\nw2,s,caf").encode() + b"\xe9,b,b\n")
    with pytest.raises(VotesFormatError) as err:
        read_votes(path)
    assert err.value.line == 3 and "not valid UTF-8 (byte 0xe9)" in str(err.value)


def test_same_item_id_in_two_sets_is_two_items():
    v = build_votes(["w", "w"], ["s1", "s2"], ["a", "a"], ["b", "b"], ["a", "b"])
    assert len(v.item_ids) == 4 and v.item_set.tolist() == [0, 0, 1, 1]


def _same_votes(one, two) -> None:
    for name in ("worker", "item_a", "item_b", "a_won", "is_gold", "gold_correct", "item_set", "line"):
        np.testing.assert_array_equal(getattr(one, name), getattr(two, name), err_msg=name)
    for name in ("worker_ids", "set_ids", "item_ids"):
        assert list(getattr(one, name)) == list(getattr(two, name)), name
    assert one.extra.keys() == two.extra.keys()
    for name in one.extra:
        assert one.extra[name].tolist() == two.extra[name].tolist(), name


@pytest.mark.parametrize("names", [("w", "s", "m"), ("wörker", "sét", "ítem")])  # bytes and text paths
def test_plain_files_read_column_wise_as_the_row_reader_reads_them(tmp_path, monkeypatch, names):
    """A file without quotes is split column by column (formats._plain_columns): the same votes,
    line numbers (blank lines skipped) included, as the row reader gives; a formula-escaped cell
    still goes through the row reader, which undoes the escape."""
    from analysis import formats
    w, s, m = names
    rng = np.random.default_rng(0)
    rows = []
    for k in range(300):
        a, b = rng.choice(12, 2, replace=False)
        rows.append(f"{w}{k % 7},{s}{k % 3},{m}{a},{m}{b},{m}{(a, b)[k % 2]},{('left', 'right')[k % 2]},0")
    rows.insert(100, "")
    rows.insert(200, "   ")
    header = "worker_id,set_id,item_a,item_b,winner,position_a,is_gold\n"
    path = write(tmp_path, header + "\n".join(rows) + "\n", "plain.csv")
    assert formats._plain_columns(path, formats.REQUIRED_VOTE_COLUMNS, formats.OPTIONAL_VOTE_COLUMNS) is not None
    plain = read_votes(path)
    assert plain.line[99:101].tolist() == [101, 103] and len(plain.line) == 300  # blank line 102 skipped
    monkeypatch.setattr(formats, "_plain_columns", lambda *args: None)
    _same_votes(plain, read_votes(path))
    monkeypatch.undo()
    rows[0] = rows[0].replace(f"{w}0,", "'=x,", 1)  # worker "=x", escaped for spreadsheets
    escaped = write(tmp_path, header + "\n".join(rows) + "\n", "escaped.csv")
    assert formats._plain_columns(escaped, formats.REQUIRED_VOTE_COLUMNS, formats.OPTIONAL_VOTE_COLUMNS) is None
    assert read_votes(escaped).worker_ids[read_votes(escaped).worker[0]] == "=x"


@pytest.mark.parametrize("ending, longest", [("\n", 8), ("", 30), ("\n\t \n", 12)])
def test_ascii_cells_of_any_width_read_as_the_row_reader_reads_them(tmp_path, monkeypatch, ending, longest):
    """The ASCII reader finds the cells from the bytes' comma and line-break positions and sorts IDs of up to
    eight bytes as integers (formats._ascii_fields, _sorted_codes): IDs of one to ``longest`` characters (up to
    eight: sorted as integers; more: through the dictionary), some with spaces inside, blank lines of spaces and
    tabs, a last line with or without its line break read as the row reader reads them; a row with a missing
    field still goes to the row reader."""
    from analysis import formats
    rng = np.random.default_rng(1)
    alphabet = np.array(list("abcXYZ019_- "))

    def ident(k):
        return "".join(rng.choice(alphabet, 1 + k % longest)).strip() or "x"
    workers = [ident(k) for k in range(9)]
    items = sorted({ident(k) for k in range(40)} | {"i", "ii", "i2", "abcdefgh", "abcdefghi"[:longest]})
    rows = []
    for k in range(400):
        a, b = rng.choice(len(items), 2, replace=False)
        rows.append(f"{workers[k % 9]},{('s', 'set two')[k % 2]},{items[a]},{items[b]},{items[(a, b)[k % 3 > 0]]}")
    rows.insert(17, " \t ")
    rows.insert(301, "")
    path = write(tmp_path, HEADER + "\n".join(rows) + ending)
    assert formats._plain_columns(path, formats.REQUIRED_VOTE_COLUMNS, formats.OPTIONAL_VOTE_COLUMNS) is not None
    plain = read_votes(path)
    assert len(plain.line) == 400 and plain.line[15:18].tolist() == [17, 18, 20]
    monkeypatch.setattr(formats, "_plain_columns", lambda *args: None)
    _same_votes(plain, read_votes(path))
    monkeypatch.undo()
    rows[50] = rows[50].rpartition(",")[0]  # four fields
    short = write(tmp_path, HEADER + "\n".join(rows) + ending, "short.csv")
    assert formats._plain_columns(short, formats.REQUIRED_VOTE_COLUMNS, formats.OPTIONAL_VOTE_COLUMNS) is None
    with pytest.raises(VotesFormatError) as err:
        read_votes(short)
    assert err.value.line == 52  # rows[50] (blank lines are rows too)


def test_plain_gold_rows_read_as_the_row_reader_reads_them(tmp_path, monkeypatch):
    """The column-wise reader keeps ASCII cells as bytes until their distinct values are known; gold answers
    and the kept extra columns come out as the row reader gives them (text, not bytes)."""
    from analysis import formats
    text = ("worker_id,set_id,item_a,item_b,winner,position_a,is_gold,gold_winner\n"
            "w1,s,a,b,a,left,0,\nw1,s,a,c,c,right,1,c\nw2,s,b,c,b,left,1,c\nw2,s,a,b,b,right,0,\n")
    path = write(tmp_path, text)
    plain = read_votes(path)
    assert plain.gold_correct.tolist() == [False, True, False, False]
    assert plain.extra["gold_winner"].tolist() == ["", "c", "c", ""] and list(plain.worker_ids) == ["w1", "w2"]
    monkeypatch.setattr(formats, "_plain_columns", lambda *args: None)
    _same_votes(plain, read_votes(path))


def test_reads_the_krasula_paired_comparisons_row_for_row():
    """The shipped real study (tests/analysis/data/README.md) reads as the csv module reads it: every row a vote,
    in file order, with its subject, scene, images and winner; no subject judged a pair twice (the original keys
    each vote by subject and pair)."""
    import csv
    from pathlib import Path

    path = Path(__file__).parent / "data" / "krasula_sharpening_pc_votes.csv"
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    v = read_votes(path)
    items = v.item_ids
    read = [(v.worker_ids[v.worker[k]], v.set_ids[v.vote_set[k]], items[v.item_a[k]], items[v.item_b[k]],
             items[v.winner[k]]) for k in range(len(v))]
    assert read == [(r["worker_id"], r["set_id"], r["item_a"], r["item_b"], r["winner"]) for r in rows]
    assert len({(r["worker_id"], r["set_id"], r["item_a"], r["item_b"]) for r in rows}) == len(rows)
    assert not v.is_gold.any()
