"""zlib.crc32, folded with carry-less multiplication where the compiled ``_crc`` is there."""

from __future__ import annotations

import zlib
from collections.abc import Callable

from pytest_accuracy.switches import env_switch

#: Set (not "0") to check CRCs with zlib even where the compiled path is built (read at import).
PURE_ENV = "PYTEST_ACCURACY_PURE_CRC"

Crc32 = Callable[[bytes | bytearray | memoryview], int]


def _choose() -> Crc32:
    if env_switch(PURE_ENV):
        return zlib.crc32
    try:  # built at install time where a C compiler was found
        from pytest_accuracy.dumps import _crc
    except ImportError:  # pragma: no cover - depends on the install
        return zlib.crc32
    # Without PCLMULQDQ its byte-wise table is slower than zlib's: zlib then.
    return _crc.crc32 if _crc.accelerated() else zlib.crc32


#: The CRC-32 of a buffer, as ``zlib.crc32(data)`` gives it (tested bit for bit against it).
crc32: Crc32 = _choose()
