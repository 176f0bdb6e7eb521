"""The pickle inside a torch .pt file, read without torch or pickle code, and the array it
describes: a restricted unpickler (only tensor rebuild functions, storage types and dtypes
resolve, each to a sealed stand-in), an opcode pre-check, and the strided view built on the
storage bytes.  Shared by the zipfile reader (tensors.py) and the offset reader (ptzip.py)."""

from __future__ import annotations

import io
import math
import pickle
import pickletools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.text import brief, printable

__all__ = ["LEGACY_TORCH_MAGIC", "TensorRef", "parse_byteorder", "parse_tensor_pickle",
           "tensor_from_storage"]

# torch dtype name -> numpy dtype.  Pickled torch dtypes always use these canonical
# names (torch.float32, never torch.float).  ml_dtypes supplies the formats numpy lacks;
# they are looked up by name because older ml_dtypes releases lack some float8 variants.
_NUMPY_NAMES = "float32 float64 float16 int8 int16 int32 int64 uint8 uint16 uint32 uint64 bool"
_ML_DTYPES_NAMES = (
    "bfloat16 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz float8_e8m0fnu"
)
_TORCH_DTYPES: dict[str, np.dtype[Any]] = {
    **{name: np.dtype(name) for name in (*_NUMPY_NAMES.split(), "complex64", "complex128")},
    **{
        n: np.dtype(getattr(ml_dtypes, n))
        for n in _ML_DTYPES_NAMES.split()
        if hasattr(ml_dtypes, n)
    },
}
_KNOWN_DTYPES = frozenset(_TORCH_DTYPES.values())
# Legacy typed storage classes written by _rebuild_tensor_v2 (one per classic dtype).
_STORAGE_DTYPES: dict[str, str] = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "CharStorage": "int8",
    "ShortStorage": "int16",
    "IntStorage": "int32",
    "LongStorage": "int64",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}

# Real torch dtypes we cannot represent: named as "unsupported dtype", not as an attack.
_UNSUPPORTED_TORCH_DTYPES = frozenset(
    {"complex32", "chalf", "qint8", "quint8", "qint32", "quint4x2", "quint2x4", "float4_e2m1fn_x2"}
    | {f"bits{n}" for n in ("1x8", "2x4", "4x2", "8", "16")}
    | {f"{kind}{bits}" for kind in ("int", "uint") for bits in range(1, 8)}
    | {"float8_e8m0fnu"} - set(_TORCH_DTYPES)
)

LEGACY_TORCH_MAGIC = b"\x80\x02\x8a\x0a"  # pickle proto 2 + the long magic of pre-1.6 torch.save


class _BadPickle(Exception):
    """The pickle is malformed or asks for something we refuse; the message says what."""


class _Sealed:
    """Base of every object a pickle can reach: BUILD (``__setstate__``) is refused.

    A frozen slots dataclass still accepts ``__setstate__`` (that is how such objects
    unpickle), so a pickle could BUILD a validated tensor reference into another stride,
    or poison a shared storage type for every later file.  The unpickler looks this method
    up before anything else, so raising here stops every BUILD on these objects.
    """

    __slots__ = ()

    def __setstate__(self, state: object) -> None:
        what = type(self).__name__.lstrip("_")
        raise _BadPickle(f"refused BUILD on {what}: a tensor file never sets object state")


@dataclass(frozen=True, slots=True)
class _StorageType(_Sealed):
    """Stand-in for torch.<X>Storage / torch.storage.UntypedStorage (dtype None = bytes)."""

    dtype: np.dtype[Any] | None


@dataclass(frozen=True, slots=True)
class _DtypeRef(_Sealed):
    """Stand-in for a torch.<dtype> object, as passed to _rebuild_tensor_v3."""

    dtype: np.dtype[Any]


@dataclass(frozen=True, slots=True)
class _StorageRef(_Sealed):
    """A lazy reference to the archive member <prefix>/data/<key>."""

    key: str
    dtype: np.dtype[Any] | None
    nbytes: int


@dataclass(frozen=True, slots=True)
class _TensorRef(_Sealed):
    """What the pickle describes: a strided view of one storage."""

    storage: _StorageRef
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: np.dtype[Any]


