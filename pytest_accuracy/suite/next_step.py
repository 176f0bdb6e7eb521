"""The next action a failing compare or loss item ends with (pytest_accuracy.nextstep)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.settings import setting

if TYPE_CHECKING:
    from pytest_accuracy.compare import Comparison, NodeResult
    from pytest_accuracy.nextstep import Situation
    from pytest_accuracy.nextstep.situation import Framework


def compare_next_step(item: pytest.Item, cmp: Comparison, result: NodeResult) -> list[str]:
    """For the node that makes an error: inside a module (L0), the APIs it runs, dumped as
    tensors; an API call (L1, mix), its precheck. Empty where no msprobe config fits."""
    from pytest_accuracy.nextstep import Situation
    from pytest_accuracy.nextstep.from_dump import ranks_of, side_from_dump

    dump = cmp.entries[result.index][0]
    bench_dump = cmp.bench.dumps.get((dump.step, dump.rank))
    try:
        npu = side_from_dump(dump, [result.npu.name], given=str(cmp.npu.root))
        bench = (side_from_dump(bench_dump, [result.bench.name], given=str(cmp.bench.root))
                 if bench_dump is not None and result.bench is not None else None)
    except ValueError:  # a framework msprobe writes no config for (a native dump's)
        return []
    case: Literal["module", "api"] = "module" if result.npu.kind == "module" else "api"
    return _said(item, Situation(case, item.nodeid, dump.step, npu, bench, rank=dump.rank,
                                 ranks_in_run=ranks_of(cmp.npu)))


def _said(item: pytest.Item, situation: Situation) -> list[str]:
    """The message lines: with --acc-report the configs are written into its next_step/
    folder; without, the plan is said and how to have the files written."""
    from pytest_accuracy.nextstep import plan_next_step, write_next_step
    from pytest_accuracy.nextstep.writer import next_step_dir

    report = setting(item.config, "report")
    try:
        if report:
            return ["", *write_next_step(situation, report).splitlines()]
        step = plan_next_step(situation, next_step_dir("REPORT", situation.item_id))
    except (OSError, ValueError, AccuracyInputError) as exc:  # advice: never the failure
        return ["", f"Next step not written: {exc}"]
    return ["", f"Next: {step.headline}; --acc-report=DIR writes the msprobe configs for it "
                "into DIR/next_step/ with the commands to run them."]


# The framework a training log's format comes from (a MindSpore run logs as MindFormers).
_LOG_FRAMEWORK: dict[str, Framework] = {"mindformers": "mindspore"}


def loss_next_step(item: pytest.Item, npu_log: Any, bench_log: Any | None, step: int
                   ) -> list[str]:
    """A loss check that names a step (log numbering, from 1): the guide's coarse pass,
    both runs dumped at L0 statistics at that step (msprobe counts steps from 0) and the one
    before it."""
    from pytest_accuracy.nextstep import Side, Situation

    def side(log: Any) -> Side:
        return Side(_LOG_FRAMEWORK.get(str(getattr(log, "format", "")), "pytorch"))

    bench = side(bench_log) if bench_log is not None else None
    return _said(item, Situation("loss", item.nodeid, max(step - 1, 0), side(npu_log), bench))
