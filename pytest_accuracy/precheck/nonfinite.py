"""Cases over NaN/Inf recorded statistics: a NaN input is not judged, an overflow never passes."""

from __future__ import annotations

import dataclasses
import math

from pytest_accuracy.dumps.model import TensorRecord
from pytest_accuracy.precheck.results import OutputCheck, PrecheckCase, PrecheckResult


def _records(case: PrecheckCase) -> tuple[list[TensorRecord], list[TensorRecord]]:
    """(inputs, outputs) the run recorded for the case: a backward's inputs are the output
    gradients and the forward's inputs, its outputs the input gradients."""
    forward = case.forward_call
    ins = (forward.input_tensors + forward.parameters) if forward is not None else []
    if case.direction == "backward" and case.backward_call is not None:
        return case.backward_call.input_tensors + ins, case.backward_call.output_tensors
    return ins, forward.output_tensors if forward is not None else []


def _bad(record: TensorRecord) -> str | None:
    """'input.0 Max nan' when Max/Min says the tensor holds NaN or Inf."""
    for label, value in (("Max", record.stats.max), ("Min", record.stats.min)):
        if value is not None and not math.isfinite(value):
            return f"{record.path} {label} {value}"
    return None


def _unjudgeable(record: TensorRecord) -> str | None:
    """'input.0 Max nan' when the tensor holds NaN, or Inf in every element (Min +inf or
    Max -inf): no kernel's output can be judged on it, and values generated from such
    statistics are NaN or clamped to the dtype's range, not the run's.  An Inf at one end
    only (a -inf attention mask) stays: the values between are generated and judged."""
    s = record.stats
    for label, value in (("Max", s.max), ("Min", s.min)):
        if value is not None and math.isnan(value):
            return f"{record.path} {label} {value}"
    if s.min is not None and s.min == math.inf:
        return f"{record.path} Min inf"
    if s.max is not None and s.max == -math.inf:
        return f"{record.path} Max -inf"
    return None


def nan_input_reason(case: PrecheckCase) -> str | None:
    """Why a case whose recorded inputs hold NaN (or only Inf) is skipped, never passed."""
    inputs, _ = _records(case)
    found = next((b for r in inputs if (b := _unjudgeable(r))), None)
    if found is None:
        return None
    return (f"not checked: the run recorded NaN/Inf in its inputs ({found}), on which no "
            "kernel's output can be judged; it carries an earlier overflow (run --acc-npu "
            "without --acc-precheck to name the first node that made it)")


def overflow_verdict(case: PrecheckCase, result: PrecheckResult) -> PrecheckResult:
    """A pass turned into a failure when the run recorded NaN/Inf in an output from finite
    inputs: the replay ran on other values (generated from statistics), and what the run
    recorded itself is an overflow, never a pass."""
    if result.status != "pass" or case.mode == "tensor":  # tensor: recorded outputs are judged
        return result
    inputs, outputs = _records(case)
    if any(_bad(r) for r in inputs):
        return result  # an Inf input (a -inf mask, say) may make an Inf output legitimately
    record = next((r for r in outputs if _bad(r)), None)
    if record is None:
        return result
    reason = (f"the run recorded {_bad(record)} from finite inputs, where the re-run on values "
              f"generated from its statistics agrees with the float64 reference: the run's "
              "own overflow (a statistics dump has no values to replay it; dump with task "
              "tensor to see which)")
    check = OutputCheck(f"{case.api}.{case.direction}.recorded_{record.path}", "fail", "float64",
                        record.dtype, tuple(record.shape), {}, reason)
    return dataclasses.replace(result, status="fail", reason=reason,
                               outputs=(*result.outputs, check))
