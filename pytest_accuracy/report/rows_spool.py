"""A node's rows of msprobe's table kept on disk until the report's CSV is written."""

from __future__ import annotations

from typing import Any

import msgspec

from pytest_accuracy.report.spool_file import SpoolFile


class RowsSpool:
    """Rows kept on disk, each read back by its place: a 100k-node run's rows were ~130 MB
    held beside the dump models until the session ended, and only the CSV (and the first
    divergence's card) reads them, once."""

    def __init__(self) -> None:
        self._store = SpoolFile("acc-rows-")

    def put(self, rows: list[Any]) -> RowsRef:
        data = msgspec.msgpack.encode(rows)
        return RowsRef(self, self._store.put(data), len(data))

    def read(self, offset: int, size: int) -> list[Any]:
        rows: list[Any] = msgspec.msgpack.decode(self._store.read(offset, size))
        return rows

    def close(self) -> None:
        self._store.close()


class RowsRef:
    """Where one node's rows lie in a ``RowsSpool`` (true, as a non-empty row list is)."""

    __slots__ = ("offset", "size", "spool")

    def __init__(self, spool: RowsSpool, offset: int, size: int) -> None:
        self.spool, self.offset, self.size = spool, offset, size

    def load(self) -> list[Any]:
        return self.spool.read(self.offset, self.size)

    def __repr__(self) -> str:  # JSON's default=str never sees one: rows are report-only
        return f"<rows at {self.offset}>"


def rows_of(value: Any) -> list[Any]:
    """A record's rows, as kept (a list) or spooled."""
    if isinstance(value, RowsRef):
        return value.load()
    return list(value or [])
