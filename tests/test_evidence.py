"""No pass without evidence: a node passes only when something was compared, and a run whose
verdict fails shows it the same way on the terminal, in JUnit and in the exit code."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import dump, rerun

Mutate = Callable[[dict[str, Any]], None]


def _outputs(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(name, out) for name, node in doc["data"].items()
            for out in node.get("output") or [] if isinstance(out, dict) and "dtype" in out]


def _edit(root: Path, change: Mutate) -> None:
    """Apply ``change`` to every step's dump.json."""
    for path in sorted(root.glob("step*/*/dump.json")):
        doc = json.loads(path.read_text())
        change(doc)
        path.write_text(json.dumps(doc))


def _run(pytester: pytest.Pytester, npu: Path, bench: Path, *args: str
         ) -> tuple[pytest.RunResult, dict[str, Any]]:
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", f"--acc-json={out}",
                                "-p", "no:cacheprovider", "-rfs", *args)
    return result, json.loads(out.read_text()) if out.is_file() else {}


def _statuses(doc: dict[str, Any]) -> dict[str, str]:
    return {n["npu_name"]: n["status"] for n in doc["compare"]["nodes"]}


def _null_stats(doc: dict[str, Any]) -> None:
    for _, out in _outputs(doc):
        out.update(Max=None, Min=None, Mean=None, Norm=None)


def test_a_node_with_no_statistics_is_not_checked(pytester: pytest.Pytester, copy_dump) -> None:  # type: ignore[no-untyped-def]
    npu = copy_dump("pt_fp32", "mix_statistics")
    _edit(npu, _null_stats)
    result, doc = _run(pytester, npu, dump("pt_fp32", "mix_statistics"))
    node = next(n for n in doc["compare"]["nodes"] if n["npu_name"] == "Torch.rsqrt.0.forward")
    assert node["status"] == "skip"
    assert "nothing compared (output.0: no statistic recorded on both sides" in node["reason"]
    assert result.parseoutcomes()["skipped"] > 100


def test_a_run_that_checked_nothing_fails(pytester: pytest.Pytester, copy_dump) -> None:  # type: ignore[no-untyped-def]
    npu = copy_dump("pt_fp32", "mix_statistics")
    _edit(npu, _null_stats)
    result, doc = _run(pytester, npu, dump("pt_fp32", "mix_statistics"),
                       "--acc-scope=Torch.rsqrt.*.forward", "-k", "compare and not local_norm")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*Nothing was checked: all * compared nodes were skipped*"])
    assert result.parseoutcomes()["failed"] == 1  # the verdict, counted like any failure
    assert doc["verdict"] == "fail"


@pytest.mark.parametrize(("change", "reason"), [
    # Max missing while Mean and Norm are 100x off: what is recorded is compared
    (lambda out: out.pop("Max") and out.update(Mean=out["Mean"] * 100, Norm=out["Norm"] * 100),
     "Norm relative error 99"),
    (lambda out: out.update(shape=[*out["shape"][:-1], out["shape"][-1] * 2]),
     "shape differs: npu [2, 8, 192] vs bench [2, 8, 96]"),
    (lambda out: out.update(dtype="torch.int64"), "dtype differs: npu int64 vs bench float32"),
])
def test_what_statistics_do_say_is_judged(pytester: pytest.Pytester, copy_dump,  # type: ignore[no-untyped-def]
                                          change: Callable[[dict[str, Any]], Any],
                                          reason: str) -> None:
    npu = copy_dump("pt_fp32", "mix_statistics")
    _edit(npu, lambda doc: change(doc["data"]["Functional.linear.0.forward"]["output"][0]))
    result, doc = _run(pytester, npu, dump("pt_fp32", "mix_statistics"))
    assert result.ret == 1
    first = doc["compare"]["first_divergence"]
    assert first["npu_name"] == "Functional.linear.0.forward"
    assert reason in first["reason"]


def test_a_selection_that_matches_nothing_is_refused(pytester: pytest.Pytester) -> None:
    result, _ = _run(pytester, dump("pt_bug", "mix_statistics"), dump("pt_fp32", "mix_statistics"),
                     "--acc-scope=Nope.*")
    assert result.ret != 0
    assert re.search(r"--acc-scope 'Nope\.\*' matches none of the \d+ NPU nodes",
                     result.stdout.str() + result.stderr.str())


