"""Passing nodes' records kept on disk while the compare runs, read back for the documents."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import msgspec

from pytest_accuracy.report.spool_file import SpoolFile

_MISSING = object()


class RecordSpool:
    """Records appended to an unlinked temporary file: a 100k-node run's passing records
    were ~110 MB held beside the dump models, and as much again while the documents were
    written; a stub of the keys the session reads stays, and the writers read the rest."""

    def __init__(self) -> None:
        self._store = SpoolFile("acc-nodes-")
        self._count = 0
        self._last_at, self._last = -1, dict[str, Any]()
        self._tolerances: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(dict)

    def put(self, record: dict[str, Any]) -> SpooledRecord:
        """The record's stub; ``record`` holds JSON's types only (as a worker sends it), and
        its ``rows`` may be a RowsRef (kept in the stub, its place in the record kept)."""
        head = (*(record.get(k, _MISSING) for k in HEAD[:-1]),
                self._shared(record.get("tolerance")))
        rows = record.get("rows")
        data = self._encoder.encode({**record, "rows": None} if rows else record)
        stub = SpooledRecord(self, self._store.put(data), len(data), head)
        self._count += 1
        return stub

    def _shared(self, tolerance: Any) -> Any:
        """One object for the nodes of one flat tolerance (a dict a node was ~230 bytes);
        any other is left in the spool."""
        if not isinstance(tolerance, dict) or any(type(v) not in _FLAT
                                                  for v in tolerance.values()):
            return _SPOOLED
        return self._tolerances.setdefault(tuple(tolerance.items()), tolerance)

    def __len__(self) -> int:
        """How many records were spooled."""
        return self._count

    def read(self, offset: int, size: int) -> dict[str, Any]:
        """The record at ``offset``, not to be changed: the last one read is kept, as the
        writers read a node's keys one after another (one decoding a node, not one a key)."""
        if offset != self._last_at:
            self._last = self._decoder.decode(self._store.read(offset, size))
            self._last_at = offset
        return self._last


# the keys the session reads of every node before its documents are written (the verdict,
# the order, the summary's counts, a pass's note), and that the writers read of each in a
# pass of their own (the tree's parent, the tolerance learned or not), kept in memory; the
# rest is read from the spool. The tolerance comes last: shared between nodes where flat.
HEAD = ("npu_name", "step", "rank", "status", "order", "first_divergence", "rows", "reason",
        "parent", "tolerance")
_FLAT = frozenset({int, float, str, bool, type(None)})


class SpooledRecord(MutableMapping[str, Any]):
    """A node record kept in a ``RecordSpool``, with HEAD's values at hand: other keys are
    read from the spool on each access (never cached: that would hold the record again);
    changes are kept beside it."""

    __slots__ = ("_changed", "_head", "_offset", "_size", "_spool")

    def __init__(self, spool: RecordSpool, offset: int, size: int,
                 head: tuple[Any, ...]) -> None:
        self._spool, self._offset, self._size, self._head = spool, offset, size, head
        self._changed: dict[str, Any] | None = None

    def materialize(self) -> dict[str, Any]:
        """The whole record as a dict, as it was made (its keys in their order), changed."""
        out = dict(self._spool.read(self._offset, self._size))
        rows = self._head[_PLACE["rows"]]
        if rows is not _MISSING and rows:
            out["rows"] = rows
        for key, value in (self._changed or {}).items():
            if value is _MISSING:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    def get(self, key: str, default: Any = None) -> Any:
        # the writers ask ~60 keys a node: written out, not Mapping's get over __getitem__
        if self._changed is not None and key in self._changed:
            value = self._changed[key]
        else:
            value = self._head[_PLACE[key]] if key in _PLACE else _SPOOLED
            if value is _SPOOLED:
                spool = self._spool
                record = spool._last if spool._last_at == self._offset else spool.read(
                    self._offset, self._size)
                return record.get(key, default)
        return default if value is _MISSING else value

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        if self.get(key, _MISSING) is value or (
                key in _PLACE and type(value) in (bool, int, str) and self.get(key) == value):
            return  # settling marks every node: most keep what they had
        self._changed = {**(self._changed or {}), key: value}

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._changed = {**(self._changed or {}), key: _MISSING}

    def __iter__(self) -> Iterator[str]:
        return iter(self.materialize())

    def __len__(self) -> int:
        return len(self.materialize())

    def copy(self) -> dict[str, Any]:
        return self.materialize()


_PLACE = {k: i for i, k in enumerate(HEAD)}
_SPOOLED = object()  # a head value left in the spool (a tolerance that is not flat)
