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


def first_overflow(dump: Dump) -> Overflow:
    """Forward calls in execution order, then backward ones (a forward overflow causes the
    backward's): the first whose output statistics hold NaN/Inf while every input and
    parameter is finite; an input already non-finite only carries an earlier overflow."""
    calls = ([c for c in dump.calls if c.direction == "forward"]
             + [c for c in dump.calls if c.direction != "forward"])
    checked = 0
    for call in calls:
        outputs = call.output_tensors
        if not outputs or any(_unknown(r) for r in outputs):
            continue
        checked += 1
        bad = next((r for r in outputs if _nonfinite(r) is not None), None)
        if bad is not None and all(_nonfinite(r) is None
                                   for r in call.input_tensors + call.parameters):
            return Overflow(call, bad.path, _nonfinite(bad) or "", checked)
    return Overflow(None, "", "", checked)


def _unknown(record: TensorRecord) -> bool:
    s = record.stats
    return all(v is None for v in (s.max, s.min, s.mean, s.norm))


def _nonfinite(record: TensorRecord) -> str | None:
    s = record.stats
    for label, value in (("Max", s.max), ("Min", s.min), ("Mean", s.mean), ("Norm", s.norm)):
        if value is not None and not math.isfinite(value):
            return f"{label} {value}"
    return None
