"""A bench with more pipeline stages than the NPU (issue 40): NPU runs at TP=2 (and TP=1, TP=4)
with one stage against the TP=2 x PP=2 bench, on real gloo dumps (tests/data/real/layouts_pp,
README there). The bench's two stages are joined as the NPU's one process names its calls
(stage 1's ``layers.0`` is the NPU's ``layers.1``, its ``linear.0`` the NPU's ``linear.2``);
clean pairs pass, and the bugs made on NPU rank 1 are named there, at their node, against the
one bench rank that made the node, with the layouts given or inferred."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.pairing.layouts import Layout, bench_ranks, layouts_problem
from pytest_accuracy.pairing.stages import stages_joined
from tests.helpers import compare_pair

DATA = Path(__file__).parent / "data" / "real" / "layouts_pp"
BENCH = "tp2pp2"
INFERRED = ("Layouts differ: NPU tp={tp},dp=1,pp=1 against bench tp=2,dp=1,pp=2 (inferred from "
            "the dumps")


def test_bench_ranks_of_a_bench_with_more_stages() -> None:
    bench = Layout(tp=2, pp=2)
    assert [bench_ranks(Layout(tp=2), bench, r) for r in range(2)] == [[0, 2], [1, 3]]
    assert [bench_ranks(Layout(tp=4), bench, r) for r in range(4)] == [[0, 2], [0, 2],
                                                                        [1, 3], [1, 3]]
    assert bench_ranks(Layout(), bench, 0) == [0, 1, 2, 3]
    assert layouts_problem(Layout(tp=2), bench) is None
    assert "one pp a divisor of the other" in str(layouts_problem(Layout(pp=2), Layout(pp=3)))


def test_two_stages_are_joined_under_the_names_one_stage_gives_them() -> None:
    bench = load_dumps(str(DATA / "L0" / BENCH)).dumps
    npu = load_dumps(str(DATA / "L0" / "tp2")).dumps[(0, 1)]
    joined = stages_joined([bench[(0, 1)], bench[(0, 3)]], npu)
    assert joined is not None
    assert {c.name for c in joined.calls} == {c.name for c in npu.calls}
    # the NPU's layers.1 is stage 1's layers.0: the same record, renamed, from bench rank 3
    made = joined.get("Module.layers.1.fc1.ColumnParallelLinear.forward.0")
    theirs = bench[(0, 3)].get("Module.layers.0.fc1.ColumnParallelLinear.forward.0")
    assert made is not None and theirs is not None
    assert made.output_tensors[0].stats == theirs.output_tensors[0].stats
    assert made.scope == "layers.1.fc1"
    assert joined.call_ranks[made.name] == (3,)
    assert joined.call_ranks["Module.layers.0.fc1.ColumnParallelLinear.forward.0"] == (1,)
    # one process runs every forward, then the backward from the last stage's down
    names = [c.name for c in joined.calls]
    assert names.index("Module.layers.1.fc1.ColumnParallelLinear.forward.0") < names.index(
        "Module.layers.1.fc1.ColumnParallelLinear.backward.0") < names.index(
        "Module.layers.0.fc1.ColumnParallelLinear.backward.0")
    assert [c.order for c in joined.calls] == list(range(len(joined.calls)))


def _run(pytester: pytest.Pytester, level: str, npu: str, *flags: str
         ) -> tuple[pytest.RunResult, str]:
    return compare_pair(pytester, DATA / level / npu, DATA / level / BENCH, *flags)


def _given(npu: str) -> tuple[str, ...]:
    return (f"--acc-npu-layout=tp={npu[2]}", "--acc-bench-layout=tp=2,pp=2")


@pytest.mark.parametrize("given", [False, True], ids=["inferred", "given"])
@pytest.mark.parametrize(("level", "npu"), [("L1", "tp2"), ("L0", "tp2"), ("mix", "tp2"),
                                            ("L0", "tp1"), ("mix", "tp1")])
def test_clean_one_stage_runs_pass_against_two_stages(pytester: pytest.Pytester, level: str,
                                                      npu: str, given: bool) -> None:
    result, said = _run(pytester, level, npu, *(_given(npu) if given else ()))
    assert result.ret == 0, said
    assert said.startswith("No divergence")
    text = result.stdout.str()
    if not given:
        assert INFERRED.format(tp=npu[2]) in text
    # every NPU node met a bench node: the stages' collectives too, backward ones included
    assert "had no bench counterpart" not in text


# (level, run) -> where the first divergence is named: each bug is on NPU rank 1 (TP rank 1 of
# 2, the one stage); the node is the one the bug is in (at L1 the add after the all-reduce
# that is missing, or the lookup that reads the shifted table shard), compared with the one
# bench rank that made it (layer 0 and the embedding are bench stage 0's: rank 1).
FC1 = "Functional.linear.0.forward"
EMBED = "Module.embed.VocabParallelEmbedding.forward.0"
LOOKUP = "between Tensor.masked_fill.0.forward and Functional.embedding.0.forward"
BUGS = {
    ("L1", "tp2_fc1_transposed"): f"{FC1} (step 0, rank 1; bench rank 1)",
    ("L0", "tp2_fc1_transposed"): ": Module.layers.0.fc1.ColumnParallelLinear.forward.0 "
                                  "(step 0, rank 1; bench rank 1)",
    ("L0", "tp2_no_allreduce"): ": Module.layers.0.fc2.RowParallelLinear.forward.0 (step 0, "
                                "rank 1; bench rank 1)",
    # the embedding all-reduces inside: rank 0's output differs too, with nothing of its own
    # differing; rank 1's table shard does
    ("L0", "tp2_vocab_split"): f": {EMBED} (step 0, rank 1; bench rank 1)",
    ("mix", "tp2_fc1_transposed"): f": {FC1} (step 0, rank 1; bench rank 1)",
    ("mix", "tp2_no_allreduce"): ": Module.layers.0.fc2.RowParallelLinear.forward.0 (step 0, "
                                 "rank 1; bench rank 1)",
    ("mix", "tp2_vocab_split"): f"{LOOKUP} (step 0, rank 1; bench rank 1)",
    # TP=4 against TP=2 from statistics: NPU ranks 0 and 1 share bench rank 0's table shard,
    # joined they meet it whole (which of them differs needs tensors)
    ("mix", "tp4_vocab_split"): f"{LOOKUP} (step 0, ranks 0, 1 joined",
}


@pytest.mark.parametrize("given", [False, True], ids=["inferred", "given"])
@pytest.mark.parametrize("case", sorted(BUGS), ids=lambda c: "-".join(c))
def test_a_bug_on_one_rank_is_named_against_the_bench_rank_that_made_the_node(
        pytester: pytest.Pytester, case: tuple[str, str], given: bool) -> None:
    level, run = case
    result, said = _run(pytester, level, run, *(_given(run) if given else ()))
    assert result.ret == 1
    assert said.startswith("First divergence") and BUGS[case] in said, said
    text = result.stdout.str()
    assert "FAILED accuracy::compare::inputs" not in text
    if not given:
        assert INFERRED.format(tp=run[2]) in text


def test_the_document_names_the_bench_rank_of_the_node(pytester: pytest.Pytester) -> None:
    """Layer 0's fc1 is bench stage 0's: bench rank 1 for NPU rank 1, in acc.json and in the
    node's failure header; the summary lists both bench ranks each NPU rank meets."""
    out = pytester.path / "acc.json"
    result, _ = _run(pytester, "mix", "tp2_fc1_transposed", f"--acc-json={out}")
    assert result.ret == 1
    first = json.loads(out.read_text())["compare"]["first_divergence"]
    assert (first["npu_name"], first["rank"], first["bench_ranks"]) == (FC1, 1, [1])
    result.stdout.fnmatch_lines([
        f"Outputs of {FC1} (step 0, rank 1) are not close to bench {FC1} (bench rank 1)!",
        "*(NPU rank <- bench ranks: 0 <- 0+2, 1 <- 1+3)*"])