# dataclass(frozen=True, slots=True) installs its own __setstate__ on each class (it is how
# such objects unpickle), hiding the base's: put the refusing one back on every stand-in.
for _cls in (_StorageType, _DtypeRef, _StorageRef, _TensorRef):
    _cls.__setstate__ = _Sealed.__setstate__  # type: ignore[method-assign]


def _int_tuple(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or len(value) > 64:
        raise _BadPickle(f"tensor {what} is not a tuple of at most 64 ints: {brief(value)}")
    for item in value:
        if type(item) is not int or not 0 <= item < 1 << 62:
            raise _BadPickle(f"tensor {what} has an invalid entry: {brief(item)}")
    return value


def _tensor_ref(storage: object, offset: object, size: object, stride: object) -> _TensorRef:
    if not isinstance(storage, _StorageRef):
        raise _BadPickle("tensor storage is not a persistent storage reference")
    if type(offset) is not int or not 0 <= offset < 1 << 62:
        raise _BadPickle(f"invalid storage offset {brief(offset)}")
    shape, strides = _int_tuple(size, "size"), _int_tuple(stride, "stride")
    if len(shape) != len(strides):
        raise _BadPickle(f"tensor size {shape} and stride {strides} differ in length")
    if storage.dtype is None:
        raise _BadPickle("an untyped storage needs _rebuild_tensor_v3 with a dtype")
    return _TensorRef(storage, offset, shape, strides, storage.dtype)


def _rebuild_tensor(storage: object, offset: object, size: object, stride: object) -> _TensorRef:
    return _tensor_ref(storage, offset, size, stride)


def _rebuild_tensor_v2(
    storage: object, offset: object, size: object, stride: object, *_grad_hooks_meta: object
) -> _TensorRef:
    return _tensor_ref(storage, offset, size, stride)


def _rebuild_tensor_v3(
    storage: object,
    offset: object,
    size: object,
    stride: object,
    _requires_grad: object,
    _hooks: object,
    dtype: object,
    *_metadata: object,
) -> _TensorRef:
    if not isinstance(storage, _StorageRef) or not isinstance(dtype, _DtypeRef):
        raise _BadPickle("_rebuild_tensor_v3 needs a storage reference and a torch dtype")
    typed = _StorageRef(storage.key, dtype.dtype, storage.nbytes)
    return _tensor_ref(typed, offset, size, stride)


def _rebuild_parameter(data: object, *_grad_hooks: object) -> object:
    # An nn.Parameter is just its data tensor for our purposes.
    return data


def _empty_hooks() -> dict[object, object]:
    # Stand-in for collections.OrderedDict(): backward hooks are never restored.
    return {}


class _Call(_Sealed):
    """A rebuild function as a pickle sees it: callable, never BUILD-able (a bare function's
    ``__dict__`` and ``__defaults__`` could be set by BUILD and outlive the file)."""

    __slots__ = ("_fn",)
    _fn: Callable[..., object]

    def __init__(self, fn: Callable[..., object]) -> None:
        object.__setattr__(self, "_fn", fn)

    def __call__(self, *args: object) -> object:
        return self._fn(*args)

    def __setattr__(self, name: str, value: object) -> None:
        raise _BadPickle("refused to modify a rebuild function")


_SAFE_GLOBALS: dict[str, object] = {
    "torch._utils._rebuild_tensor": _Call(_rebuild_tensor),
    "torch._utils._rebuild_tensor_v2": _Call(_rebuild_tensor_v2),
    "torch._utils._rebuild_tensor_v3": _Call(_rebuild_tensor_v3),
    "torch._utils._rebuild_parameter": _Call(_rebuild_parameter),
    "collections.OrderedDict": _Call(_empty_hooks),
    "torch.storage.UntypedStorage": _StorageType(None),
    "torch.UntypedStorage": _StorageType(None),
    **{f"torch.{cls}": _StorageType(_TORCH_DTYPES[dt]) for cls, dt in _STORAGE_DTYPES.items()},
    **{f"torch.{name}": _DtypeRef(dtype) for name, dtype in _TORCH_DTYPES.items()},
}


class _TensorUnpickler(pickle.Unpickler):
    """Resolves globals only to the harmless stand-ins above; everything else is refused.

    Every way a pickle can reach a callable (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*)
    goes through find_class, so nothing outside _SAFE_GLOBALS can ever run.
    """

    def find_class(self, module: str, name: str) -> Any:
        qualified = f"{module}.{name}"
        if qualified in _SAFE_GLOBALS:
            return _SAFE_GLOBALS[qualified]
        if module == "torch" and (name.endswith("Storage") or name in _UNSUPPORTED_TORCH_DTYPES):
            raise _BadPickle(f"unsupported dtype: tensor of type {qualified!r}")
        raise _BadPickle(
            f"refused to unpickle {qualified!r}: only torch tensor rebuild functions, "
            "storage types and dtypes are allowed in a tensor file"
        )

    def persistent_load(self, pid: Any) -> _StorageRef:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _BadPickle(f"unexpected persistent id {brief(pid)}")
        _, storage_type, key, _location, numel = pid
        if not isinstance(storage_type, _StorageType):
            raise _BadPickle(f"persistent id names no storage type: {brief(storage_type)}")
        if not isinstance(key, str) or not key.isalnum():
            raise _BadPickle(f"invalid storage key {brief(key)}")
        if type(numel) is not int or not 0 <= numel < 1 << 62:
            raise _BadPickle(f"invalid storage size {brief(numel)}")
        dtype = storage_type.dtype
        # Typed storages count elements, UntypedStorage counts bytes.
        nbytes = numel * dtype.itemsize if dtype is not None else numel
        return _StorageRef(key, dtype, nbytes)



_MAX_MEMO_INDEX = 1 << 16  # torch writes a handful of memo entries per tensor


def _check_opcodes(data: bytes) -> None:
    """Walk the opcodes (pickletools reads, never runs them) before the C unpickler sees them.

    The C unpickler trusts declared sizes: it allocates a BINBYTES8/BINUNICODE8 buffer of the
    declared length before reading, and grows its memo to a PUT's index, so a 200-byte pickle
    could take GBs.  pickletools reads lengths against the real data and yields each index.
    """
    try:
        for op, arg, _pos in pickletools.genops(data):
            if "PUT" in op.name and isinstance(arg, int) and not 0 <= arg < _MAX_MEMO_INDEX:
                raise _BadPickle(f"memo index {arg} in data.pkl: not a tensor file's")
    except _BadPickle:
        raise
    except Exception as exc:  # declared lengths past the end, unknown opcodes, ...
        raise _BadPickle(f"corrupt data.pkl: {printable(exc, 200)}") from None


def _checked_ref(obj: _TensorRef, path: str | Path) -> _TensorRef:
    """The tensor reference checked again once the pickle has finished (nothing trusted from
    the time it was built): field types, sizes, strides and the declared storage size."""
    storage = obj.storage
    if (
        type(obj) is not _TensorRef or type(storage) is not _StorageRef
        or not isinstance(obj.dtype, np.dtype) or obj.dtype != storage.dtype
        or obj.dtype not in _KNOWN_DTYPES
        or type(storage.nbytes) is not int or not 0 <= storage.nbytes < 1 << 62
        or not isinstance(storage.key, str) or not storage.key.isalnum()
    ):
        raise AccuracyInputError(path, "data.pkl describes an invalid tensor reference")
    try:
        checked = _tensor_ref(storage, obj.offset, obj.size, obj.stride)
    except _BadPickle as exc:
        raise AccuracyInputError(path, str(exc)) from None
    nbytes = math.prod(checked.size) * checked.dtype.itemsize
    if nbytes > limit("tensor_bytes"):
        raise AccuracyInputError(
            path, f"tensor of shape {brief(list(checked.size))}: {over('tensor_bytes', nbytes)}")
    return checked


def _build_array(raw: np.ndarray, ref: _TensorRef, byteorder: str, path: str | Path) -> np.ndarray:
    dtype = ref.dtype
    count = raw.size // dtype.itemsize
    numel = math.prod(ref.size)
    needed = 0
    if numel:
        needed = (
            ref.offset + 1 + sum((n - 1) * s for n, s in zip(ref.size, ref.stride, strict=True))
        )
    if needed > count:
        raise AccuracyInputError(
            path,
            f"storage too small: {count} elements of {dtype}, but offset {ref.offset}, "
            f"shape {list(ref.size)} and stride {list(ref.stride)} need {needed}",
        )
    elements = raw[: count * dtype.itemsize].view(dtype)
    if byteorder == "big" and dtype.itemsize > 1:
        elements = _swap_bytes(elements)
    if not numel:
        return np.empty(ref.size, dtype=dtype)
    if _is_contiguous(ref.size, ref.stride):
        return elements[ref.offset : ref.offset + numel].reshape(ref.size)
    copied = numel * dtype.itemsize
    if copied > raw.size + limit("expand_bytes"):
        raise AccuracyInputError(
            path, f"the strides {brief(list(ref.stride))} expand {raw.size} stored bytes to "
            f"{copied}: {over('expand_bytes', copied - raw.size)}")
    view = np.lib.stride_tricks.as_strided(
        elements[ref.offset :],
        shape=ref.size,
        strides=tuple(s * dtype.itemsize for s in ref.stride),
        writeable=False,
    )
    # Non-plain strides (views, expands) are copied so callers always get a normal array.
    return np.ascontiguousarray(view)


def _is_contiguous(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    # Row-major layout; the stride of a length-1 dimension never matters (torch
    # leaves arbitrary values there, e.g. after unsqueeze).
    step = 1
    for n, s in zip(reversed(size), reversed(stride), strict=True):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def _swap_bytes(elements: np.ndarray) -> np.ndarray:
    # Swap each scalar component (complex numbers are two floats), via an unsigned view
    # so that ml_dtypes types need no byte-order support of their own.
    width = elements.dtype.itemsize // (2 if elements.dtype.kind == "c" else 1)
    return elements.view(f"<u{width}").byteswap().view(elements.dtype)


TensorRef = _TensorRef


# data.pkl bytes -> the reference they unpickle to.  Tensors of one shape have byte-identical
# pickles (the storage key and the file's name are not in them), and the opcode walk costs
# more than the rest of reading a small tensor.  The reference is immutable and unpickling is
# a pure function of the bytes; _checked_ref (limits are read per call) runs every time.
_PARSED: dict[bytes, TensorRef] = {}
_MAX_PARSED, _MAX_PARSED_BYTES = 4096, 1024


def parse_tensor_pickle(data: bytes, path: str | Path) -> TensorRef:
    """The tensor reference in a data.pkl's bytes, checked; AccuracyInputError otherwise."""
    ref = _PARSED.get(data)
    if ref is None:
        ref = _unpickle(data, path)
        if len(data) <= _MAX_PARSED_BYTES:
            if len(_PARSED) >= _MAX_PARSED:
                _PARSED.clear()
            _PARSED[bytes(data)] = ref
    return _checked_ref(ref, path)


def _unpickle(data: bytes, path: str | Path) -> TensorRef:
    try:
        _check_opcodes(data)
        obj = _TensorUnpickler(io.BytesIO(data)).load()
    except _BadPickle as exc:
        raise AccuracyInputError(path, str(exc)) from None
    except Exception as exc:
        # Hostile or corrupt pickles fail in many ways (TypeError from calling a
        # stand-in with odd arguments, UnpicklingError, EOFError, ...); all are bad input.
        problem = f"corrupt data.pkl: {type(exc).__name__}: {printable(exc, 300)}"
        raise AccuracyInputError(path, problem) from None
    if not isinstance(obj, _TensorRef):
        raise AccuracyInputError(
            path, f"expected a single saved tensor, found {type(obj).__name__}"
        )
    return obj


def parse_byteorder(data: bytes, path: str | Path) -> str:
    """The byteorder member's word: ``little`` or ``big``."""
    order = data.decode("ascii", "replace").strip()
    if order not in ("little", "big"):
        raise AccuracyInputError(path, f"unknown byteorder {printable(order, 40)!r}")
    return order


def tensor_from_storage(raw: np.ndarray, ref: TensorRef, byteorder: str,
                        path: str | Path) -> np.ndarray:
    """The array ``ref`` describes over the storage bytes ``raw`` (uint8)."""
    if raw.size < ref.storage.nbytes:
        raise AccuracyInputError(
            path,
            f"storage too small: data/{ref.storage.key} holds {raw.size} bytes, "
            f"the pickle declares {ref.storage.nbytes}",
        )
    try:
        return _build_array(raw[: ref.storage.nbytes], ref, byteorder, path)
    except (ValueError, MemoryError) as exc:
        # A hostile shape over a tiny storage (stride 0, or zero-sized but enormous).
        problem = f"cannot build a tensor of shape {list(ref.size)}: {exc}"
        raise AccuracyInputError(path, problem) from None
