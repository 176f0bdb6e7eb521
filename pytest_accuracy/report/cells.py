"""CSV cells made safe for the spreadsheet that opens them: formulas neutralised, text one line."""

from __future__ import annotations

import re
from numbers import Number
from typing import Any

from pytest_accuracy.text import escape_line

__all__ = ["csv_cell", "csv_row"]

_PLAIN = frozenset({float, int, bool})
# What Excel, LibreOffice and Google Sheets start a formula (or DDE) with.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# A plain number written as text ("-0.5", "1e-3", "-inf") is no formula: it stays a number.
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|[-+]?(inf|nan)", re.IGNORECASE)


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
    text = str(value)
    if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + escape_line(text)
    return escape_line(text)


def csv_row(row: dict[str, Any]) -> dict[str, Any]:
    """Every cell of a ``csv.DictWriter`` row through ``csv_cell`` (keys are our column names)."""
    return {key: csv_cell(value) for key, value in row.items()}
