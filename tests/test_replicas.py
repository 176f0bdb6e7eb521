"""Data-parallel replicas checked against each other without a bench (issue 39), on real gloo
dumps (tests/data/real/dp_replicas, TP=2 x DP=2, msprobe 26.2.0): a gradient left unscaled on
rank 3 shows at step 1 in fc2's weight on DP group {1, 3}; a missed initial broadcast on rank 2
shows at step 0 in head's weight on group {0, 2}; the clean run passes. The largest differences
are the ones the data's README measured with torch from the .pt files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_accuracy.compare.replicas import _disagreement, check_replicas, dp_groups
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.model import Stats, TensorRecord
from pytest_accuracy.pairing.layouts import Layout

DATA = Path(__file__).parent / "data" / "real" / "dp_replicas"
LAYOUT = Layout(tp=2, dp=2)


def _checks(run: str, level: str) -> dict[tuple[int, ...], object]:
    dumps = load_dumps(str(DATA / run / level))
    return {g: check_replicas(dumps, g) for g in dp_groups(LAYOUT, [0, 1, 2, 3])}


def test_dp_groups_follow_megatrons_rank_order() -> None:
    assert dp_groups(LAYOUT, [0, 1, 2, 3]) == [(0, 2), (1, 3)]
    assert dp_groups(Layout(tp=2, dp=2, pp=2), range(8)) == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert dp_groups(Layout(tp=4, dp=1), range(4)) == []  # no replicas


@pytest.mark.parametrize("level", ["mix", "L0"])
def test_the_clean_run_passes_having_checked_parameters_and_dp_reductions(level: str) -> None:
    for group, found in _checks("golden", level).items():
        assert found.first is None, group  # type: ignore[attr-defined]
        # mix: 4 module parameters and the 4 DP gradient all-reduces a step, 3 steps; L0 (one
        # step shipped): the 4 parameters, L0 records no collective
        assert found.values == (24 if level == "mix" else 4)  # type: ignore[attr-defined]


@pytest.mark.parametrize("level", ["mix", "L0"])
def test_an_unscaled_gradient_on_rank_3_shows_in_fc2_at_step_1(level: str) -> None:
    checks = _checks("grad_unscaled", level)
    assert checks[(0, 2)].first is None  # type: ignore[attr-defined]
    first = checks[(1, 3)].first  # type: ignore[attr-defined]
    assert (first.step, first.node, first.tensor, first.kind) == (
        1, "Module.fc2.RowParallelLinear.forward.0", "parameters.weight", "parameter")
    assert first.odd == (1, 3)  # two replicas: no majority to tell which
    if level == "L0":  # from the tensors: lr x (sum of the two gradients) / 2, as measured
        assert "largest difference 0.0402528" in first.detail


@pytest.mark.parametrize("level", ["mix", "L0"])
def test_a_missed_initial_broadcast_shows_in_head_at_step_0(level: str) -> None:
    checks = _checks("init_drift", level)
    assert checks[(1, 3)].first is None  # type: ignore[attr-defined]
    first = checks[(0, 2)].first  # type: ignore[attr-defined]
    assert (first.step, first.node, first.tensor) == (
        0, "Module.head.Linear.forward.0", "parameters.weight")
    if level == "L0":
        assert "largest difference 0.705155" in first.detail


def test_a_collective_output_one_member_holds_differently_fails(tmp_path: Path) -> None:
    run = tmp_path / "mix"
    shutil.copytree(DATA / "golden" / "mix", run)
    path = run / "step2" / "rank2" / "dump.json"
    doc = json.loads(path.read_text())
    doc["data"]["Distributed.all_reduce.4.forward"]["output"][0]["Norm"] *= 1.001
    path.write_text(json.dumps(doc))
    found = check_replicas(load_dumps(str(run)), (0, 2))
    assert found.first is not None
    assert (found.first.step, found.first.node, found.first.kind) == (
        2, "Distributed.all_reduce.4.forward", "collective")


def _record(norm: float) -> TensorRecord:
    return TensorRecord("parameters.weight", "parameter", "float32", "torch.float32", (4,),
                        Stats(1.0, -1.0, 0.0, norm))


def test_a_majority_names_the_odd_replica() -> None:
    odd, detail = _disagreement([_record(2.0), _record(2.0), _record(2.5), _record(2.0)],
                                (0, 2, 4, 6)) or ((), "")
    assert odd == (4,) and "rank 4: Max 1, Min -1, Norm 2.5" in detail
    assert _disagreement([_record(2.0)] * 3, (0, 1, 2)) is None


def test_items_through_pytest_fail_naming_the_group_step_and_parameter(
        pytester: pytest.Pytester) -> None:
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={DATA / 'grad_unscaled' / 'mix'}", "--acc-dp-size=2",
                                f"--acc-json={out}", "-rA", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "accuracy: overflow check and data-parallel replica check of the NPU dump only*"])
    assert "PASSED accuracy::replicas::0,2" in result.outlines
    result.stdout.fnmatch_lines([
        "FAILED accuracy::replicas::1,3 - Data-parallel replicas {1, 3} *"])
    result.stdout.fnmatch_lines([
        "Data-parallel replicas {1, 3} differ at step 1: Module.fc2.RowParallelLinear.forward.0 "
        "parameters.weight (parameter): the replicas disagree (rank 1: Max 0.684655845*",
        "They agreed at step 0: the update between differed on one replica*"])
    keys = {k["name"]: k for k in json.loads(out.read_text())["replicas"]["keys"]}
    assert keys["0,2"]["status"] == "pass" and keys["0,2"]["checked"] == 24
    assert (keys["1,3"]["step"], keys["1,3"]["odd"]) == (1, [1, 3])


def test_with_a_bench_the_replicas_are_checked_beside_the_compare(
        pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(f"--acc-npu={DATA / 'init_drift' / 'mix'}",
                                f"--acc-bench={DATA / 'golden' / 'mix'}",
                                "--acc-npu-layout=tp=2,dp=2", "-p", "no:cacheprovider", "-q",
                                "-k", "replicas")
    result.stdout.fnmatch_lines(["Data-parallel replicas {0, 2} differ at step 0: "
                                 "Module.head.Linear.forward.0 parameters.weight*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_dp_size_that_does_not_divide_the_ranks_is_a_usage_error(
        pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(f"--acc-npu={DATA / 'golden' / 'mix'}", "--acc-dp-size=3",
                                "-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*--acc-dp-size 3: the NPU dump holds ranks 0-3 (4), not a "
                                 "multiple of it*"])


def test_a_dump_with_nothing_to_check_skips_saying_why(pytester: pytest.Pytester) -> None:
    """tests/data/multirank: L1, the gradient all-reduce outside the dump window."""
    multirank = Path(__file__).parent / "data" / "multirank" / "golden_tp2dp2"
    result = pytester.runpytest(f"--acc-npu={multirank}", "--acc-dp-size=2", "-rs",
                                "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["SKIPPED*nothing checked for ranks 0,2: no step dumps a "
                                 "module's parameters or a collective over this group*"])
    assert result.ret == pytest.ExitCode.OK  # the overflow items checked something
    alone = pytester.runpytest(f"--acc-npu={multirank}", "--acc-dp-size=2", "-k", "replicas",
                               "-p", "no:cacheprovider")
    alone.stdout.fnmatch_lines(["Nothing was checked: all 2 replicas items were skipped*"])
    assert alone.ret == pytest.ExitCode.TESTS_FAILED  # never a pass without evidence


@pytest.mark.parametrize(("name", "text"), [
    ("run.yaml", "runner_config:\n  batch_size: 1\nparallel_config:\n  data_parallel: 2\n"
                 "  model_parallel: 2\n  pipeline_stage: 1\n"),
    ("pretrain.sh", "torchrun --nproc_per_node 4 pretrain_gpt.py --tensor-model-parallel-size 2 "
                    "--pipeline-model-parallel-size 1 --micro-batch-size 1\n"),
])
def test_the_npu_config_gives_the_groups(pytester: pytest.Pytester, name: str,
                                         text: str) -> None:
    """MindFormers' parallel_config, or Megatron's world / (tp x pp) from a launch line."""
    config = pytester.path / name
    config.write_text(text)
    result = pytester.runpytest(f"--acc-npu={DATA / 'grad_unscaled' / 'mix'}",
                                f"--acc-npu-config={config}", f"--acc-bench-config={config}",
                                "-k", "replicas", "-rA",
                                "-p", "no:cacheprovider")
    assert "PASSED accuracy::replicas::0,2" in result.outlines, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines(["FAILED accuracy::replicas::1,3 - *"])


def test_the_report_page_lists_the_replica_checks_failing_first(
        pytester: pytest.Pytester) -> None:
    """The page's headline counts them and a section lists each group with what it found (as
    for the overflow items); names and messages escaped."""
    report = pytester.path / "report"
    pytester.runpytest(f"--acc-npu={DATA / 'grad_unscaled' / 'mix'}", "--acc-dp-size=2",
                       f"--acc-report={report}", "-p", "no:cacheprovider")
    page = (report / "index.html").read_text()
    assert "Data-parallel replicas: 1 of 2 checks fail: 1,3" in page
    section = page[page.index("<section id='replicas'>"):]
    section = section[:section.index("</section>")]
    rows = section.split("<tr data-status=")[1:]
    assert [r.split("'")[1] for r in rows] == ["fail", "pass"]  # failing first
    assert "differ at step 1: Module.fc2.RowParallelLinear.forward.0" in rows[0]
    assert "<section id='overflow'>" in page  # the overflow items beside them


def test_group_records_from_json_render_escaped(tmp_path: Path) -> None:
    from pytest_accuracy.report.html import render

    evil = "<script>alert(1)</script>"
    doc = {"verdict": "fail", "inputs": {}, "replicas": {"keys": [
        {"name": evil, "status": "fail", "summary": evil}]}}
    page = render(doc, tmp_path, [])
    assert evil not in page and "&lt;script&gt;" in page
