"""CSV cells made safe for the spreadsheet that opens them: formulas neutralised, text one line."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from numbers import Number
from operator import itemgetter
from typing import Any

from pytest_accuracy.text import escape_line

__all__ = ["RowFormat", "TextFields", "csv_cell", "csv_line", "csv_row"]

_PLAIN = frozenset({float, int, bool})
# What Excel, LibreOffice and Google Sheets start a formula (or DDE) with.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# A plain number written as text ("-0.5", "1e-3", "-inf") is no formula: it stays a number.
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?(inf|nan)", re.IGNORECASE)
# What makes csv.writer (excel dialect, QUOTE_MINIMAL) quote a field: the delimiter, the
# quote character and the line terminator's characters.
_QUOTE_WHEN = re.compile('[,"\r\n]')
_TEXTS_KEPT = 8192


def csv_cell(value: Any) -> Any:
    """``value`` for a CSV cell: None empty, numbers as they are, text escaped and neutralised.

    Node names and reasons come from other machines: ``=HYPERLINK(...)`` or ``@SUM(...)``
    would run in the spreadsheet CI users open the table with, so such a cell gets a leading
    ``'`` (OWASP's advice); newlines and control characters are escaped (``\\n``), so one
    record stays one line and a lone surrogate cannot stop the UTF-8 writer.
    """
    if type(value) in _PLAIN:  # most cells of a big table: no ABC check for them
        return value
    if value is None:
        return ""
    if isinstance(value, (bool, Number)):
        return value
    return _text_cell(str(value))


def _text_cell(text: str) -> str:
    # Printable ASCII holds none of the characters escape_line escapes (C0, DEL, C1, bidi,
    # surrogates): most names and messages skip its regex.
    line = text if text.isascii() and text.isprintable() else escape_line(text)
    if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + line
    return line


def csv_row(row: dict[str, Any]) -> dict[str, Any]:
    """Every cell of a ``csv.DictWriter`` row through ``csv_cell`` (keys are our column names)."""
    return {key: csv_cell(value) for key, value in row.items()}


def _field(cell: Any) -> str:
    """A cell as csv.writer writes it: None empty, str() of a non-string, quoted if needed."""
    text = "" if cell is None else cell if isinstance(cell, str) else str(cell)
    if _QUOTE_WHEN.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_line(cells: Sequence[Any]) -> str:
    """``[csv_cell(c) for c in cells]`` as one CSV record with its ``\\r\\n``, byte for byte
    what ``csv.writer`` (excel dialect) writes for it. The slow, general way: the header, and
    rows holding numbers of other types (numpy's)."""
    fields = [_field(csv_cell(c)) for c in cells]
    if fields == [""]:  # csv.writer quotes a lone empty field: a blank line is no record
        return '""\r\n'
    return ",".join(fields) + "\r\n"


class TextFields(dict[str, str]):
    """The CSV field of each distinct text cell (``csv_cell`` then quoting), worked out once:
    a big table repeats its dtypes, verdicts, causes, shapes and stack lines in every row.

    Node names are distinct in every row: the cache starts over at ``_TEXTS_KEPT`` entries
    rather than hold each of them until the table is written."""

    def __missing__(self, text: str) -> str:
        if len(self) >= _TEXTS_KEPT:
            self.clear()
        field = self[text] = _field(_text_cell(text))
        return field


def _picker(indices: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """``itemgetter`` that always gives a tuple (itemgetter of one index gives the item)."""
    if len(indices) == 1:
        only = indices[0]
        return lambda cells: (cells[only],)
    return itemgetter(*indices) if indices else lambda cells: ()


class RowFormat:
    """How rows of one shape become CSV records: ``picks[j]`` is where column j's cell sits in
    the row's cells, ``types`` the type of each cell. Same bytes as :func:`csv_line`.

    Built once per shape (a big table has a handful): a row then costs a few C calls and
    no Python call per cell. Text goes through ``TextFields`` (the same ``csv_cell``
    neutralisation and escaping for every string), int/float/bool cells through ``%r``
    (their ``str``, as csv.writer writes them), None cells are empty.
    """

    __slots__ = ("_args", "_general", "_picks", "_template", "_texts")

    def __init__(self, picks: Sequence[int], types: Sequence[type]) -> None:
        kinds = [_kind(t) for t in types]
        self._picks = _picker(picks)
        # other number types (numpy's: csv_cell keeps them, csv.writer takes their str())
        # and a one-column record (csv.writer quotes it when empty) take the general way
        self._general = "other" in kinds or len(picks) == 1
        texts = sorted({i for i in picks if kinds[i] == "text"})
        behind = {i: len(types) + k for k, i in enumerate(texts)}  # after the row's cells
        specs, args = [], []
        for i in picks:
            if kinds[i] == "none":
                specs.append("")
            else:
                specs.append("%s" if kinds[i] == "text" else "%r")
                args.append(behind.get(i, i))
        self._texts = _picker(texts)
        self._args = _picker(args)
        self._template = ",".join(specs) + "\r\n"

    def line(self, cells: list[Any], fields: TextFields) -> str:
        """The record of ``cells`` (a row of this shape); ``fields`` caches the text fields."""
        if self._general:
            return csv_line(self._picks(cells))
        texts = map(fields.__getitem__, map(str, self._texts(cells)))
        return self._template % self._args([*cells, *texts])


def _kind(kind: type) -> str:
    """What ``csv_cell`` does with a cell of this type: keeps it (number), empties it (none),
    keeps another number type (other) or makes text of it (text)."""
    if kind is type(None):
        return "none"
    if kind in _PLAIN:
        return "number"
    return "other" if issubclass(kind, (bool, Number)) else "text"
