"""The file formats of ARCHITECTURE.md: votes.csv in, scales/overall/workers CSV and summary JSON out.

:func:`read_votes` validates the whole file before anything is computed and
raises :class:`VotesFormatError` naming the first offending line. Writers go
through :func:`atomic_write_text`, so a file is either complete or absent.
"""
from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stimuli.csv_safety import QUOTE, csv_text, dict_rows, unescape_cell
from stimuli.io import write_bytes_atomic

REQUIRED_VOTE_COLUMNS = ("worker_id", "set_id", "item_a", "item_b", "winner")
OPTIONAL_VOTE_COLUMNS = ("position_a", "trial_id", "is_gold", "gold_winner", "created_at")
SCALES_COLUMNS = ("set_id", "item_id", "scale", "ci_low", "ci_high", "rank", "n_votes",
                  "rank_ci_low", "rank_ci_high", "n_workers", "ci_reason", "unit")
OVERALL_COLUMNS = ("item_id", "mean_scale", "rank", "n_sets")
WORKERS_COLUMNS = ("worker_id", "n_votes", "tpr", "kept")
_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f", ""}


class VotesFormatError(ValueError):
    """A votes file that cannot be analysed; ``str()`` is one line naming the file and line."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path, self.line = path, line
        where = f"{path}, line {line}" if line is not None else path
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Votes:
    """Paired-comparison votes with their labels, as integer arrays.

    Items are indexed globally; ``item_set[g]`` is the set of item ``g`` and
    the items of each set are contiguous, in the order of ``set_ids``.
    """

    worker: np.ndarray        # (V,) index into worker_ids
    item_a: np.ndarray        # (V,) global item index
    item_b: np.ndarray        # (V,)
    a_won: np.ndarray         # (V,) bool
    is_gold: np.ndarray       # (V,) bool: a check only, left out of the scales
    gold_correct: np.ndarray  # (V,) bool, True where a check (:attr:`is_check`) was answered as expected
    worker_ids: np.ndarray    # (W,) str
    set_ids: np.ndarray       # (S,) str
    item_set: np.ndarray      # (I,) set index of each global item
    item_ids: np.ndarray      # (I,) item ID (unique within its set)
    line: np.ndarray          # (V,) line of the vote in its file (0 when generated)
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # optional columns kept verbatim

    def __len__(self) -> int:
        return len(self.worker)

    @property
    def winner(self) -> np.ndarray:
        return np.where(self.a_won, self.item_a, self.item_b)

    @property
    def loser(self) -> np.ndarray:
        return np.where(self.a_won, self.item_b, self.item_a)

    @property
    def vote_set(self) -> np.ndarray:
        return self.item_set[self.item_a]

    @property
    def has_gold_answers(self) -> bool:
        return "gold_winner" in self.extra

    @property
    def is_check(self) -> np.ndarray:
        """(V,) bool: the rows with a known answer, which gold screening scores: the gold rows, and the real votes
        with a ``gold_winner`` (a design pair shown as a gold trial: a vote of that pair, which the scales use
        like any other, and a check of its worker)."""
        if "gold_winner" not in self.extra:
            return self.is_gold
        return self.is_gold | (self.extra["gold_winner"] != "")

    def set_slice(self, s: int) -> slice:
        """Global item indices of set ``s``."""
        members = np.flatnonzero(self.item_set == s)
        return slice(int(members[0]), int(members[-1]) + 1)

    def subset(self, mask: np.ndarray) -> "Votes":
        """The votes where ``mask`` is true, with the same label tables."""
        pick = lambda a: a[mask]  # noqa: E731
        return Votes(pick(self.worker), pick(self.item_a), pick(self.item_b), pick(self.a_won),
                     pick(self.is_gold), pick(self.gold_correct), self.worker_ids, self.set_ids,
                     self.item_set, self.item_ids, pick(self.line),
                     {k: pick(v) for k, v in self.extra.items()})


# --------------------------------------------------------------------------- building

def _text_column(values) -> np.ndarray:
    """A column as a numpy string array: ASCII bytes (``S``, as :func:`_plain_columns` splits them) stay bytes,
    anything else becomes ``str``."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "SU":
        return values
    return np.asarray(values, dtype=str)


