"""What a compare produces: tensor comparisons, scalar differences and one result per node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_accuracy.compare.criteria import Judgement, Tolerance, Waiver
from pytest_accuracy.compare.metrics import StatsMetrics, TensorMetrics
from pytest_accuracy.dumps.model import Call, TensorRecord

if TYPE_CHECKING:
    from pytest_accuracy.compare.local import LocalError


@dataclass
class TensorComparison:
    """One NPU tensor and its bench counterpart, with metrics and a judgement."""

    path: str
    npu: TensorRecord
    bench: TensorRecord | None
    dtype: str  # the effective dtype whose tolerance applied
    judgement: Judgement
    metrics: TensorMetrics | StatsMetrics | None = None
    method: str = "tensor"  # tensor | statistics | md5

    @property
    def ok(self) -> bool:
        return self.judgement.ok

    @property
    def identical(self) -> bool:
        """Passed with no difference at all (a statistics pair has no max_abs_err: never)."""
        return self.ok and getattr(self.metrics, "max_abs_err", 1.0) == 0


@dataclass(frozen=True)
class ScalarDiff:
    path: str
    npu_value: object
    bench_value: object

    def __str__(self) -> str:
        return f"{self.path}: {self.npu_value!r} vs bench {self.bench_value!r}"


@dataclass(frozen=True)
class Finding:
    """Why a node makes an error of its own; ``kind`` names the rule, ``detail`` the evidence."""

    kind: str  # precision | argument | local_error | update
    detail: str
    via: str | None = None  # the node only the NPU run records that brought the change in


@dataclass
class NodeResult:
    """The verdict for one NPU node."""

    index: int
    step: int
    rank: int
    npu: Call
    bench: Call | None
    # pass | fail (makes an error of its own) | carried (only carries an earlier one)
    # | unmatched | skip | error | waived
    status: str
    reason: str = ""
    inputs: list[TensorComparison] = field(default_factory=list)
    outputs: list[TensorComparison] = field(default_factory=list)
    scalar_diffs: list[ScalarDiff] = field(default_factory=list)
    waiver: Waiver | None = None
    inputs_checked: bool = False
    findings: list[Finding] = field(default_factory=list)
    local: LocalError | None = None
    local_note: str = ""  # why local error was not measured
    carried_from: str | None = None  # the earlier divergence this node carries
    # its differing inputs came from these nodes, which agree with the bench (or which only
    # the NPU run records): the error entered between them and this node
    entered_after: list[str] = field(default_factory=list)
    entered_through: list[str] = field(default_factory=list)  # of those, the one-sided ones
    tolerance: Tolerance | None = None
    twin_step: int | None = None  # an earlier step identical between the runs

    @property
    def inputs_ok(self) -> bool:
        return all(t.ok for t in self.inputs)

    @property
    def inputs_identical(self) -> bool:
        return all(t.identical for t in self.inputs)

    @property
    def outputs_identical(self) -> bool:
        """Every output compared element by element and equal to the bench's (NaN/Inf in
        place)."""
        outputs = self.outputs  # the first output's method first: statistics are never so
        return bool(outputs) and outputs[0].method == "tensor" and all(
            t.method == "tensor" and t.identical for t in outputs)

    @property
    def failing_outputs(self) -> list[TensorComparison]:
        return [t for t in self.outputs if not t.ok]

    @property
    def key(self) -> str:
        return f"{self.step}/{self.rank}/{self.npu.name}"
