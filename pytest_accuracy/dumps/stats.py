"""A tensor's recorded statistics, alone (``Stats``) or a whole dump's as columns."""

from __future__ import annotations

import math
import struct
from array import array
from typing import NamedTuple

import numpy as np


class Stats(NamedTuple):
    """The four statistics msprobe records per tensor (None where it records null).

    A tuple: 0.14 us to make from the reader's values where a frozen dataclass took 0.9."""

    max: float | None = None
    min: float | None = None
    mean: float | None = None
    norm: float | None = None

    def values(self) -> tuple[float, float, float, float]:
        """(Norm, Max, Min, Mean), NaN where not recorded: the order statistics are compared in."""
        def value(v: float | None) -> float:
            return math.nan if v is None else float(v)

        return value(self.norm), value(self.max), value(self.min), value(self.mean)


_new_stats = tuple.__new__  # Stats from an iterable without NamedTuple's keyword __new__
_NOT_RECORDED = (math.nan,) * 4
_ROW = struct.Struct("4d").pack  # native order and size: array("d")'s own bytes


class StatsColumns:
    """Every statistic of one dump's tensor records, four float64 a row in one array.

    A 100k-node statistics dump has 300k records: as a ``Stats`` tuple of four float objects
    each, 55 MB; here 10 MB. A record keeps its row and makes its ``Stats`` when asked. Rows
    with a statistic not recorded (None) keep their tuple (``_odd``), and read NaN in
    ``array()``.
    """

    __slots__ = ("_odd", "_values")

    def __init__(self) -> None:
        self._values = array("d")
        self._odd: dict[int, Stats] = {}

    def add(self, stats: tuple[float | None, float | None, float | None, float | None]) -> int:
        """Append one record's (Max, Min, Mean, Norm), floats or None; its row."""
        row = len(self._values) >> 2
        try:
            # four floats, most rows: packed as the array keeps them (native doubles) in
            # one step, half the time of extend's four appends
            self._values.frombytes(_ROW(*stats))
        except struct.error:  # a None: not recorded (nothing was packed)
            self._values.extend(_NOT_RECORDED)
            self._odd[row] = _new_stats(Stats, stats)
        return row

    def truncate(self, rows: int) -> None:
        """Drop every row from ``rows`` on (a reader that reads a record again)."""
        del self._values[rows * 4 :]
        for row in [r for r in self._odd if r >= rows]:
            del self._odd[row]

    def __len__(self) -> int:
        return len(self._values) >> 2

    def get(self, row: int) -> Stats:
        if self._odd:
            odd = self._odd.get(row)
            if odd is not None:
                return odd
        return _new_stats(Stats, self._values[row * 4 : row * 4 + 4])

    def unsure_rows(self) -> bytes:
        """Per row, 1 where its Max or Min may be NaN/Inf or its Mean NaN (a statistic not
        recorded counts: NaN here), 0 where each is certainly a finite float: a scan for
        NaN/Inf asks its records only where this says 1."""
        values = self.array()
        with np.errstate(invalid="ignore"):
            sure = np.isfinite(values[:, 0]) & np.isfinite(values[:, 1]) & ~np.isnan(values[:, 2])
        return (~sure).astype(np.uint8).tobytes()

    def array(self) -> np.ndarray:
        """The rows as a (rows, 4) float64 view: Max, Min, Mean, Norm; NaN where not recorded."""
        return np.frombuffer(self._values, dtype=np.float64).reshape(-1, 4)
