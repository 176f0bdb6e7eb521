"""Pipeline stages across layouts (issue 40): an NPU run at TP=2 x PP=2 against a bench at
TP=1 or TP=4 with one stage, on real gloo dumps (tests/data/real/layouts_pp, README there).
Each NPU stage meets the bench's calls it makes, renamed as the stage names them (stage 1's
``layers.0`` is the bench's ``layers.1``, its counters start at 0); clean pairs pass, and the
bugs made on rank 3 (stage 1) or rank 1 (stage 0) are named there, with the layouts given or
inferred."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.pairing.layouts import Layout, bench_ranks, layouts_problem, stage_place
from pytest_accuracy.pairing.stages import stage_view
from tests.helpers import compare_pair

DATA = Path(__file__).parent / "data" / "real" / "layouts_pp"
GIVEN = ("--acc-npu-layout=tp=2,pp=2", "--acc-bench-layout=tp=1")
INFERRED = "Layouts differ: NPU tp=2,dp=1,pp=2 against bench tp=1,dp=1,pp=1 (inferred"


def test_bench_ranks_and_places_of_a_two_stage_run() -> None:
    npu, tp1, tp4 = Layout(tp=2, pp=2), Layout(tp=1), Layout(tp=4)
    assert [bench_ranks(npu, tp1, r) for r in range(4)] == [[0], [0], [0], [0]]
    assert [bench_ranks(npu, tp4, r) for r in range(4)] == [[0, 1], [2, 3], [0, 1], [2, 3]]
    assert [stage_place(npu, tp1, r) for r in range(4)] == [0.0, 0.0, 1.0, 1.0]
    assert layouts_problem(npu, tp1) is None
    assert "a stage of one must hold whole stages of the other" in str(
        layouts_problem(Layout(pp=2), Layout(pp=3)))
    assert layouts_problem(Layout(dp=2), Layout(dp=1)) is None
    assert "one dp a divisor of the other" in str(layouts_problem(Layout(dp=2), Layout(dp=3)))


def test_a_stage_sees_the_bench_calls_it_makes_under_its_own_names() -> None:
    bench = load_dumps(str(DATA / "L0" / "tp1")).dumps[(0, 0)]
    npu = load_dumps(str(DATA / "L0" / "tp2pp2"))
    first = stage_view(bench, npu.dumps[(0, 0)], 0.0)
    last = stage_view(bench, npu.dumps[(0, 2)], 1.0)
    assert first is not None and last is not None
    assert {c.name for c in first.calls} == {c.name for c in npu.dumps[(0, 0)].calls}
    assert {c.name for c in last.calls} == {c.name for c in npu.dumps[(0, 2)].calls}
    # stage 1's layers.0 is the bench's layers.1: the same record, renamed
    made = last.get("Module.layers.0.fc1.ColumnParallelLinear.forward.0")
    theirs = bench.get("Module.layers.1.fc1.ColumnParallelLinear.forward.0")
    assert made is not None and theirs is not None
    assert made.output_tensors[0].stats == theirs.output_tensors[0].stats
    assert made.scope == "layers.0.fc1"
    grad = last.get("Module.layers.0.fc1.ColumnParallelLinear.parameters_grad.0")
    assert grad is not None  # a backward-side node follows its forward


def _run(pytester: pytest.Pytester, level: str, npu: str, bench: str, *flags: str
         ) -> tuple[pytest.RunResult, str]:
    return compare_pair(pytester, DATA / level / npu, DATA / level / bench, *flags)


@pytest.mark.parametrize("flags", [(), GIVEN], ids=["inferred", "given"])
@pytest.mark.parametrize(("level", "bench"), [("L1", "tp1"), ("L0", "tp1"), ("L0", "tp4"),
                                              ("mix", "tp1"), ("mix", "tp4")])
def test_clean_two_stage_runs_pass(pytester: pytest.Pytester, level: str, bench: str,
                                   flags: tuple[str, ...]) -> None:
    if flags and bench == "tp4":
        flags = ("--acc-npu-layout=tp=2,pp=2", "--acc-bench-layout=tp=4")
    result, said = _run(pytester, level, "tp2pp2", bench, *flags)
    assert result.ret == 0, said
    assert said.startswith("No divergence")
    if not flags:
        assert INFERRED.replace("tp=1,dp=1", f"tp={bench[2:]},dp=1") in result.stdout.str()


# (level, run, bench) -> where the first divergence is named: each bug at each level against
# both benches (L1 against TP=1 only: its TP=4 dump is not shipped). fc1 transposed and the
# skipped all-reduce are made on rank 3 (stage 1, TP rank 1), the vocabulary split on rank 1
# (stage 0, TP rank 1); the node is the one the bug is in, or at L1 the first call after the
# all-reduce that is missing (a call that is not made cannot be named).
FC1 = "Functional.linear.0.forward"
FC1_L0 = "Module.layers.0.fc1.ColumnParallelLinear.forward.0"
FC2 = "Module.layers.0.fc2.RowParallelLinear.forward.0"
EMBED = "Module.embed.VocabParallelEmbedding.forward.0"
LOOKUP = "between Tensor.masked_fill.0.forward and Functional.embedding.0.forward"
BUGS = {
    ("L1", "tp2pp2_fc1_transposed", "tp1"): f"between Tensor.__mul__.1.forward and {FC1} "
                                            "(step 0, rank 3; bench rank",
    ("L1", "tp2pp2_no_allreduce", "tp1"): ": Tensor.__add__.1.forward (step 0, rank 3; bench rank",
    # the table shard rank 1 reads is not the bench's rows [8, 16): a leaf the dump did not
    # make, read by a lookup whose output is a partial value
    ("L1", "tp2pp2_vocab_split", "tp1"): f"{LOOKUP} (step 0, rank 1; bench rank",
    ("L0", "tp2pp2_fc1_transposed", "tp1"): f": {FC1_L0} (step 0, rank 3; bench rank",
    ("L0", "tp2pp2_fc1_transposed", "tp4"): f": {FC1_L0} (step 0, rank 3; bench rank",
    ("L0", "tp2pp2_no_allreduce", "tp1"): f": {FC2} (step 0, rank 3; bench rank",
    ("L0", "tp2pp2_no_allreduce", "tp4"): f": {FC2} (step 0, rank 3; bench rank",
    ("L0", "tp2pp2_vocab_split", "tp1"): f": {EMBED} (step 0, rank 1; bench rank",
    ("L0", "tp2pp2_vocab_split", "tp4"): f": {EMBED} (step 0, rank 1; bench rank",
    # statistics against a coarser bench: stage 1's two shards joined meet the TP=1 bench's
    # whole; the message says so, and which shard differs needs tensors (the L1 row above)
    ("mix", "tp2pp2_fc1_transposed", "tp1"): f": {FC1} (step 0, ranks 2, 3 joined: their "
                                             "shards' statistics together",
    ("mix", "tp2pp2_fc1_transposed", "tp4"): f": {FC1} (step 0, rank 3; bench rank",
    ("mix", "tp2pp2_no_allreduce", "tp1"): f": {FC2} (step 0, rank 3; bench rank",
    ("mix", "tp2pp2_no_allreduce", "tp4"): f": {FC2} (step 0, rank 3; bench rank",
    ("mix", "tp2pp2_vocab_split", "tp1"): f"{LOOKUP} (step 0, ranks 0, 1 joined",
    ("mix", "tp2pp2_vocab_split", "tp4"): f"{LOOKUP} (step 0, rank 1; bench rank",
}


@pytest.mark.parametrize("given", [False, True], ids=["inferred", "given"])
@pytest.mark.parametrize("case", sorted(BUGS), ids=lambda c: "-".join(c))
def test_a_bug_on_one_rank_is_named_on_it(pytester: pytest.Pytester,
                                              case: tuple[str, str, str], given: bool) -> None:
    level, run, bench = case
    flags = ("--acc-npu-layout=tp=2,pp=2", f"--acc-bench-layout=tp={bench[2:]}") if given \
        else ()
    result, said = _run(pytester, level, run, bench, *flags)
    assert result.ret == 1
    assert said.startswith("First divergence") and BUGS[case] in said, said
    # the data check reads each shard's lookup as a shard's: never "ids past the table"
    assert "FAILED accuracy::compare::inputs" not in result.stdout.str()


def test_joined_shards_are_said_and_their_ranks_dumped_next(pytester: pytest.Pytester) -> None:
    """Against a TP=1 bench of statistics, stage 1's fc1 shards are joined (Max and Min of
    both, Mean by counts, Norm as the root of the sum of squares) and meet the bench's whole:
    the difference shows on both ranks; the first divergence names both, acc.json lists them,
    and the next step dumps every rank rather than the one the tie put first."""
    import json

    out, report = pytester.path / "acc.json", pytester.path / "r"
    result, said = _run(pytester, "mix", "tp2pp2_fc1_transposed", "tp1", f"--acc-json={out}",
                        f"--acc-report={report}")
    assert result.ret == 1
    assert "which shard differs needs their tensors" in said, said
    first = json.loads(out.read_text())["compare"]["first_divergence"]
    assert (first["npu_name"], first["joined"]) == (FC1, [2, 3])
    configs = sorted((report / "next_step").glob(f"*_{FC1}-*/config_pytorch.json"))
    assert len(configs) == 2, sorted(p.name for p in (report / "next_step").iterdir())
    for config in configs:  # rank 2's item and rank 3's: tensors of fc1 on every rank
        written = json.loads(config.read_text())
        assert (written["rank"], written["level"], written["task"]) == ([], "L1", "tensor")


def test_under_workers_the_summary_and_the_document_say_the_inferred_layouts(
        pytester: pytest.Pytester) -> None:
    """-n 2: the workers infer the layouts; the controller's summary line and acc.json repeat
    them from the coverage item's record."""
    pytest.importorskip("xdist")
    out = pytester.path / "acc.json"
    result, said = _run(pytester, "mix", "tp2pp2", "tp1", "-n", "2", f"--acc-json={out}")
    assert result.ret == 0, said
    result.stdout.fnmatch_lines([f"{INFERRED}*"])
    import json

    layouts = json.loads(out.read_text())["compare"]["layouts"]
    assert (layouts["npu"], layouts["bench"]) == ("tp=2,dp=1,pp=2", "tp=1,dp=1,pp=1")
    assert layouts["inferred"].startswith("inferred from the dumps")