def _text(value) -> str:
    """One cell of a :func:`_text_column` as ``str`` (for labels and messages)."""
    return value.decode("ascii") if isinstance(value, bytes) else str(value)


def _sorted_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of a string array, without sorting the strings themselves.

    Sorting a million strings took a second per column. ASCII cells of at most 8 bytes (``S`` arrays, as
    :func:`_plain_columns` splits them) are sorted as the big-endian integers of their zero-padded bytes,
    whose order is the strings' (the 2.4 M item cells of benchmarks/analysis_scale.py's large study: 0.18 CPU s
    instead of the dictionary's 0.48 s); others through a dictionary of the distinct values, sorted afterwards.
    The distinct values come back as ``str`` (ASCII bytes sort as their text).
    """
    if values.dtype.kind == "S" and 0 < values.dtype.itemsize <= 8 and len(values):
        width = values.dtype.itemsize
        padded = np.zeros((len(values), 8), dtype=np.uint8)
        padded[:, :width] = np.ascontiguousarray(values).view(np.uint8).reshape(-1, width)
        keys = padded.view(">u8").ravel()
        order = np.argsort(keys)
        ordered = keys[order]
        first = np.empty(len(keys), dtype=bool)
        first[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        inverse = np.empty(len(keys), dtype=np.int64)
        inverse[order] = np.cumsum(first) - 1
        uniques = ordered[first].astype(">u8").view("S8")  # trailing zero bytes are not part of an S value
        return np.array([u.decode("ascii") for u in uniques.tolist()], dtype=str), inverse
    values_list = values.tolist()
    uniques = sorted(dict.fromkeys(values_list))
    rank = {value: k for k, value in enumerate(uniques)}
    inverse = np.fromiter(map(rank.__getitem__, values_list), np.int64, len(values_list))
    return np.array([_text(u) for u in uniques], dtype=str), inverse


def build_votes(worker_id, set_id, item_a, item_b, winner, *, is_gold=None, gold_winner=None,
                extra: dict | None = None, line=None, path: str = "votes") -> Votes:
    """Index string columns into a :class:`Votes`, validating every row.

    Raises :class:`VotesFormatError` for a winner that is neither item, a
    pair of identical items, empty IDs, or a set with fewer than two items.
    """
    # ASCII columns stay bytes until their distinct values are known: converting a million-vote file's
    # columns to numpy's 4-byte characters took a quarter of reading it.
    cols = {name: _text_column(values) for name, values in
            dict(worker_id=worker_id, set_id=set_id, item_a=item_a, item_b=item_b, winner=winner).items()}
    n = len(cols["worker_id"])
    line = np.arange(2, n + 2) if line is None else np.asarray(line)
    if n == 0:
        raise VotesFormatError(path, None, "no votes (the file has a header but no data rows)")
    for name, values in cols.items():
        empty = np.flatnonzero(np.char.str_len(np.char.strip(values)) == 0)
        if empty.size:
            raise VotesFormatError(path, int(line[empty[0]]), f"empty {name}")
    a_won = cols["winner"] == cols["item_a"]
    bad = np.flatnonzero(~a_won & (cols["winner"] != cols["item_b"]))
    if bad.size:
        k = bad[0]
        raise VotesFormatError(path, int(line[k]), f"winner {_text(cols['winner'][k])!r} is neither item_a "
                               f"{_text(cols['item_a'][k])!r} nor item_b {_text(cols['item_b'][k])!r}")
    set_ids, set_index = _sorted_codes(cols["set_id"])
    # Items are keyed by (set, item ID): the same ID in two sets is two items. Sorted by set, then ID.
    names, name_index = _sorted_codes(np.concatenate([cols["item_a"], cols["item_b"]]))
    item_keys, item_index = np.unique(np.tile(set_index, 2) * len(names) + name_index, return_inverse=True)
    item_set, item_ids = item_keys // len(names), names[item_keys % len(names)]
    counts = np.bincount(item_set, minlength=len(set_ids))
    lonely = np.flatnonzero(counts < 2)
    if lonely.size:
        s = lonely[0]
        k = np.flatnonzero(set_index == s)[0]
        raise VotesFormatError(path, int(line[k]), f"set {str(set_ids[s])!r} has only one item "
                               f"({str(item_ids[item_set == s][0])!r}); a set needs at least two")
    same = np.flatnonzero(cols["item_a"] == cols["item_b"])
    if same.size:
        k = same[0]
        raise VotesFormatError(path, int(line[k]), f"item_a and item_b are the same item {_text(cols['item_a'][k])!r}")
    workers, worker_index = _sorted_codes(cols["worker_id"])
    gold = np.zeros(n, dtype=bool) if is_gold is None else _parse_bool(is_gold, line, path)
    extra = {k: np.asarray(v, dtype=str) for k, v in (extra or {}).items()}
    gold_correct = np.zeros(n, dtype=bool)
    if gold_winner is not None:
        gw = _text_column(gold_winner)
        extra["gold_winner"] = gw.astype(str)
        # Every gold row is a check; so is a real vote with a gold_winner (still scaled: Votes.is_check).
        checks = gold | (extra["gold_winner"] != "")
        rows = np.flatnonzero(checks)
        wrong = rows[(gw[rows] != cols["item_a"][rows]) & (gw[rows] != cols["item_b"][rows])]
        if wrong.size:
            k = wrong[0]
            raise VotesFormatError(path, int(line[k]), f"gold_winner {_text(gw[k])!r} is neither item_a "
                                   f"{_text(cols['item_a'][k])!r} nor item_b {_text(cols['item_b'][k])!r}")
        gold_correct = checks & (gw == cols["winner"])
    return Votes(worker=worker_index.astype(np.int64), item_a=item_index[:n].astype(np.int64),
                 item_b=item_index[n:].astype(np.int64), a_won=a_won, is_gold=gold,
                 gold_correct=gold_correct, worker_ids=workers.astype(object), set_ids=set_ids.astype(object),
                 item_set=item_set.astype(np.int64), item_ids=item_ids.astype(object), line=line, extra=extra)


def _parse_bool(values, line, path) -> np.ndarray:
    text = np.char.lower(np.char.strip(np.asarray(values, dtype=str)))
    true, false = np.isin(text, list(_TRUE)), np.isin(text, list(_FALSE))
    bad = np.flatnonzero(~(true | false))
    if bad.size:
        raise VotesFormatError(path, int(line[bad[0]]), f"is_gold {_text(values[bad[0]])!r} is not a boolean "
                               "(use 1/0 or true/false)")
    return true


# --------------------------------------------------------------------------- reading

def read_csv_table(path: str | os.PathLike, required: tuple[str, ...], optional: tuple[str, ...], error,
                   *, strip: bool = False) -> tuple[str, list[str], list[list[str]], list[int]]:
    """Read a CSV input with a header: ``(name, columns kept, rows of those columns, line numbers)``.

    Columns are ``required`` (all must be in the header) then the ``optional`` ones present; other
    columns are ignored and blank lines skipped. Every problem (unreadable file, not UTF-8, a NUL byte,
    empty, a missing column or one named twice, a row with fewer or more fields than the header, a
    malformed row) raises ``error(name, line, message)``. ``strip``
    trims spaces around each kept field.
    """
    name = os.fspath(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise error(name, None, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise error(name, line, f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}); save the file as UTF-8") from None
    if not text.strip():
        raise error(name, None, "file is empty (expected a header: " + ",".join(required) + ")")
    if "\x00" in text:  # no ID may hold one: databases refuse it, and it ends a C string in other tools
        raise error(name, text.count("\n", 0, text.index("\x00")) + 1, "a NUL byte (\\x00) in the text")
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [unescape_cell(h.strip()) for h in next(reader)]
    twice = sorted({h for h in header if h and header.count(h) > 1})
    if twice:  # which of the two would be read is a guess
        raise error(name, 1, f"column{'s' if len(twice) > 1 else ''} {', '.join(twice)} appear"
                    f"{'' if len(twice) > 1 else 's'} twice in the header")
    missing = [c for c in required if c not in header]
    if missing:
        raise error(name, 1, f"missing column{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(missing)} (the header has: {', '.join(header)})")
    wanted = [c for c in required + optional if c in header]
    index = [header.index(c) for c in wanted]
    rows, lines = [], []
    # Cells a spreadsheet would run were written with a quote in front (stimuli/csv_safety.py). A file
    # without that quote has no such cell, and its cells are taken as they are: undoing the escape
    # cell by cell was most of the time of reading a million votes.
    unescape = unescape_cell if QUOTE in text else None
    n_fields = len(header)
    try:
        for row in reader:
            if len(row) != n_fields or (len(row) == 1 and not row[0].strip()):
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue  # blank line
                # a short row, or one whose cells shifted (an unquoted comma)
                raise error(name, reader.line_num, f"{len(row)} fields, the header has {len(header)}")
            cells = [row[i].strip() for i in index] if strip else [row[i] for i in index]
            rows.append([unescape(c) for c in cells] if unescape is not None else cells)
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise error(name, reader.line_num, f"malformed CSV: {exc}") from None
    return name, wanted, rows, lines


def _split_first(rows: np.ndarray, sep) -> tuple[np.ndarray, np.ndarray]:
    """Each string's text before its first ``sep``, and after it (numpy 2's string ufuncs where present)."""
    if hasattr(np, "strings"):
        first, _, rest = np.strings.partition(rows, sep)
        return first, rest
    parts = np.char.partition(rows, sep)
    return parts[:, 0], parts[:, 2]


_SEPARATOR = np.zeros(256, dtype=bool)
_SEPARATOR[[ord(","), ord("\n")]] = True
# The little-endian word of a cell's first b bytes: its eight bytes from the text AND _FIRST_BYTES[b].
_FIRST_BYTES = np.array([(1 << 8 * b) - 1 for b in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def _ascii_fields(data: np.ndarray, n_fields: int) -> tuple[list[np.ndarray], np.ndarray] | None:
    """The ``n_fields`` comma-separated fields (``S`` arrays) of each non-blank line of the ASCII bytes ``data`` (a
    uint8 array of a file's body) and their line numbers (the body's first line is 2), or None when a non-blank
    line has another number of fields.

    The same cells as splitting the lines and partitioning them field by field (:func:`_split_first`), found
    from the positions of the commas and line breaks, each field gathered eight bytes at a time
    (:func:`_gather_cells`), with no copy of the text: the 1.2 M votes of benchmarks/analysis_scale.py's large
    study in 0.5 CPU s instead of the line split and partitions' 0.72 s.
    """
    separators = np.flatnonzero(_SEPARATOR[data])                     # commas and line breaks, in order
    is_break = data[separators] == 10
    line_end = np.append(np.flatnonzero(is_break), len(separators))   # each line's break among the separators
    commas = np.diff(line_end, prepend=-1) - 1
    starts = np.concatenate([[0], separators[line_end[:-1]] + 1])      # the lines of body.split(b"\n")
    ends = np.append(separators[line_end[:-1]], len(data))
    odd = np.flatnonzero(commas != n_fields - 1)
    if any(data[starts[k]:ends[k]].tobytes().strip() for k in odd.tolist()):
        return None  # a row of another length: the row reader says which
    good = np.setdiff1d(np.arange(len(starts)), odd, assume_unique=True)
    # Blank lines hold no comma, so every comma is one of the good lines', n_fields - 1 each in order.
    cuts = separators[~is_break].reshape(len(good), n_fields - 1)
    bounds = [starts[good], *(cuts[:, k] for k in range(n_fields - 1)), ends[good]]
    if len(data) < 8:
        data = np.concatenate([data, np.zeros(8, dtype=np.uint8)])
    return [_gather_cells(data, bounds[k] + (k > 0), bounds[k + 1]) for k in range(n_fields)], good + 2


def _gather_cells(data: np.ndarray, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """The bytes ``data[start:stop]`` of every cell as one ``S`` array (as wide as the widest cell).

    Each eight bytes of a cell are one little-endian word of the text from its start (a read-only sliding
    view, no copy), the bytes past the cell's end zeroed by a mask (an ``S`` value ends at its first trailing
    zero byte); a word that would run past the text's end is read from eight bytes before that end and
    shifted down."""
    width = stop - start
    widest = max(int(width.max(initial=0)), 1)
    windows = np.lib.stride_tricks.sliding_window_view(data, 8)
    last = len(data) - 8
    words = []
    for k in range(-(-widest // 8)):
        at = start + 8 * k
        clipped = np.minimum(at, last)
        word = windows[clipped].view("<u8").ravel()
        over = np.flatnonzero(at > last)   # the cells in the text's last few bytes
        if len(over):
            word[over] >>= (8 * (at[over] - last)).astype(np.uint64)
        word &= _FIRST_BYTES[np.clip(width - 8 * k, 0, 8)]
        words.append(word)
    cells = np.column_stack(words).view(np.uint8)[:, :widest]
    return np.ascontiguousarray(cells).view(f"S{widest}").ravel()


def _plain_columns(path: str | os.PathLike, required: tuple[str, ...], optional: tuple[str, ...]):
    """``(wanted, columns, lines)`` of a CSV file without quotes, or None where :func:`read_csv_table` must read it.

    A file whose body has no quote characters (neither CSV's ``"`` nor the formula escape's ``'``)
    and no carriage returns is a comma-separated table line by line: its columns are split out by
    whole-array operations instead of row by row (an ASCII file from its bytes' comma positions,
    :func:`_ascii_fields`; others by numpy's string partition), which reads a million votes in under a
    second instead of ten. Anything else (quotes, a missing column, rows of another length, no rows,
    an unreadable file) returns None, and the row reader reads the file and reports its problems.
    """
    try:
        raw = Path(path).read_bytes()
        # ASCII (no byte order mark either) is split as bytes: a quarter of the memory of numpy's 4-byte
        # characters, and no decoded copy of the text.
        ascii_text = raw.isascii()
        text = raw if ascii_text else raw.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None
    if any(c in text for c in ((b'"', QUOTE.encode(), b"\r", b"\x00") if ascii_text else ('"', QUOTE, "\r", "\x00"))):
        return None  # the row reader reads (or refuses) these
    head = (raw.partition(b"\n")[0].decode("ascii") if ascii_text else text.partition("\n")[0])
    header = [h.strip() for h in head.split(",")]
    wanted = [c for c in required + optional if c in header]
    if len(wanted) < len(required) or len(set(header)) < len(header):
        return None
    if ascii_text:
        split = _ascii_fields(np.frombuffer(raw, dtype=np.uint8)[len(head) + 1:], len(header))
        if split is None or not len(split[1]):
            return None
        fields, lines = split
        return wanted, {c: fields[header.index(c)] for c in wanted}, lines
    rows = np.array(text.partition("\n")[2].split("\n"))
    lines = np.arange(2, len(rows) + 2)
    odd = np.flatnonzero(np.char.count(rows, ",") != len(header) - 1)
    if (np.char.str_len(np.char.strip(rows[odd])) > 0).any():
        return None  # a row of another length: the row reader says which
    if len(odd):  # blank lines
        rows, lines = np.delete(rows, odd), np.delete(lines, odd)
    if not len(rows):
        return None
    fields = []
    for _ in range(len(header) - 1):
        first, rows = _split_first(rows, ",")
        fields.append(first)
    fields.append(rows)
    return wanted, {c: fields[header.index(c)] for c in wanted}, lines


def read_votes(path: str | os.PathLike) -> Votes:
    """Read and validate a votes.csv (ARCHITECTURE.md format)."""
    plain = _plain_columns(path, REQUIRED_VOTE_COLUMNS, OPTIONAL_VOTE_COLUMNS)
    if plain is not None:
        wanted, columns, lines = plain
        name = os.fspath(path)
    else:
        name, wanted, rows, lines = read_csv_table(path, REQUIRED_VOTE_COLUMNS, OPTIONAL_VOTE_COLUMNS,
                                                   VotesFormatError)
        columns = dict(zip(wanted, zip(*rows))) if rows else {c: () for c in wanted}
    extra = {c: columns[c] for c in ("position_a", "trial_id", "created_at") if c in columns}
    return build_votes(columns["worker_id"], columns["set_id"], columns["item_a"], columns["item_b"],
                       columns["winner"], is_gold=columns.get("is_gold"), gold_winner=columns.get("gold_winner"),
                       extra=extra, line=np.asarray(lines, dtype=np.int64), path=name)


# --------------------------------------------------------------------------- writing

def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` through a temporary file and an atomic rename."""
    write_bytes_atomic(path, text.encode("utf-8"))


def _csv_text(columns: tuple[str, ...], rows) -> str:
    """CSV text whose cells no spreadsheet runs as a formula (:mod:`stimuli.csv_safety`; readers undo it)."""
    return csv_text(columns, rows)


def _fmt(x) -> str:
    """Floats with 17 significant digits round-trip exactly; NaN as an empty field."""
    if isinstance(x, (float, np.floating)):
        return "" if not np.isfinite(x) else repr(float(x))
    return str(x)


def votes_csv(votes: Votes) -> str:
    """The votes as votes.csv text (required columns, then the optional ones present)."""
    optional = [c for c in ("position_a", "trial_id", "created_at") if c in votes.extra]
    columns = REQUIRED_VOTE_COLUMNS + tuple(optional) + (("is_gold",) if votes.is_gold.any() else ()) \
        + (("gold_winner",) if votes.has_gold_answers else ())
    set_of = votes.set_ids[votes.vote_set]
    parts = [votes.worker_ids[votes.worker], set_of, votes.item_ids[votes.item_a],
             votes.item_ids[votes.item_b], votes.item_ids[votes.winner]]
    parts += [votes.extra[c] for c in optional]
    if votes.is_gold.any():
        parts.append(np.where(votes.is_gold, "1", "0"))
    if votes.has_gold_answers:
        parts.append(votes.extra["gold_winner"])
    return _csv_text(columns, zip(*parts))


def write_votes(path, votes: Votes) -> None:
    atomic_write_text(path, votes_csv(votes))


def table_csv(columns: tuple[str, ...], records: list[dict]) -> str:
    """CSV text of dict records in a fixed column order."""
    return _csv_text(columns, ([_fmt(r[c]) for c in columns] for r in records))


def read_table(path, columns: tuple[str, ...], numeric: tuple[str, ...] = ()) -> list[dict]:
    """Read one of the output CSVs back (for round trips and downstream tools)."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
        return [{c: (float(r[c]) if r[c] != "" else float("nan")) if c in numeric else r[c] for c in columns}
                for r in dict_rows(reader)]


def json_text(obj) -> str:
    def default(o):
        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o)
        if isinstance(o, np.ndarray):
            return o.tolist()
        raise TypeError(f"not JSON serialisable: {type(o).__name__}")
    return json.dumps(obj, indent=2, default=default, allow_nan=False) + "\n"
