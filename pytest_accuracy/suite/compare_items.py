"""Compare items: one per NPU node (``accuracy::compare::<step>/<rank>/<node>``) plus coverage."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import pytest

from pytest_accuracy.compare import Comparison, NodeResult
from pytest_accuracy.compare.bench_coverage import BenchCoverage, bench_coverage
from pytest_accuracy.compare.divergence import (
    FirstDivergence,
    bench_ranks_words,
    describe,
    evidence_lines,
    find_first_nonfinite,
)
from pytest_accuracy.compare.plain import PlainPass, plain_pass
from pytest_accuracy.report.records import node_record, plain_record, verdict_record
from pytest_accuracy.settings import setting, typed_setting
from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyGroup, AccuracyItem
from pytest_accuracy.suite.messages import enclosing_line, mismatched_line, precision_hint
from pytest_accuracy.suite.readahead import AHEAD_KEY
from pytest_accuracy.suite.state import STATE_KEY
from pytest_accuracy.text import escape_controls


class CompareGroup(AccuracyGroup):
    def collect(self) -> Iterator[pytest.Item]:
        from pytest_accuracy.suite.rank_items import rank_items, rank_mode

        state = self.config.stash[STATE_KEY]
        ranks = rank_mode(self.config, state)
        if ranks is not None:  # many ranks: each item reads its own
            yield from rank_items(self, state, ranks)
            return
        cmp = state.comparison  # input errors become collection errors
        scopes = setting(self.config, "scope") or []
        chosen = scoped(cmp, scopes)
        if scopes and not chosen:  # a selection that checks nothing must not pass
            example = cmp.entries[0][1].name if cmp.entries else "none"
            raise pytest.UsageError(escape_controls(
                f"--acc-scope {', '.join(map(repr, scopes))} matches none of the "
                f"{len(cmp.entries)} NPU nodes (names look like {example!r})"))
        if _per_region(self.config, len(chosen)):
            from pytest_accuracy.suite.region_items import region_items

            yield from region_items(self, cmp, chosen)
        else:
            for i in chosen:
                dump, call = cmp.entries[i]
                name = escape_controls(f"{dump.step}/{dump.rank}/{call.name}")
                yield CompareItem.from_parent(self, name=name, index=i)
        yield CoverageItem.from_parent(self, name="coverage")
        from pytest_accuracy.suite.gradient_items import gradient_items
        from pytest_accuracy.suite.input_items import input_items

        yield from gradient_items(self, cmp)
        yield from input_items(self, cmp)


def scoped(cmp: Comparison, scopes: list[str]) -> list[int]:
    """The nodes --acc-scope selects (every node without one), in run order."""
    return [i for i, (_, call) in enumerate(cmp.entries)
            if not scopes or any(fnmatch.fnmatchcase(call.name, s) for s in scopes)]


def _per_region(config: pytest.Config, nodes: int) -> bool:
    """--acc-items: node, region, or auto (per node up to NODE_ITEMS_UP_TO nodes)."""
    from pytest_accuracy.compare.regions import NODE_ITEMS_UP_TO

    chosen = typed_setting(config, "items") or "auto"
    return chosen == "region" or (chosen == "auto" and nodes > NODE_ITEMS_UP_TO)


class CompareItem(AccuracyItem):
    """Passes when this node's outputs meet the compare criteria."""

    def __init__(self, *, index: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.index = index

    def runtest(self) -> None:
        cmp = self.config.stash[STATE_KEY].comparison
        result, own, record = judge_node(cmp, self.index, self.stash.get(AHEAD_KEY, None),
                                         detail=record_detail(self.config))
        self.stash[RECORD_KEY] = record
        if result.status in ("unmatched", "skip"):
            pytest.skip(escape_controls(f"{result.status}: {result.reason}"))
        if result.status == "waived":
            pytest.xfail(escape_controls(result.reason))
        if result.status == "carried":
            pytest.xfail(escape_controls(f"carried from {result.carried_from}: {result.reason}"))
        if result.status == "error":
            raise AccuracyError([f"{result.npu.name}: {result.reason}"])
        if result.status == "fail":
            assert isinstance(result, NodeResult)  # a plain pass never fails
            from pytest_accuracy.suite.next_step import compare_next_step

            after = compare_next_step(self, cmp, result) if own is not None else []
            raise AccuracyError(failure_lines(result, own) + after)


Detail = Literal["verdict", "record", "rows"]


def record_detail(config: pytest.Config) -> Detail:
    """What the node records must hold: the report's table rows (--acc-report), every field
    of the JSON document (--acc-json, a Markdown summary), or, for a gate that writes
    neither, what the verdict and the terminal summary read of a pass."""
    from pytest_accuracy.suite.markdown_out import markdown_wanted

    if setting(config, "report"):
        return "rows"
    return "record" if setting(config, "json") or markdown_wanted(config) else "verdict"


def judge_node(cmp: Comparison, index: int, ahead: Sequence[int] | None, *,
               detail: Detail) -> tuple[NodeResult | PlainPass, FirstDivergence | None,
                                        dict[str, Any]]:
    """One node's result, its own error described when it fails, and its record."""
    plain = plain_pass(cmp, index)
    if plain is not None:  # certain from metadata: no result to build (compare/plain.py)
        record = (verdict_record(plain) if detail == "verdict"
                  else plain_record(plain, rows=detail == "rows"))
        record["order"] = index
        return plain, None, record
    result = cmp.node(index, ahead=ahead)
    # Each failing node describes itself; the controller picks the earliest (xdist-safe).
    own = describe(cmp, cmp.with_inputs(index)) if result.status == "fail" else None
    if detail == "verdict" and result.status == "pass":
        record = verdict_record(result)  # all a gate reads of a pass, tensor nodes too
    else:
        record = node_record(result, own, rows=detail == "rows")
    record["order"] = index
    if own is not None:
        record["first"] = {**own.as_dict(), "index": own.index}
    cmp.release(index)  # the record holds what the run needs of a passing node
    return result, own, record


def failure_lines(result: NodeResult, first: FirstDivergence | None) -> list[str]:
    """The failure message: what mismatched, how much, where, and why it matters."""
    where = f"step {result.step}, rank {result.rank}"
    bench = result.bench.name if result.bench else "?"
    if first is not None and first.bench_ranks:  # another layout: the ranks it was made of
        bench += f" ({bench_ranks_words(first.bench_ranks)})"
    if result.failing_outputs:
        lines = [f"Outputs of {result.npu.name} ({where}) are not close to bench {bench}!", ""]
    else:
        lines = [f"{result.npu.name} ({where}) differs from bench {bench} in how it computes!",
                 ""]
    for finding in result.findings:
        lines.append(f"{finding.kind}: {finding.detail}")
    for t in result.failing_outputs:
        lines.append(f"{t.path}: {t.judgement.detail}")
        m = t.metrics
        mismatched = mismatched_line(t)
        if mismatched:
            lines.append(mismatched)
        index = getattr(m, "worst_index", None)
        if index is not None:
            lines.append(f"Greatest absolute difference: {getattr(m, 'max_abs_err', 0):.3g} "
                         f"at index {index}")
    lines.append("")
    if first is not None:
        lines.append("This node MAKES an error of its own: " + _how_made(first))
        if first.likely_cause and all(f.detail != first.likely_cause for f in result.findings):
            lines.append(f"Likely cause: {first.likely_cause}")
    hint = precision_hint(result)
    if hint:
        lines.append(hint)
    if result.local is not None:
        lines.append(f"Local error (output vs float64 replay of its own inputs): "
                     f"{result.local.sentence()}")
    elif result.local_note:
        lines.append(f"Local error not measured: {result.local_note}")
    lines += ["", "Inputs vs outputs:", *evidence_lines(result)]
    lines += [""] + [line for line in (enclosing_line(result.npu),) if line]
    stack = result.npu.stack_line()
    if stack:
        lines += [f"Stack: {stack}"]
    return lines


_MADE_BY = {
    "precision": "it computes in another precision than the bench from inputs that arrive "
                 "in the same dtypes (or from a parameter stored in another dtype).",
    "argument": "it is called with different non-tensor arguments.",
    "local_error": "its outputs are further from a float64 replay of its own inputs than the "
                   "bench's are.",
    "update": "it reads a parameter that the update after an identical step changed "
              "differently.",
}


def _how_made(first: FirstDivergence) -> str:
    if first.finding in _MADE_BY:
        return _MADE_BY[first.finding]
    if first.kind == "parameter":
        return "its inputs match the bench's and a parameter of its own differs."
    if first.kind == "appears":
        return "its inputs match the bench exactly and its outputs do not."
    after = first.previous or f"the start of step {first.step}"
    if first.through is not None and first.through == first.previous:
        return (f"its inputs already differ and nothing dumped before it diverged; the input "
                f"was made by {after}, which only the NPU run records.")
    return (f"its inputs already differ and nothing dumped before it diverged; the error "
            f"entered after {after}, through an input the dump did not see being made.")


class CoverageItem(AccuracyItem):
    """Fails when too few NPU nodes found a bench counterpart, or none could be compared."""

    def runtest(self) -> None:
        state = self.config.stash[STATE_KEY]
        cmp: Comparison = state.comparison
        record, theirs = coverage_record(cmp, state.criteria.min_matched)
        from pytest_accuracy.suite.summary import layouts_seen

        # -n: the layouts as this process saw them, for the controller's summary and document
        self.stash[RECORD_KEY] = {**record, "layouts_seen": layouts_seen(state)}
        _write_inferred_mapping(self.config, cmp)
        problem = coverage_problem(cmp, record["coverage"], theirs)
        if problem:
            raise AccuracyError(problem)


def coverage_record(cmp: Comparison, need: float) -> tuple[dict[str, Any], BenchCoverage]:
    """How many NPU nodes found a counterpart (and bench nodes an NPU one), the first
    NaN/Inf, and what was compared on: the "coverage" part of the JSON document."""
    share = cmp.matched_share()
    total = len(cmp)
    nonfinite = find_first_nonfinite(cmp)
    theirs = bench_coverage(cmp)
    return {"coverage": {"matched": round(share * total), "total": total,
                         "matched_share": share, "min_matched": need, **theirs.as_dict()},
            "first_nonfinite": nonfinite.as_dict() if nonfinite else None,
            **_compared_on(cmp)}, theirs


def coverage_problem(cmp: Comparison, coverage: dict[str, Any],
                     theirs: BenchCoverage) -> list[str] | None:
    """Why the run's coverage fails it, in lines; None where it holds."""
    total, matched, share = coverage["total"], coverage["matched"], coverage["matched_share"]
    need = coverage["min_matched"]
    if total == 0 or matched == 0:
        return [f"Nothing comparable matched: 0 of {total} NPU nodes found a bench counterpart.",
                f"NPU {cmp.npu.framework} dump {cmp.npu.root}, bench {cmp.bench.framework} "
                f"dump {cmp.bench.root}."]
    if not any(_has_common_output(cmp, i) for i in range(total)):  # stops at the first
        return [f"Nothing was compared: none of the {matched} matched NPU nodes has a tensor "
                "output that the bench also recorded, so no accuracy was checked.",
                f"NPU dump {cmp.npu.root}, bench dump {cmp.bench.root}."]
    missing = sorted(set(cmp.npu.keys()) - set(cmp.bench.keys()))
    unmade = [f"step {s} rank {r}: {why}" for (s, r), why in sorted(cmp.bench.unmade.items())]
    if missing:  # the merge of shards fails on it: so does one run
        return missing_lines(missing) + unmade[:5]
    if share < need:
        return [f"Only {matched} of {total} NPU nodes ({share:.1%}) found a bench counterpart "
                f"(at least {need:.0%} required).",
                "Unmatched nodes are skipped items; see the summary for the list."]
    if theirs.skipped:
        return [f"The NPU run skips {len(theirs.skipped)} bench module call(s) whose like "
                "siblings all have an NPU counterpart:", *theirs.skipped_lines(),
                "A layer the NPU model leaves out (its config's layer count, a condition that "
                "skips it) computes nothing there: compare the two models' structure."]
    return None


def missing_lines(missing: list[tuple[int, int]]) -> list[str]:
    """NPU (step, rank) dumps with no bench counterpart, as a coverage failure."""
    where = ", ".join(f"step {s} rank {r}" for s, r in missing[:5])
    return [f"{len(missing)} NPU step/rank dump(s) have no bench counterpart ({where}"
            f"{' ...' if len(missing) > 5 else ''}): their nodes were not checked.",
            "Give the bench run's dumps of the same steps and ranks, or select the ones "
            "both runs have (--acc-steps-select, --acc-ranks)."]


def _compared_on(cmp: Comparison) -> dict[str, Any]:
    """``{"compared_on": ...}`` when the dumps' tasks differ (statistics were compared)."""
    from pytest_accuracy.dumps.tasks import task_mismatch

    mismatch = task_mismatch(cmp.npu, cmp.bench)
    if mismatch is None:
        return {}
    return {"compared_on": {**mismatch.as_dict(), "note": mismatch.note()}}


def _has_common_output(cmp: Comparison, index: int) -> bool:
    bench = cmp.bench_call(index)
    if bench is None:
        return False
    call = cmp.entries[index][1]
    if call.dtype_signature == bench.dtype_signature:  # the same tensors, in the same places
        return bool(call.output_tensors)
    theirs = {r.path for r in bench.output_tensors}
    return any(r.path in theirs for r in cmp.entries[index][1].output_tensors)


def _write_inferred_mapping(config: pytest.Config, cmp: Comparison) -> None:
    """Once per run (this item runs in exactly one process), also under xdist."""
    from pathlib import Path

    from pytest_accuracy.suite.pairing import InferredPairing

    report = config.getoption("acc_report") or config.getini("acc_report")
    if report and isinstance(cmp.pairing, InferredPairing):
        out = Path(report)
        out.mkdir(parents=True, exist_ok=True)
        cmp.pairing.write_yaml(out)