def test_a_stage_whose_calls_the_bench_does_not_make_fails_coverage_saying_so(
        pytester: pytest.Pytester) -> None:
    """Rank 3's dump with one op renamed: its stage is not a segment of the bench's calls; its
    nodes go unchecked, and the coverage item fails naming it and why (never a pass)."""
    import json
    import shutil

    npu = pytester.path / "npu"
    shutil.copytree(DATA / "L1" / "tp2pp2", npu)
    path = npu / "step0" / "rank3" / "dump.json"
    doc = json.loads(path.read_text())
    doc["data"] = {("Tensor.foo.0.forward" if k == "Tensor.mean.0.forward" else k): v
                   for k, v in doc["data"].items()}
    path.write_text(json.dumps(doc))
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={DATA / 'L1' / 'tp1'}",
                                *GIVEN, "-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*_ accuracy::compare::coverage _*",
        "1 NPU step/rank dump(s) have no bench counterpart (step 0 rank 3)*",
        "*",
        "step 0 rank 3: its pipeline stage's calls are not found in order among bench rank "
        "0's*"])


def test_messages_name_the_bench_ranks_each_npu_rank_met(pytester: pytest.Pytester) -> None:
    """NPU rank 3 (stage 1, TP rank 1 of 2) holds what bench ranks 2 and 3 of TP=4 hold: the
    first divergence, its JSON record and the node's failure message say so."""
    import json

    out = pytester.path / "acc.json"
    result, said = _run(pytester, "mix", "tp2pp2_fc1_transposed", "tp4", f"--acc-json={out}")
    assert result.ret == 1
    assert f"{FC1} (step 0, rank 3; bench ranks 2, 3)" in said, said
    first = json.loads(out.read_text())["compare"]["first_divergence"]
    assert (first["rank"], first["bench_ranks"]) == (3, [2, 3])
    result.stdout.fnmatch_lines([f"Outputs of {FC1} (step 0, rank 3) are not close to bench "
                                 f"{FC1} (bench ranks 2, 3)!"])


