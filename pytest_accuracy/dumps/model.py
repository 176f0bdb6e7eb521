"""One in-memory model for every dump format: DumpSet > Dump (step, rank) > Call > records."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from pytest_accuracy.dumps.shared import SharedValues
from pytest_accuracy.dumps.stats import Stats, StatsColumns

CallKind = Literal["api", "module", "params_grad", "kernel"]
Direction = Literal["forward", "backward", "params_grad"]
Role = Literal["input", "output", "parameter", "grad"]
DumpMode = Literal["tensor", "statistics", "md5"]

# Canonical dtype names (numpy-style) for the spellings msprobe writes.
_DTYPE_ALIASES = {
    "float32": "float32",
    "float": "float32",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "float64": "float64",
    "double": "float64",
    "int64": "int64",
    "long": "int64",
    "int32": "int32",
    "int": "int32",
    "int16": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "bool": "bool",
    "complex64": "complex64",
    "complex128": "complex128",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
}

# Machine epsilon per floating dtype (exact: 2**-23 for float32, as torch.finfo gives it);
# it drives the dtype-aware tolerances and torch's default rms_norm eps.
FLOAT_EPS = {
    "float64": 2.0**-52,
    "float32": 2.0**-23,
    "float16": 2.0**-10,
    "bfloat16": 2.0**-7,
    "float8_e4m3fn": 2.0**-3,
    "float8_e5m2": 2.0**-2,
}


def canonical_dtype(raw: str | None) -> str:
    """Map 'torch.float32', 'Float32', 'BFloat16' ... onto numpy-style names."""
    if not raw:
        return "unknown"
    name = raw.rsplit(".", 1)[-1].lower()
    return _DTYPE_ALIASES.get(name, name)


def is_float_dtype(dtype: str) -> bool:
    return dtype in FLOAT_EPS


_RECORD_FIELDS = ("path", "role", "dtype", "raw_dtype", "shape", "stats", "requires_grad", "md5",
                  "data_root", "data_name", "dump_json", "confine")


class RecordSource:
    """Where a tensor record's statistics are and the files it comes from: one for every
    record a reader makes from one dump.json (its ``StatsColumns``), or a record's own."""

    __slots__ = ("confine", "data_root", "dump_json", "stats")

    def __init__(self, stats: Stats | StatsColumns, data_root: Path | None = None,
                 dump_json: Path | None = None, confine: Path | None = None) -> None:
        self.stats = stats
        self.data_root = data_root  # the directory every data file must stay inside
        self.dump_json = dump_json  # the dump.json the records came from, for messages
        self.confine = confine  # the dump directory named: data_root must resolve in it


class TensorRecord:
    """One tensor argument, output, parameter or gradient of a call; data loads lazily.

    A plain class, not a dataclass: a reader passes its dump's ``RecordSource`` as ``stats``
    and the record's ``row`` in the source's ``StatsColumns``; the statistics and the file
    paths are then the source's, not four float objects and three paths a record (a 100k-node
    dump holds 300k records a side; __slots__: no per-object __dict__)."""

    __slots__ = ("_row", "_source", "data_name", "dtype", "md5", "path", "raw_dtype",
                 "requires_grad", "role", "shape")

    def __init__(
        self,
        path: str,  # position inside the call: "input.0", "output.1.0", "parameters.weight"
        role: Role,
        dtype: str,  # canonical
        raw_dtype: str,
        shape: tuple[int, ...],
        stats: Stats | StatsColumns | RecordSource,
        requires_grad: bool | None = None,
        md5: str | None = None,
        data_root: Path | None = None,
        data_name: str | None = None,  # file name as written in dump.json, resolved on load
        dump_json: Path | None = None,
        confine: Path | None = None,
        row: int = 0,  # the record's row in the source's StatsColumns
    ) -> None:
        # one statement a field: no tuple packed and unpacked (~40 ns less, 400k records)
        self.path = path
        self.role = role
        self.dtype = dtype
        self.raw_dtype = raw_dtype
        self.shape = shape
        self.requires_grad = requires_grad
        self.md5 = md5
        self.data_name = data_name
        self._source = (stats if isinstance(stats, RecordSource)
                        else RecordSource(stats, data_root, dump_json, confine))
        self._row = row

    @property
    def stats(self) -> Stats:
        stats = self._source.stats
        return stats.get(self._row) if type(stats) is StatsColumns else stats  # type: ignore[return-value]

    @property
    def stats_row(self) -> tuple[StatsColumns, int] | None:
        """The dump's statistics columns and this record's row there, if it keeps them so."""
        stats = self._source.stats
        return (stats, self._row) if type(stats) is StatsColumns else None

    @property
    def data_root(self) -> Path | None:
        """The directory of the record's data file; None where it names none."""
        return self._source.data_root if self.data_name else None

    @property
    def dump_json(self) -> Path | None:
        return self._source.dump_json

    @property
    def confine(self) -> Path | None:
        return self._source.confine

    def _fields(self) -> tuple[object, ...]:
        return (self.path, self.role, self.dtype, self.raw_dtype, self.shape, self.stats,
                self.requires_grad, self.md5, self.data_root, self.data_name, self.dump_json,
                self.confine)

    def __eq__(self, other: object) -> bool:
        if type(other) is not TensorRecord:
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value: as a dataclass

    def __repr__(self) -> str:
        shown = zip(_RECORD_FIELDS, self._fields(), strict=True)
        return f"TensorRecord({', '.join(f'{n}={v!r}' for n, v in shown)})"

    @property
    def has_data(self) -> bool:
        # data_root's own test first, without the property: asked ~3 times a record
        return bool(self.data_name) and self._source.data_root is not None

    def load(self) -> np.ndarray:
        """The tensor's values (memory-mapped where the format allows).

        The path is confined to the dump directory here rather than at read time, so
        a bad data_name fails the one item that needs it, not the whole collection.
        """
        from pytest_accuracy.dumps.tensors import load_data
        from pytest_accuracy.errors import AccuracyInputError

        if self.data_root is None or not self.data_name:
            where = self.dump_json or "dump"
            raise AccuracyInputError(where, f"{self.path} has no tensor data (not a tensor dump)")
        return load_data(self.data_root, self.data_name, self.confine)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


