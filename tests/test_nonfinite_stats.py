"""Precheck and compare over NaN/Inf recorded statistics never pass (issue 27, item 1)."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

from pytest_accuracy.compare.criteria import CompareCriteria
from pytest_accuracy.compare.judge import compare_tensor, settle
from pytest_accuracy.compare.results import NodeResult
from pytest_accuracy.dumps.model import Stats, TensorRecord

NODE = "Torch.rsqrt.0.forward"  # first RMSNorm's rsqrt; Tensor.__mul__.0 takes it as input.1


def _poison(root: Path, *, output: bool = True, consumer: bool = False) -> Path:
    """Step 0's rsqrt output Max (and/or its consumer's input.1 Max) becomes NaN."""
    path = next(root.glob("step0/*/dump.json"))
    doc = json.loads(path.read_text())
    if output:
        doc["data"][NODE]["output"][0]["Max"] = math.nan
    if consumer:
        doc["data"]["Tensor.__mul__.0.forward"]["input_args"][1]["Max"] = math.nan
    path.write_text(json.dumps(doc))
    return root


def test_precheck_fails_a_recorded_nan_output_and_skips_a_nan_input(  # type: ignore[no-untyped-def]
        pytester: pytest.Pytester, copy_dump) -> None:
    if importlib.util.find_spec("torch") is None:  # not imported here: the subprocess does
        pytest.skip("torch is not installed: a statistics dump is re-run by its framework")
    npu = _poison(copy_dump("pt_fp32", "mix_statistics"), consumer=True)
    # a subprocess: torch re-runs the calls, and its state must not outlive this test
    result = pytester.runpytest_subprocess(f"--acc-npu={npu}", "--acc-precheck",
                                           "--acc-steps-select=0",
                                           "-k", f"{NODE} or Tensor.__mul__.0.forward",
                                           "-rs", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert (outcomes["failed"], outcomes["skipped"], outcomes.get("passed")) == (1, 1, None)
    result.stdout.fnmatch_lines([
        f"*{NODE}*the run recorded output.0 Max nan from finite inputs, where the re-run on "
        "values generated from its statistics agrees with the float64 reference*",
        "*not checked: the run recorded NaN/Inf in its inputs (input.1 Max nan)*",
    ])


def _record(mx: float, mn: float, mean: float, norm: float) -> TensorRecord:
    return TensorRecord(path="output.0", role="output", dtype="float32",
                        raw_dtype="torch.float32", shape=(2, 3), stats=Stats(mx, mn, mean, norm))


FINITE = _record(1.0, -1.0, 0.1, 2.0)
NAN = _record(math.nan, math.nan, math.nan, math.nan)
ALL_INF = _record(math.inf, math.inf, math.inf, math.inf)


def _settled(npu: TensorRecord, bench: TensorRecord) -> NodeResult:
    from pytest_accuracy.dumps.model import Call

    call = Call(name="Torch.exp.0.forward", kind="api", direction="forward", order=0,
                prefix="Torch", op="exp", index=0)
    result = NodeResult(index=0, step=0, rank=0, npu=call, bench=call, status="")
    result.outputs = [compare_tensor(npu, bench, "float32", CompareCriteria()),
                      compare_tensor(FINITE, FINITE, "float32", CompareCriteria())]
    settle(result)
    return result


@pytest.mark.parametrize("npu", [NAN, ALL_INF, _record(math.inf, -1.0, math.inf, math.inf)],
                         ids=["nan", "all-inf", "max-inf"])
def test_compare_fails_npu_nan_where_bench_is_finite(npu: TensorRecord) -> None:
    result = _settled(npu, FINITE)
    assert result.status == "fail"
    assert result.failing_outputs[0].judgement.detail == \
        "NaN/Inf in the statistics of one side only"


@pytest.mark.parametrize("both", [NAN, ALL_INF], ids=["nan", "all-inf"])
def test_compare_never_passes_nan_on_both_sides(both: TensorRecord) -> None:
    """Another output that agrees does not make the node a pass."""
    result = _settled(both, both)
    assert result.status == "skip"
    assert result.reason.startswith("not compared: NaN/Inf on both sides (output.0 ")


def test_compare_keeps_judging_a_mask_with_inf_at_one_end() -> None:
    mask = _record(0.0, -math.inf, -math.inf, math.inf)
    assert _settled(mask, mask).status == "pass"
