"""Reader for msprobe dumps (PyTorch and MindSpore): dump.json + stack.json + construct.json."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pytest_accuracy.dumps.framework import infer_framework
from pytest_accuracy.dumps.jsonfile import (
    check_json,
    node_record,
    parse_json_items,
    read_bytes,
    read_dump_json,
    read_json,
)
from pytest_accuracy.dumps.model import (
    Arg,
    Call,
    CallKind,
    Direction,
    Dump,
    DumpMode,
    RecordSource,
    Role,
    ScalarArg,
    SharedValues,
    StackIndex,
    TensorRecord,
    canonical_dtype,
)
from pytest_accuracy.dumps.stats import StatsColumns
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.text import brief, escape_line

_TENSOR_TYPES = {
    "torch.Tensor",
    "mindspore.Tensor",
    "numpy.ndarray",
    "torch.nn.parameter.Parameter",
    "mindspore.common.parameter.Parameter",
    "mindspore.Parameter",
}
_DIRECTIONS: dict[str, Direction] = {"forward": "forward", "backward": "backward"}


def read_dump(dump_json: Path, *, step: int, rank: int, confine: Path | None = None) -> Dump:
    """Read one dump.json with the stack.json and construct.json beside it."""
    doc = read_dump_json(dump_json)  # each record's text parsed as its Call is made
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
    ctx = _Context(dump_json, data_root if mode == "tensor" else None, confine)
    calls = []
    # each record is parsed here (read_dump_json leaves it as text where it can) and dropped
    # once its Call is built: the whole tree and every Call alive together were the peak
    # memory of a big dump
    for order, name in enumerate(list(data)):
        record = node_record(data.pop(name), dump_json)
        if not isinstance(record, dict):
            raise AccuracyInputError(dump_json, f"node {brief(name)}: record is not an object")
        try:
            call = _parse_call(shown_name(name), record, order, ctx)
        except RecursionError:
            raise AccuracyInputError(dump_json, f"node {brief(name)}: nests too deep") from None
        call.parent = parents.get(call.name)
        call.stacks = stacks
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
    # one string per parent, not per child naming it (a module has many)
    shared: dict[str, str] = {}
    parents = {shown_name(str(k)): (shared.setdefault(str(v), shown_name(str(v)))
                                    if v is not None else None)
               for k, v in doc.items()}
    _check_parent_depth(path, parents)
    return parents


def _check_parent_depth(path: Path, parents: dict[str, str | None]) -> None:
    """Refuse parent cycles and chains deeper than ``construct_depth``, in linear time.

    Whatever walks the tree later (scopes, alignment depths) then stays linear too; a
    100k-node chain would otherwise cost every walker N^2 / 2 steps.
    """
    cap = limit("construct_depth")
    depth: dict[str, int] = {}
    for start in parents:
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
        if below > cap:
            problem = f"parent chain of {brief(start)}: {over('construct_depth', below)}"
            raise AccuracyInputError(path, problem)


class _Context:
    """What every record of one dump.json needs to know while being parsed."""

    def __init__(self, dump_json: Path, data_root: Path | None, confine: Path | None) -> None:
        self.dump_json = dump_json  # for messages
        self.stats = StatsColumns()  # every record's statistics, one row each
        # what every record shares: the columns, the data directory, the file, the confine
        self.source = RecordSource(self.stats, data_root, dump_json, confine)


def parse_node_name(name: str) -> tuple[CallKind, Direction, str, str, int]:
    """Split a node name into (kind, direction, prefix, api or class name, call index)."""
    parts = name.split(".")
    prefix = parts[0]
    if len(parts) >= 3 and parts[-2] == "parameters_grad" and parts[-1].isdigit():
        return "params_grad", "params_grad", prefix, parts[-3], int(parts[-1])
    if len(parts) >= 4 and parts[-2] in _DIRECTIONS and parts[-1].isdigit():
        return "module", _DIRECTIONS[parts[-2]], prefix, parts[-3], int(parts[-1])
    if len(parts) >= 4 and parts[-1] in _DIRECTIONS and parts[-2].isdigit():
        return "api", _DIRECTIONS[parts[-1]], prefix, ".".join(parts[1:-2]), int(parts[-2])
    return "api", "forward", prefix, ".".join(parts[1:]), 0


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


def _parse_call(name: str, record: dict[str, Any], order: int, ctx: _Context) -> Call:
    kind, direction, prefix, op, index = parse_node_name(name)
    scope = module_scope(name) if kind in ("module", "params_grad") else ""
    shared = _shared.known
    call = Call(name, kind, direction, order, _NONE_GIVEN, _NONE_GIVEN, _NONE_GIVEN, None, (),
                shared(prefix) or _shared(prefix), shared(op) or _shared(op), scope,
                _counts.known(index) or _counts(index))
    if kind == "params_grad":
        call.outputs = []
        for param, records in record.items():
            items = records if isinstance(records, list) else [records]
            for i, item in enumerate(items):
                path = f"grad.{param}" if len(items) == 1 else f"grad.{param}.{i}"
                call.outputs.extend(_flatten(item, path, "grad", ctx, name))
        return call
    get = record.get
    if direction == "forward":
        call.inputs = _flatten(get("input_args", _NONE_GIVEN), "input", "input", ctx, name)
        kwargs = get("input_kwargs", _NONE_GIVEN)
        if kwargs is not _NONE_GIVEN:
            call.inputs += _flatten(kwargs, "input", "input", ctx, name)
        params = get("parameters", _NONE_GIVEN)
        if params is not _NONE_GIVEN:
            call.parameters = [p for p in _flatten(params, "parameters", "parameter", ctx, name)
                               if isinstance(p, TensorRecord)] or _NONE_GIVEN
    else:
        call.inputs = _flatten(get("input", _NONE_GIVEN), "input", "input", ctx, name)
    call.outputs = _flatten(get("output", _NONE_GIVEN), "output", "output", ctx, name)
    return call


# A key the record does not have, and the arguments or parameters of a call that has none:
# one empty list, never changed (200k calls, 11 MB of empty lists less)
_NONE_GIVEN: list[Any] = []


def _flatten(value: Any, path: str, role: Role, ctx: _Context, node: str) -> list[Arg]:
    """Walk msprobe's structural encoding of args (lists, dicts, records) into flat args."""
    if value is None:
        return [ScalarArg(path, "None", None)]
    if type(value) is list:
        if len(value) == 1 and type(item := value[0]) is dict and (
                item.get("type") in _TENSOR_TYPES or _is_tensor(item)):
            # most calls' inputs or outputs: a list of one slot, not append's four
            return [_tensor(item, _child_path(path, 0), role, ctx, node)]
        out: list[Arg] = []
        for i, item in enumerate(value):
            child = _child_path(path, i)
            if type(item) is dict and _is_tensor(item):  # most items: no recursion for them
                out.append(_tensor(item, child, role, ctx, node))
            else:
                out += _flatten(item, child, role, ctx, node)
        return out
    if not isinstance(value, dict):
        raise AccuracyInputError(ctx.dump_json, f"node {brief(node)}: unexpected value at {path}")
    if _is_tensor(value):
        return [_tensor(value, path, role, ctx, node)]
    if "type" in value:
        payload = value.get("value", {k: v for k, v in value.items() if k != "type"})
        return [ScalarArg(path, str(value["type"]), payload)]
    out = []
    for key, item in value.items():
        out += _flatten(item, _child_path(path, key), role, ctx, node)
    return out