@dataclass(frozen=True, slots=True)
class ScalarArg:
    """A non-tensor argument (int, float, str, slice, dtype, None, ...) as msprobe recorded it."""

    path: str
    type_name: str
    value: object


Arg = TensorRecord | ScalarArg


@dataclass(slots=True)
class Call:
    """One dumped node: an API call, a module/cell call or a parameter-gradient record."""

    name: str
    kind: CallKind
    direction: Direction
    order: int  # position in dump.json, i.e. execution order
    inputs: list[Arg] = field(default_factory=list)
    outputs: list[Arg] = field(default_factory=list)
    parameters: list[TensorRecord] = field(default_factory=list)
    parent: str | None = None  # from construct.json
    stack: tuple[str, ...] = ()  # innermost first, from stack.json
    prefix: str = ""  # Functional, Tensor, Torch, Mint, Module, Cell, ...
    op: str = ""  # api name ("linear") or module class name ("RMSNorm")
    scope: str = ""  # module path ("layers.0.n1"); empty for APIs
    index: int = 0  # call counter from the name
    # the tensor inputs and outputs and the dtype signature, fixed by a reader once the call
    # is complete (asked ~10 times a node by the compare); None: found anew on every ask.
    # Three fields, not one tuple of them: 200k calls, 10 MB less
    fixed_inputs: list[TensorRecord] | None = field(default=None, repr=False, compare=False)
    fixed_outputs: list[TensorRecord] | None = field(default=None, repr=False, compare=False)
    fixed_signature: DtypeSignature | None = field(default=None, repr=False, compare=False)
    # where the stack comes from when ``stack`` is not given (read when a message asks)
    stacks: StackIndex | None = field(default=None, repr=False, compare=False)

    @property
    def input_tensors(self) -> list[TensorRecord]:
        """The tensor inputs (read-only: a reader's call may share the list with ``inputs``)."""
        if self.fixed_inputs is not None:
            return self.fixed_inputs
        return [a for a in self.inputs if isinstance(a, TensorRecord)]

    @property
    def output_tensors(self) -> list[TensorRecord]:
        """The tensor outputs (read-only, as ``input_tensors``)."""
        if self.fixed_outputs is not None:
            return self.fixed_outputs
        return [a for a in self.outputs if isinstance(a, TensorRecord)]

    def fix_tensors(self) -> None:
        """Compute the tensor inputs and outputs once: inputs and outputs are complete."""
        # the tensors kept and _signature written out: a reader's every node asks (~300 ns less)
        # every element a TensorRecord once the loops below have looked (no cast: a call)
        ins: list[TensorRecord] = self.inputs  # type: ignore[assignment]
        outs: list[TensorRecord] = self.outputs  # type: ignore[assignment]
        for a in ins:
            if type(a) is not TensorRecord:
                ins = [a for a in ins if isinstance(a, TensorRecord)]
                break
        for a in outs:
            if type(a) is not TensorRecord:
                outs = [a for a in outs if isinstance(a, TensorRecord)]
                break
        self.fixed_inputs, self.fixed_outputs = ins, outs
        params = self.parameters
        if len(ins) == 1 and len(outs) == 1 and not params:  # most calls: no comprehension
            i, o = ins[0], outs[0]
            signature: DtypeSignature = ((i.path, i.dtype), (o.path, o.dtype))
        else:
            signature = tuple([(r.path, r.dtype) for r in (*ins, *params, *outs)])
        self.fixed_signature = _SIGNATURES.known(signature) or _SIGNATURES(signature)

    @property
    def dtype_signature(self) -> DtypeSignature:
        """(path, dtype) of every tensor input, parameter and output, in order: two calls
        with equal signatures pair every tensor with one of the same dtype."""
        if self.fixed_signature is not None:
            return self.fixed_signature
        return _signature(self.input_tensors, self.parameters, self.output_tensors)

    @property
    def scalar_inputs(self) -> list[ScalarArg]:
        if self.fixed_inputs is not None and self.fixed_inputs is self.inputs:
            return []  # its inputs are all tensors
        return [a for a in self.inputs if isinstance(a, ScalarArg)]

    def stack_frames(self) -> tuple[str, ...]:
        """The call's stack, innermost first (its dump's stack.json, read when first asked)."""
        if self.stack or self.stacks is None:
            return self.stack
        return self.stacks.get(self.name)

    def stack_line(self) -> str | None:
        """The innermost stack frame outside the frameworks' own files, for messages."""
        stack = self.stack_frames()
        for frame in stack:
            if "site-packages" not in frame and "dist-packages" not in frame:
                return " ".join(frame.split())
        return " ".join(stack[0].split()) if stack else None


