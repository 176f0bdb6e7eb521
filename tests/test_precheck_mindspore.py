"""Precheck re-run with MindSpore (``--acc-device=mindspore:cpu``): the bundled tiny-Llama dump
and a generated attention + MLP block pass, a scaled output and a wrong kernel are caught, a
missing CPU kernel skips with MindSpore's words.

Needs mindspore 2.10 with numpy<2 (``pip install 'pytest-accuracy[mindspore]'``); CI runs this
file in a venv of its own (``.ci/run``), the main venv skips it with the reason.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_accuracy.precheck.executors import mindspore_problem

# CI's MindSpore venv sets this: there a missing or unusable MindSpore fails, never skips.
if mindspore_problem() and os.environ.get("PYTEST_ACCURACY_REQUIRE_MINDSPORE") == "1":
    pytest.fail(f"PYTEST_ACCURACY_REQUIRE_MINDSPORE=1: {mindspore_problem()}", pytrace=False)
pytest.importorskip(
    "mindspore", reason="mindspore is not installed: pip install 'pytest-accuracy[mindspore]'"
)
if mindspore_problem():
    pytest.skip(str(mindspore_problem()), allow_module_level=True)

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.precheck import ms_ops
from pytest_accuracy.precheck.args import Bound, Unsupported
from pytest_accuracy.precheck.executors import DeviceJob, make_executor
from pytest_accuracy.precheck.registry import resolve
from pytest_accuracy.precheck.results import PrecheckResult
from pytest_accuracy.precheck.runner import plan, run_case
from tests.helpers import ROOT, dump

L1 = dump("ms_fp32", "L1_tensor")
BLOCK = ROOT / "tests" / "data" / "ms_block" / "L1_tensor"  # benchmarks/make_ms_block_dump.py
DEVICE = "mindspore:cpu"


def _run(path: Path, api_names: tuple[str, ...] = ()) -> list[PrecheckResult]:
    cases = plan(load_dumps(path), device=DEVICE)
    return [run_case(c) for c in cases if not api_names or c.api_name in api_names]


def _counts(results: list[PrecheckResult]) -> dict[tuple[str, str], int]:
    return dict(collections.Counter((r.direction, r.status) for r in results))


def test_clean_tiny_llama_dump_passes_every_api_on_mindspore() -> None:
    results = _run(L1)
    assert _counts(results) == {("forward", "pass"): 176, ("backward", "pass"): 166}
    assert all(r.device.startswith("cpu (mindspore 2.") for r in results)
    for r in results:  # the re-run and what the dump recorded were both judged
        names = [c.name.rsplit(".", 2)[-2] for c in r.outputs]
        assert any(not n.startswith("recorded_") for n in names), r.case_id
    softmax = next(r for r in results if r.name == "Mint.softmax.0.forward")
    assert [c.name.split("forward.")[1] for c in softmax.outputs] == [
        "output.0", "recorded_output.0"
    ]  # fmt: skip


def test_generated_block_dump_checks_every_api_but_the_random_one() -> None:
    results = _run(BLOCK)
    assert _counts(results) == {
        ("forward", "pass"): 58, ("backward", "pass"): 50,
        ("forward", "skip"): 1, ("backward", "skip"): 2,
    }  # fmt: skip
    skipped = sorted((r.name, r.reason) for r in results if r.status == "skip")
    random = "Functional.dropout draws random numbers; a re-run cannot reproduce it"
    assert skipped == [
        ("Functional.dropout.0.backward", random),
        ("Functional.dropout.0.forward", random),
        ("Mint.cat.0.backward", "no gradient reference for cat"),
    ]


def test_a_wrong_kernel_fails_forward_and_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    def scaled(op: str) -> Any:
        original = ms_ops.MS_OPS[op]
        return lambda env, b: original(env, b) * 1.01

    monkeypatch.setitem(ms_ops.MS_OPS, "softmax", scaled("softmax"))
    monkeypatch.setitem(ms_ops.MS_OPS, "linear", scaled("linear"))
    results = {r.name: r for r in _run(L1 / "step0", ("Mint.softmax", "MintFunctional.linear"))}
    # the re-run's output.N, not the recorded_output.N of the (clean) dump
    assert results["Mint.softmax.0.forward"].status == "fail"
    assert results["Mint.softmax.0.forward"].reason.startswith("output.0: max abs error 1.0")
    backward = results["MintFunctional.linear.0.backward"]
    assert backward.status == "fail" and backward.reason.startswith("output.1: max abs error ")
    # A uniform 1% scale keeps the cosine: outputs below 1e-2 stay within max abs 1e-4.
    assert collections.Counter(r.status for r in results.values()) == {"fail": 20, "pass": 6}


def test_a_missing_cpu_kernel_skips_with_mindspores_words() -> None:
    executor = make_executor(DEVICE, "mindspore", "tensor")
    spec = resolve("mindspore", "Mint.matmul")
    assert spec is not None
    x = np.ones((2, 3), np.float32)
    bf16 = Bound({"input": x, "other": x.T.copy()}, {"input": "bfloat16", "other": "bfloat16"})
    fp32 = Bound({"input": x, "other": x.T.copy()}, {"input": "float32", "other": "float32"})
    for _ in range(5):  # asynchronous ops raised the error again in later calls: none here
        with pytest.raises(Unsupported) as info:
            executor.forward(DeviceJob(spec, bf16, []))
        assert str(info.value).startswith("MindSpore's CPU backend cannot run matmul here: ")
        out = executor.forward(DeviceJob(spec, fp32, []))[0]
        assert out is not None and np.array_equal(out, np.full((2, 2), 3.0, np.float32))


def test_scaled_output_is_caught_through_the_plugin(
    pytester: pytest.Pytester, copy_dump: Any
) -> None:
    npu = copy_dump("ms_fp32", "L1_tensor")
    step0 = next((npu / "step0").iterdir())
    target = step0 / "dump_tensor_data" / "Mint.softmax.0.forward.output.0.npy"
    np.save(target, np.load(target) * np.float32(1.01))
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={npu}", "--acc-precheck", f"--acc-device={DEVICE}",
                                f"--acc-json={out}", "-p", "no:cacheprovider")
    assert result.ret == 1
    failed = [line.split()[1] for line in result.stdout.lines if line.startswith("FAILED")]
    assert failed == ["accuracy::precheck::0/0/Mint.softmax.0.forward"]
    result.stdout.fnmatch_lines([
        "Mint.softmax.0.forward disagrees with the float64 CPU reference [[]default standard, "
        "cpu (mindspore 2.*, dumped dtype), dumped inputs[]]:",
        "Mint.softmax.0.forward.recorded_output.0 float32 [[]2, 4, 8, 8[]]: max abs error *",
    ])
    apis = json.loads(out.read_text())["precheck"]["apis"]
    assert collections.Counter(a["status"] for a in apis) == {"pass": 341, "fail": 1}


def test_a_device_mindspore_cannot_use_is_a_usage_error(tmp_path: Path) -> None:
    # A subprocess: MindSpore's device is process-wide and this test must not set it here.
    code = (
        "from pytest_accuracy.dumps.layout import load_dumps\n"
        "from pytest_accuracy.precheck.runner import plan\n"
        "import sys\n"
        "try:\n    plan(load_dumps(sys.argv[1]), device='mindspore:gpu')\n"
        "except ValueError as exc:\n    print('REFUSED', exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(L1 / "step0")], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REFUSED"))
    assert line.startswith("REFUSED precheck device 'mindspore:gpu': MindSpore cannot use GPU: ")