# (path, position or key) -> "path.position", one string for "input.0" across 100k nodes
# (bounded: a hostile dump could name a million)
_CHILD_PATHS: dict[tuple[str, int | str], str] = {}


def _child_path(path: str, i: int | str) -> str:
    known = _CHILD_PATHS.get((path, i))
    if known is None:
        known = sys.intern(f"{path}.{i}")
        if len(_CHILD_PATHS) < 4096:
            _CHILD_PATHS[(path, i)] = known
    return known


def _is_tensor(value: dict[str, Any]) -> bool:
    return value.get("type") in _TENSOR_TYPES or ("dtype" in value and "shape" in value)


def _num(value: Any) -> float | None:
    if type(value) is float:  # nearly every statistic: no further checks
        return value
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)  # msprobe writes inf/nan as strings in some versions
        except ValueError:
            return None
    return None


# raw dtype string -> (the interned raw string, its canonical name): a dump has a handful
_DTYPES: dict[str, tuple[str, str]] = {}


def _valid_dims(shape: list[Any]) -> bool:
    # a loop, not all() over a generator: 1 us less a record, 400k records in a 100k dump
    for d in shape:  # noqa: SIM110
        if type(d) is not int or not 0 <= d < 1 << 62:
            return False
    return True


# one tuple per distinct shape: a layer's tensors repeat the same few in every layer
_shapes: SharedValues[tuple[int, ...]] = SharedValues(65536)


def _tensor(value: dict[str, Any], path: str, role: Role, ctx: _Context, node: str) -> TensorRecord:
    get = value.get
    shape = get("shape")
    if type(shape) is not list or len(shape) > 64 or not _valid_dims(shape):
        raise AccuracyInputError(
            ctx.dump_json, f"node {brief(node)}: {path} has an invalid shape {shape!r}"
        )
    data_name = get("data_name")
    if type(data_name) is not str or data_name in ("", "-1"):
        data_name = None
    md5 = get("md5")
    raw = get("dtype")
    dtype = _DTYPES.get(raw) if type(raw) is str else None
    if dtype is None:
        raw_dtype = sys.intern(str(raw))  # one string per dtype, not per record
        dtype = (raw_dtype, canonical_dtype(raw_dtype))
        if len(_DTYPES) < 256:  # a hostile dump's million dtype strings are not kept here
            _DTYPES[raw_dtype] = dtype
    stats = (get("Max"), get("Min"), get("Mean"), get("Norm"))
    for v in stats:  # nearly always four floats: converted only where one is not
        if type(v) is not float:
            stats = (_num(stats[0]), _num(stats[1]), _num(stats[2]), _num(stats[3]))
            break
    grad = get("requires_grad")
    return TensorRecord(
        path,
        role,
        dtype[1],
        dtype[0],
        _shapes.known(dims := tuple(shape)) or _shapes(dims),
        ctx.source,  # the dump's: its statistics columns and files
        grad if type(grad) is bool else None,
        str(md5) if md5 is not None else None,
        None,
        data_name,
        None,
        None,
        ctx.stats.add(stats),
    )
