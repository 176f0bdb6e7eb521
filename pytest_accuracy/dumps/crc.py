"""CRC-32 of the .pt members read: ISA-L's (``isal``, 3-10x zlib here), zlib's as referee."""

from __future__ import annotations

import zlib
from collections.abc import Callable

from pytest_accuracy.switches import env_switch

#: Set (not "0") to check CRCs with zlib even where isal is installed (read at import).
PURE_ENV = "PYTEST_ACCURACY_PURE_CRC"

Crc32 = Callable[[bytes | bytearray | memoryview], int]


def _choose() -> Crc32:
    if env_switch(PURE_ENV):
        return zlib.crc32
    try:  # a core dependency; a platform with no isal wheel keeps zlib
        from isal import isal_zlib
    except ImportError:  # pragma: no cover - depends on the install
        return zlib.crc32
    fast: Crc32 = isal_zlib.crc32
    return fast


#: The CRC-32 of a buffer, as ``zlib.crc32(data)`` gives it (tested bit for bit against it).
crc32: Crc32 = _choose()