def test_carried_nodes_whose_cause_was_not_run_fail_in_junit(pytester: pytest.Pytester) -> None:
    junit = pytester.path / "junit.xml"
    result, doc = _run(pytester, dump("pt_bug", "L1_tensor"), dump("pt_fp32", "L1_tensor"),
                       f"--junitxml={junit}", "--deselect",
                       "accuracy::compare::0/0/Tensor.__add__.5.forward", "-k",
                       "not local_norm and not gradient_steps")
    assert result.ret == 1
    xml = junit.read_text()
    assert re.search(r'failures="1"', xml) and 'name="verdict"' in xml
    result.stdout.fnmatch_lines(["*compared nodes carry a divergence whose cause was not among*",
                                 "FAILED accuracy::compare::verdict*"])
    assert doc["verdict"] == "fail"


def test_a_known_divergence_takes_its_carried_nodes_with_it(pytester: pytest.Pytester) -> None:
    waivers = pytester.path / "waivers.yaml"
    waivers.write_text("waivers:\n- pattern: Tensor.__add__.5.forward\n  reason: eps, JIRA-1\n"
                       "  known_divergence: true\n")
    result, doc = _run(pytester, dump("pt_bug", "L1_tensor"), dump("pt_fp32", "L1_tensor"),
                       f"--acc-waivers={waivers}", "-k", "not local_norm and not gradient_steps")
    assert result.ret == 0, result.stdout.str()
    statuses = _statuses(doc)
    assert statuses["Tensor.__add__.5.forward"] == "waived"
    assert statuses["Torch.rsqrt.2.forward"] == "waived"  # carried it: waived with it
    assert "carried" not in statuses.values()


def test_md5_equal_while_statistics_differ_is_an_input_error(pytester: pytest.Pytester,  # type: ignore[no-untyped-def]
                                                            copy_dump) -> None:
    npu = copy_dump("pt_fp32", "L1_md5")
    _edit(npu, lambda doc: doc["data"]["Torch.rsqrt.0.forward"]["output"][0].update(Max=123.0))
    result, doc = _run(pytester, npu, dump("pt_fp32", "L1_md5"))
    assert result.ret == 1
    node = next(n for n in doc["compare"]["nodes"] if n["npu_name"] == "Torch.rsqrt.0.forward")
    assert node["status"] == "error"
    assert "equals the bench's while the statistics of the same records differ" in node["reason"]


def test_a_tensor_file_that_contradicts_its_record_is_an_input_error(  # type: ignore[no-untyped-def]
        pytester: pytest.Pytester, copy_dump) -> None:
    npu = copy_dump("ms_fp32", "L1_tensor")
    data = next(npu.rglob("Mint.rsqrt.0.forward.output.0.npy"))
    np.save(data, np.load(data) * np.float32(1.5))  # the record still says the old values
    result, doc = _run(pytester, npu, rerun(dump("ms_fp32", "L1_tensor"), pytester.path))
    assert result.ret == 1
    node = next(n for n in doc["compare"]["nodes"] if n["npu_name"] == "Mint.rsqrt.0.forward")
    assert node["status"] == "error"
    assert "Mint.rsqrt.0.forward.output.0.npy" in node["reason"]
    assert "contradicts its dump.json record (output.0 Norm" in node["reason"]


def test_complex_values_under_a_float_record_are_an_input_error(  # type: ignore[no-untyped-def]
        pytester: pytest.Pytester, copy_dump) -> None:
    npu = copy_dump("ms_fp32", "L1_tensor")
    data = next(npu.rglob("Mint.rsqrt.0.forward.output.0.npy"))
    np.save(data, np.load(data).astype(np.complex64))
    result, doc = _run(pytester, npu, rerun(dump("ms_fp32", "L1_tensor"), pytester.path))
    assert result.ret == 1
    node = next(n for n in doc["compare"]["nodes"] if n["npu_name"] == "Mint.rsqrt.0.forward")
    assert node["status"] == "error"
    assert "holds complex64 values where its dump.json record says float32" in node["reason"]


def test_a_npu_rank_without_a_bench_rank_fails(pytester: pytest.Pytester, tmp_path: Path) -> None:
    import shutil

    golden = Path(__file__).parent / "data" / "multirank" / "golden_tp2dp2"
    bench = tmp_path / "bench"
    shutil.copytree(rerun(golden, tmp_path), bench)
    for rank in bench.glob("step*/rank3"):
        shutil.rmtree(rank)
    result, _ = _run(pytester, golden, bench, "-k", "coverage")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*NPU step/rank dump(s) have no bench counterpart (step 0 "
                                 "rank 3*): their nodes were not checked.*"])


