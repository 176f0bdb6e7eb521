"""Numpy references for shape APIs (transpose, reshape, split, cat ...), with their gradients."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pytest_accuracy.precheck.args import Bound, DType, Unsupported
from pytest_accuracy.precheck.refs_math import Arrays, Grads, Seeds, seed


def transpose(b: Bound) -> Arrays:
    return [np.swapaxes(b.tensor("input"), b.integer("dim0"), b.integer("dim1"))]


def transpose_bw(b: Bound, grads: Seeds) -> Grads:
    return {"input": np.swapaxes(seed(grads), b.integer("dim0"), b.integer("dim1"))}


def permute(b: Bound) -> Arrays:
    return [np.transpose(b.tensor("input"), b.ints("dims"))]


def permute_bw(b: Bound, grads: Seeds) -> Grads:
    dims = b.ints("dims") or []
    return {"input": np.transpose(seed(grads), np.argsort([d % len(dims) for d in dims]))}


def reshape(b: Bound) -> Arrays:
    if isinstance(b.get("shape"), DType):
        raise Unsupported("view(dtype) reinterprets bits; not a value computation")
    return [b.tensor("input").reshape(b.ints("shape") or [])]


def flatten(b: Bound) -> Arrays:
    x = b.tensor("input")
    if x.ndim == 0:
        return [x.reshape(1)]
    start, end = b.integer("start_dim", 0) % x.ndim, b.integer("end_dim", -1) % x.ndim
    return [x.reshape((*x.shape[:start], -1, *x.shape[end + 1 :]))]


def unsqueeze(b: Bound) -> Arrays:
    x = b.tensor("input")
    return [np.expand_dims(x, b.integer("dim") % (x.ndim + 1))]


def squeeze(b: Bound) -> Arrays:
    x, dims = b.tensor("input"), b.ints("dim")
    axes = tuple(d % x.ndim for d in dims if x.shape[d] == 1) if dims else None
    return [np.squeeze(x, axis=axes)]


def reshape_bw(b: Bound, grads: Seeds) -> Grads:
    return {"input": seed(grads).reshape(b.tensor("input").shape)}


def _split_points(b: Bound, length: int) -> list[int]:
    sizes = b.get("split_size_or_sections")
    if isinstance(sizes, list):
        return list(np.cumsum(b.ints("split_size_or_sections") or [])[:-1])
    step = b.integer("split_size_or_sections")
    return list(range(step, length, step))


def split(b: Bound) -> Arrays:
    x = b.tensor("input")
    dim = b.integer("dim", 0)
    return list(np.split(x, _split_points(b, x.shape[dim]), axis=dim))


def chunk(b: Bound) -> Arrays:
    x, chunks, dim = b.tensor("input"), b.integer("chunks"), b.integer("dim", 0)
    step = -(-x.shape[dim] // chunks)
    return list(np.split(x, list(range(step, x.shape[dim], step)), axis=dim))


def concat_grads(b: Bound, grads: Seeds, pieces: Arrays) -> Grads:
    """Gradient of split/chunk: the output gradients side by side (zeros where none flowed)."""
    dim = b.integer("dim", 0)
    parts = [g if g is not None else np.zeros_like(p) for g, p in zip(grads, pieces, strict=False)]
    return {"input": np.concatenate(parts, axis=dim)}


def split_bw(b: Bound, grads: Seeds) -> Grads:
    return concat_grads(b, grads, split(b))


def chunk_bw(b: Bound, grads: Seeds) -> Grads:
    return concat_grads(b, grads, chunk(b))


def cat(b: Bound) -> Arrays:
    tensors = b.get("tensors")
    if not isinstance(tensors, list) or not all(isinstance(t, np.ndarray) for t in tensors):
        raise Unsupported("cat needs a list of tensors")
    return [np.concatenate(tensors, axis=b.integer("dim", 0))]


def triangle(upper: bool) -> Callable[[Bound], Arrays]:
    fn = np.triu if upper else np.tril
    return lambda b: [fn(b.tensor("input"), k=b.integer("diagonal", 0))]


def triangle_bw(upper: bool) -> Callable[[Bound, Seeds], Grads]:
    fn = np.triu if upper else np.tril
    return lambda b, grads: {"input": fn(seed(grads), k=b.integer("diagonal", 0))}


def full(b: Bound) -> Arrays:
    return [np.full(b.ints("size") or [], b.number("fill_value"))]


def cumsum(b: Bound) -> Arrays:
    return [np.cumsum(b.tensor("input"), axis=b.integer("dim"))]


def cumsum_bw(b: Bound, grads: Seeds) -> Grads:
    dim = b.integer("dim")
    return {"input": np.flip(np.cumsum(np.flip(seed(grads), dim), axis=dim), dim)}


def _index(b: Bound) -> Any:
    """The recorded index; msprobe writes a tuple as a list, so a list means a tuple here."""
    index = b.values.get("index")
    return tuple(index) if isinstance(index, list) else index


def getitem(b: Bound) -> Arrays:
    return [np.asarray(b.tensor("input")[_index(b)])]


def getitem_bw(b: Bound, grads: Seeds) -> Grads:
    x = b.tensor("input")
    out = np.zeros(x.shape, dtype=seed(grads).dtype)
    np.add.at(out, _index(b), seed(grads))
    return {"input": out}
