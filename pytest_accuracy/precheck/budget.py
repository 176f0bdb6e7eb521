"""Precheck allocation budget: a replay's memory estimated from dump.json shapes, up front."""

from __future__ import annotations

import math

from pytest_accuracy.dumps.model import Call, TensorRecord
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


def estimate_bytes(api: str, forward: Call | None, backward: Call | None) -> int:
    """Bytes a replay of the call will allocate, from the recorded shapes (never the data)."""
    elements = sum(_numel(t) for t in (*_tensors(forward), *_tensors(backward)))
    elements += _attention_scores(api, forward) * (2 if backward is not None else 1)
    return elements * 8 * _COPIES


def allocation_over_budget(api: str, forward: Call | None, backward: Call | None) -> str | None:
    """The skip reason when replaying this call would pass the precheck allocation limit."""
    need = estimate_bytes(api, forward, backward)
    if need <= limit("precheck_bytes"):
        return None
    return f"replay needs about {need} bytes: {over('precheck_bytes', need)}"
