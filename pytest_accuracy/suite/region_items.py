"""Region items (``accuracy::compare::<step>/<rank>/<layer or first..last node>``) at scale."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from pytest_accuracy.compare import Comparison, NodeResult
from pytest_accuracy.compare.divergence import FirstDivergence
from pytest_accuracy.compare.plain import PlainPass
from pytest_accuracy.compare.regions import Region, regions
from pytest_accuracy.report.records import json_native
from pytest_accuracy.suite import (
    NATIVE_KEY,
    RECORD_KEY,
    AccuracyError,
    AccuracyGroup,
    AccuracyItem,
)
from pytest_accuracy.suite.state import STATE_KEY
from pytest_accuracy.text import escape_controls

# Failing nodes a region's message names beyond its first (all are in the JSON and report).
_NAMED = 5


def region_items(group: AccuracyGroup, cmp: Comparison,
                 chosen: Sequence[int]) -> Iterator[pytest.Item]:
    for region in regions(cmp.entries, chosen):
        name = escape_controls(f"{region.step}/{region.rank}/{region.name}")
        yield RegionItem.from_parent(group, name=name, region=region)


class RegionItem(AccuracyItem):
    """Passes when every node of this region meets the compare criteria; a failure names the
    region's first node that makes an error of its own, with that node's whole evidence."""

    def __init__(self, *, region: Region, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.region = region

    def runtest(self) -> None:
        from pytest_accuracy.suite.compare_items import record_detail

        cmp = self.config.stash[STATE_KEY].comparison
        detail = record_detail(self.config)
        judged = judge_region(cmp, self.region.indices, detail)
        self.stash[RECORD_KEY], self.stash[NATIVE_KEY] = region_record(self.region, judged,
                                                                       detail)
        outcome(self.region, judged, next_action(self, cmp, judged))


Judged = list[tuple[NodeResult | PlainPass, FirstDivergence | None, dict[str, Any]]]


def judge_region(cmp: Comparison, indices: Sequence[int], detail: Any) -> Judged:
    """Each node judged in order, the next few read ahead meanwhile."""
    from pytest_accuracy.suite.compare_items import judge_node

    return [judge_node(cmp, index, indices[at + 1:at + 8], detail=detail)
            for at, index in enumerate(indices)]


def region_record(region: Region, judged: Judged, detail: Any) -> tuple[dict[str, Any], bool]:
    """The item's record (its nodes' records) and whether it is JSON-native as built."""
    records = [record for _, _, record in judged]
    failing = _failing(judged)
    # step, rank and order of the region's first failure: failures print in run order
    lead = failing[0][0] if failing else judged[0][0]
    record = {"region": region.name, "region_nodes": records, "step": lead.step,
              "rank": lead.rank, "order": lead.index}
    # a plain pass's record without rows is JSON-native as built (tests/test_plain_pass.py
    # checks): the rest are checked here, not the whole region again at the report
    native = all((type(result) is PlainPass and detail != "rows") or json_native(rec)
                 for result, _, rec in judged)
    return record, native


def outcome(region: Region, judged: Judged, after: list[str] | None = None) -> None:
    """Raise the region's verdict (see ``_outcome``); a failure ends with ``after`` (the next
    action for the node that makes the error)."""
    try:
        _outcome(region, [result for result, _, _ in judged], _failing(judged))
    except AccuracyError as exc:
        if after:
            exc.lines += after
            exc.args = ("\n".join(exc.lines),)
        raise


def next_action(item: pytest.Item, cmp: Comparison, judged: Judged) -> list[str]:
    """The next action for the first node here that makes an error of its own, if any."""
    failing = _failing(judged)
    if not failing or failing[0][1] is None:
        return []
    from pytest_accuracy.suite.next_step import compare_next_step

    return compare_next_step(item, cmp, failing[0][0])


def _failing(judged: Judged) -> list[tuple[NodeResult, FirstDivergence | None]]:
    # a plain pass (compare/plain.py) never fails: failures are full results
    return [(result, own) for result, own, _ in judged
            if isinstance(result, NodeResult) and result.status == "fail"]


def _outcome(region: Region, results: list[NodeResult | PlainPass],
             failing: list[tuple[NodeResult, FirstDivergence | None]]) -> None:
    """Raise the region's verdict: error, fail, xfail (only carried or waived), skip."""
    errors = [r for r in results if r.status == "error"]
    if errors:
        raise AccuracyError([f"{r.npu.name}: {r.reason}" for r in errors[:_NAMED]]
                            + _more(len(errors), "unreadable nodes"))
    if failing:
        raise AccuracyError(_failure_lines(region, results, failing))
    if all(r.status in ("unmatched", "skip") for r in results):
        first = results[0]
        pytest.skip(escape_controls(f"none of the {len(results)} nodes was compared "
                                    f"({first.npu.name}: {first.status}: {first.reason})"))
    carried = [r for r in results if r.status == "carried"]
    if carried:
        pytest.xfail(escape_controls(
            f"{len(carried)} of {len(results)} nodes carried from {carried[0].carried_from}: "
            f"{carried[0].reason}"))
    if all(r.status in ("waived", "unmatched", "skip") for r in results):
        waived = next(r for r in results if r.status == "waived")
        pytest.xfail(escape_controls(f"{waived.npu.name}: {waived.reason}"))


def _failure_lines(region: Region, results: list[NodeResult | PlainPass],
                   failing: list[tuple[NodeResult, FirstDivergence | None]]) -> list[str]:
    from pytest_accuracy.suite.compare_items import failure_lines

    result, own = failing[0]
    where = f"step {region.step}, rank {region.rank}"
    lines = [f"{len(failing)} of the {len(results)} nodes of {region.name} ({where}) fail; "
             f"the first is {result.npu.name}.", ""]
    lines += failure_lines(result, own)
    others = [r.npu.name for r, _ in failing[1:]]
    if others:
        lines += ["", f"Also failing here: {', '.join(others[:_NAMED])}"
                  + (f" and {len(others) - _NAMED} more" if len(others) > _NAMED else "")
                  + " (each in the JSON and the report)."]
    carried = sum(r.status == "carried" for r in results)
    if carried:
        lines.append(f"{carried} more nodes here carry an earlier error (xfail-like: not "
                     "counted against this region).")
    return lines


def _more(count: int, what: str) -> list[str]:
    return [f"... and {count - _NAMED} more {what}"] if count > _NAMED else []
