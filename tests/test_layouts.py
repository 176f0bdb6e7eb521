"""Runs sharded otherwise (issue 40): an NPU at TP=2 against a bench at TP=1, and back.

Real dumps: tests/data/multirank (gloo CPU ranks, msprobe 26.2.0, L1 tensor; README there):
a TP x DP MLP with a column-parallel fc1 and a row-parallel fc2 whose partial sums are
all-reduced, at TP=2 x DP=2 and TP=1 x DP=2 from the same weights.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.pairing.layouts import Layout, bench_ranks, parse_layout
from pytest_accuracy.pairing.shards import ShardRecord, relayout
from tests.helpers import ROOT

RUNS = ROOT / "tests" / "data" / "multirank"
TP2, TP1, BUG = RUNS / "golden_tp2dp2", RUNS / "golden_tp1dp2", RUNS / "bug_tp2dp2"
L_TP2, L_TP1 = "--acc-npu-layout=tp=2,dp=2", "--acc-bench-layout=tp=1,dp=2"


def test_layouts_number_ranks_as_megatron_does() -> None:
    layout = parse_layout("tp=2, dp=2")
    assert layout == Layout(tp=2, dp=2, pp=1)
    assert [layout.coords(r) for r in range(4)] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    assert layout.rank(1, 1, 0) == 3
    # the bench ranks holding an NPU rank's part: same data (dp), its TP range
    assert [bench_ranks(Layout(tp=2, dp=2), Layout(tp=1, dp=2), r) for r in range(4)] == \
        [[0], [0], [1], [1]]
    assert bench_ranks(Layout(tp=2), Layout(tp=4), 1) == [2, 3]
    assert bench_ranks(Layout(tp=4), Layout(tp=2), 3) == [1]
    assert bench_ranks(Layout(tp=1, dp=2), Layout(tp=2, dp=2), 1) == [2, 3]
    for bad in ("tp=0", "tp=2,tp=4", "ep=2", ""):
        with pytest.raises(ValueError, match="expected tp=N"):
            parse_layout(bad)


def test_a_shard_is_the_slice_of_the_gathered_bench_tensor() -> None:
    """fc1's column-parallel output on NPU rank 1 (TP=2) is columns 16..31 of bench rank
    0's full output (TP=1); the reverse view (NPU TP=1) joins the TP=2 shards, and the
    statistics of the join are those msprobe recorded for the full tensor."""
    npu, bench = load_dumps(TP2), load_dumps(TP1)
    view = relayout(npu, Layout(tp=2, dp=2), bench, Layout(tp=1, dp=2))
    record = view.dumps[(0, 1)].get("Functional.linear.0.forward").output_tensors[0]
    assert isinstance(record, ShardRecord) and record.shape == (2, 4, 16)
    full = bench.dumps[(0, 0)].get("Functional.linear.0.forward").output_tensors[0].load()
    np.testing.assert_array_equal(record.load(), np.asarray(full, dtype=np.float64)[..., 16:])
    # half of one bench tensor: no statistics recorded for it; measured from the slice
    half = np.asarray(full, dtype=np.float64)[..., 16:]
    assert record.stats.norm == pytest.approx(float(np.linalg.norm(half)), rel=1e-12)
    assert (record.stats.max, record.stats.min) == (half.max(), half.min())
    back = relayout(bench, Layout(tp=1, dp=2), npu, Layout(tp=2, dp=2))
    joined = back.dumps[(0, 0)].get("Functional.linear.0.forward").output_tensors[0]
    recorded = bench.dumps[(0, 0)].get("Functional.linear.0.forward").output_tensors[0].stats
    assert joined.shape == (2, 4, 32)
    for got, want in zip(joined.stats, recorded, strict=True):
        assert got == pytest.approx(want, rel=1e-6, abs=1e-9)
    # fc2 reads a shard: its full-shaped output is a partial sum on each TP=2 rank, which the
    # TP=1 bench does not make: left out, with the reason, in both directions
    assert "Functional.linear.1.forward" in view.dumps[(0, 1)].left_out
    assert "is a partial value (it reads a shard)" in \
        back.dumps[(0, 0)].left_out["Functional.linear.1.forward"]


def _run(pytester: pytest.Pytester, npu: Path, bench: Path, *flags: str) -> pytest.RunResult:
    return pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}",
                              "-p", "no:cacheprovider", *flags)


def test_a_clean_tp2_run_passes_against_a_tp1_bench_given_the_layouts(
        pytester: pytest.Pytester) -> None:
    out = pytester.path / "acc.json"
    result = _run(pytester, TP2, TP1, L_TP2, L_TP1, f"--acc-json={out}", "-rs")
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines([
        "Layouts differ: NPU tp=2,dp=2,pp=1 against bench tp=1,dp=2,pp=1. Each NPU rank is "
        "compared with the slice it holds of its bench ranks' tensors (NPU rank <- bench "
        "ranks: 0 <- 0, 1 <- 0, 2 <- 1, 3 <- 1)*",
        "No divergence: all * compared nodes meet the criteria.",
    ])
    result.stdout.fnmatch_lines(["*not compared: its output on NPU rank 1 (TP rank 1 of 2) is a "
                                 "partial value (it reads a shard) that the bench at TP=1 does "
                                 "not make*"])
    doc = json.loads(out.read_text())
    assert (doc["inputs"]["npu_layout"], doc["inputs"]["bench_layout"]) == ("tp=2,dp=2",
                                                                            "tp=1,dp=2")
    passed = [n for n in doc["compare"]["nodes"] if n["status"] == "pass"]
    assert {n["rank"] for n in passed} == {0, 1, 2, 3} and len(passed) > 100
    # not given, the layouts are read from the dumps (every rank there), and said
    inferred = _run(pytester, TP2, TP1)
    assert inferred.ret == 0
    inferred.stdout.fnmatch_lines([
        "Layouts differ: NPU tp=2,dp=2,pp=1 against bench tp=1,dp=2,pp=1 (inferred from the "
        "dumps: 4 ranks of the NPU against 2 ranks of the bench; ranks 0-1 of the NPU and rank 0 "
        "of the bench read one batch, and the NPU's sharded tensors are 1/2 where the bench's are "
        "whole; give --acc-npu-layout and --acc-bench-layout to say otherwise)*"])
    # a part of the ranks without the layouts: paired rank by number, never a silent pass
    assert _run(pytester, TP2, TP1, "--acc-ranks=0,1").ret == 1


@pytest.mark.parametrize("given", [True, False], ids=["given", "inferred"])
def test_the_rank_that_makes_the_error_is_named_across_layouts(
        pytester: pytest.Pytester, given: bool) -> None:
    """bug_tp2dp2: rank 2 runs its RMSNorm with eps 1e-5; rank 2 is NPU (tp 0, dp 1), held
    against bench rank 1 (dp 1); the same verdict with the layouts given and inferred."""
    result = _run(pytester, BUG, TP1, *((L_TP2, L_TP1) if given else ()))
    result.stdout.fnmatch_lines(["Layouts differ: NPU tp=2,dp=2,pp=1 against bench "
                                 "tp=1,dp=2,pp=1*"])
    assert result.ret == 1
    result.stdout.fnmatch_lines(["First divergence: Tensor.__add__.0.forward (step 0, rank 2; "
                                 "bench rank 1), output.0: relative error 0.0714*"])


def test_a_tp1_run_meets_the_sum_and_join_of_tp2_shards(pytester: pytest.Pytester) -> None:
    """The other way round, at task statistics too: the join of whole shards has statistics
    (Max, Min, Mean by counts, Norm), so TP=1 is checked against TP=2 from dump.json alone;
    and a TP=2 statistics dump meets the statistics of its slices of a TP=1 tensor dump."""
    stats = pytester.path / "tp2_statistics"
    shutil.copytree(TP2, stats, ignore=shutil.ignore_patterns("dump_tensor_data", "*.pt"))
    for path in stats.rglob("dump.json"):
        doc = json.loads(path.read_text())
        doc["task"] = "statistics"
        path.write_text(json.dumps(_without_data(doc)))
    for bench in (TP2, stats):
        result = _run(pytester, TP1, bench, "--acc-npu-layout=tp=1,dp=2",
                      "--acc-bench-layout=tp=2,dp=2")
        assert result.ret == 0, result.stdout.str()[-3000:]
        result.stdout.fnmatch_lines(["*(NPU rank <- bench ranks: 0 <- 0+1, 1 <- 2+3)*",
                                     "No divergence: all 7? compared nodes meet the criteria."])
    result = _run(pytester, stats, TP1, L_TP2, L_TP1)
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["No divergence: all 144 compared nodes meet the criteria."])


def _without_data(node: object) -> object:
    if isinstance(node, dict):
        return {k: _without_data(v) for k, v in node.items() if k != "data_name"}
    if isinstance(node, list):
        return [_without_data(v) for v in node]
    return node


@pytest.mark.parametrize(("flags", "message"), [
    (("--acc-bench-layout=tp=1",), "*--acc-bench-layout needs --acc-npu-layout*"),
    ((L_TP2, "--acc-bench-layout=tp=1,dp=3"), "*has dp=2, the bench * dp=3: a DP rank of one "
                                              "must read whole parts of the batch of the other*"),
    (("--acc-npu-layout=tp=2,dp=2", "--acc-bench-layout=tp=1"),
     "*splits the batch and the model by the same ratio against the bench*"),
    (("--acc-npu-layout=tp=2,dp=2", "--acc-bench-layout=tp=2,pp=2"), "*differ in both dp and pp*"),
    (("--acc-npu-layout=tp=2,pp=2", "--acc-bench-layout=tp=1,pp=3"),
     "*a stage of one must hold whole stages of the other*"),
    (("--acc-npu-layout=tp=1,dp=2", "--acc-bench-layout=tp=2,dp=2"),
     "*--acc-npu-layout tp=1,dp=2,pp=1 has 2 ranks, the NPU dump * has rank 2*"),
    (("--acc-npu-layout=tp=2,tp=4", L_TP1), "*expected tp=N,dp=N,pp=N*"),
])
def test_layouts_that_cannot_hold_are_usage_errors(pytester: pytest.Pytester,
                                                    flags: tuple[str, ...], message: str) -> None:
    result = _run(pytester, TP2, TP1, *flags)
    assert result.ret in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERRUPTED)
    text = result.stdout.str() + result.stderr.str()
    assert any(fnmatch.fnmatch(line, message) for line in text.splitlines()), text


# tests/data/real/layouts (README there): a vocabulary-parallel embedding, a column-parallel
# fc1, a row-parallel fc2 and a column-parallel vocabulary head gathered with all_gather, at
# TP=1, 2 and 4 (DP=1), and three bugs on rank 1 of TP=2.
LAYOUTS = ROOT / "tests" / "data" / "real" / "layouts"
CLEAN = [("L1", "tp2", "tp1"), ("L0", "tp2", "tp1"), ("L0", "tp2", "tp4"), ("L0", "tp4", "tp2"),
         ("L0", "tp1", "tp4"), ("mix", "tp2", "tp1"), ("mix", "tp2", "tp4"),
         ("mix", "tp4", "tp1"), ("mix", "tp1", "tp2")]


@pytest.mark.parametrize(("level", "npu", "bench"), CLEAN, ids=["-".join(c) for c in CLEAN])
def test_clean_runs_of_other_tp_sizes_pass(pytester: pytest.Pytester, level: str, npu: str,
                                           bench: str) -> None:
    """Partial values (the vocabulary lookup and its range masks, the row-parallel partial
    sums, the gathered logits' pieces) are skipped with the reason; everything else meets the
    bench's slice, and passes."""
    out = pytester.path / "acc.json"
    result = _run(pytester, LAYOUTS / level / npu, LAYOUTS / level / bench, f"--acc-json={out}")
    assert result.ret == 0, result.stdout.str()[-3000:]
    doc = json.loads(out.read_text())
    assert doc["compare"]["layouts"]["npu"].startswith(f"tp={npu[2:]},")
    passed = sum(n["status"] == "pass" for n in doc["compare"]["nodes"])
    assert passed >= 15  # of 17 (L0, TP=1) to 160 (mix, TP=4) nodes


# (bug, level, bench) -> the node that makes the error on rank 1, named on rank 1 (rank 0
# receives it through the all-reduce or the gather). Against a finer bench (TP=4) the
# row-parallel output is compared where the coarser TP=1 bench has no partial sum.
BUGS = {
    ("tp2_fc1_transposed", "L1", "tp1"): "Functional.linear.0.forward",
    ("tp2_fc1_transposed", "L0", "tp1"): "Module.fc1.ColumnParallelLinear.forward.0",
    ("tp2_fc1_transposed", "L0", "tp4"): "Module.fc1.ColumnParallelLinear.forward.0",
    ("tp2_fc1_transposed", "mix", "tp4"): "Functional.linear.0.forward",
    ("tp2_no_allreduce", "L1", "tp1"): "Tensor.__add__.1.forward",
    ("tp2_no_allreduce", "L0", "tp1"): "Module.fc2.RowParallelLinear.forward.0",
    ("tp2_no_allreduce", "L0", "tp4"): "Module.fc2.RowParallelLinear.forward.0",
    ("tp2_no_allreduce", "mix", "tp1"): "Module.fc2.RowParallelLinear.forward.0",
    ("tp2_no_allreduce", "mix", "tp4"): "Module.fc2.RowParallelLinear.forward.0",
}


@pytest.mark.parametrize(("bug", "level", "bench"), sorted(BUGS),
                         ids=["-".join(c) for c in sorted(BUGS)])
def test_a_bug_on_one_rank_is_named_on_that_rank(pytester: pytest.Pytester, bug: str,
                                                 level: str, bench: str) -> None:
    """Rank 1's fc1 shard transposed, or rank 1 keeping its partial sum (no all-reduce)."""
    out = pytester.path / "acc.json"
    result = _run(pytester, LAYOUTS / level / bug, LAYOUTS / level / bench, f"--acc-json={out}")
    assert result.ret == 1
    # the data check reads each shard's lookup as a shard's: never "ids past the table"
    assert "FAILED accuracy::compare::inputs" not in result.stdout.str()
    first = json.loads(out.read_text())["compare"]["first_divergence"]
    assert (first["npu_name"], first["rank"], first["step"]) == (BUGS[bug, level, bench], 1, 0)


@pytest.mark.parametrize(("level", "bench", "node"), [
    ("L0", "tp1", "Module.embed.VocabParallelEmbedding.forward.0"),
    ("L0", "tp4", "Module.embed.VocabParallelEmbedding.forward.0"),
    ("mix", "tp4", "Functional.embedding.0.forward")])
def test_a_wrong_vocabulary_split_is_named_at_the_embedding(pytester: pytest.Pytester,
                                                            level: str, bench: str,
                                                            node: str) -> None:
    """Rank 1's embedding shard takes rows [7, 15): the lookup is a partial value on every
    rank, so the error shows in the embedding's all-reduced output, alike on both ranks. Rank
    1's own table shard differs from the bench's rows [8, 16): with tensors (L0) a parameter
    of its own; from statistics (mix) against TP=4, whose ranks 2 and 3 hold rows [8, 16)
    whole, the table the lookup reads: made there, so rank 1 is named."""
    out = pytester.path / "acc.json"
    result = _run(pytester, LAYOUTS / level / "tp2_vocab_split", LAYOUTS / level / bench,
                  f"--acc-json={out}")
    assert result.ret == 1
    first = json.loads(out.read_text())["compare"]["first_divergence"]
    assert (first["npu_name"], first["rank"], first.get("joined")) == (node, 1, None)


@pytest.mark.parametrize(("bug", "node"), [("tp2_vocab_split", "Functional.embedding.0.forward"),
                                           ("tp2_fc1_transposed", "Functional.linear.0.forward")])
def test_statistics_against_a_tp1_bench_join_the_shards(pytester: pytest.Pytester, bug: str,
                                                        node: str) -> None:
    """From statistics, a TP=1 bench has none of a shard's own: the two ranks' shards are
    joined (Max and Min of both, Mean by counts, Norm as the root of the sum of squares) and
    meet the bench's whole. The bug's node is named on both ranks, said to be joined; the
    clean run passes the same joined checks (test_clean_runs_of_other_tp_sizes_pass)."""
    out = pytester.path / "acc.json"
    result = _run(pytester, LAYOUTS / "mix" / bug, LAYOUTS / "mix" / "tp1", f"--acc-json={out}")
    assert result.ret == 1
    first = json.loads(out.read_text())["compare"]["first_divergence"]
    assert (first["npu_name"], first["rank"], first["joined"]) == (node, 0, [0, 1])
    result.stdout.fnmatch_lines(["First divergence*(step 0, ranks 0, 1 joined: their shards' "
                                 "statistics together against the bench's whole; which shard "
                                 "differs needs their tensors; bench rank 0)*"])


def test_the_same_verdict_given_or_inferred(pytester: pytest.Pytester) -> None:
    runs = LAYOUTS / "L0"
    for flags in ((), ("--acc-npu-layout=tp=2", "--acc-bench-layout=tp=4")):
        out = pytester.path / "acc.json"
        result = _run(pytester, runs / "tp2_no_allreduce", runs / "tp4", f"--acc-json={out}",
                      *flags)
        assert result.ret == 1
        first = json.loads(out.read_text())["compare"]["first_divergence"]
        assert (first["npu_name"], first["rank"]) == ("Module.fc2.RowParallelLinear.forward.0", 1)


def test_the_report_page_says_which_layouts_met(pytester: pytest.Pytester) -> None:
    runs = LAYOUTS / "L0"
    result = _run(pytester, runs / "tp2", runs / "tp1", f"--acc-report={pytester.path / 'r'}")
    assert result.ret == 0
    page = (pytester.path / "r" / "index.html").read_text()
    assert ("NPU layout tp=2,dp=1,pp=1 against bench tp=1,dp=1,pp=1 (inferred from the dumps): "
            "each NPU rank compared with the slice its bench ranks hold") in page
