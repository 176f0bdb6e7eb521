"""Column-wise reading of step lines through pandas' C tokenizer, validated key by key."""

from __future__ import annotations

import csv
import io
import itertools
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from pytest_accuracy.logs.table import is_true, read_value

SEP = b"\x1f"  # ASCII unit separator: never in a log line we read
_SEP_STR = SEP.decode("latin-1")
_BLOCK = 1 << 16  # rows per read_csv call: bounded memory, one layout per block
_SLICE = 1 << 25  # bytes of the file read_records takes at a time
SAMPLE = 16  # rows a layout is learnt from (a block's here, a scan's in records.py)
# Value texts pandas reads as NaN (table.read_value reads them as missing too), with the
# spaces the formats put around values; any other "no value" text takes the slow path.
BARE_NA = ["", "nan", "NaN", "NAN", "-nan", "None", "none", "N/A", "n/a", "NA", "na", "null", "-"]
_NA = [f"{a}{t}{b}" for t in BARE_NA for a in ("", " ") for b in ("", " ")]


@dataclass(frozen=True)
class Layout:
    """Where a block's fields are: the exact key token before each kept value."""

    width: int  # fields per row, counting the empty sentinel field appended to each row
    keys: tuple[tuple[int, str], ...]  # (position, exact token with its spaces)
    values: tuple[tuple[int, str], ...]  # (position, column name)
    seps: bytes = b""  # the row's separator bytes as written (the C scanner checks them)


@dataclass(frozen=True)
class Fields:
    """What a format tells the reader: how to split its lines and which values to keep."""

    table: bytes  # bytes.translate table mapping the format's separators to SEP
    column: Callable[[str], str | None]  # stripped key -> column name, or None to drop
    fixed: dict[int, str]  # positions read without a key (e.g. the step right after the marker)
    flags: frozenset[str] = frozenset()  # columns that hold True/False texts
    # A run of separators is one, as str.split() does (padded columns: ``loss:  3.2``); only
    # the compiled scanner reads such fields: the format's own regex is the pure path.
    collapse: bool = False
    digits: frozenset[str] = frozenset()  # columns whose text must be \d+ (a step)


@dataclass
class Columns:
    """Per-row values of every block; ``odd`` rows must be read one by one by the caller."""

    values: dict[str, np.ndarray]
    flags: dict[str, np.ndarray]
    odd: np.ndarray
    bad: int  # values present but unparseable (read as NaN)
    odd_rows: dict[int, bytes] = field(default_factory=dict)  # row -> its text (read_records)

    def __len__(self) -> int:
        return len(self.odd)


def read_records(data: bytes, pattern: re.Pattern[bytes], spec: Fields) -> Columns:
    """``read_rows`` over the records ``pattern`` finds (group 1), a slice of ``data`` at a time.

    Records never span lines, so slices end at line ends; only the texts of odd
    rows are kept (``odd_rows``).  Slices keep the record lists small: less
    memory, and the bytes stay in cache between the regex and the tokenizer.
    """
    return read_located(data, pattern, spec, None)


def read_located(
    data: bytes,
    pattern: re.Pattern[bytes],
    spec: Fields,
    starts: list[int] | None,
    layout: Layout | None = None,
) -> Columns:
    """``read_records``; with a ``starts`` list, each record's offset in ``data`` is appended.

    A ``layout`` is used for every block instead of one learnt from its first rows."""
    parts: list[Columns] = []
    offset, pos = 0, 0
    while pos < len(data):
        end = data.find(b"\n", pos + _SLICE)
        end = len(data) if end < 0 else end + 1
        if starts is None:
            rows = pattern.findall(data, pos, end)
        else:
            found = list(pattern.finditer(data, pos, end))
            rows = [m.group(1) for m in found]
            starts += [m.start(1) for m in found]
        part = read_rows(rows, spec, layout)
        part.odd_rows = {offset + i: rows[i] for i in np.flatnonzero(part.odd).tolist()}
        parts.append(part)
        offset, pos = offset + len(rows), end
    return concat(parts)


