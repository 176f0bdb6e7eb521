"""``accuracy::compare::inputs``: token ids inside the vocabulary, the first batch the bench's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_accuracy.compare import Comparison
from pytest_accuracy.compare.inputs_check import (
    InputProblem,
    batch_differs,
    lookups,
    out_of_vocabulary,
    split_lookups,
)
from pytest_accuracy.dumps.model import Dump
from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyItem
from pytest_accuracy.suite.state import STATE_KEY


def input_items(parent: pytest.Collector, cmp: Comparison) -> Iterator[pytest.Item]:
    """Only where the NPU run dumped an embedding lookup."""
    if any(lookups(dump) for dump in cmp.npu):
        yield InputsItem.from_parent(parent, name="inputs")


def input_problems(cmp: Comparison) -> tuple[list[InputProblem], int, int]:
    """Every lookup past its table; per rank, the first step's batch against the bench's;
    with how many lookups and first batches were checked."""
    found = [p for key, dump in sorted(cmp.npu.dumps.items())
             for p in _past_tables(cmp, key, dump)]
    looked = sum(len(lookups(dump)) for dump in cmp.npu)
    first = min(step for step, _ in cmp.npu.dumps)
    batches = 0
    for (step, rank), dump in sorted(cmp.npu.dumps.items()):
        bench = cmp.bench.dumps.get((step, rank))
        if step != first or bench is None:
            continue
        differs, compared = batch_differs(dump, bench)
        batches += compared
        found += [differs] if differs is not None else []
    return found, looked, batches


def _past_tables(cmp: Comparison, key: tuple[int, int], dump: Dump) -> list[InputProblem]:
    """The rank's lookups past their tables, but for those into a vocabulary shard: where the
    layouts differ, the bench's view says which (partial ones, and those that complete
    inside); else the bench's lookup or the rank's TP peers show it (``split_lookups``)."""
    view = cmp.bench.dumps.get(key)
    shards = frozenset(view.left_out) | frozenset(view.exchanges) if view is not None else \
        frozenset()
    found = out_of_vocabulary(dump, shards)
    if not found:
        return found
    others = [d for (step, rank), d in cmp.npu.dumps.items() if step == key[0] and rank != key[1]]
    return out_of_vocabulary(dump, shards | split_lookups(dump, others, view))


class InputsItem(AccuracyItem):
    """The guide's cheap checks on the data: run before reading any node's verdict."""

    def runtest(self) -> None:
        cmp: Comparison = self.config.stash[STATE_KEY].comparison
        record = input_record(*input_problems(cmp))
        self.stash[RECORD_KEY] = {"group": "data", "name": "inputs", **record}
        if record["problems"]:
            raise AccuracyError(input_lines(record))


def input_record(problems: list[InputProblem], looked: int, batches: int) -> dict[str, Any]:
    return {"status": "fail" if problems else "pass",
            "summary": problems[0].detail if problems else "",
            "lookups_checked": looked, "first_batches_compared": batches,
            "problems": [{"kind": p.kind, "step": p.step, "rank": p.rank, "node": p.node,
                          "detail": p.detail} for p in problems]}


def input_lines(record: dict[str, Any]) -> list[str]:
    problems = record["problems"]
    return ([f"Inputs: {len(problems)} problem(s) with the data itself:"]
            + [f"  step {p['step']}, rank {p['rank']}: {p['detail']}" for p in problems[:5]])