def test_a_part_of_the_ranks_is_not_read_as_a_whole_run(pytester: pytest.Pytester) -> None:
    """--acc-ranks=0,1 loads stage 0 of the TP=2 x PP=2 run alone: read from the dumps it
    would look like a whole TP=2 run (it was inferred so, and compared with the whole bench
    model). Now the layouts are read only when every rank is loaded; the summary says why
    they were not and what to give; given, the part is compared shard by slice."""
    result, said = _run(pytester, "mix", "tp2pp2_fc1_transposed", "tp1", "--acc-ranks=0,1")
    assert result.ret == 1, said  # ranks by number: never a pass
    text = result.stdout.str()
    assert "Layouts differ" not in text
    result.stdout.fnmatch_lines(["The NPU run has 4 ranks at step 0 and the bench 1: where "
                                 "their parallel layouts differ, they are read from the dumps "
                                 "only when every rank is loaded*--acc-npu-layout and "
                                 "--acc-bench-layout*"])
    result, said = _run(pytester, "mix", "tp2pp2_fc1_transposed", "tp1", "--acc-ranks=2,3",
                        *GIVEN)
    assert result.ret == 1
    assert f"{FC1} (step 0, ranks 2, 3 joined" in said, said
    result.stdout.fnmatch_lines(["Layouts differ: NPU tp=2,dp=1,pp=2 against bench "
                                 "tp=1,dp=1,pp=1. *"])
