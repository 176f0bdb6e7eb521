"""Rank items (issue 41): one item per rank reads, compares and lets go of its rank; the
verdict, the first divergence, the coverage and every node's judgement are the run's own."""

from __future__ import annotations

import gc
import json
import shutil
import weakref
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT

MULTIRANK = ROOT / "tests" / "data" / "multirank"
BUG, GOLDEN = MULTIRANK / "bug_tp2dp2", MULTIRANK / "golden_tp2dp2"


def _run(pytester: pytest.Pytester, name: str, *args: str, npu: Path = BUG,
         bench: Path = GOLDEN) -> tuple[pytest.RunResult, dict[str, Any]]:
    out = pytester.path / f"{name}.json"
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", f"--acc-json={out}",
                                "-p", "no:cacheprovider", *args)
    return result, json.loads(out.read_text())


def _judged(doc: dict[str, Any]) -> list[dict[str, Any]]:
    # the wording of why a node carries an error depends on what its process saw
    return [{k: v for k, v in n.items() if k not in ("reason", "divergence_kind")}
            for n in doc["compare"]["nodes"]]


def test_rank_items_judge_every_node_as_the_whole_run_does(pytester: pytest.Pytester) -> None:
    _, whole = _run(pytester, "whole")
    result, ranked = _run(pytester, "ranked", "--acc-items=rank")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] >= 1 and outcomes["passed"] >= 1
    result.stdout.fnmatch_lines(["FAILED accuracy::compare::rank2 - *"])
    assert ranked["verdict"] == whole["verdict"] == "fail"
    assert ranked["compare"]["first_divergence"] == whole["compare"]["first_divergence"]
    assert ranked["compare"]["coverage"] == whole["compare"]["coverage"]
    assert _judged(ranked) == _judged(whole)


def test_a_gate_counts_passing_nodes_and_still_sees_a_waiver_they_match(
        pytester: pytest.Pytester) -> None:
    """Without a document to write, a rank item sends its passing nodes as a count: the
    summary's numbers stay, and a waiver matching only passing nodes is not called stale."""
    waivers = pytester.path / "waivers.yaml"
    waivers.write_text("- pattern: 'Functional.linear.*'\n  reason: checked by hand\n"
                       "  rel_err: 0.01\n")
    clean = pytester.runpytest(f"--acc-npu={GOLDEN}", f"--acc-bench={_rerun(pytester)}",
                               "--acc-items=rank", f"--acc-waivers={waivers}",
                               "-p", "no:cacheprovider")
    assert clean.ret == pytest.ExitCode.OK
    clean.stdout.fnmatch_lines(["Matched 168 of 168 NPU nodes *",
                                "No divergence: all 168 compared nodes meet the criteria."])
    assert "matched no compared node" not in clean.stdout.str()


def _rerun(pytester: pytest.Pytester) -> Path:
    from tests.helpers import rerun

    return rerun(GOLDEN, pytester.path)


def test_a_rank_the_bench_lacks_fails_coverage(pytester: pytest.Pytester) -> None:
    bench = pytester.path / "bench"
    shutil.copytree(GOLDEN, bench)
    for step in ("step0", "step1"):
        shutil.rmtree(bench / step / "rank3")
    result = pytester.runpytest(f"--acc-npu={BUG}", f"--acc-bench={bench}", "--acc-items=rank",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*_ accuracy::compare::coverage _*",
                                 "2 NPU step/rank dump(s) have no bench counterpart (step 0 "
                                 "rank 3, step 1 rank 3): their nodes were not checked.",
                                 "FAILED accuracy::compare::coverage - *"])
    assert "accuracy::compare::rank3" not in result.stdout.str()


def test_a_discarded_comparison_is_freed_without_a_collection() -> None:
    """Its cached helpers hold bound methods of it (a cycle): discarded, its dump models go
    by reference counting alone, so a rank's memory returns before the next rank's is read."""
    from pytest_accuracy.compare import Comparison
    from pytest_accuracy.dumps.layout import load_dumps

    npu, bench = load_dumps(BUG, ranks={2}), load_dumps(GOLDEN, ranks={2})
    cmp = Comparison(npu, bench)
    assert cmp.node(len(cmp) - 1).status in ("pass", "fail", "carried", "skip", "unmatched")
    model = weakref.ref(next(iter(npu)))
    del npu, bench
    gc.disable()
    try:
        cmp.discard()
        del cmp
        assert model() is None
    finally:
        gc.enable()


def test_auto_reads_rank_by_rank_past_the_size_where_it_pays(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    # by sys.modules, not the package's attribute: an earlier in-process run may have left
    # the package pointing at a module object its cleanup dropped from sys.modules
    rank_items = importlib.import_module("pytest_accuracy.suite.rank_items")
    items = pytester.runpytest(f"--acc-npu={BUG}", f"--acc-bench={GOLDEN}", "--co", "-q",
                               "-p", "no:cacheprovider")
    assert "accuracy::compare::rank0" not in items.stdout.str()  # 4 small ranks: per node
    monkeypatch.setattr(rank_items, "RANK_ITEMS_FROM_BYTES", 1)
    items = pytester.runpytest(f"--acc-npu={BUG}", f"--acc-bench={GOLDEN}", "--co", "-q",
                               "-p", "no:cacheprovider")
    items.stdout.fnmatch_lines(["accuracy::compare::rank0", "accuracy::compare::rank1",
                                "accuracy::compare::rank2", "accuracy::compare::rank3",
                                "accuracy::compare::coverage"])
