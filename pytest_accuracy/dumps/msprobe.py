"""Reader for msprobe dumps (PyTorch and MindSpore): dump.json + stack.json + construct.json."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from msgspec import UNSET

from pytest_accuracy.dumps.framework import infer_framework
from pytest_accuracy.dumps.jsonfile import (
    check_json,
    node_record,
    parse_json_items,
    read_bytes,
    read_dump_records,
    read_json,
    typed_node_record,
)
from pytest_accuracy.dumps.model import (
    Arg,
    Call,
    CallKind,
    Direction,
    Dump,
    DumpMode,
    StackIndex,
    TensorRecord,
)
from pytest_accuracy.dumps.msprobe_args import (
    BACKWARD_DECODER,
    FORWARD_DECODER,
    ReadContext,
    Unusual,
    flatten,
    typed_args,
)
from pytest_accuracy.dumps.msprobe_args import DTYPES as _DTYPES  # noqa: F401  # tests ask it
from pytest_accuracy.dumps.shared import SharedValues
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.text import brief, escape_line

_DIRECTIONS: dict[str, Direction] = {"forward": "forward", "backward": "backward"}


def read_dump(dump_json: Path, *, step: int, rank: int, confine: Path | None = None) -> Dump:
    """Read one dump.json with the stack.json and construct.json beside it."""
    # each record's text parsed as its Call is made
    doc, ascii_file = read_dump_records(dump_json)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        raise AccuracyInputError(
            dump_json, "not an msprobe dump.json: no 'data' object at top level"
        )
    data: dict[str, Any] = doc["data"]
    if len(data) > limit("dump_nodes"):  # each node costs ~300-900 bytes once read
        raise AccuracyInputError(dump_json, f"nodes: {over('dump_nodes', len(data))}")
    data_root = dump_json.parent / "dump_tensor_data"
    mode = _dump_mode(doc, data, dump_json)
    stacks = _read_stacks(dump_json.parent / "stack.json")
    parents = _read_construct(dump_json.parent / "construct.json")
    ctx = ReadContext(dump_json, data_root if mode == "tensor" else None, confine, ascii_file,
                      parents, stacks)
    calls = []
    # every name shown as written where all of them are printable ASCII (asked of them
    # joined, once: not a call a node)
    plain = (joined := "".join(data)).isascii() and joined.isprintable()
    del joined
    # each record is parsed here (read_dump_records leaves it as text where it can) and dropped
    # once its Call is built: the whole tree and every Call alive together were the peak
    # memory of a big dump
    for order, name in enumerate(list(data)):
        value, shown = data.pop(name), name if plain else shown_name(name)
        call = (_typed_call(name, shown, value, order, ctx)
                or _read_call(name, shown, value, order, ctx))
        call.fix_tensors()
        calls.append(call)
    framework, notes = str(doc.get("framework") or ""), list[str]()
    if not framework:
        framework, note = infer_framework(calls)
        notes.append(note)
    return Dump(
        path=dump_json,
        framework=framework,
        level=str(doc.get("level") or "unknown"),
        mode=mode,
        step=step,
        rank=rank,
        calls=calls,
        notes=notes,
    )


def _dump_mode(doc: dict[str, Any], data: dict[str, Any], path: Path) -> DumpMode:
    if doc.get("task") == "tensor":
        return "tensor"
    # md5 is not a task of its own: statistics records that carry an "md5" key.
    for value in data.values():
        record = node_record(value, path)
        if '"md5"' in json.dumps(record):
            return "md5"
        if record:
            break
    return "statistics"


def _read_stacks(path: Path) -> StackIndex | None:
    """stack.json read and parsed now (a bad one fails the dump), indexed when first asked
    (its entries parsed one at a time: the whole tree was ~60 MB at 100k nodes). The loader
    holds nothing of the dump: a dump released is freed at once, not at a cycle collection."""
    if not path.exists():
        return None
    raw = read_bytes(path)
    check_json(path, raw)  # its errors are the dump's, now
    # the text is read again when a stack is first asked, not kept (8 MB a 100k-node side):
    # a file changed since is refused, not read as this dump's stacks
    digest = hashlib.blake2b(raw, digest_size=16).digest()
    return StackIndex(lambda: _index_stacks(parse_json_items(path, _same_text(path, digest))))


def _same_text(path: Path, digest: bytes) -> bytes:
    raw = read_bytes(path)
    if hashlib.blake2b(raw, digest_size=16).digest() != digest:
        raise AccuracyInputError(path, "changed while the run was reading it; run again")
    return raw


def _index_stacks(items: Iterable[tuple[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Node name -> its frames, from stack.json's items."""
    stacks: dict[str, tuple[str, ...]] = {}
    # one tuple per distinct stack: a layer's calls repeat the same frames in every layer
    shared: dict[tuple[str, ...], tuple[str, ...]] = {}
    for _, entry in items:
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list):
            # map(str): each frame as str() makes it, in one C loop (20k entries a side)
            frames = tuple(map(str, entry[1])) if isinstance(entry[1], list) else ()
            frames = shared.setdefault(frames, frames)
            for name in entry[0]:
                stacks[shown_name(name if type(name) is str else str(name))] = frames
    return stacks


