"""Rank items (``accuracy::compare::rank<r>``): each reads, compares and lets go of one rank.

A step of many ranks (16-1,024 ``dump.json`` files) is the most independent work a run
has: one item per rank reads only that rank's dumps (every selected step of it), judges
every node, and keeps only the node records. A process then holds one rank's dump models
at a time, and pytest-xdist workers each read only the ranks they were given. The first
divergence across ranks, coverage and the documents are made where the records meet.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_accuracy.settings import parse_int_set, setting, typed_setting
from pytest_accuracy.suite import (
    NATIVE_KEY,
    RECORD_KEY,
    AccuracyError,
    AccuracyGroup,
    AccuracyItem,
)
from pytest_accuracy.suite.input_items import input_lines
from pytest_accuracy.suite.state import STATE_KEY, SuiteState, same_run_files

if TYPE_CHECKING:
    from pytest_accuracy.compare import Comparison
    from pytest_accuracy.suite.region_items import Judged

# --acc-items=auto reads rank by rank when a step has several ranks and the NPU dump.json
# files add up to this many bytes (~25,000 statistics nodes): below, one item per node or
# region, as for one rank.
RANK_ITEMS_FROM_BYTES = 16 << 20


def rank_mode(config: pytest.Config, state: SuiteState) -> list[int] | None:
    """The ranks to give one item each, or None where the run is itemised by node or region."""
    from pytest_accuracy.dumps.layout import dump_files

    chosen = typed_setting(config, "items") or "auto"
    if chosen not in ("auto", "rank") or state.npu is None or state.bench is None:
        return None
    if chosen == "auto" and setting(config, "scope"):
        return None  # a scope is checked against every node at collection
    steps = parse_int_set(setting(config, "steps_select"), "steps")
    ranks = parse_int_set(setting(config, "ranks"), "ranks")
    files = dump_files(state.npu, steps=steps, ranks=ranks)
    if not files:
        return None  # not an msprobe layout, or nothing selected: the usual path says why
    found = sorted({r for _, r, _ in files})
    if chosen == "rank":
        return found
    size = sum(path.stat().st_size for _, _, path in files)
    return found if len(found) > 1 and size >= RANK_ITEMS_FROM_BYTES else None


def rank_items(group: AccuracyGroup, state: SuiteState, ranks: list[int]
               ) -> Iterator[pytest.Item]:
    """One item per rank, then the coverage of the steps and ranks both runs hold."""
    from pytest_accuracy.dumps.layout import dump_files

    steps = parse_int_set(setting(group.config, "steps_select"), "steps")
    assert state.npu is not None and state.bench is not None
    npu = dump_files(state.npu, steps=steps, ranks=ranks) or []
    layouts = state.layouts  # given, or set by the configs (inferring needs every rank read)
    bench = dump_files(state.bench, steps=steps, ranks=ranks if layouts is None else None) or []
    same = same_run_files(npu, bench)
    if same:
        raise pytest.UsageError(same)
    theirs = {(s, r) for s, r, _ in bench}
    mine = {(s, r) for s, r, _ in npu}
    # the bench ranks each NPU rank meets: its own number, or its layout's
    if layouts is not None:
        from pytest_accuracy.pairing.layouts import bench_ranks

        missing = sorted((s, r) for s, r in mine if any(
            (s, b) not in theirs for b in bench_ranks(layouts[0], layouts[1], r)))
    else:
        missing = sorted(mine - theirs)
    lacking = set(missing)
    for rank in ranks:  # a rank only the NPU run dumped: the coverage item names it
        if any(r == rank and (s, r) not in lacking for s, r in mine):
            yield RankItem.from_parent(group, name=f"rank{rank}", rank=rank)
    yield RankCoverageItem.from_parent(group, name="coverage", missing=missing)


class RankItem(AccuracyItem):
    """Passes when every node of this rank (all its selected steps) meets the compare
    criteria and the rank's nodes found their bench counterparts; a failure names the
    rank's first node that makes an error of its own, with that node's whole evidence."""

    def __init__(self, *, rank: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rank = rank
        self.coverage: dict[str, Any] = {}

    def runtest(self) -> None:
        from pytest_accuracy.compare.regions import Region
        from pytest_accuracy.suite.compare_items import record_detail
        from pytest_accuracy.suite.input_items import input_problems, input_record
        from pytest_accuracy.suite.region_items import next_action, outcome, region_record

        state = self.config.stash[STATE_KEY]
        cmp = state.rank_comparison(self.rank)
        try:
            judged, problem = self._judge(cmp, state)
            after = next_action(self, cmp, judged)
            inputs = input_record(*input_problems(cmp))  # the data itself, this rank's part
        finally:
            cmp.discard()  # its threads, and its models before the next rank's are read
        region = Region(judged[0][0].step, self.rank, f"rank {self.rank}",
                        tuple(r.index for r, _, _ in judged))
        detail = record_detail(self.config)
        record, self.stash[NATIVE_KEY] = region_record(region, judged, detail)
        if detail == "verdict":  # no document written: passing nodes are counted, not sent
            record = _passes_counted(record, state.criteria.waivers)
        self.stash[RECORD_KEY] = {**record, "rank_coverage": self.coverage, "inputs": inputs}
        if inputs["problems"]:  # data that differs explains the nodes: said first
            self.stash[RECORD_KEY]["status"] = "fail"
            raise AccuracyError(input_lines(inputs) + _after_inputs(region, judged, after))
        if problem and not any(r.status == "fail" for r, _, _ in judged):
            raise AccuracyError(problem)
        outcome(region, judged, after)

    def _judge(self, cmp: Comparison, state: SuiteState) -> tuple[Judged, list[str] | None]:
        from pytest_accuracy.suite.compare_items import (
            coverage_problem,
            coverage_record,
            record_detail,
            scoped,
        )
        from pytest_accuracy.suite.region_items import judge_region

        scopes = setting(self.config, "scope") or []
        chosen = scoped(cmp, scopes)
        if not chosen:
            pytest.skip(f"--acc-scope matches none of rank {self.rank}'s {len(cmp)} nodes")
        judged = judge_region(cmp, chosen, record_detail(self.config))
        coverage, theirs = coverage_record(cmp, state.criteria.min_matched)
        self.coverage = coverage
        return judged, coverage_problem(cmp, coverage["coverage"], theirs)


def _after_inputs(region: Any, judged: Judged, after: list[str]) -> list[str]:
    """The rank's node verdict under its input problems, if it has one."""
    from pytest_accuracy.suite.region_items import outcome

    try:
        outcome(region, judged, after)
    except AccuracyError as exc:
        return ["", *exc.lines]
    except pytest.xfail.Exception as exc:  # the nodes only carry what they received
        return ["", str(exc)]
    except pytest.skip.Exception:
        return []
    return []


class RankCoverageItem(AccuracyItem):
    """Fails when an NPU step/rank dump has no bench counterpart (its nodes were not
    checked); each rank item checks its own nodes' coverage."""

    def __init__(self, *, missing: list[tuple[int, int]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.missing = missing

    def runtest(self) -> None:
        from pytest_accuracy.suite.compare_items import missing_lines

        if self.missing:
            raise AccuracyError(missing_lines(self.missing))



def _passes_counted(record: dict[str, Any], waivers: Any) -> dict[str, Any]:
    """The rank's record with its passing nodes as a count and the waivers their names match
    (what the verdict, the summary and the stale-waiver check read of them): 20,000 passes
    a rank are ~6 MB of records where a gate writes no document."""
    passed = [n["npu_name"] for n in record["region_nodes"] if n["status"] == "pass"]
    parts = {part for name in passed for part in (name, *name.split("."))}
    matched = [w.pattern for w in waivers
               if any(fnmatch.fnmatchcase(part, w.pattern) for part in parts)]
    kept = [n for n in record["region_nodes"] if n["status"] != "pass"]
    return {**record, "region_nodes": kept, "passes": len(passed), "waivers_matched": matched}
