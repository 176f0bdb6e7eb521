"""JSON files of a dump (dump.json, stack.json, construct.json) read within limits."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.safe_io import open_regular
from pytest_accuracy.text import brief

try:
    import msgspec as _msgspec
except ImportError:  # a platform without its wheel: json alone, slower
    _msgspec = None  # type: ignore[assignment]
else:
    class _DumpTop(_msgspec.Struct):
        """dump.json's top level, its node records kept as their text (``msgspec.Raw``)."""

        data: dict[str, _msgspec.Raw] | None = None
        task: Any = None
        level: Any = None
        framework: Any = None

    _DUMP_TOP = _msgspec.json.Decoder(_DumpTop)
    _OBJECT_RAW = _msgspec.json.Decoder(dict[str, _msgspec.Raw])


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


def read_dump_json(path: Path) -> Any:
    """dump.json as ``read_json(path, unique_nodes=True)`` reads it, but where it can, each
    node record under "data" is left as its text until ``node_record`` parses it: the whole
    tree of a 100k-node file (~290 MB) is never alive at once, only one record's."""
    return read_dump_records(path)[0]


def read_dump_records(path: Path) -> tuple[Any, bool]:
    """``read_dump_json``'s document, and whether the file is ASCII (``typed_node_record``
    then needs no check of a record's bytes: one scan of the file, 0.4 ms at 9 MB, where a
    copy of each record took 6)."""
    raw = read_bytes(path)
    split = _split_records(raw)
    if split is None:  # NaN literals, long numbers, no "data" object, invalid text
        return parse_json(path, raw, unique_nodes=True), False
    _check_unique_nodes(raw, split, path)
    return split, raw.isascii()


def node_record(value: Any, path: Path) -> Any:
    """A value of ``read_dump_json``'s "data", parsed if it is still text."""
    if _msgspec is None or type(value) is not _msgspec.Raw:
        return value
    try:
        try:
            return _msgspec.json.decode(value)  # checked as JSON when the file was split
        except (_msgspec.DecodeError, UnicodeDecodeError):
            return json.loads(bytes(value).decode("utf-8"))  # what json reads: 1e400 is inf
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AccuracyInputError(path, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise AccuracyInputError(path, "JSON nests too deep to read") from None


def typed_node_record(value: Any, decoder: Any, ascii_file: bool) -> Any:
    """A value of ``read_dump_json``'s "data" decoded by ``decoder`` (a typed msgspec JSON
    decoder: its types decode what they name as the parse into dicts does), or None where
    ``node_record`` must read it: not text, not of the decoder's types, or not ASCII (the
    keys a type skips are checked as JSON, not as UTF-8: ``node_record`` refuses bad bytes
    anywhere; ``ascii_file``: the whole file is, ``read_dump_records`` says). It nests no
    deeper than ``node_record`` reads: called at the depth node_record is (the reader calls
    both from a function of its loop), a typed decoder gives up at the same nesting or one
    sooner (msgspec counts a typed level, a skipped one too, as an untyped one)."""
    if _msgspec is None or type(value) is not _msgspec.Raw:
        return None
    try:
        record = decoder.decode(value)
    except (_msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    return record if ascii_file or bytes(value).isascii() else None


def parse_json_items(path: Path, raw: bytes) -> Iterator[tuple[str, Any]]:
    """The items of ``raw``'s top-level object (the text of ``path``), each value parsed as
    it is reached: the whole tree of a large file (a 100k-node stack.json's is ~60 MB) is
    never alive at once, only one value's. Where msgspec cannot split the text (NaN literals,
    long numbers, bad text), parsed whole with ``parse_json``'s errors; a top level that is
    no object has no items."""
    top = None
    if _msgspec is not None and not _long_number(raw):
        try:
            top = _OBJECT_RAW.decode(raw)
            if not raw.isascii():  # msgspec checks the syntax of what it skips, not its bytes
                raw.decode("utf-8")
        except (_msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            top = None
    if top is None:
        doc = parse_json(path, raw)
        yield from (doc.items() if isinstance(doc, dict) else ())
        return
    del raw
    for key in list(top):
        yield key, node_record(top.pop(key), path)


def _split_records(raw: bytes) -> dict[str, Any] | None:
    if _msgspec is None or _long_number(raw):
        return None
    try:
        # every record's text checked, none of them parsed; NaN and Infinity literals
        # (msprobe's own json.dump writes them) are refused here, and json reads them
        top = _DUMP_TOP.decode(raw)
    except (_msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if top.data is None:
        return None
    return {"task": top.task, "level": top.level, "framework": top.framework, "data": top.data}


def _long_number(raw: bytes) -> bool:
    """A number too long to convert within the limits (json.loads with hooks refuses it)."""
    return raw.translate(_DIGITS).find(b"0" * (limit("json_number_chars") + 1)) >= 0


def parse_json(path: Path, raw: bytes, *, unique_nodes: bool = False) -> Any:
    """``raw``, the text of ``path``, parsed (``read_json``'s errors and limits)."""
    long_numbers = _long_number(raw)
    doc = _fast_loads(raw) if not long_numbers else None
    if doc is not None:  # msgspec checked the UTF-8 itself: no decoded copy of the text
        if unique_nodes:
            _check_unique_nodes(raw, doc, path)
        return doc
    try:
        text = raw.decode("utf-8")  # the slow path (NaN literals, long numbers, bad text)
    except UnicodeDecodeError as exc:
        raise AccuracyInputError(path, "not UTF-8 text; is this really a JSON file?") from exc
    try:
        doc = _loads(text, path, long_numbers=long_numbers)
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


def check_json(path: Path, raw: bytes) -> None:
    """``parse_json(path, raw)``'s refusals, without building the document: the text is
    checked as JSON (msgspec, skipping every value) and as UTF-8; parse_json itself says
    what is wrong where either check fails, or where a number is too long to skip safely.
    A 100k-node stack.json: ~0.02 s, where parsing it took ~0.18 s."""
    if _msgspec is None or _long_number(raw):
        parse_json(path, raw)
        return
    try:
        _msgspec.json.decode(raw, type=_msgspec.Raw)
        raw.decode("utf-8")  # msgspec checks the syntax of the strings it skips, not their bytes
    except (_msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        parse_json(path, raw)


def _fast_loads(raw: bytes) -> Any:
    """msgspec's parse (3.5x json's on a dump.json) where it gives what json.loads gives;
    None where it cannot: NaN/Infinity literals, invalid text (json.loads then names the
    error), nesting too deep (json.loads then fails alike). Integers of any length are read
    exactly, as json.loads reads them; the caller has ruled out numbers past the limits."""
    if _msgspec is None:
        return None
    try:  # NaN/Infinity literals are malformed JSON to msgspec: json.loads reads them
        return _msgspec.json.decode(raw)
    except (_msgspec.DecodeError, UnicodeDecodeError, RecursionError):
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


# every digit byte to "0", every other to " ": a digit run becomes a run of "0" that
# bytes.find (memmem) looks for (0.09 s on a 46 MB dump.json where a [0-9]{65} search took
# 0.57)
# every character a JSON number may hold (digits, sign, point, exponent) -> "0": a run past
# the limit is a number that long, or text that merely looks like one (then the hooks check)
_DIGITS = bytes(48 if (48 <= b <= 57 or b in b"+-.eE") else 32 for b in range(256))


def _loads(text: str, path: Path, *, long_numbers: bool) -> Any:
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
