"""A node record's arguments (inputs, outputs, parameters) as flat records, for the msprobe
reader: msprobe's structural encoding (lists, dicts, tensor and scalar slots) walked in the
parsed record (``flatten``), or, for a record of the usual shape, in its typed decoding
(``typed_args``: the same records, made ~2x faster)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import msgspec

from pytest_accuracy.dumps.model import (
    Arg,
    RecordSource,
    Role,
    ScalarArg,
    StackIndex,
    TensorRecord,
    canonical_dtype,
)
from pytest_accuracy.dumps.shared import SharedValues
from pytest_accuracy.dumps.stats import StatsColumns
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.text import brief

TENSOR_TYPES = {
    "torch.Tensor",
    "mindspore.Tensor",
    "numpy.ndarray",
    "torch.nn.parameter.Parameter",
    "mindspore.common.parameter.Parameter",
    "mindspore.Parameter",
}


class ReadContext:
    """What every record of one dump.json needs to know while being parsed."""

    def __init__(self, dump_json: Path, data_root: Path | None, confine: Path | None,
                 ascii_file: bool = False, parents: dict[str, str | None] | None = None,
                 stacks: StackIndex | None = None) -> None:
        self.dump_json = dump_json  # for messages
        self.ascii_file = ascii_file  # the whole dump.json is ASCII (typed_node_record)
        self.parents = parents or {}  # construct.json's: node -> parent
        self.stacks = stacks  # stack.json's
        self.stats = StatsColumns()  # every record's statistics, one row each
        # what every record shares: the columns, the data directory, the file, the confine
        self.source = RecordSource(self.stats, data_root, dump_json, confine)


def flatten(value: Any, path: str, role: Role, ctx: ReadContext, node: str) -> list[Arg]:
    """Walk msprobe's structural encoding of args (lists, dicts, records) into flat args."""
    if value is None:
        return [ScalarArg(path, "None", None)]
    if type(value) is list:
        if len(value) == 1 and type(item := value[0]) is dict and (
                item.get("type") in TENSOR_TYPES or _is_tensor(item)):
            # most calls' inputs or outputs: a list of one slot, not append's four
            return [_tensor(item, child_path(path, 0), role, ctx, node)]
        out: list[Arg] = []
        for i, item in enumerate(value):
            child = child_path(path, i)
            if type(item) is dict and _is_tensor(item):  # most items: no recursion for them
                out.append(_tensor(item, child, role, ctx, node))
            else:
                out += flatten(item, child, role, ctx, node)
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
        out += flatten(item, child_path(path, key), role, ctx, node)
    return out


# (path, position or key) -> "path.position", one string for "input.0" across 100k nodes
# (bounded: a hostile dump could name a million)
CHILD_PATHS: dict[tuple[str, int | str], str] = {}


def child_path(path: str, i: int | str) -> str:
    known = CHILD_PATHS.get((path, i))
    if known is None:
        known = sys.intern(f"{path}.{i}")
        if len(CHILD_PATHS) < 4096:
            CHILD_PATHS[(path, i)] = known
    return known


def _is_tensor(value: dict[str, Any]) -> bool:
    return value.get("type") in TENSOR_TYPES or ("dtype" in value and "shape" in value)


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
DTYPES: dict[str, tuple[str, str]] = {}


def _dtype(raw: Any) -> tuple[str, str]:
    """(raw dtype string, canonical name) of a record's "dtype" value (None where none)."""
    dtype = DTYPES.get(raw) if type(raw) is str else None
    if dtype is None:
        raw_dtype = sys.intern(str(raw))  # one string per dtype, not per record
        dtype = (raw_dtype, canonical_dtype(raw_dtype))
        if len(DTYPES) < 256:  # a hostile dump's million dtype strings are not kept here
            DTYPES[raw_dtype] = dtype
    return dtype


def _valid_dims(shape: list[Any]) -> bool:
    # a loop, not all() over a generator: 1 us less a record, 400k records in a 100k dump
    for d in shape:  # noqa: SIM110
        if type(d) is not int or not 0 <= d < 1 << 62:
            return False
    return True


# one tuple per distinct shape: a layer's tensors repeat the same few in every layer
_shapes: SharedValues[tuple[int, ...]] = SharedValues(65536)


