"""Step records of a log: the compiled scanner where it was built, the pure path as referee."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

import numpy as np

from pytest_accuracy.logs import fields
from pytest_accuracy.logs.fields import Columns, Fields, Layout
from pytest_accuracy.logs.speedups import scanner
from pytest_accuracy.logs.table import TRUE_TEXTS

_ROUNDS = 4  # layouts tried on the lines the previous one did not fit (a run that changed keys)
_FEW = 64  # fewer odd lines than this are outliers: the pure path reads them with the layout
_CLOSE = {"line": 0, "first": 1, "last": 2}
_SKIP_SPACES, _COLLAPSE, _ONCE, _SHORT_ROWS = 1, 2, 4, 8  # the scanner's flags
_NA = tuple(t.encode() for t in fields.BARE_NA)
_TRUTH = tuple(t.encode() for t in sorted(TRUE_TEXTS))


@dataclass(frozen=True)
class Records:
    """Where a format's step records are.

    ``pattern``'s group 1 is the record: that is the definition, and the pure
    path uses it.  The scanner finds the same records without a regex: group 1
    starts after the first ``marker`` of a line (and the spaces after it when
    ``skip_spaces``) and ends at the line's end, its first ``}`` (``close="first"``)
    or its last ``}`` (``"last"``).  ``once``: a line with the marker twice is
    left to the pure path (where the format's regex finds a record per marker).
    """

    pattern: re.Pattern[bytes]
    marker: bytes
    close: Literal["line", "first", "last"] = "line"
    skip_spaces: bool = False
    once: bool = False


#: A format's own reader for the lines the scanner leaves: (buffer, list to append each
#: record's offset to, or None when offsets are not needed) -> their columns.
Rest = Callable[[bytes, "list[int] | None"], Columns]


def read_records(
    data: bytes, where: Records, spec: Fields, rest: Rest | None = None
) -> Columns:
    """Every record of ``data`` read into columns, in file order (see ``fields.Columns``).

    The C scanner reads each line that fits the layout learnt from the first
    records, in one pass over the bytes.  The lines it leaves go to the pure
    path (``fields.read_records``, also what runs without the compiled module)
    with the same layout, which reads them as it would in the whole file: a value
    that is no plain number (``1.2.3``, ``[3.5]``) by its text, a line whose keys
    moved or that holds two records by key or one by one.  Only when many lines
    do not fit (a run whose keys changed) do they get a layout of their own, up
    to ``_ROUNDS`` times.  Both paths give the same table.  A format with a
    ``rest`` reader (its own regex) has every line the scanner leaves read by it.
    """
    scan = scanner()
    if scan is None:
        return rest(data, None) if rest else fields.read_records(data, where.pattern, spec)
    parts: list[tuple[np.ndarray, Columns]] = []
    buf, origin, kept = data, _Origin.identity(), None
    for _ in range(_ROUNDS):
        found = list(itertools.islice(where.pattern.finditer(buf), fields.SAMPLE))
        layout = fields.learn_layout([m.group(1) for m in found], spec)
        if layout and rest and not _agrees(scan, _lines(buf, found), where, spec, layout, rest):
            layout = None  # the format's reader reads its sample otherwise: it reads everything
        scanned = _scan_with(scan, buf, where, spec, layout, rest is None) if layout else None
        if scanned is None or not len(scanned[0]) + len(scanned[3]):
            break
        starts, part, odd, junk = scanned
        parts.append((origin.to_data(starts), part))
        if len(junk):  # they fit this layout: read with it, as the pure path would
            parts.append(_pure(*_gather(buf, junk, origin), where, spec, rest, layout=layout))
        buf, origin = _gather(buf, odd, origin)
        if len(odd) < _FEW:
            kept = layout  # outliers: read with this layout, as in the whole file
            break
    if buf:
        parts.append(_pure(buf, origin, where, spec, rest, layout=kept))
    return _in_file_order(parts)


def _pure(
    buf: bytes,
    origin: _Origin,
    where: Records,
    spec: Fields,
    rest: Rest | None,
    layout: Layout | None = None,
) -> tuple[np.ndarray, Columns]:
    """Lines the scanner left, read by the pure path (with ``layout``, else layouts it learns)."""
    located: list[int] = []
    if rest is not None:
        part = rest(buf, located)
    else:
        part = fields.read_located(buf, where.pattern, spec, located, layout)
    return origin.to_data(np.array(located, dtype=np.int64)), part


@dataclass(frozen=True)
class _Origin:
    """Maps offsets in a buffer of gathered lines back to offsets in the file."""

    here: np.ndarray | None  # where each gathered line starts in the buffer
    there: np.ndarray | None  # where it starts in the file

    @classmethod
    def identity(cls) -> _Origin:
        return cls(None, None)

    def to_data(self, offsets: np.ndarray) -> np.ndarray:
        if self.here is None or self.there is None:
            return offsets
        line = np.searchsorted(self.here, offsets, side="right") - 1
        return self.there[line] + (offsets - self.here[line])


def _scan_with(
    scan: ModuleType, buf: bytes, where: Records, spec: Fields, layout: Layout, short_rows: bool
) -> tuple[np.ndarray, Columns, np.ndarray, np.ndarray] | None:
    """One C pass with ``layout``: record offsets, their columns, and the (start, end) of
    the lines that do not fit and of those that fit with a value that is no plain number."""
    ntok = layout.width - 1
    if any(pos >= ntok for pos, _ in layout.values):
        return None  # a fixed position the rows do not have: the pure path says why
    kinds, keys = bytearray(ntok), [b""] * ntok
    for pos, token in layout.keys:
        kinds[pos], keys[pos] = 1, token.encode("latin-1")
    for pos, name in layout.values:
        kinds[pos] = 3 if name in spec.flags else 4 if name in spec.digits else 2
    flags = where.skip_spaces * _SKIP_SPACES | spec.collapse * _COLLAPSE | where.once * _ONCE
    flags |= short_rows * _SHORT_ROWS  # as pandas reads them; a format's own regex may not
    values, starts_raw, odd_raw, junk_raw = scan.scan(
        buf, 0, len(buf), where.marker, _CLOSE[where.close], flags, spec.table,
        layout.seps, bytes(kinds), tuple(keys), _NA, _TRUTH,
    )  # fmt: skip
    starts = np.frombuffer(starts_raw, dtype=np.int64)
    n = len(starts)
    kept = sorted(pos for pos, _ in layout.values)
    matrix = np.frombuffer(values, dtype=np.float64).reshape(len(kept), n)
    column = {pos: matrix[j] for j, pos in enumerate(kept)}
    part = Columns({}, {}, np.zeros(n, dtype=bool), 0)
    for pos, name in layout.values:  # in the pure path's order: a repeated name keeps the last
        if name in spec.flags:
            part.flags[name] = column[pos] != 0
        else:
            part.values[name] = column[pos]
    spans = [np.frombuffer(raw, dtype=np.int64).reshape(-1, 2) for raw in (odd_raw, junk_raw)]
    return starts, part, spans[0], spans[1]


def _lines(buf: bytes, found: list[re.Match[bytes]]) -> bytes:
    """The whole lines the matches are on, once each, in order."""
    spans: dict[tuple[int, int], None] = {}
    for m in found:
        end = buf.find(b"\n", m.end())
        spans[buf.rfind(b"\n", 0, m.start()) + 1, len(buf) if end < 0 else end + 1] = None
    return b"".join(buf[a:b] for a, b in spans)


def _agrees(
    scan: ModuleType, sample: bytes, where: Records, spec: Fields, layout: Layout, rest: Rest
) -> bool:
    """Every sample line the scanner reads with ``layout``, ``rest`` reads as one record with
    the same values.  Lines shaped like them (same separators, keys, plain values) then agree
    too; a layout learnt from a line the format's regex does not take as a record does not."""
    scanned = _scan_with(scan, sample, where, spec, layout, short_rows=False)
    if scanned is None:
        return False
    starts, part, _, _ = scanned
    located: list[int] = []
    ref = rest(sample, located)
    line_starts = np.flatnonzero(np.frombuffer(b"\n" + sample, dtype=np.uint8) == 10)
    ours = np.searchsorted(line_starts, starts, side="right")
    theirs = np.searchsorted(line_starts, np.array(located, dtype=np.int64), side="right")
    if len(np.unique(theirs)) != len(theirs) or not np.isin(ours, theirs).all():
        return False
    rows = np.searchsorted(theirs, ours)
    return all(
        np.array_equal(values, ref.values[name][rows], equal_nan=True)
        for name, values in part.values.items()
        if name in ref.values
    )


def _gather(buf: bytes, odd: np.ndarray, origin: _Origin) -> tuple[bytes, _Origin]:
    """The odd lines joined into one buffer, and where they came from in the file."""
    if not len(odd):
        return b"", origin
    lengths = odd[:, 1] - odd[:, 0]
    here = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    joined = b"".join([buf[a:b] for a, b in odd.tolist()])
    return joined, _Origin(here, origin.to_data(odd[:, 0]))


def _in_file_order(parts: list[tuple[np.ndarray, Columns]]) -> Columns:
    """The parts' rows as one ``Columns``, sorted by where each record is in the file."""
    if len(parts) <= 1:
        return parts[0][1] if parts else fields.concat([])
    shift = 0
    for _, part in parts:  # odd row numbers become numbers in the joined rows
        part.odd_rows = {shift + i: row for i, row in part.odd_rows.items()}
        shift += len(part)
    merged = fields.concat([part for _, part in parts])
    order = np.argsort(np.concatenate([starts for starts, _ in parts]), kind="stable")
    if (order == np.arange(len(order))).all():
        return merged
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return Columns(
        {k: v[order] for k, v in merged.values.items()},
        {k: v[order] for k, v in merged.flags.items()},
        merged.odd[order],
        merged.bad,
        {int(rank[i]): row for i, row in merged.odd_rows.items()},
    )
