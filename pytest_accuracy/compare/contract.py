"""What a fused call promises, checked on the chain of calls the other run makes instead.

Where one run computes attention in one call (``scaled_dot_product_attention``) and the other
in a chain (matmul, scale, mask, softmax, matmul), only the chain's end has a counterpart. The
fused call's record still says how it computes: in its output's precision, and with the scale
it was given (or 1/sqrt of the head size). A call of the chain that breaks either is where an
error of the region entered.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pytest_accuracy.compare.metrics import MASK_VALUE
from pytest_accuracy.compare.results import Finding
from pytest_accuracy.dumps.model import FLOAT_EPS, Call, ScalarArg
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.pairing.anchors import leading

_ATTENTION = ("scaled_dot_product_attention", "npu_fusion_attention", "flash_attention_score",
              "FlashAttentionScore")
_SCALES = {"__mul__": 1, "__rmul__": 1, "mul": 1, "Mul": 1, "__truediv__": -1, "div": -1,
           "true_divide": -1, "RealDiv": -1, "Div": -1}
_SCALE_REL = 1e-6


def chain_contract(chain: Sequence[Call], fused: Call, step_dtype: str,
                   before: Sequence[Call] = ()) -> Finding | None:
    """The first call of ``chain`` that breaks what ``fused`` promises, as a finding naming
    it (``via``); None when the chain keeps it (or the record says too little). A precision
    below the fused call's is one only below ``step_dtype`` too: the precision both runs
    already went through (two codebases place their casts apart). ``before``: the run's
    calls up to the chain's end, where the chain's mask may have been made."""
    return (_scale(chain, fused) or _mask(chain, fused, before)
            or _precision(chain, fused, step_dtype))


def _mask(chain: Sequence[Call], fused: Call, before: Sequence[Call]) -> Finding | None:
    """A causal fused call (``is_causal=True``) against a chain whose mask is not causal:
    with tensor data, the positions the masking call fills against j > i; with statistics,
    the softmax's Max (a causal first row attends to itself alone: its weight is 1). Named
    where the record shows it: the mask's maker, else the masking call (data), else the
    softmax."""
    scalars = {a.path.rsplit(".", 1)[-1]: a.value for a in fused.scalar_inputs}
    if fused.op not in _ATTENTION or scalars.get("is_causal") is not True:
        return None
    masking = next((c for c in chain if any(r.dtype == "bool" for r in c.input_tensors)), None)
    softmax = next((c for c in chain if c.op.lower() == "softmax"), None)
    wrong = _masked_otherwise(masking) if masking is not None else None
    if wrong is None and softmax is not None:
        out = leading(softmax)
        high = out.stats.max if out is not None else None
        if high is not None and math.isfinite(high) and high < 1.0 - _CAUSAL_SLACK:
            wrong = (f"no row of {softmax.name} attends to one position alone (its Max is "
                     f"{high:.4g})")
    if wrong is None:
        return None
    maker = _mask_maker(masking, before) if masking is not None else None
    culprit = maker or (masking if wrong.startswith("it fills") else softmax) or masking
    if culprit is None:
        return None
    return Finding("argument", f"the region's mask is not causal: {wrong}, where the bench's "
                   f"{fused.op} is causal (is_causal=True: row i sees positions 0..i)",
                   via=culprit.name)


_CAUSAL_SLACK = 1e-3


def _masked_otherwise(masking: Call) -> str | None:
    """How the masking call's output (tensor data) differs from a causal mask, else None."""
    out = leading(masking)
    if out is None or not out.has_data or len(out.shape) < 2:
        return None
    try:
        values = np.asarray(out.load(), dtype=np.float64)
    except (AccuracyInputError, ValueError, TypeError):
        return None
    rows, cols = values.shape[-2:]
    want = np.triu(np.ones((rows, cols), dtype=bool), k=1)  # j > i
    got = values <= MASK_VALUE
    bad = got != want
    if not bad.any():
        return None
    where = np.argwhere(bad)[0][-2:]
    return (f"it fills {int(got.sum())} positions where a causal mask fills "
            f"{int(want.sum()) * (values.size // want.size)} (first at row {where[0]}, "
            f"column {where[1]})")


def _mask_maker(masking: Call, before: Sequence[Call]) -> Call | None:
    """The latest call before ``masking`` making a bool tensor of its mask's shape (up to
    the leading ones a broadcast view adds: ``mask[None, None]``)."""
    mask = next((r for r in masking.input_tensors if r.dtype == "bool"), None)
    if mask is None:
        return None
    for call in reversed(before):
        if call.order >= masking.order or call.direction != "forward":
            continue
        if any(r.dtype == "bool" and _unbroadcast(r.shape) == _unbroadcast(mask.shape)
               for r in call.output_tensors):
            return call
    return None


def _unbroadcast(shape: tuple[int, ...]) -> tuple[int, ...]:
    dims = list(shape)
    while dims and dims[0] == 1:
        dims.pop(0)
    return tuple(dims)


def _precision(chain: Sequence[Call], fused: Call, step_dtype: str) -> Finding | None:
    out = leading(fused)
    if out is None or out.dtype not in FLOAT_EPS:
        return None
    floor = max(FLOAT_EPS[out.dtype], FLOAT_EPS.get(step_dtype, 0.0))
    for call in chain:
        rec = leading(call)
        if rec is not None and FLOAT_EPS.get(rec.dtype, 0.0) > floor:
            return Finding("precision", f"{call.name} computes in {rec.dtype} inside the region "
                           f"the bench computes in one {fused.op} call in {out.dtype}",
                           via=call.name)
    return None


def _scale(chain: Sequence[Call], fused: Call) -> Finding | None:
    """The chain's scalar factors against the fused attention's scale."""
    want = _attention_scale(fused)
    factors = [(call, value ** power) for call in chain
               if (power := _SCALES.get(call.op, 0))
               and (value := _one_float(call)) is not None and value != 0.0]
    if want is None or not factors:
        return None
    got = math.prod(f for _, f in factors)
    if abs(got - want) <= _SCALE_REL * abs(want):
        return None
    culprit = next((c for c, f in factors if abs(f - 1.0) > _SCALE_REL), factors[0][0])
    return Finding("argument", f"the scores are scaled by {got:.6g} in the region (by "
                   f"{culprit.name}) where the bench's {fused.op} scales by {want:.6g}",
                   via=culprit.name)


def _attention_scale(fused: Call) -> float | None:
    if fused.op not in _ATTENTION:
        return None
    scalars = {a.path.rsplit(".", 1)[-1]: a for a in fused.scalar_inputs}
    given = scalars.get("scale")
    if given is not None and isinstance(given.value, (int, float)) and not isinstance(
            given.value, bool):
        return float(given.value)
    if fused.op != "scaled_dot_product_attention":
        return None  # the fused kernels' head size is not their query's last dimension
    query = fused.input_tensors[0] if fused.input_tensors else None
    return 1.0 / math.sqrt(query.shape[-1]) if query is not None and query.shape else None


def _one_float(call: Call) -> float | None:
    """The one float scalar a scaling call takes (a tensor by a number)."""
    numbers = [a.value for a in call.scalar_inputs if isinstance(a, ScalarArg)
               and isinstance(a.value, (int, float)) and not isinstance(a.value, bool)]
    return float(numbers[0]) if len(numbers) == 1 and len(call.input_tensors) == 1 else None