def _tensor(value: dict[str, Any], path: str, role: Role, ctx: ReadContext,
            node: str) -> TensorRecord:
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
    dtype = DTYPES.get(raw) if type(raw) is str else None
    stats = (get("Max"), get("Min"), get("Mean"), get("Norm"))
    for v in stats:  # nearly always four floats: converted only where one is not
        if type(v) is not float:
            stats = (_num(stats[0]), _num(stats[1]), _num(stats[2]), _num(stats[3]))
            break
    grad = get("requires_grad")
    return TensorRecord(
        path,
        role,
        (dtype := dtype or _dtype(raw))[1],
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


# The typed lane. A record decoded into these structs holds the values a parse into dicts
# holds under the keys they name (msgspec decodes an ``Any`` field as it decodes untyped; a
# key written twice keeps its last value, as in a dict), and UNSET where the key is absent.
# What is not of the types below fails the decoding: the record is then read as dicts.

# a shape as ``_valid_dims`` accepts it (an array of at most 64 ints, each in [0, 2**62):
# msgspec refuses bools and floats as ints), already the tuple a record keeps
_Shape = Annotated[tuple[Annotated[int, msgspec.Meta(ge=0, lt=1 << 62)], ...],
                   msgspec.Meta(max_length=64)]


class Slot(msgspec.Struct, gc=False):
    """One item of a typed record's list: a tensor's or a scalar's keys (others are skipped:
    ``_tensor`` and a scalar with a "value" read none of them)."""

    # a string or null, as nearly every slot has them (another type: read as dicts)
    type: str | msgspec.UnsetType | None = msgspec.UNSET
    dtype: str | msgspec.UnsetType | None = msgspec.UNSET
    shape: _Shape | msgspec.UnsetType = msgspec.UNSET
    Max: Any = None
    Min: Any = None
    Mean: Any = None
    Norm: Any = None
    # what ``_tensor`` keeps of these as they are (another type: read as dicts)
    requires_grad: bool | None = None
    md5: str | None = None
    data_name: str | None = None
    value: Any = msgspec.UNSET


# a list's items: nested lists and None as parsed untyped (``flatten`` walks them)
Items = list[Slot | list[Any] | None] | None


class ForwardRecord(msgspec.Struct, gc=False):
    """A forward API's or module's record (a parameters_grad record's keys are parameter
    names: never typed): the keys the reader reads of it, every other one skipped, as the
    reader skips it."""

    input_args: Items | msgspec.UnsetType = msgspec.UNSET
    input_kwargs: Any = msgspec.UNSET
    parameters: Any = msgspec.UNSET
    output: Items | msgspec.UnsetType = msgspec.UNSET


class BackwardRecord(msgspec.Struct, gc=False):
    """A backward API's or module's record, as ``ForwardRecord``."""

    input: Items | msgspec.UnsetType = msgspec.UNSET
    output: Items | msgspec.UnsetType = msgspec.UNSET


FORWARD_DECODER = msgspec.json.Decoder(ForwardRecord)
BACKWARD_DECODER = msgspec.json.Decoder(BackwardRecord)


class Unusual(Exception):
    """A typed record holds what only the dict walk reads right (a slot with neither a tensor
    type nor a scalar's "value", a shape an error names): read it as dicts instead."""


_UNSET = msgspec.UNSET
# "input.0" and "output.0", the paths of most slots (child_path's own strings), without a key
# tuple made for each
_FIRST_CHILD = {"input": child_path("input", 0), "output": child_path("output", 0)}
_NO_DATA = frozenset({"", "-1"})  # a data_name naming no file


def typed_args(items: Items | msgspec.UnsetType, path: str, role: Role, ctx: ReadContext,
               node: str) -> list[Arg]:
    """``flatten(value, ...)`` of the value a typed record holds (UNSET: the key is absent,
    where the reader flattens an empty list), or Unusual."""
    if items is None:
        return [ScalarArg(path, "None", None)]
    if items is _UNSET:
        return []
    if len(items) == 1 and type(item := items[0]) is Slot:
        # most calls' inputs or outputs: a list of one slot, not append's four (flatten's)
        return [_slot_arg(item, _FIRST_CHILD.get(path) or child_path(path, 0), role, ctx)]
    out: list[Arg] = []
    for i, item in enumerate(items):
        child = CHILD_PATHS.get((path, i)) or child_path(path, i)
        if type(item) is Slot:
            out.append(_slot_arg(item, child, role, ctx))
        else:  # a list or None: flatten's own walk
            out += flatten(item, child, role, ctx, node)
    return out


def _slot_arg(slot: Slot, path: str, role: Role, ctx: ReadContext) -> Arg:
    """``flatten``'s record of a dict in a list, made from its typed slot."""
    kind = slot.type
    if kind not in TENSOR_TYPES:
        # a scalar: flatten's ScalarArg of a dict with "type" (a string or null here) and
        # "value", no tensor by its keys (one with "dtype" and "shape" is)
        if kind is _UNSET or slot.value is _UNSET or (
                slot.dtype is not _UNSET and slot.shape is not _UNSET):
            raise Unusual
        return ScalarArg(path, str(kind), slot.value)
    shape = slot.shape
    if shape is _UNSET:  # an error's message, or a shape not valid: flatten's
        raise Unusual
    data_name = slot.data_name
    if data_name in _NO_DATA:
        data_name = None
    raw: Any = slot.dtype  # a string, null or UNSET: DTYPES has strings alone, the rest miss
    stats = (mx, mn, mean, norm) = (slot.Max, slot.Min, slot.Mean, slot.Norm)
    if not (type(mx) is float and type(mn) is float and type(mean) is float
            and type(norm) is float):  # nearly always four floats: converted where not
        stats = (_num(mx), _num(mn), _num(mean), _num(norm))
    return TensorRecord(
        path,
        role,
        (dtype := DTYPES.get(raw) or _dtype(None if raw is _UNSET else raw))[1],
        dtype[0],
        _shapes.known(shape) or _shapes(shape),
        ctx.source,
        slot.requires_grad,
        slot.md5,
        None,
        data_name,
        None,
        None,
        ctx.stats.add(stats),
    )