def concat(parts: list[Columns]) -> Columns:
    """One ``Columns`` of the parts' rows, in order; a column a part lacks is NaN / False."""
    if len(parts) == 1:
        return parts[0]
    names = dict.fromkeys(k for part in parts for k in part.values)
    flags = dict.fromkeys(k for part in parts for k in part.flags)
    values = {k: [_or_nan(part.values.get(k), len(part)) for part in parts] for k in names}
    truth = {k: [_or_false(part.flags.get(k), len(part)) for part in parts] for k in flags}
    return Columns(
        {k: np.concatenate(v) for k, v in values.items()},
        {k: np.concatenate(v) for k, v in truth.items()},
        np.concatenate([np.zeros(0, bool), *(part.odd for part in parts)]),
        sum(part.bad for part in parts),
        {i: row for part in parts for i, row in part.odd_rows.items()},
    )


def _or_nan(column: np.ndarray | None, n: int) -> np.ndarray:
    return np.full(n, np.nan) if column is None else column


def _or_false(column: np.ndarray | None, n: int) -> np.ndarray:
    return np.zeros(n, dtype=bool) if column is None else column


def read_rows(rows: Sequence[bytes], spec: Fields, known: Layout | None = None) -> Columns:
    """Parse ``rows`` (step lines from the marker on) block by block.

    One Python regex match per line was the cost that dominated; here the rows of
    a block are joined, their separators translated to ``SEP`` and parsed by
    ``read_csv`` as positional fields.  Positions come from the block's first
    rows; every kept value's key is checked in every row, so a row with extra,
    missing or reordered fields (or a stray ``SEP``) is never read by position:
    it is flagged ``odd`` and the caller reads it one by one.
    """
    n = len(rows)
    out = Columns({}, {}, np.zeros(n, dtype=bool), 0)
    for start in range(0, n, _BLOCK):
        block = rows[start : start + _BLOCK]
        layout = known or learn_layout(block[:SAMPLE], spec)
        try:
            if layout is not None:
                _read_block(block, layout, spec, out, start, n)
                continue
        except (ValueError, pd.errors.ParserError):
            pass  # whatever pandas cannot tokenize is read one by one
        block_rows = slice(start, start + len(block))
        out.odd[block_rows] = True
        for column in out.values.values():  # nothing read by position may stay
            column[block_rows] = np.nan
        for flag in out.flags.values():
            flag[block_rows] = False
    return out


def learn_layout(sample: Sequence[bytes], spec: Fields) -> Layout | None:
    """The most common field layout among ``sample`` (kept keys and their positions)."""
    seen: Counter[Layout] = Counter()
    for raw in sample:
        tokens, seps = _split(raw, spec)
        keys: dict[int, str] = {}
        values = dict(spec.fixed)
        for i, token in enumerate(tokens[:-2]):
            name = spec.column(token.strip())
            if name is not None and i not in values and i + 1 not in values:
                keys[i], values[i + 1] = token, name
        if spec.collapse and not _key_value_words(keys, values, seps):
            continue
        if keys and not any(_merged(t, spec) for t in tokens):
            seen[Layout(len(tokens), tuple(keys.items()), tuple(values.items()), seps)] += 1
    return seen.most_common(1)[0][0] if seen else None


def _split(raw: bytes, spec: Fields) -> tuple[list[str], bytes]:
    """A record's field texts (translated, plus the empty sentinel) and its separator bytes."""
    translated = raw.translate(spec.table)
    if not spec.collapse:
        seps = bytes(raw[i] for i, c in enumerate(translated) if c == SEP[0])
        return (translated + SEP).decode("latin-1").split(_SEP_STR), seps
    words = list(re.finditer(rb"[^\x1f]+", translated))
    seps = bytes(raw[w.end()] for w in words[:-1])  # the first byte of each run between words
    return [w.group().decode("latin-1") for w in words] + [""], seps


def _key_value_words(keys: dict[int, str], values: dict[int, str], seps: bytes) -> bool:
    """Collapse mode reads ``key: value  key: value``: a key ends at a separator that is no
    space (``:``), a value at a space or the record's end (``2:.5`` is one junk value)."""
    spaces = b" \t\r"
    return all(seps[i] not in spaces for i in keys if i < len(seps)) and all(
        seps[i] in spaces for i in values if i < len(seps)
    )


