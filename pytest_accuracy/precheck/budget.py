"""Precheck allocation budget: a replay's memory estimated from dump.json shapes, up front."""

from __future__ import annotations

import math

from pytest_accuracy.dumps.model import Call, ScalarArg, TensorRecord
from pytest_accuracy.limits import limit, over

__all__ = ["allocation_over_budget", "estimate_bytes"]

# Inputs and outputs live in their dumped dtype, in float64 for the reference, and once more
# on the device side and in the metrics: four float64-sized copies is a safe upper estimate.
_COPIES = 4
_ATTENTION_WORDS = ("attention", "sdpa", "flash_attn")


def _numel(record: TensorRecord) -> int:
    return math.prod(max(int(d), 0) for d in record.shape)


def _tensors(call: Call | None) -> list[TensorRecord]:
    if call is None:
        return []
    args = [*call.inputs, *call.outputs, *call.parameters]
    return [a for a in args if isinstance(a, TensorRecord)]


def _attention_scores(api: str, call: Call | None) -> int:
    """Elements of the score matrix an attention reference builds (batch x heads x Sq x Sk).

    The shapes give ``numel(q) / head_dim`` query rows; every one meets each key position,
    taken as the longest non-last dimension of the key (exact for BNSD and BSND layouts).
    """
    if call is None or not any(w in api.lower() for w in _ATTENTION_WORDS):
        return 0
    tensors = [a for a in call.inputs if isinstance(a, TensorRecord) and a.shape]
    if len(tensors) < 2:
        return 0
    q, k = tensors[0], tensors[1]
    rows = _numel(q) // max(int(q.shape[-1]), 1)
    keys = max((int(d) for d in k.shape[:-1]), default=1)
    return rows * keys


# APIs whose arguments, not their recorded tensors, size what the replay allocates: a record
# of 4 elements whose arguments say full((40000, 40000)) would allocate 12.8 GB.
_SIZED_BY_ARGS = frozenset({
    "full", "zeros", "ones", "empty", "rand", "randn", "randint", "new_full", "new_zeros",
    "new_ones", "new_empty", "expand", "broadcast_to", "expand_as", "eye", "fill"})
_REPEATS = frozenset({"repeat", "tile", "repeat_interleave", "repeat_elements"})
_RANGES = frozenset({"arange", "range", "linspace", "logspace"})
_HUGE = 1 << 62  # a size that is no number (inf, nan): over any budget


def _scalars(call: Call) -> list[tuple[str, float | int]]:
    out: list[tuple[str, float | int]] = []
    for arg in call.inputs:
        if not isinstance(arg, ScalarArg):
            continue
        value = arg.value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((arg.path, value))
    return out


def _argument_elements(api: str, call: Call | None) -> int:
    """Elements the call's own arguments ask for (sizes, repeats, ranges); 0 for other APIs."""
    base = api.rsplit(".", 1)[-1].strip("_").lower()
    if call is None or base not in _SIZED_BY_ARGS | _REPEATS | _RANGES:
        return 0
    given = _scalars(call)
    if any(isinstance(v, float) and not math.isfinite(v) for _, v in given):
        return _HUGE
    if base in _RANGES:
        if base != "arange" and base != "range":
            return max((abs(int(v)) for _, v in given), default=0)  # the steps argument
        values = [v for _, v in given][:3]
        start, end = (0, values[0]) if len(values) == 1 else (*values, 0, 0)[:2]
        step = abs(values[2]) if len(values) > 2 and values[2] else 1
        try:
            return math.ceil(abs(end - start) / step)
        except OverflowError:  # 10**400 elements
            return _HUGE
    if base in ("full", "new_full", "fill"):  # the fill value is no size
        given = [(p, v) for p, v in given if p.count(".") > 1 and "fill" not in p] or given[:-1]
    sizes = math.prod(max(abs(int(v)), 1) for _, v in given if isinstance(v, int))
    if base in _REPEATS:
        sizes *= max((_numel(t) for t in _tensors(call)), default=1)
    return sizes


def estimate_bytes(api: str, forward: Call | None, backward: Call | None) -> int:
    """Bytes a replay of the call will allocate, from the recorded shapes (never the data)
    and from the sizes its arguments give (``full``, ``arange``, ``repeat``, ...)."""
    elements = sum(_numel(t) for t in (*_tensors(forward), *_tensors(backward)))
    elements += _attention_scores(api, forward) * (2 if backward is not None else 1)
    made = _argument_elements(api, forward)  # beyond what the output record already counts
    recorded = sum(_numel(t) for t in forward.outputs if isinstance(t, TensorRecord)) if (
        forward is not None) else 0
    elements += max(made - recorded, 0) * (2 if backward is not None else 1)
    return elements * 8 * _COPIES


def allocation_over_budget(api: str, forward: Call | None, backward: Call | None) -> str | None:
    """The skip reason when replaying this call would pass the precheck allocation limit."""
    need = estimate_bytes(api, forward, backward)
    if need <= limit("precheck_bytes"):
        return None
    return f"replay needs about {need} bytes: {over('precheck_bytes', need)}"
