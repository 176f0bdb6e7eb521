"""Script-friendly view of a compare: pairs, a metrics table, the first divergence, an assert."""

from __future__ import annotations

from functools import cached_property

import pandas as pd

from pytest_accuracy.compare import Comparison, NodeResult
from pytest_accuracy.compare.divergence import FirstDivergence, find_first_divergence
from pytest_accuracy.report.records import node_record, tensor_row


class CompareReport:
    """Everything a regression suite asserts on, computed once."""

    def __init__(self, comparison: Comparison) -> None:
        self.comparison = comparison

    @cached_property
    def results(self) -> list[NodeResult]:
        return self.comparison.results()

    @cached_property
    def first_divergence(self) -> FirstDivergence | None:
        return find_first_divergence(self.comparison)

    @property
    def pairs(self) -> list[tuple[str, str | None]]:
        return [(r.npu.name, r.bench.name if r.bench else None) for r in self.results]

    @property
    def failures(self) -> list[NodeResult]:
        return [r for r in self.results if r.status in ("fail", "error")]

    @cached_property
    def table(self) -> pd.DataFrame:
        """One row per compared tensor, msprobe's column names, numbers as numbers: every
        node's inputs too (``compare_result.csv`` holds the inputs a run compared: the first
        divergent node's, or all of them with ``--acc-inputs=all``)."""
        return pd.DataFrame([tensor_row(r, t) for r in self.results for t in r.inputs + r.outputs])

    @cached_property
    def nodes(self) -> pd.DataFrame:
        """One row per NPU node with status and the metrics of its worst output."""
        first = self.first_divergence
        rows = [node_record(r, first) for r in self.results]
        return pd.DataFrame([{k: v for k, v in row.items() if k != "rows"} for row in rows])

    def assert_close(self) -> None:
        """Raise AssertionError naming the first divergence when any node fails."""
        __tracebackhide__ = True
        if not self.failures:
            return
        first = self.first_divergence
        head = first.sentence() if first else f"{len(self.failures)} nodes failed"
        raise AssertionError(f"{head}\n{len(self.failures)} of {len(self.results)} NPU nodes "
                             "miss the compare criteria.")
