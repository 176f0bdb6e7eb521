"""Rebuild msprobe's recorded call arguments into values bound to an API's parameter names."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_accuracy.dumps.model import Arg, ScalarArg, TensorRecord, canonical_dtype


class Unsupported(Exception):
    """This call cannot be checked (the message says why): its case is skipped, never passed."""


@dataclass(frozen=True)
class DType:
    """A dtype argument (torch.dtype / mindspore.dtype) as a canonical name; never resolved."""

    name: str


_PLAIN = frozenset({"int", "float", "bool", "str"})
_SEQUENCES = frozenset({"tuple", "list", "torch.Size"})
_DTYPES = frozenset({"torch.dtype", "mindspore.dtype", "mindspore.common.dtype", "numpy.dtype"})
# Arguments that only say where or how to allocate; the re-run decides that itself.
_PLACEMENT = frozenset({"torch.device", "mindspore.device", "device"})
_DROP = object()

# Keyword arguments that do not change the values an API computes.
IGNORED_KWARGS = frozenset(
    {"inplace", "_stacklevel", "device", "layout", "pin_memory", "requires_grad", "memory_format"}
)


def scalar_value(arg: ScalarArg) -> object:
    """The Python value of a recorded non-tensor argument; nothing in it is resolved or called."""
    kind, value = arg.type_name, arg.value
    if kind == "None":
        return None
    if kind in _PLAIN and isinstance(value, (int, float, bool, str)):
        return value
    if kind == "slice" and isinstance(value, list) and len(value) == 3:
        return slice(*value)
    if kind == "ellipsis":
        return Ellipsis
    if kind in _DTYPES:
        return DType(canonical_dtype(str(value)))
    if kind in _SEQUENCES and isinstance(value, list):
        return list(value)
    if kind in _PLACEMENT:
        return _DROP
    # numpy scalar types (numpy.float32, numpy.int64 ...) carry a plain JSON number.
    if kind.startswith("numpy.") and isinstance(value, (int, float, bool)):
        return value
    raise Unsupported(f"argument {arg.path} of type {kind!r} is not supported by the precheck")


def rebuild(
    args: Sequence[Arg], tensor_value: Callable[[TensorRecord], object]
) -> tuple[list[object], dict[str, object]]:
    """Positional and keyword arguments from msprobe's flattened paths.

    ``input.1`` is positional argument 1, ``input.dim`` the keyword ``dim``, and a
    further ``.N`` an element of a list (``input.0.1``).  msprobe writes nothing for an
    empty list or tuple, so a hole in the numbering is an empty list.
    """
    items: list[tuple[tuple[str, ...], object]] = []
    for arg in args:
        parts = tuple(arg.path.split(".")[1:])
        if not parts:
            raise Unsupported(f"argument path {arg.path!r} has no position")
        value = tensor_value(arg) if isinstance(arg, TensorRecord) else scalar_value(arg)
        if value is not _DROP:
            items.append((parts, value))
    groups = _group(items)
    positional = {int(k): v for k, v in groups.items() if k.isdigit()}
    kwargs = {k: _assemble(v) for k, v in groups.items() if not k.isdigit()}
    count = max(positional) + 1 if positional else 0
    ordered = [_assemble(positional[i]) if i in positional else [] for i in range(count)]
    return ordered, kwargs


def _group(
    items: list[tuple[tuple[str, ...], object]],
) -> dict[str, list[tuple[tuple[str, ...], object]]]:
    groups: dict[str, list[tuple[tuple[str, ...], object]]] = {}
    for path, value in items:
        if not path:
            raise Unsupported("an argument is recorded both as a value and as a container")
        groups.setdefault(path[0], []).append((path[1:], value))
    return groups


def _assemble(items: list[tuple[tuple[str, ...], object]]) -> object:
    if len(items) == 1 and not items[0][0]:
        return items[0][1]
    groups = _group(items)
    if all(k.isdigit() for k in groups):
        count = max(int(k) for k in groups) + 1
        return [_assemble(groups[str(i)]) if str(i) in groups else [] for i in range(count)]
    return {k: _assemble(v) for k, v in groups.items()}


@dataclass(frozen=True)
class Signature:
    """An API's parameters in call order, as one framework spells them.

    ``varargs`` collects extra positionals (``Tensor.reshape(2, 8, -1)``); ``aliases``
    maps a framework's keyword spelling onto the canonical name (MindSpore ``axis`` ->
    ``dim``); ``constants`` are fixed values this dump name implies (``fused=True``).
    """

    params: tuple[str, ...]
    varargs: str | None = None
    aliases: Mapping[str, str] = field(default_factory=dict)
    constants: Mapping[str, object] = field(default_factory=dict)

    def bind(self, args: Sequence[object], kwargs: Mapping[str, object]) -> dict[str, object]:
        values: dict[str, object] = dict(zip(self.params, args, strict=False))
        extra = list(args[len(self.params) :])
        if extra:
            if self.varargs is None:
                raise Unsupported(
                    f"{len(args)} positional arguments recorded; "
                    f"the reference takes at most {len(self.params)}"
                )
            one_list = len(extra) == 1 and isinstance(extra[0], list)
            values[self.varargs] = extra[0] if one_list else extra
        for key, value in kwargs.items():
            name = self.aliases.get(key, key)
            if name in IGNORED_KWARGS:
                continue
            if name not in self.params and name != self.varargs:
                raise Unsupported(f"keyword argument {key!r} is not supported by the reference")
            if name in values:
                raise Unsupported(f"argument {name!r} given both by position and by keyword")
            values[name] = value
        values.update(self.constants)
        return values


class Bound:
    """Arguments of one call by canonical parameter name, with the dumped dtype of each tensor."""

    def __init__(self, values: Mapping[str, object], dtypes: Mapping[str, str]) -> None:
        self.values = dict(values)
        self.dtypes = dict(dtypes)

    def get(self, name: str, default: Any = None) -> Any:
        value = self.values.get(name, default)
        return default if value is None else value

    def has(self, name: str) -> bool:
        return self.values.get(name) is not None

    def tensor(self, name: str) -> np.ndarray:
        value = self.values.get(name)
        if isinstance(value, np.ndarray):
            return value
        if isinstance(value, (int, float, bool)):
            return np.asarray(value)
        raise Unsupported(f"argument {name!r} is {type(value).__name__}, expected a tensor")

    def opt_tensor(self, name: str) -> np.ndarray | None:
        return None if self.values.get(name) is None else self.tensor(name)

    def integer(self, name: str, default: int | None = None) -> int:
        value = self.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise Unsupported(f"argument {name!r} = {value!r} is not an integer")
        return int(value)

    def number(self, name: str, default: float | None = None) -> float:
        value = self.get(name, default)
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Unsupported(f"argument {name!r} = {value!r} is not a number")
        return float(value)

    def ints(self, name: str, default: Sequence[int] | None = None) -> list[int] | None:
        """An int-or-list argument (dim, shape, sizes) as a list; None when absent."""
        value = self.get(name, default)
        if value is None:
            return None
        items = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
            raise Unsupported(f"argument {name!r} = {value!r} is not a list of integers")
        return [int(v) for v in items]

    def dtype_of(self, name: str) -> str:
        return self.dtypes.get(name, "float32")
