"""Bytes appended to an unlinked temporary file in batches, each piece read back by place."""

from __future__ import annotations

import os
import tempfile
from typing import IO

# written to the file a batch at a time (one system call, not one a record)
_BATCH = 1 << 20


class SpoolFile:
    """An append-only store: ``put`` returns where the bytes lie; ``read`` gives them back,
    from the file, or from the batch not yet written. A write that fails (a full disk, a file
    size limit) raises from ``put`` and loses nothing: the unwritten batch stays readable."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._file: IO[bytes] | None = None
        self._pending = bytearray()
        self._written = 0  # bytes in the file; the pending batch follows them

    def put(self, data: bytes) -> int:
        offset = self._written + len(self._pending)
        self._pending += data
        if len(self._pending) >= _BATCH:
            self._flush()
        return offset

    def read(self, offset: int, size: int) -> bytes:
        if offset >= self._written:
            start = offset - self._written
            return bytes(self._pending[start:start + size])
        assert self._file is not None
        return os.pread(self._file.fileno(), size, offset)

    def _flush(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix=self._prefix, buffering=0)  # noqa: SIM115
        view = memoryview(self._pending)
        done = 0
        while done < len(view):  # unbuffered: a full disk fails here, never at a later read
            wrote = self._file.write(view[done:])
            if not wrote:
                raise OSError(f"spool {self._file.name}: nothing written")
            done += wrote
        view.release()
        self._written += done
        self._pending = bytearray()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._pending = bytearray()
