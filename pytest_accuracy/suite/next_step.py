"""The next action a failing item ends with: compare, loss, monitor, overflow, precheck."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.settings import setting

if TYPE_CHECKING:
    from pytest_accuracy.compare import Comparison, NodeResult
    from pytest_accuracy.dumps.model import Dump
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
    # shards joined to meet a coarser bench: every rank's tensors tell which one differs
    joined = bench_dump is not None and result.npu.name in bench_dump.joined
    return _said(item, Situation(case, item.nodeid, dump.step, npu, bench,
                                 rank=None if joined else dump.rank,
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


def dump_next_step(item: pytest.Item, case: Literal["overflow", "api"], dump: Dump,
                   name: str, given: str, ranks_in_run: int) -> list[str]:
    """A node of one dump, no bench: an overflow (the APIs inside it as statistics, or its
    inputs to replay) or a precheck miss (the API's real inputs, and msprobe's own check)."""
    from pytest_accuracy.nextstep import Situation
    from pytest_accuracy.nextstep.from_dump import side_from_dump

    try:
        npu = side_from_dump(dump, [name], given=given)
    except ValueError:  # a framework msprobe writes no config for (a native dump's)
        return []
    return _said(item, Situation(case, item.nodeid, dump.step, npu, rank=dump.rank,
                                 ranks_in_run=ranks_in_run))


def monitor_next_step(item: pytest.Item, parting: Any, rank: int, ranks_in_run: int,
                      framework: Framework) -> list[str]:
    """A monitor state that parts at step S (msprobe's numbering, from 0) at parameter P: both
    runs dumped at step S as tensors at level mix inside P's module (each run's own name of
    it); a parameter of no module: the whole step at L0 statistics, and the step before."""
    from pytest_accuracy.nextstep import Side, Situation
    from pytest_accuracy.nextstep.names import MODULE_PREFIX

    def side(param: str) -> Side:
        module = param.rsplit(".", 1)[0] if "." in param else ""
        # a node name whose module path is P's module (the class in it is not used)
        names = (f"{MODULE_PREFIX[framework]}.{module}.Module.forward.0",) if module else ()
        return Side(framework, names)

    npu, bench = side(str(parting.npu_name)), side(str(parting.bench_name))
    case: Literal["module", "loss"] = "module" if npu.names and bench.names else "loss"
    return _said(item, Situation(case, item.nodeid, int(parting.step), npu, bench, rank=rank,
                                 ranks_in_run=ranks_in_run))
