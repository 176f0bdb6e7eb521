"""Overflow items (``accuracy::overflow::<step>/<rank>``): ``--acc-npu`` without a bench."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyGroup, AccuracyItem
from pytest_accuracy.text import escape_controls


class OverflowGroup(AccuracyGroup):
    def collect(self) -> Iterator[pytest.Item]:
        from pytest_accuracy.suite.state import STATE_KEY

        dumps = self.config.stash[STATE_KEY].npu_dumps  # input errors: collection errors
        for dump in dumps:
            yield OverflowItem.from_parent(self, name=f"{dump.step}/{dump.rank}",
                                           key=(dump.step, dump.rank))


class OverflowItem(AccuracyItem):
    """Passes when no node of this step and rank outputs NaN/Inf from finite inputs."""

    def __init__(self, *, key: tuple[int, int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key

    def runtest(self) -> None:
        from pytest_accuracy.compare.overflow import first_overflow
        from pytest_accuracy.suite.state import STATE_KEY

        dump = self.config.stash[STATE_KEY].npu_dumps.dumps[self.key]
        found = first_overflow(dump)
        step, rank = self.key
        name = f"step {step}, rank {rank}"
        record: dict[str, Any] = {"group": "overflow", "name": name, "checked": found.checked,
                                  "status": "pass" if found.node is None else "fail"}
        if found.node is not None:
            record.update(node=found.node.name, tensor=found.tensor, value=found.value,
                          stack=found.node.stack_line())
        self.stash[RECORD_KEY] = record
        if found.checked == 0:
            record["status"] = "skip"
            pytest.skip(f"nothing checked: no node of {name} recorded output statistics")
        if found.node is not None:
            where = f" At {found.node.stack_line()}" if found.node.stack_line() else ""
            record["summary"] = (f"First NaN/Inf: {found.node.name} ({name}), {found.tensor}: "
                                 f"{found.value}, from finite inputs")
            raise AccuracyError([escape_controls(
                f"First NaN/Inf on the NPU: {found.node.name} ({name}), {found.tensor} has "
                f"{found.value} while every input is finite: an overflow made here (check its "
                "dtype, scale and inputs' range; msprobe's overflow_check dumps such nodes)."
                + where)])