def shown_name(name: str) -> str:
    """A node name as every output shows it: control, bidi and invisible characters escaped
    (``\\n``, ``\\u200b``), so that no name forges a line of pytest's output or hides a
    failing twin of a passing node; escaped once here, the same in dump.json, construct.json
    and stack.json."""
    return name if name.isascii() and name.isprintable() else escape_line(name)


def _read_construct(path: Path) -> dict[str, str | None]:
    if not path.exists():
        return {}
    doc = read_json(path)
    if not isinstance(doc, dict):
        raise AccuracyInputError(path, "construct.json must map node names to parent names")
    # one string per parent, not per child naming it (a module has many), escaped once
    shared: dict[str, str] = {}
    known = shared.get
    # the keys (JSON's: strings) are shown as written where all of them are printable ASCII,
    # asked of them joined (one scan, not a call a key)
    plain = (joined := "".join(doc)).isascii() and joined.isprintable()
    parents: dict[str, str | None] = {}
    for k, v in doc.items():
        if v is not None:
            v = str(v)
            v = known(v) or shared.setdefault(v, shown_name(v))
        parents[k if plain else shown_name(k)] = v
    _check_parent_depth(path, parents)
    return parents


def _check_parent_depth(path: Path, parents: dict[str, str | None]) -> None:
    """Refuse parent cycles and chains deeper than ``construct_depth``, in linear time.

    Whatever walks the tree later (scopes, alignment depths) then stays linear too; a
    100k-node chain would otherwise cost every walker N^2 / 2 steps.
    """
    cap = limit("construct_depth")
    depth: dict[str, int] = {}
    for start, parent in parents.items():
        if start in depth:
            continue  # on a chain walked before, which was within the cap
        if parent is None or parent in depth:  # most nodes: a root, or a parent's depth known
            below = depth[start] = depth[parent] + 1 if parent is not None else 0
        else:
            below = _walk_chain(path, parents, depth, start)
        if below > cap:
            problem = f"parent chain of {brief(start)}: {over('construct_depth', below)}"
            raise AccuracyInputError(path, problem)


def _walk_chain(path: Path, parents: dict[str, str | None], depth: dict[str, int],
                start: str) -> int:
    """The depth of ``start``, its ancestors' not known yet given theirs on the way."""
    chain: list[str] = []
    on_chain: set[str] = set()
    cur: str | None = start
    while cur is not None and cur not in depth:
        if cur in on_chain:
            raise AccuracyInputError(path, f"node {brief(cur)} is its own ancestor")
        chain.append(cur)
        on_chain.add(cur)
        cur = parents.get(cur)
    below = depth[cur] if cur is not None else -1
    for node in reversed(chain):
        below += 1
        depth[node] = below
    return below


def parse_node_name(name: str) -> tuple[CallKind, Direction, str, str, int]:
    """Split a node name into (kind, direction, prefix, api or class name, call index)."""
    head, _, last = name.rpartition(".")
    if last in _DIRECTIONS:  # most nodes: an API's, "<prefix>.<api>.<index>.<direction>"
        stem, _, index = head.rpartition(".")
        # the API branch below, where the name has 4 parts or more: its parts[-2] is a
        # number, which the branches before it do not take
        if index.isdigit() and "." in stem:
            prefix, op = _API_STEMS.get(stem) or _api_stem(stem)
            return "api", _DIRECTIONS[last], prefix, op, int(index)
    parts = name.split(".")
    prefix = parts[0]
    if len(parts) >= 3 and parts[-2] == "parameters_grad" and parts[-1].isdigit():
        return "params_grad", "params_grad", prefix, parts[-3], int(parts[-1])
    if len(parts) >= 4 and parts[-2] in _DIRECTIONS and parts[-1].isdigit():
        return "module", _DIRECTIONS[parts[-2]], prefix, parts[-3], int(parts[-1])
    if len(parts) >= 4 and parts[-1] in _DIRECTIONS and parts[-2].isdigit():
        return "api", _DIRECTIONS[parts[-1]], prefix, ".".join(parts[1:-2]), int(parts[-2])
    return "api", "forward", prefix, ".".join(parts[1:]), 0


# "<prefix>.<api>" -> (prefix, api): an API's every call repeats it (bounded: a hostile dump
# could name a million)
_API_STEMS: dict[str, tuple[str, str]] = {}


def _api_stem(stem: str) -> tuple[str, str]:
    prefix, _, op = stem.partition(".")  # parts[0] and ".".join(parts[1:-2]) of the name
    if len(_API_STEMS) < 4096:
        _API_STEMS[stem] = (prefix, op)
    return prefix, op


def module_scope(name: str) -> str:
    """The module path of a module or parameters_grad node name ("layers.0.n1")."""
    parts = name.split(".")
    tail = 2 if parts[-2] == "parameters_grad" else 3
    return ".".join(parts[1:-tail])


