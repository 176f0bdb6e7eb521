"""JSON files of a dump (dump.json, stack.json, construct.json) read within limits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.safe_io import open_regular
from pytest_accuracy.text import brief

try:
    import orjson as _orjson
except ImportError:  # a platform without its wheel: json alone, slower
    _orjson = None  # type: ignore[assignment]

def read_json(path: Path, *, unique_nodes: bool = False) -> Any:
    """Parse a JSON file, turning every failure into an error that names the file.

    Within the limits (file size, digits of a number, nesting the parser can recurse into),
    since a small hostile file could otherwise take GBs (a 5000-digit integer, 100k brackets).
    ``unique_nodes``: a node name written twice as a key is an error (JSON keeps the last).
    """
    return parse_json(path, read_bytes(path), unique_nodes=unique_nodes)


def read_bytes(path: Path) -> bytes:
    try:
        with open_regular(path) as (handle, info):  # a FIFO or /dev/zero is refused
            if (size := info.st_size) > limit("json_bytes"):
                raise AccuracyInputError(path, f"file size: {over('json_bytes', size)}")
            return handle.read()
    except OSError as exc:
        raise AccuracyInputError(path, f"cannot read file ({exc.strerror or exc})") from exc


def parse_json(path: Path, raw: bytes, *, unique_nodes: bool = False) -> Any:
    """``raw``, the text of ``path``, parsed (``read_json``'s errors and limits)."""
    digits = raw.translate(_DIGITS)
    long_numbers = digits.find(b"0" * (limit("json_number_chars") + 1)) >= 0
    wide_integer = digits.find(_WIDE_INTEGER) >= 0
    del digits  # 46 MB on a 100k-node dump.json: gone before the tree is built
    doc = _fast_loads(raw) if not (long_numbers or wide_integer) else None
    if doc is not None:  # orjson checked the UTF-8 itself: no decoded copy of the text
        if unique_nodes:
            _check_unique_nodes(raw, doc, path)
        return doc
    try:
        text = raw.decode("utf-8")  # the slow path (NaN literals, long numbers, bad text)
    except UnicodeDecodeError as exc:
        raise AccuracyInputError(path, "not UTF-8 text; is this really a JSON file?") from exc
    try:
        doc = _loads(text, path, long_numbers)
        if unique_nodes:
            _check_unique_nodes(raw, doc, path)
        return doc
    except RecursionError:
        raise AccuracyInputError(path, "JSON nests too deep to read") from None
    except json.JSONDecodeError as exc:
        hint = "; the file looks truncated" if exc.pos >= len(text.rstrip()) - 1 else ""
        raise AccuracyInputError(
            path, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}{hint}"
        ) from exc


def _fast_loads(raw: bytes) -> Any:
    """orjson's parse (2.5x json's on a dump.json) where it gives what json.loads gives; None
    where it cannot: NaN/Infinity literals (msprobe's own json.dump writes them), invalid
    text (json.loads then names the error). The caller has ruled out integers of 19 digits
    or more (orjson makes one past 64 bits a float)."""
    if _orjson is None or b"NaN" in raw or b"Infinity" in raw:
        return None
    try:
        return _orjson.loads(raw)
    except _orjson.JSONDecodeError:
        return None


# A node name as a key: "Tensor.__add__.0.forward": {  (a data_name value ends in .pt/.npy)
_NODE_KEY = re.compile(rb'"([^"\\]{1,4096}\.(?:forward|backward|parameters_grad)(?:\.\d+)?)"\s*:')


_NODE_END = (re.compile(rb'ward(?:\.\d+)?"\s*:'), re.compile(rb'parameters_grad(?:\.\d+)?"\s*:'))


def _check_unique_nodes(text: bytes, doc: Any, path: Path) -> None:
    """json.loads keeps the last of two equal keys: a node written twice would be compared
    on whichever came last. Counting node-name keys in the text (one C scan) tells."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict):
        return
    # counted first with patterns that start with a literal (re's fast search): 0.08 s on a
    # 46 MB dump.json where the capturing pattern takes 0.26 s; named only when they disagree
    if sum(len(p.findall(text)) for p in _NODE_END) <= len(data):
        return
    names = _NODE_KEY.findall(text)
    seen: set[bytes] = set()
    for name in names:
        if name in seen:
            shown = name.decode("utf-8", "replace")
            raise AccuracyInputError(path, f"node {brief(shown)} is written twice in 'data' "
                                     "(JSON keeps the last one silently); the dump is corrupt")
        seen.add(name)


# every digit byte to "0", ".eE" to ".", every other to " ": a digit run becomes a run of
# "0" that bytes.find (memmem) looks for (0.09 s on a 46 MB dump.json where a [0-9]{65}
# search took 0.57), and an integer's digits follow a " ", a fraction's or exponent's a "."
_DIGITS = bytes(48 if 48 <= b <= 57 else 46 if b in b".eE" else 32 for b in range(256))
# 19 digits after a non-digit: an integer that may not fit 64 bits (or a float's integer
# part: json.loads reads those, as it does every number)
_WIDE_INTEGER = b" " + b"0" * 19


def _loads(text: str, path: Path, long_numbers: bool) -> Any:
    """json.loads at C speed; number hooks only when a long digit run is there at all.

    A hook per number costs the C parser several times its own time on a large dump.json,
    so a linear scan for a digit run past the limit decides whether they are needed.
    """
    if not long_numbers:
        return json.loads(text)
    number = _NumberParser(path, limit("json_number_chars"))
    return json.loads(text, parse_int=number.integer, parse_float=number.real)


class _NumberParser:
    """json.loads hooks that refuse absurdly long numbers before converting them."""

    def __init__(self, path: Path, cap: int) -> None:
        self.path = path
        self.cap = cap

    def _check(self, text: str) -> None:
        if len(text) > self.cap:
            problem = f"a number of {over('json_number_chars', len(text))}: {text[:20]}..."
            raise AccuracyInputError(self.path, problem)

    def integer(self, text: str) -> int:
        self._check(text)
        return int(text)

    def real(self, text: str) -> float:
        self._check(text)
        return float(text)  # 1e400 is inf, as msprobe's own "inf" strings are
