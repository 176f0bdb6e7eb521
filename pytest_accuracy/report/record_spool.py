"""Passing nodes' records kept on disk while the compare runs, read back for the documents."""

from __future__ import annotations

from array import array
from collections.abc import Iterator, MutableMapping
from typing import Any, cast

import msgspec

from pytest_accuracy.report.rows_spool import RowsRef, RowsSpool
from pytest_accuracy.report.spool_file import SpoolFile

_MISSING = object()


class RecordSpool:
    """Records appended to an unlinked temporary file: a 100k-node run's passing records
    were ~110 MB held beside the dump models, and as much again while the documents were
    written. The keys the session reads (HEAD) stay in columns, a node a row (integers in
    arrays, a rows reference as its place), ~150 bytes a node with its stub where a stub
    holding them was ~370; the writers read the rest."""

    def __init__(self) -> None:
        self._store = SpoolFile("acc-nodes-")
        self._at, self._size = array("q"), array("q")  # each record's place in the file
        self._ints = {key: array("q") for key in _INTS}
        self._objects: dict[str, list[Any]] = {key: [] for key in _OBJECTS}
        self._rows_at, self._rows_size = array("q"), array("q")  # < 0: none, or in _odd
        self._rows: RowsSpool | None = None
        self._odd: dict[tuple[int, str], Any] = {}  # head values the columns do not hold
        self._changed: dict[int, dict[str, Any]] = {}  # what the session set, by node
        self._last_at, self._last = -1, dict[str, Any]()
        self._tolerances: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(dict)

    def put(self, record: dict[str, Any]) -> SpooledRecord:
        """The record's stub; ``record`` holds JSON's types only (as a worker sends it), and
        its ``rows`` may be a RowsRef (its place kept, its place in the record kept)."""
        rows = record.get("rows", _MISSING)
        data = self._encoder.encode({**record, "rows": None} if rows else record)
        offset = self._store.put(data)  # may raise: then nothing of it is kept here
        index = len(self._at)
        self._at.append(offset)
        self._size.append(len(data))
        for key, column in self._ints.items():
            value = record.get(key, _MISSING)
            fits = type(value) is int and _NOT_INT < value < 1 << 63
            column.append(value if fits else _NOT_INT)
            if not fits:
                self._odd[(index, key)] = value
        for key, objects in self._objects.items():
            objects.append(record.get(key, _MISSING) if key != "tolerance"
                           else self._shared(record.get("tolerance")))
        if isinstance(rows, RowsRef) and self._rows in (None, rows.spool):
            self._rows = rows.spool
            self._rows_at.append(rows.offset)
            self._rows_size.append(rows.size)
        else:  # none (-2), no rows (-3: a gate's record), or kept as it is (-1)
            code = -2 if rows is _MISSING else -3 if rows == [] else -1
            self._rows_at.append(code)
            self._rows_size.append(0)
            if code == -1:
                self._odd[(index, "rows")] = rows
        return SpooledRecord(self, index)

    def _shared(self, tolerance: Any) -> Any:
        """One object for the nodes of one flat tolerance (a dict a node was ~230 bytes);
        any other is left in the spool."""
        if not isinstance(tolerance, dict) or any(type(v) not in _FLAT
                                                  for v in tolerance.values()):
            return _SPOOLED
        return self._tolerances.setdefault(tuple(tolerance.items()), tolerance)

    def __len__(self) -> int:
        """How many records were spooled."""
        return len(self._at)

    def head(self, index: int, key: str) -> Any:
        """A HEAD value of node ``index`` as it was put (_MISSING where it had none)."""
        if key in self._ints:
            value = self._ints[key][index]
            return value if value != _NOT_INT else self._odd[(index, key)]
        if key == "rows":
            at = self._rows_at[index]
            if at < 0:
                return _MISSING if at == -2 else [] if at == -3 else self._odd[(index, key)]
            return RowsRef(
                cast(RowsSpool, self._rows), at, self._rows_size[index])
        return self._objects[key][index]

    def read(self, index: int) -> dict[str, Any]:
        """The record of node ``index``, not to be changed: the last one read is kept, as the
        writers read a node's keys one after another (one decoding a node, not one a key)."""
        if index != self._last_at:
            self._last = self._decoder.decode(self._store.read(self._at[index],
                                                               self._size[index]))
            self._last_at = index
        return self._last


# the keys the session reads of every node before its documents are written (the verdict,
# the order, the summary's counts, a pass's note), and that the writers read of each in a
# pass of their own (the tree's parent, the tolerance learned or not), kept in memory; the
# rest is read from the spool. The tolerance is shared between nodes where flat.
HEAD = ("npu_name", "step", "rank", "status", "order", "first_divergence", "rows", "reason",
        "parent", "tolerance")
_INTS = ("step", "rank", "order")
_OBJECTS = tuple(k for k in HEAD if k not in _INTS and k != "rows")
_NOT_INT = -(1 << 63)  # in an integer column: the value is in _odd
_FLAT = frozenset({int, float, str, bool, type(None)})


class SpooledRecord(MutableMapping[str, Any]):
    """A node record kept in a ``RecordSpool``, by its place there: HEAD's values from the
    spool's columns, other keys read from its file on each access (never cached: that would
    hold the record again); changes are kept in the spool beside it."""

    __slots__ = ("_index", "_spool")

    def __init__(self, spool: RecordSpool, index: int) -> None:
        self._spool, self._index = spool, index

    def materialize(self) -> dict[str, Any]:
        """The whole record as a dict, as it was made (its keys in their order), changed."""
        spool = self._spool
        out = dict(spool.read(self._index))
        rows = spool.head(self._index, "rows")
        if rows is not _MISSING and rows:
            out["rows"] = rows
        for key, value in spool._changed.get(self._index, {}).items():
            if value is _MISSING:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    def get(self, key: str, default: Any = None) -> Any:
        # the writers ask ~60 keys a node: written out, not Mapping's get over __getitem__
        spool = self._spool
        changed = spool._changed.get(self._index) if spool._changed else None
        if changed is not None and key in changed:
            value = changed[key]
        else:
            value = spool.head(self._index, key) if key in _PLACE else _SPOOLED
            if value is _SPOOLED:
                record = spool._last if spool._last_at == self._index else spool.read(
                    self._index)
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
        self._spool._changed.setdefault(self._index, {})[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._spool._changed.setdefault(self._index, {})[key] = _MISSING

    def __iter__(self) -> Iterator[str]:
        return iter(self.materialize())

    def __len__(self) -> int:
        return len(self.materialize())

    def copy(self) -> dict[str, Any]:
        return self.materialize()


_PLACE = frozenset(HEAD)
_SPOOLED = object()  # a head value left in the spool (a tolerance that is not flat)
