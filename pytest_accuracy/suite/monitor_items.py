"""Monitor items: ``accuracy::monitor::<rank>/<state>`` and ``accuracy::monitor::coverage``."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Any

import pytest

from pytest_accuracy.settings import float_setting, path_setting
from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyGroup, AccuracyItem
from pytest_accuracy.text import escape_controls


class MonitorGroup(AccuracyGroup):
    @cached_property
    def comparison(self) -> Any:
        """Both runs read and compared once per process (unreadable input: a collection
        error naming the file)."""
        from pytest_accuracy.errors import AccuracyInputError
        from pytest_accuracy.monitor import compare_monitors, read_monitor
        from pytest_accuracy.suite.state import STATE_KEY

        npu = path_setting(self.config, "npu_monitor")
        bench = path_setting(self.config, "bench_monitor")
        if npu is None or bench is None:
            missing = "--acc-bench-monitor" if npu else "--acc-npu-monitor"
            raise AccuracyInputError(str(npu or bench), f"the monitor compare needs both runs' "
                                     f"monitor outputs: {missing} is missing")
        criteria = self.config.stash[STATE_KEY].criteria
        return compare_monitors(read_monitor(npu), read_monitor(bench),
                                lambda dtype: criteria.tolerance(dtype).rel_err)

    def collect(self) -> Iterator[pytest.Item]:
        cmp = self.comparison
        yield MonitorCoverageItem.from_parent(self, name="coverage")
        for rank, kind in sorted(cmp.results):
            yield MonitorItem.from_parent(self, name=f"{rank}/{kind}", key=(rank, kind))


class MonitorItem(AccuracyItem):
    """Passes when this state of this rank agrees with the bench at every step; a failure
    names the first step and parameter where it parts and the state that parts first."""

    def __init__(self, *, key: tuple[int, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key

    def runtest(self) -> None:
        from pytest_accuracy.monitor.report import failure_lines, record

        assert isinstance(self.parent, MonitorGroup)
        cmp = self.parent.comparison
        result = cmp.results[self.key]
        self.stash[RECORD_KEY] = record(result, cmp)
        head = cmp.carried_by(result)
        if head is not None:  # one cause, one failed item: the state that parted first
            self.stash[RECORD_KEY]["status"] = "carried"
            first = result.first
            assert first is not None
            pytest.xfail(escape_controls(
                f"{result.kind} parts at step {first.step} ({first.npu_name}), after "
                f"{head.kind} parted at step {head.step} ({head.npu_name}): it carries that "
                "error (the failed item of that state is the one to look at)"))
        if result.first is not None:
            from pytest_accuracy.suite.next_step import monitor_next_step

            ranks = len({rank for rank, _ in cmp.results})
            after = monitor_next_step(self, result.first, self.key[0], ranks,
                                      _framework(cmp.npu.layout))
            raise AccuracyError([escape_controls(line) for line in
                                 [*failure_lines(result, cmp), *after]])
        if result.compared == 0:
            pytest.skip(escape_controls(_nothing_compared(result)))


def _framework(layout: str) -> Any:
    """The framework whose msprobe wrote a monitor output, from its layout's words."""
    return "mindspore" if "mindspore" in layout.lower() else "pytorch"


def _nothing_compared(result: Any) -> str:
    if result.pairs == 0:
        return (f"no {result.kind} parameter name of the NPU run pairs with the bench's "
                f"(NPU: {', '.join(result.unmatched_npu[:3])}; bench: "
                f"{', '.join(result.unmatched_bench[:3])})")
    return (f"every {result.kind} value of both runs rounds to zero at the CSVs' precision: "
            "raise 'ndigits' in the monitor config to compare them")


class MonitorCoverageItem(AccuracyItem):
    """Passes when at least --acc-min-matched (50 %) of the NPU run's parameters found a bench
    counterpart and something was compared; a run that compared nothing fails here."""

    def runtest(self) -> None:
        assert isinstance(self.parent, MonitorGroup)
        cmp = self.parent.comparison
        results = list(cmp.results.values())
        paired = sum(r.pairs for r in results)
        npu_names = paired + sum(len(r.unmatched_npu) for r in results)
        compared = sum(r.compared for r in results)
        need = float_setting(self.config, "min_matched") or 0.5
        share = paired / npu_names if npu_names else 0.0
        self.stash[RECORD_KEY] = {
            "group": "monitor", "name": "coverage", "paired": paired, "npu_names": npu_names,
            "compared": compared, "one_sided": cmp.one_sided, "npu_layout": cmp.npu.layout,
            "bench_layout": cmp.bench.layout,
            "status": "pass" if compared and share >= need else "fail"}
        problems = []
        if not results:
            problems.append("the two runs share no rank and state kind: nothing was compared "
                            f"({'; '.join(cmp.one_sided) or 'no states recorded'})")
        elif compared == 0:
            problems.append("nothing was compared: no paired value is above the CSVs' rounding")
        if results and share < need:
            lost = [n for r in results for n in r.unmatched_npu][:5]
            problems.append(f"Matched {paired} of {npu_names} NPU parameter names "
                            f"({share:.1%}; at least {need:.0%} required). Unmatched: "
                            f"{', '.join(lost)}. Names pair through the rules of "
                            "data/param_names.yaml (HF, Megatron, MindFormers).")
        if problems:
            self.stash[RECORD_KEY]["summary"] = problems[0]
            raise AccuracyError([escape_controls(p) for p in problems])
