"""CSV cells that a spreadsheet cannot run: every CSV the project writes goes through :func:`csv_text`, every
CSV it reads through :func:`csv_rows` (or :func:`unescape_cell`), so a round trip is exact.

A spreadsheet (Excel, LibreOffice, Google Sheets) runs a cell that begins with ``=``, ``+``, ``-`` or ``@``
as a formula, and some also after a tab or a carriage return: a participant ID ``=HYPERLINK(...)`` in an
export would be a live link in the experimenter's sheet. The rule (OWASP's "CSV injection" advice):

* a cell whose text begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is written with a
  single quote in front (``'=HYPERLINK(...)``, ``'-abc``), which spreadsheets show as text;
* except a plain number (``-1.5``, ``+2``, ``-3e-05``: what a numeric column holds), which stays a number
  (a spreadsheet reads it as one, and no formula can hide in it);
* a cell that begins with a quote followed by one of those characters or by another quote gets one more
  quote, so that a value that really begins with a quote comes back unchanged too;
* readers remove one leading quote when a second character of that set (or a quote) follows it.

So ``-abc``, ``=HYPERLINK("x")``, ``'=x`` and ``-1.5`` all come back exactly as they were written, and a
hand-made file without escapes reads as before (a cell ``'abc`` stays ``'abc``).

It lives in :mod:`stimuli`, the package every other one may import (``stimuli`` imports neither
``analysis`` nor ``server``), because all three write CSV.
"""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_ESCAPED_NEXT = (*FORMULA_STARTS, QUOTE)  # what may follow the quote of an escaped cell


def escape_cell(text: str) -> str:
    """The cell as written: ``text`` with a quote in front when a spreadsheet would run it (see the module).

    Parameters
    ----------
    text : str
        The cell's value as text.

    Returns
    -------
    str
    """
    if text.startswith(FORMULA_STARTS):
        return text if _NUMBER.fullmatch(text) else QUOTE + text
    if text.startswith(QUOTE) and text[1:2] in _ESCAPED_NEXT:  # a tuple: "" is not in it
        return QUOTE + text
    return text


def unescape_cell(text: str) -> str:
    """The value of a cell as read: :func:`escape_cell` undone."""
    if text.startswith(QUOTE) and text[1:2] in _ESCAPED_NEXT:
        return text[1:]
    return text


def csv_text(columns: Iterable[str], rows: Iterable[Iterable[object]]) -> str:
    """CSV text (``\\n`` line ends) of a header and rows, every cell escaped (:func:`escape_cell`).

    Parameters
    ----------
    columns : iterable of str
        The header.
    rows : iterable of iterables
        The cells; each is written as ``str(cell)`` (format numbers before, as the file wants them).

    Returns
    -------
    str
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([escape_cell(str(c)) for c in columns])
    writer.writerows([escape_cell(str(cell)) for cell in row] for row in rows)
    return buffer.getvalue()


def dict_csv_text(columns: Iterable[str], records: Iterable[dict]) -> str:
    """:func:`csv_text` of dict records in the order of ``columns`` (a missing key is an empty cell)."""
    columns = tuple(columns)
    return csv_text(columns, ([("" if r.get(c) is None else r[c]) for c in columns] for r in records))


def csv_rows(reader: Iterable[list[str]]) -> Iterator[list[str]]:
    """The rows of a ``csv.reader`` with every cell unescaped (:func:`unescape_cell`)."""
    for row in reader:
        yield [unescape_cell(cell) for cell in row]


def dict_rows(reader: Iterable[dict]) -> Iterator[dict]:
    """The records of a ``csv.DictReader`` with every value unescaped (extra fields, a list, are left alone)."""
    for record in reader:
        yield {k: unescape_cell(v) if isinstance(v, str) else v for k, v in record.items()}