class StackIndex:
    """Node name -> stack frames of one dump, made from its stack.json when a node's stack is
    first asked (a failure's message, a report's rows): a run where nothing fails never asks,
    and indexing a 100k-node stack.json took 0.13 s a side. The file was read and parsed
    when the dump was (a bad one fails the dump's reading); ``load`` reads it again and
    fails only where it changed since."""

    __slots__ = ("_frames", "_load", "_lock")

    def __init__(self, load: Callable[[], dict[str, tuple[str, ...]]]) -> None:
        self._load: Callable[[], dict[str, tuple[str, ...]]] | None = load
        self._frames: dict[str, tuple[str, ...]] | None = None
        self._lock = threading.Lock()  # nodes compare in threads

    def get(self, name: str) -> tuple[str, ...]:
        if self._frames is None:
            with self._lock:
                if self._frames is None and self._load is not None:
                    self._frames, self._load = self._load(), None
        return self._frames.get(name, ()) if self._frames is not None else ()


DtypeSignature = tuple[tuple[str, str], ...]
_SIGNATURES: SharedValues[DtypeSignature] = SharedValues(4096)


def _signature(*groups: list[TensorRecord]) -> DtypeSignature:
    signature = tuple([(r.path, r.dtype) for group in groups for r in group])
    return _SIGNATURES.known(signature) or _SIGNATURES(signature)


def is_collective(call: Call) -> bool:
    """A call that exchanges values between ranks (msprobe's ``Distributed.*``)."""
    return call.prefix == "Distributed"


@dataclass
class Dump:
    """One dump.json (one step of one rank) with its calls in execution order."""

    path: Path  # the dump.json (or the native dump directory)
    framework: str  # pytorch | mindspore | mindtorch
    level: str  # L0 | L1 | mix | L2 | native
    mode: DumpMode
    step: int
    rank: int
    calls: list[Call]
    notes: list[str] = field(default_factory=list)  # what the reader had to assume
    # calls whose outputs a view of another layout could not make, and why (pairing/shards.py)
    left_out: dict[str, str] = field(default_factory=dict)
    # calls that complete a value across ranks inside (a module that all-reduces): errors of
    # other ranks come in through them, as through a collective (pairing/shards.py)
    exchanges: set[str] = field(default_factory=set)
    # the NPU rank's pipeline stage, on a view of a bench with fewer stages (pairing/shards.py)
    stage: int = 0
    stages: int = 1
    # on a view of a coarser bench dumped as statistics: the NPU records joined over their TP
    # group (call name -> the ranks joined, and the records by path; pairing/shards.py)
    joined: dict[str, tuple[tuple[int, ...], dict[str, TensorRecord]]] = field(
        default_factory=dict)
    # on such a view: the bench ranks it was made of (else empty: the rank's own)
    bench_ranks: tuple[int, ...] = ()
    # on a view of a bench with more pipeline stages: the bench ranks each call came from
    call_ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _by_name: dict[str, Call] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {c.name: c for c in self.calls}

    def get(self, name: str) -> Call | None:
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self.calls)


@dataclass
class DumpSet:
    """Every step and rank of one run, keyed by (step, rank), iterated in step-then-rank order."""

    root: Path
    dumps: dict[tuple[int, int], Dump]
    # a view of another layout: the NPU (step, rank)s it could not make, and why
    unmade: dict[tuple[int, int], str] = field(default_factory=dict)
    # a view of another layout: what it assumed of the whole run (pairing/shards.py)
    notes: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[Dump]:
        return iter(self.dumps[k] for k in sorted(self.dumps))

    def keys(self) -> list[tuple[int, int]]:
        return sorted(self.dumps)

    @property
    def framework(self) -> str:
        return next(iter(self)).framework if self.dumps else "unknown"

    @property
    def mode(self) -> DumpMode:
        return next(iter(self)).mode if self.dumps else "statistics"

    @property
    def level(self) -> str:
        return next(iter(self)).level if self.dumps else "unknown"
