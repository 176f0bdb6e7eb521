"""Reading ``.npy`` files without pickle and, from any thread, without ``ast``.

``np.load`` parses the header with ``ast.literal_eval``, and CPython 3.11's AST
construction is not thread-safe (python/cpython#106905: ``SystemError: AST
constructor recursion depth mismatch``); the compare reads tensors from worker
threads.  numpy writes one header shape, parsed here with a regex; any other
header goes to ``np.load`` under a lock.
"""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path
from typing import Any, Literal

import numpy as np

_MAGIC = b"\x93NUMPY"
# numpy's own writer: keys in this order, a ", " after each value, then padding spaces.
_HEADER = re.compile(
    r"\{'descr': '([<>|=]?[A-Za-z]\d*)', 'fortran_order': (True|False), "
    r"'shape': \(((?:\d+, ?)*\d*)\),? ?\} *\n?\Z"
)
_LOCK = threading.Lock()


def load_npy(
    path: Path, mmap: bool, max_header: int = 1 << 16, max_bytes: int = 1 << 62
) -> np.ndarray:
    """``np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)``, thread-safe.

    Raises what ``np.load`` raises for a bad file (``ValueError``, ``OSError``,
    ``EOFError``), so callers keep their error messages; a header over ``max_header``
    bytes or data over ``max_bytes`` is a ValueError too.
    """
    header = _read_header(path, max_header)
    if header is None:
        try:
            with _LOCK:
                loaded = np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
        except (ValueError, OSError, EOFError):
            raise
        except Exception as exc:
            # np.load tokenizes and ast-parses a header: a malformed one raises SyntaxError,
            # tokenize.TokenError, TypeError, OverflowError, ... all mean a bad file.
            raise ValueError(f"malformed header: {type(exc).__name__}: {exc}") from None
        if not isinstance(loaded, np.ndarray):
            raise ValueError("not a single .npy array (an .npz archive?)")
        return loaded
    dtype, shape, order, offset = header
    if dtype.hasobject:
        raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
    count = math.prod(shape)
    if count * dtype.itemsize > max_bytes:
        raise ValueError(f"{count * dtype.itemsize} bytes of data, over the limit {max_bytes}")
    needed = offset + count * dtype.itemsize
    if (size := path.stat().st_size) < needed:
        raise ValueError(f"truncated: {size} bytes, the header describes {needed}")
    if mmap and count:
        return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)
    with path.open("rb") as f:
        f.seek(offset)
        array = np.fromfile(f, dtype=dtype, count=count)
    return array.reshape(shape, order=order)


def _read_header(
    path: Path, max_header: int
) -> tuple[np.dtype[Any], tuple[int, ...], Literal["C", "F"], int] | None:
    """(dtype, shape, order, data offset) of a header numpy wrote; None for any other."""
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8 or not head.startswith(_MAGIC):
            raise ValueError("not a .npy file (no \\x93NUMPY magic string)")
        if head[6] not in (1, 2, 3):
            return None
        size_bytes = 2 if head[6] == 1 else 4
        length = int.from_bytes(f.read(size_bytes), "little")
        if length > max_header:  # np.load would read, then ast-parse, all of it
            raise ValueError(f"header of {length} bytes, over the limit {max_header}")
        text = f.read(length).decode("utf-8" if head[6] == 3 else "latin-1", "replace")
    m = _HEADER.match(text)
    if m is None:
        return None
    try:
        dtype = np.dtype(m[1])
    except TypeError:
        return None
    shape = tuple(int(n) for n in m[3].split(",") if n.strip())
    return dtype, shape, "F" if m[2] == "True" else "C", 8 + size_bytes + length