def test_ids_past_a_vocabulary_shard_are_the_layouts_not_the_data(
        pytester: pytest.Pytester) -> None:
    """At one layout (no view to say so), a vocabulary-parallel embedding module reads the
    whole vocabulary's ids into its shard of 8 rows: the bench's module does alike and the
    rank's TP peers hold the rest, so the data check passes (it had failed every TP run
    dumped at L0)."""
    result = pytester.runpytest(f"--acc-npu={DATA / 'L0' / 'tp2pp2_fc1_transposed'}",
                                f"--acc-bench={DATA / 'L0' / BENCH}", "-p", "no:cacheprovider",
                                "-k", "inputs", "-rA")
    result.stdout.fnmatch_lines(["PASSED accuracy::compare::inputs*"])


def test_a_vocabulary_shard_is_told_from_a_replicated_table() -> None:
    """Ids past the table are a shard's only where the bench's module reads alike, or where
    the rank's peers read the same ids from tables of other rows: a peer with the same table
    (a replicated embedding, which a wrong tokenizer overruns on every rank) does not count."""
    from pytest_accuracy.compare.inputs_check import split_lookups

    dumps = load_dumps(str(DATA / "L0" / "tp2")).dumps
    mine, peer = dumps[(0, 0)], dumps[(0, 1)]
    assert split_lookups(mine, [peer], None) == {EMBED}
    replicated = load_dumps(str(DATA / "L0" / "tp2"), ranks=[0]).dumps[(0, 0)]
    assert split_lookups(mine, [replicated], None) == frozenset()
    bench = load_dumps(str(DATA / "L0" / BENCH), ranks=[0]).dumps[(0, 0)]
    assert split_lookups(mine, [], bench) == {EMBED}
