"""What the precheck plans (cases) and reports (results with per-output checks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pytest_accuracy.dumps.model import Call
from pytest_accuracy.precheck.inputs import InputSource

Status = Literal["pass", "fail", "skip"]
Direction = Literal["forward", "backward"]


@dataclass(frozen=True)
class PrecheckCase:
    """One API call to check: its forward outputs, or its input gradients (backward)."""

    id: str  # "<step>/<rank>/<api node>", e.g. "0/0/Functional.linear.0.forward"
    step: int
    rank: int
    node: str  # the dump node: "Functional.linear.0.forward"
    api: str  # "Functional.linear.0"
    api_name: str  # the allow-list key: "Functional.linear"
    direction: Direction
    framework: str
    mode: str  # tensor | statistics | md5
    op: str | None  # canonical op; None when there is no reference
    device: str
    standard: str
    inputs: InputSource
    forward_call: Call | None
    backward_call: Call | None = None
    skip_reason: str | None = None


@dataclass(frozen=True)
class OutputCheck:
    """One compared output (forward) or input gradient (backward): a details-CSV row."""

    name: str  # "Functional.linear.0.forward.output.0"
    status: Status
    bench_dtype: str
    device_dtype: str
    shape: tuple[int, ...]
    metrics: dict[str, float | None]
    message: str


@dataclass(frozen=True)
class PrecheckResult:
    """The outcome of one case.  ``status`` is never "pass" when nothing was compared."""

    case_id: str
    name: str  # the dump node
    api: str
    direction: Direction
    framework: str
    status: Status
    cosine: float | None  # the worst over the compared outputs
    max_abs: float | None
    reason: str
    inputs: str  # "dumped inputs" | "generated from statistics, seed N"
    device: str  # what produced the device-side values
    standard: str
    outputs: tuple[OutputCheck, ...] = ()

    @property
    def details(self) -> list[dict[str, object]]:
        """msprobe-style details rows (one per output) in this framework's column layout."""
        from pytest_accuracy.precheck.report import details_rows  # report imports this module

        return details_rows(self)
