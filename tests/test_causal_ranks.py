"""Ranks in causal order (issue 39): the rank that made an error before a collective carried
it to another rank is named, not the lowest rank.

Real dumps: tests/data/multirank (README there). bug_tp2dp2's rank 2 runs its RMSNorm with eps
1e-5 and its TP partner, rank 3, receives the error through the row-parallel all-reduce. The
test swaps ranks 2 and 3 (both runs alike), so that the rank that makes the error is the higher
one of its TP group, and the lower one's all-reduce is the first failing node in rank order.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_accuracy.compare import Comparison
from pytest_accuracy.compare.divergence import find_first_divergence
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.report.merge import merge_files
from tests.helpers import ROOT

RUNS = ROOT / "tests" / "data" / "multirank"


def _swapped(where: Path, run: str) -> Path:
    out = where / run
    shutil.copytree(RUNS / run, out)
    for step in ("step0", "step1"):
        (out / step / "rank2").rename(out / step / "tmp")
        (out / step / "rank3").rename(out / step / "rank2")
        (out / step / "tmp").rename(out / step / "rank3")
    return out


def test_the_rank_that_made_the_error_comes_before_the_one_that_received_it(
        tmp_path: Path) -> None:
    npu, bench = _swapped(tmp_path, "bug_tp2dp2"), _swapped(tmp_path, "golden_tp2dp2")
    cmp = Comparison(load_dumps(npu), load_dumps(bench))
    # in rank order, rank 2's all-reduce fails first: its inputs agree, its output does not
    received = next(r for r in cmp.results() if r.status == "fail")
    assert (received.rank, received.npu.name) == (2, "Distributed.all_reduce.0.forward")
    first = find_first_divergence(cmp)
    assert first is not None
    assert (first.step, first.rank, first.npu_name) == (0, 3, "Tensor.__add__.0.forward")
    assert not first.received


@pytest.mark.parametrize("flags", [(), ("-n", "2"), ("--acc-items=rank",)],
                         ids=["serial", "xdist", "rank-items"])
def test_every_way_of_running_names_the_maker(pytester: pytest.Pytester,
                                              flags: tuple[str, ...]) -> None:
    npu, bench = _swapped(pytester.path, "bug_tp2dp2"), _swapped(pytester.path, "golden_tp2dp2")
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", f"--acc-json={out}",
                                "-p", "no:cacheprovider", *flags)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["First divergence: Tensor.__add__.0.forward (step 0, rank 3)*"])
    first = json.loads(out.read_text())["compare"]["first_divergence"]
    assert (first["rank"], first["received"]) == (3, False)


def test_a_merge_of_shards_by_rank_names_the_maker(pytester: pytest.Pytester) -> None:
    """The part holding ranks 0-2 names rank 2's all-reduce (received); the part holding
    rank 3 names the maker; the merge ranks the maker first."""
    npu, bench = _swapped(pytester.path, "bug_tp2dp2"), _swapped(pytester.path, "golden_tp2dp2")
    parts = []
    for name, ranks in (("a", "0-2"), ("b", "3")):
        out = pytester.path / f"{name}.json"
        pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", f"--acc-json={out}",
                           f"--acc-ranks={ranks}", "--acc-steps-select=0", "-p",
                           "no:cacheprovider")
        parts.append(out)
    alone = json.loads(parts[0].read_text())["compare"]["first_divergence"]
    assert (alone["rank"], alone["npu_name"], alone["received"]) == (
        2, "Distributed.all_reduce.0.forward", True)
    merged = merge_files(parts)
    assert merged["compare"]["first_divergence"]["rank"] == 3