def test_a_minimum_of_nan_is_refused(pytester: pytest.Pytester) -> None:
    result, _ = _run(pytester, dump("pt_fp32", "mix_statistics"),
                     dump("pt_fp32", "mix_statistics"), "--acc-min-matched=nan")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--acc-min-matched: expected a number, e.g. 0.01, got 'nan'" in result.stderr.str()


def test_a_node_written_twice_in_dump_json_is_an_input_error(  # type: ignore[no-untyped-def]
        pytester: pytest.Pytester, copy_dump) -> None:
    npu = copy_dump("pt_fp32", "mix_statistics")
    path = next(npu.glob("step0/*/dump.json"))
    text = path.read_text()
    key = '"Torch.rsqrt.0.forward":'
    at = text.index(key)  # the same node again, first, with no records: JSON keeps the last
    path.write_text(f'{text[:at]}{key} {{"input_args": []}},\n    {text[at:]}')
    result, _ = _run(pytester, npu, dump("pt_fp32", "mix_statistics"))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*{path}: node 'Torch.rsqrt.0.forward' is written twice in "
                                 "'data' (JSON keeps the last one silently); the dump is corrupt*"])


def test_a_norm_a_device_summed_in_blocks_is_not_a_contradiction(tmp_path: Path) -> None:
    """4M fp32 values whose recorded Norm a device summed in fp32, 16 values a block and the
    blocks one after another: 63 ulps from numpy's float64 norm (the old bound was 64). The
    bound grows as sqrt(numel) ulps; a file scaled by 1 % is still refused."""
    from pytest_accuracy.compare.integrity import check_norm as _check_norm
    from pytest_accuracy.dumps.model import Stats, TensorRecord
    from pytest_accuracy.errors import AccuracyInputError

    x = np.random.default_rng(0).standard_normal(1 << 22).astype(np.float32)
    blocks = np.cumsum((x * x).reshape(-1, 16), axis=1, dtype=np.float32)[:, -1]
    device_norm = float(np.sqrt(np.cumsum(blocks, dtype=np.float32)[-1]))
    np.save(tmp_path / "x.npy", x)
    record = TensorRecord("output.0", "output", "float32", "torch.float32", x.shape,
                          Stats(float(x.max()), float(x.min()), float(x.mean()), device_norm),
                          data_root=tmp_path, data_name="x.npy", confine=tmp_path)
    exact = float(np.linalg.norm(x.astype(np.float64)))
    assert abs(exact - device_norm) / exact > 50 * 1.19e-7  # the case the old bound refused
    _check_norm(record, exact, x)
    with pytest.raises(AccuracyInputError, match=r"contradicts its dump\.json record"):
        _check_norm(record, exact * 1.01, x)


@pytest.mark.parametrize("large", [0, 1])
def test_a_float16_norm_msprobe_mindspore_summed_in_float16_is_not_a_contradiction(
        large: int) -> None:
    """msprobe-MindSpore squares a float16 tensor in float16: a gradient of |g| < 2.4e-4
    everywhere records Norm 0 (MindFormers' wk bias gradient in an fp16 run), and beside a
    larger value the tiny squares are lost. That is what the run dumped; a file scaled by 2
    is not."""
    from pytest_accuracy.compare.integrity import check_norm as _check_norm
    from pytest_accuracy.dumps.model import Stats, TensorRecord
    from pytest_accuracy.errors import AccuracyInputError

    g = np.full(512, 1.5e-4, np.float16)
    g[::2] *= -1
    g[:large] = 1e-3
    squares = (g.astype(np.float32) ** 2).astype(np.float16).astype(np.float64)
    fp16_norm = float(np.sqrt(squares.sum()))
    exact = float(np.linalg.norm(g.astype(np.float64)))
    assert fp16_norm == (0.0 if not large else pytest.approx(1e-3, rel=1e-2))
    assert abs(exact - fp16_norm) > 0.5 * exact  # far beyond any summation-order slack
    record = TensorRecord("output.0", "output", "float16", "mindspore.float16", g.shape,
                          Stats(float(g.max()), float(g.min()), float(g.mean()), fp16_norm))
    _check_norm(record, exact, g)
    with pytest.raises(AccuracyInputError, match=r"contradicts its dump\.json record"):
        _check_norm(record, 2 * exact, 2 * g)
