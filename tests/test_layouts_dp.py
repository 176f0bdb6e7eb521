"""Runs of another data-parallel size (issue 40): NPU runs at DP=2 (TP=1, and TP=2 x DP=2)
against benches at DP=1 (TP=1, TP=4) and the other way round, on real gloo dumps
(tests/data/real/layouts_dp, README there). Each NPU DP rank reads half the batch: its
activations are compared with the bench's half, its batch gradients at the scale the first
one shows, sums over the batch (the loss, parameters' gradients) not at all; from statistics
the DP peers are joined to meet the bench's whole batch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.pairing.batch_parts import backward_scale, batch_axis, dp_joins, dp_sources
from pytest_accuracy.pairing.layouts import Layout, bench_ranks, infer_layouts, layouts_problem
from tests.helpers import compare_pair

DATA = Path(__file__).parent / "data" / "real" / "layouts_dp"
LAYOUTS = {"tp1": "tp=1", "tp2": "tp=2", "tp4": "tp=4", "dp2": "dp=2", "dp2_global_loss": "dp=2",
           "dp2_grad_not_reduced": "dp=2", "dp2_rows_repeated": "dp=2", "tp2dp2": "tp=2,dp=2",
           "tp2dp2_fc1_transposed": "tp=2,dp=2"}


def _run(pytester: pytest.Pytester, level: str, npu: str, bench: str, given: bool,
         *flags: str) -> tuple[pytest.RunResult, str]:
    layouts = (f"--acc-npu-layout={LAYOUTS[npu]}", f"--acc-bench-layout={LAYOUTS[bench]}")
    return compare_pair(pytester, DATA / level / npu, DATA / level / bench,
                        *(layouts if given else ()), "--acc-steps-select=0", *flags)


def test_the_bench_ranks_and_batch_parts_of_another_dp_size() -> None:
    assert dp_sources(Layout(dp=2), Layout(), 1) == [0]
    assert dp_sources(Layout(dp=4), Layout(dp=2), 3) == [1]
    assert dp_sources(Layout(), Layout(dp=2), 0) == [0, 1]
    npu = Layout(tp=2, dp=2)
    assert [bench_ranks(npu, Layout(tp=4), r) for r in range(4)] == [[0, 1], [2, 3]] * 2
    assert bench_ranks(Layout(tp=2), npu, 1) == [1, 3]
    # the batch is the first dimension with the DP ratio; a TP shard's has another
    assert batch_axis((1, 4, 16), (2, 4, 32), 2, 1) == 0
    assert batch_axis((4, 1, 16), (4, 2, 16), 2, 1) == 1  # Megatron's [s, b, h]
    assert batch_axis((16, 32), (16, 32), 2, 1) is None
    assert layouts_problem(Layout(dp=2), Layout()) is None
    assert "one dp a divisor of the other" in str(layouts_problem(Layout(dp=2), Layout(dp=3)))
    assert "by the same ratio" in str(layouts_problem(npu, Layout()))
    assert "differ in both dp and pp" in str(layouts_problem(Layout(dp=2), Layout(pp=2)))


# (level, NPU run, bench run): clean pairs, with the layouts given and inferred
CLEAN = [("L1", "dp2", "tp1"), ("L1", "tp1", "dp2"),
         ("L0", "dp2", "tp1"), ("L0", "tp2dp2", "tp4"), ("L0", "tp4", "tp2dp2"),
         ("mix", "dp2", "tp1"), ("mix", "tp2dp2", "tp4"), ("mix", "tp1", "dp2"),
         ("mix", "tp2", "tp2dp2")]


@pytest.mark.parametrize("given", [False, True], ids=["inferred", "given"])
@pytest.mark.parametrize("case", CLEAN, ids=lambda c: "-".join(c))
def test_clean_runs_of_another_dp_size_pass(pytester: pytest.Pytester,
                                            case: tuple[str, str, str], given: bool) -> None:
    level, npu, bench = case
    result, said = _run(pytester, level, npu, bench, given)
    assert result.ret == 0, said
    assert said.startswith("No divergence")
    text = result.stdout.str()
    assert "had no bench counterpart" not in text
    assert ("(inferred from the dumps" in text) is not given
    assert "sums over the batch (the loss, parameters' gradients) are not" in text


@pytest.mark.parametrize(("level", "npu", "bench", "scale"), [
    ("L1", "dp2", "tp1", 2.0), ("L1", "dp2_global_loss", "tp1", 1.0), ("mix", "dp2", "tp1", 2.0),
    ("mix", "dp2_global_loss", "tp1", 1.0), ("mix", "tp2dp2", "tp4", 2.0),
    ("L1", "tp1", "dp2", 0.5)])
def test_the_backward_is_compared_at_the_scale_its_first_gradient_shows(
        level: str, npu: str, bench: str, scale: float) -> None:
    """A loss averaged over each DP rank's half makes its batch gradients twice the bench's
    for the same samples; one normalised over the whole batch, the same. From tensors the
    bench's half is sliced; from statistics the DP peers' Norms are joined."""
    mine, theirs = load_dumps(str(DATA / level / npu)), load_dumps(str(DATA / level / bench))
    layouts = infer_layouts(mine, theirs)
    assert layouts is not None
    joins = dp_joins(mine, layouts[0], theirs, layouts[1])
    found, why = backward_scale(mine, layouts[0], theirs, layouts[1], joins)
    assert found == scale
    assert why.startswith("Functional.cross_entropy.0.backward output.0 on rank 0: NPU / "
                          "bench Norm"), why


def test_the_scale_is_what_makes_the_backward_agree(pytester: pytest.Pytester,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    # the module the in-process run imports: an earlier run's copy, which pytester took out of
    # sys.modules, may still be the package's attribute
    shards = importlib.import_module("pytest_accuracy.pairing.shards")
    monkeypatch.setattr(shards, "backward_scale", lambda *args: (1.0, "forced"))
    result, said = _run(pytester, "L1", "dp2", "tp1", True)
    assert result.ret == 1
    assert "Functional.cross_entropy.0.backward" in said, said


# (level, NPU run, bench run) -> where the first divergence is named
BUGS = {
    ("L0", "tp2dp2_fc1_transposed", "tp4"): ": Module.layers.0.fc1.ColumnParallelLinear."
                                            "forward.0 (step 0, rank 3; bench ranks 2, 3)",
    # from statistics the DP peers (ranks 1 and 3) are joined: which of them differs needs
    # tensors (the replicas check tells them apart by the weight)
    ("mix", "tp2dp2_fc1_transposed", "tp4"): ": Functional.linear.0.forward (step 0, ranks 1, "
                                             "3 joined",
    ("mix", "tp2dp2_fc1_transposed", "tp2"): ": Functional.linear.0.forward (step 0, ranks 1, "
                                             "3 joined",
    ("mix", "dp2_rows_repeated", "tp1"): ": Functional.embedding.0.forward (step 0, ranks 0, 1 "
                                         "joined",
    # its cross entropy sums over the rank's tokens (divided by the batch's afterwards): the
    # DP ranks' sums added up are 8x the bench's mean, a loss made otherwise
    ("L1", "dp2_global_loss", "tp1"): ": Functional.cross_entropy.0.forward (step 0, ranks 0, "
                                      "1 summed: the sum over the batch their parts make",
}


@pytest.mark.parametrize("case", sorted(BUGS), ids=lambda c: "-".join(c))
def test_a_bug_on_one_dp_rank_is_named_there(pytester: pytest.Pytester,
                                            case: tuple[str, str, str]) -> None:
    level, npu, bench = case
    result, said = _run(pytester, level, npu, bench, True)
    assert result.ret == 1
    assert said.startswith("First divergence") and BUGS[case] in said, said


@pytest.mark.parametrize("level", ["L0", "mix"])
@pytest.mark.parametrize("given", [False, True], ids=["inferred", "given"])
def test_gradients_not_reduced_show_at_the_next_step_on_that_rank(
        pytester: pytest.Pytester, level: str, given: bool) -> None:
    """Step 0 agrees; rank 1 steps with its own gradients, so its weights differ at step 1,
    at their first use (the embedding)."""
    result, said = _run(pytester, level, "dp2_grad_not_reduced", "tp1", given,
                        "--acc-steps-select=0,1")
    assert result.ret == 1
    assert said.startswith("First divergence"), said
    assert "embedding" in said.lower() and "(step 1, rank 1; bench rank 0)" in said, said


def test_rank_items_load_their_dp_peers_to_join_statistics(pytester: pytest.Pytester) -> None:
    result, said = _run(pytester, "mix", "tp2dp2_fc1_transposed", "tp4", True,
                        "--acc-items=rank")
    assert result.ret == 1
    assert ": Functional.linear.0.forward (step 0, ranks 1, 3 joined" in said, said
    result, said = _run(pytester, "mix", "tp2dp2", "tp4", True, "--acc-items=rank")
    assert result.ret == 0, said
    # a rank the bench has no rank of its number meets its layout's: an item, and covered
    result, said = _run(pytester, "mix", "dp2", "tp1", True, "--acc-items=rank", "-rA")
    assert result.ret == 0, said
    result.stdout.fnmatch_lines(["PASSED accuracy::compare::rank1",
                                 "PASSED accuracy::compare::coverage"])


def test_sums_over_the_batch_meet_the_bench_where_their_parts_add_up(
        pytester: pytest.Pytester) -> None:
    """From tensors (L0) the DP ranks' parameter gradients, summed over the backward's scale,
    meet the bench's: compared, and they pass; from statistics (mix) a sum of tensors is not
    known, so they are not compared, and the run says why."""
    out = pytester.path / "acc.json"
    result, _ = _run(pytester, "L0", "dp2", "tp1", True, f"--acc-json={out}")
    assert result.ret == 0
    nodes = {(n["npu_name"], n["rank"]): n for n in json.loads(out.read_text())["compare"]["nodes"]}
    grad = nodes[("Module.layers.0.fc1.ColumnParallelLinear.parameters_grad.0", 1)]
    assert grad["status"] == "pass" and grad["max_rel_err"] < 1e-4, grad
    assert nodes[("Module.layers.0.fc1.ColumnParallelLinear.backward.0", 1)]["status"] == "pass"
    result, _ = _run(pytester, "mix", "dp2", "tp1", True, f"--acc-json={out}", "-rs")
    assert result.ret == 0
    nodes = {(n["npu_name"], n["rank"]): n for n in json.loads(out.read_text())["compare"]["nodes"]}
    assert nodes[("Functional.cross_entropy.0.forward", 0)]["status"] == "pass"  # a scalar
    assert nodes[("Module.layers.0.fc1.ColumnParallelLinear.parameters_grad.0", 0)][
        "status"] == "skip"
    result.stdout.fnmatch_lines([
        "*not compared: a value summed over the batch (the loss, a parameter's gradient) is "
        "over 1/2 of the batch on NPU DP rank 0, over the whole batch on the bench's*",
        "*batch gradients compared at 2x the bench's (*"])


def test_a_split_no_layout_explains_is_hinted(pytester: pytest.Pytester) -> None:
    """Rank 1 reading rank 0's sequence: the ranks' batches are no split of the bench's, so
    no layout is read; the run says to give them (and given, names rank 1)."""
    result, _ = _run(pytester, "mix", "dp2_rows_repeated", "tp1", False)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["The NPU run has 2 ranks at step 0 and the bench 1: their "
                                 "parallel layouts could not be read from the dumps*"])


def _configs(pytester: pytest.Pytester, npu_dp: int) -> tuple[str, str]:
    """MindFormers configs of the NPU run (DP=npu_dp) and the one-rank bench, as the config
    checklist reads them."""
    made = []
    for name, dp in (("npu.yaml", npu_dp), ("bench.yaml", 1)):
        path = pytester.path / name
        path.write_text(f"parallel_config:\n  data_parallel: {dp}\n  model_parallel: 1\n"
                        "  pipeline_stage: 1\n")
        made.append(f"--acc-{name.split('.')[0]}-config={path}")
    return made[0], made[1]


def test_the_configs_give_the_layouts_before_any_rank_is_read(
        pytester: pytest.Pytester) -> None:
    """Known before loading, the configs' layouts serve rank items too (which read no
    layout from the dumps); a config whose world is not the dump's rank count says nothing,
    and the dumps are read instead."""
    result, said = _run(pytester, "mix", "dp2", "tp1", False, *_configs(pytester, 2),
                        "--acc-items=rank", "-k", "compare")
    assert result.ret == 0, said
    result.stdout.fnmatch_lines(["Layouts differ: NPU tp=1,dp=2,pp=1 against bench "
                                 "tp=1,dp=1,pp=1 (read from the configs: *npu.yaml: "
                                 "parallel_config.data_parallel (tp=1, dp=2, pp=1) and *"])
    result, said = _run(pytester, "mix", "dp2", "tp1", False, *_configs(pytester, 4),
                        "-k", "compare")
    assert result.ret == 0, said
    result.stdout.fnmatch_lines(["Layouts differ: * (inferred from the dumps: 2 ranks*"])


@pytest.mark.parametrize(("npu", "said"), [
    ("tp2", "No divergence"),
    ("tp2_fc1_transposed", "and Functional.linear.0.forward (step 0, rank 1; bench rank 0)")])
def test_rank_items_with_a_tp_difference_read_their_tp_group(pytester: pytest.Pytester,
                                                             npu: str, said: str) -> None:
    """A rank item reads its TP peers too (not compared): they tell a partial value (a
    vocabulary range's mask) from a replicated one. Read alone, the clean TP=2 run failed
    against TP=1 at the mask, and rank 1 (no bench rank of its number) had no item."""
    data = Path(__file__).parent / "data" / "real" / "layouts" / "L1"
    result, found = compare_pair(pytester, data / npu, data / "tp1", "--acc-npu-layout=tp=2",
                                 "--acc-bench-layout=tp=1", "--acc-items=rank", "-rA")
    assert said in found, found
    assert result.ret == (0 if npu == "tp2" else 1)
    result.stdout.fnmatch_lines(["*accuracy::compare::rank1*",
                                 "PASSED accuracy::compare::coverage"])
