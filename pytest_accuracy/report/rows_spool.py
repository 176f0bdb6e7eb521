"""A node's rows of msprobe's table kept on disk until the report's CSV is written."""

from __future__ import annotations

import tempfile
from typing import IO, Any

import msgspec


class RowsSpool:
    """Rows appended to an unlinked temporary file, each read back by its place: a 100k-node
    run's rows were ~130 MB held beside the dump models until the session ended, and only the
    CSV (and the first divergence's card) reads them, once."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        self._end = 0

    def put(self, rows: list[Any]) -> RowsRef:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="acc-rows-", buffering=0)  # noqa: SIM115 (kept open)
        data = msgspec.msgpack.encode(rows)
        self._file.seek(self._end)
        # unbuffered: a full disk fails this write, here, never a later read
        if self._file.write(data) != len(data):
            raise OSError(f"spool {self._file.name}: short write")
        ref = RowsRef(self, self._end, len(data))
        self._end += len(data)
        return ref

    def read(self, offset: int, size: int) -> list[Any]:
        assert self._file is not None
        self._file.seek(offset)
        rows: list[Any] = msgspec.msgpack.decode(self._file.read(size))
        return rows

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


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
