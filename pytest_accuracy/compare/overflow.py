"""Overflow check of one run alone: the first node whose output is NaN/Inf from finite inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_accuracy.dumps.model import Call, Dump, TensorRecord


@dataclass(frozen=True)
class Overflow:
    """The first overflowing node of a dump, and how many nodes were checked."""

    node: Call | None
    tensor: str
    value: str  # the statistic that is not finite, e.g. "Max inf"
    checked: int  # nodes with statistics on every output (the evidence)
    huge: Call | None = None  # an earlier node whose values are finite but whose Norm/Mean is not


def first_overflow(dump: Dump) -> Overflow:
    """Forward calls in execution order, then backward ones (a forward overflow causes the
    backward's): the first whose output holds NaN/Inf while every input and parameter is
    finite; an input already non-finite only carries an earlier overflow.

    An element is NaN/Inf when the tensor's Max or Min is (msprobe's own rule: NaN and Inf
    reach both); a Norm or Mean alone overflows on finite values near the dtype's range,
    which names the node that made them huge (``huge``), not an overflow."""
    calls = ([c for c in dump.calls if c.direction == "forward"]
             + [c for c in dump.calls if c.direction != "forward"])
    checked, huge = 0, None
    for call in calls:
        outputs = call.output_tensors
        if not outputs or any(_unknown(r) for r in outputs):
            continue
        checked += 1
        inputs = call.input_tensors + call.parameters
        bad = next((r for r in outputs if nonfinite(r) is not None), None)
        if bad is not None and all(nonfinite(r) is None for r in inputs):
            return Overflow(call, bad.path, nonfinite(bad) or "", checked, huge)
        if huge is None and bad is None and any(_summary_overflow(r) for r in outputs) and \
                not any(_summary_overflow(r) for r in inputs):
            huge = call
    return Overflow(None, "", "", checked, huge)


def _unknown(record: TensorRecord) -> bool:
    s = record.stats
    return all(v is None for v in (s.max, s.min, s.mean, s.norm))


def nonfinite(record: TensorRecord) -> str | None:
    """'Max inf' when the tensor holds NaN/Inf by its Max/Min (by Mean/Norm only when neither
    Max nor Min was recorded); None when its values are finite."""
    s = record.stats
    pairs = [("Max", s.max), ("Min", s.min)]
    if s.max is None and s.min is None:
        pairs = [("Mean", s.mean), ("Norm", s.norm)]
    for label, value in pairs:
        if value is not None and not math.isfinite(value):
            return f"{label} {value}"
    return None


def _summary_overflow(record: TensorRecord) -> bool:
    s = record.stats
    return any(v is not None and not math.isfinite(v) for v in (s.mean, s.norm))