# prefixes and API or class names: a dump has a few hundred, each written in ~1000 node
# names; shared instead of one string per node
_shared: SharedValues[str] = SharedValues(65536)
# call counters: every API counts from 0, so 100k calls hold a few thousand distinct numbers
_counts: SharedValues[int] = SharedValues(65536)


def _read_call(name: str, shown: str, value: Any, order: int, ctx: ReadContext) -> Call:
    """The call of one node of dump.json (its name as written and as shown, its value in
    "data"), its record parsed into dicts."""
    record = node_record(value, ctx.dump_json)
    if not isinstance(record, dict):
        raise AccuracyInputError(ctx.dump_json, f"node {brief(name)}: record is not an object")
    try:
        return _parse_call(shown, record, order, ctx)
    except RecursionError:
        raise AccuracyInputError(ctx.dump_json, f"node {brief(name)}: nests too deep") from None


def _typed_call(name: str, shown: str, value: Any, order: int,
                ctx: ReadContext) -> Call | None:
    """``_read_call``'s call, made from the record's typed decoding (~2x faster than from
    dicts, the same call); None where it must be read as dicts (``typed_node_record``,
    ``Unusual``), and for a parameters_grad record (its keys are parameter names)."""
    if "parameters_grad" in name:
        return None
    try:
        parsed = parse_node_name(shown)
    except ValueError:  # a "digit" int() refuses: the dict walk fails where it does
        return None
    kind, direction = parsed[0], parsed[1]
    if kind == "params_grad":
        return None  # not reached: its name holds "parameters_grad"
    # decoded as what the reader reads of the call's direction (the other keys skipped)
    forward = direction == "forward"
    record = typed_node_record(value, FORWARD_DECODER if forward else BACKWARD_DECODER,
                               ctx.ascii_file)
    if record is None:
        return None
    rows = len(ctx.stats)
    try:
        parameters: list[TensorRecord] = _NONE_GIVEN
        if forward:
            inputs = typed_args(record.input_args, "input", "input", ctx, shown)
            if (kwargs := record.input_kwargs) is not UNSET:
                inputs += flatten(kwargs, "input", "input", ctx, shown)
            if (params := record.parameters) is not UNSET:
                parameters = [p for p in flatten(params, "parameters", "parameter", ctx, shown)
                              if isinstance(p, TensorRecord)] or _NONE_GIVEN
        else:
            inputs = typed_args(record.input, "input", "input", ctx, shown)
        outputs = typed_args(record.output, "output", "output", ctx, shown)
    except (Unusual, RecursionError):  # read again as dicts, which say what is wrong
        ctx.stats.truncate(rows)  # with the rows of what it made: made again
        return None
    return _call(shown, parsed, order, inputs, outputs, parameters, ctx)


def _call(name: str, parsed: tuple[CallKind, Direction, str, str, int], order: int,
          inputs: list[Arg], outputs: list[Arg], parameters: list[TensorRecord],
          ctx: ReadContext) -> Call:
    """The call of this name (``parse_node_name``'s parts) with its arguments read (made in
    one step: no field set again)."""
    kind, direction, prefix, op, index = parsed
    scope = module_scope(name) if kind in ("module", "params_grad") else ""
    shared = _shared.known
    return Call(name, kind, direction, order, inputs, outputs, parameters,
                ctx.parents.get(name), (), shared(prefix) or _shared(prefix),
                shared(op) or _shared(op), scope, _counts.known(index) or _counts(index),
                None, None, None, ctx.stacks)


def _parse_call(name: str, record: dict[str, Any], order: int, ctx: ReadContext) -> Call:
    parsed = parse_node_name(name)
    kind, direction = parsed[0], parsed[1]
    if kind == "params_grad":
        outputs: list[Arg] = []
        for param, records in record.items():
            items = records if isinstance(records, list) else [records]
            for i, item in enumerate(items):
                path = f"grad.{param}" if len(items) == 1 else f"grad.{param}.{i}"
                outputs.extend(flatten(item, path, "grad", ctx, name))
        return _call(name, parsed, order, _NONE_GIVEN, outputs, _NONE_GIVEN, ctx)
    get = record.get
    parameters: list[TensorRecord] = _NONE_GIVEN
    if direction == "forward":
        inputs = flatten(get("input_args", _NONE_GIVEN), "input", "input", ctx, name)
        kwargs = get("input_kwargs", _NONE_GIVEN)
        if kwargs is not _NONE_GIVEN:
            inputs += flatten(kwargs, "input", "input", ctx, name)
        params = get("parameters", _NONE_GIVEN)
        if params is not _NONE_GIVEN:
            parameters = [p for p in flatten(params, "parameters", "parameter", ctx, name)
                          if isinstance(p, TensorRecord)] or _NONE_GIVEN
    else:
        inputs = flatten(get("input", _NONE_GIVEN), "input", "input", ctx, name)
    outputs = flatten(get("output", _NONE_GIVEN), "output", "output", ctx, name)
    return _call(name, parsed, order, inputs, outputs, parameters, ctx)


# A key the record does not have, and the arguments or parameters of a call that has none:
# one empty list, never changed (200k calls, 11 MB of empty lists less)
_NONE_GIVEN: list[Any] = []