def _merged(token: str, spec: Fields) -> bool:
    """A kept key and its value in one field (``global_norm [3.2]``: no separator)."""
    text = token.strip()
    head = text.rpartition(" ")[0].strip()
    return bool(head) and spec.column(text) is None and spec.column(head) is not None


def _read_block(
    block: Sequence[bytes], layout: Layout, spec: Fields, out: Columns, start: int, n: int
) -> None:
    frame = _tokenize(block, layout, spec)
    rows = slice(start, start + len(block))
    # A kept key that matched reads as NaN (it is the column's only NA text); row 0 is
    # the dummy row.
    odd = frame[layout.width - 1].notna().to_numpy()[1:].copy()
    for pos, _ in layout.keys:
        odd |= frame[pos].notna().to_numpy()[1:]
    out.odd[rows] |= odd
    for pos, name in layout.values:
        column = frame[pos].iloc[1:]
        if name in spec.flags:
            if name not in out.flags:
                out.flags[name] = np.zeros(n, dtype=bool)
            out.flags[name][rows] = _flag(column) & ~odd
            continue
        numbers, bad = _numbers(column, odd)
        if name not in out.values:  # a column can first appear in a later block
            out.values[name] = np.full(n, np.nan)
        dest = out.values[name][rows]
        dest[:] = numbers
        dest[odd] = np.nan  # read by position from a row whose fields are elsewhere
        out.bad += bad


def _tokenize(block: Sequence[bytes], layout: Layout, spec: Fields) -> pd.DataFrame:
    """The kept keys, kept values and the sentinel of every row; row 0 is a dummy.

    The appended SEP gives every row an empty last field: a row with more fields
    than the layout shows a non-empty one there.  The dummy first row has exactly
    ``width`` fields, the layout's keys in place: pandas sizes rows by the first one.
    """
    keys = dict(layout.keys)
    # One join, no concatenation: a copy of a block costs as much as tokenizing a third of it.
    dummy = SEP.join(keys.get(i, "").encode("latin-1") for i in range(layout.width - 1))
    text = (SEP + b"\n").join(itertools.chain((dummy,), block, (b"",)))
    na = {pos: [token] for pos, token in keys.items()}
    na.update({pos: _NA for pos, _ in layout.values})
    na[layout.width - 1] = [""]
    return pd.read_csv(
        io.BytesIO(text.translate(spec.table)),
        sep=_SEP_STR,
        header=None,
        names=range(layout.width),
        usecols=sorted(na),
        dtype={pos: "category" for pos, name in layout.values if name in spec.flags},
        keep_default_na=False,
        na_values=cast(Any, na),  # per-position NA texts; the stubs only allow names
        quoting=csv.QUOTE_NONE,
        skip_blank_lines=False,
        encoding="latin-1",
        engine="c",
    )


def _numbers(column: pd.Series, odd: np.ndarray) -> tuple[np.ndarray, int]:
    """float64 values; a column pandas could not type is read text by text."""
    if column.dtype.kind in "fiub":
        return column.to_numpy(dtype=np.float64, na_value=np.nan), 0
    # pandas keeps an integer too big for int64 as a Python int; NaN and None are missing.
    texts = column.to_numpy(dtype=object)
    read = [read_value(t if isinstance(t, str | int | float) else "") for t in texts]
    values = np.fromiter((v for v, _ in read), np.float64, count=len(read))
    junk = np.fromiter((not ok for _, ok in read), bool, count=len(read))
    # Only rows inside the layout count as bad values; odd rows are read again.
    return values, int((junk & ~odd).sum())


def _flag(column: pd.Series) -> np.ndarray:
    """True/False texts (``False``, ``[ True]``) as bool; NaN is False."""
    cat = column.astype("category")
    truth = np.array([is_true(str(c)) for c in cat.cat.categories], bool)
    codes = cat.cat.codes.to_numpy()
    return np.where(codes >= 0, truth[np.maximum(codes, 0)] if len(truth) else False, False)
