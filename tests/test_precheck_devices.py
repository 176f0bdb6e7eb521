"""Precheck devices without the hardware or framework: the option's grammar, the one-line hints
for a missing MindSpore (and its numpy constraint), the CUDA path (skipped without a GPU)."""

from __future__ import annotations

import collections
import importlib.util

import numpy as np
import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.errors import MissingExtraError
from pytest_accuracy.options import BY_DEST, OptionValueError, parse_value
from pytest_accuracy.precheck import executors
from pytest_accuracy.precheck.runner import plan, run_case
from tests.helpers import dump

HINT = (
    "pip install 'pytest-accuracy[mindspore]' (mindspore==2.10.0 with numpy<2: its C extension "
    "is built against NumPy 1.x)"
)
NO_MINDSPORE = importlib.util.find_spec("mindspore") is None


@pytest.mark.parametrize(
    "text",
    ["dump", "cpu", "npu:1", "cuda", "gpu", "mindspore:cpu", "torch:cuda:0", "mindspore:npu"],
)
def test_device_option_accepts_backend_prefixes(text: str) -> None:
    assert parse_value(BY_DEST["acc_device"], text, "--acc-device") == text


@pytest.mark.parametrize("text", ["mindspore", "tpu", "cpu:0:1", "jax:cpu", "mindspore:"])
def test_device_option_rejects_the_rest_naming_the_form(text: str) -> None:
    with pytest.raises(OptionValueError) as info:
        parse_value(BY_DEST["acc_device"], text, "--acc-device")
    assert str(info.value) == (
        "--acc-device: expected dump, cpu, cuda[:N], npu[:N], optionally prefixed torch: or "
        f"mindspore: (e.g. mindspore:cpu), got {text!r}"
    )


@pytest.mark.skipif(not NO_MINDSPORE, reason="mindspore is installed in this venv")
def test_missing_mindspore_is_a_one_line_hint() -> None:
    dumps = load_dumps(dump("ms_fp32", "L1_tensor") / "step0")
    with pytest.raises(MissingExtraError) as info:
        plan(dumps, device="mindspore:cpu")
    assert str(info.value) == (
        f"device='mindspore:cpu': mindspore is not installed: {HINT}; or use device='dump'"
    )


def test_mindspore_under_numpy_2_is_refused_with_the_constraint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(executors, "installed", lambda module: True)
    monkeypatch.setattr(np, "__version__", "2.4.6")
    assert executors.mindspore_problem() == f"mindspore cannot run with numpy 2.4.6: {HINT}"


@pytest.mark.skipif(not NO_MINDSPORE, reason="mindspore is installed in this venv")
def test_plugin_names_the_extra_when_mindspore_is_missing(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(f"--acc-npu={dump('ms_fp32', 'L1_tensor')}", "--acc-precheck",
                                "--acc-device=mindspore:cpu", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines([
        "--acc-precheck: device='mindspore:cpu': mindspore is not installed: pip install "
        "'pytest-accuracy?mindspore?' (mindspore==2.10.0 with numpy<2: its C extension is "
        "built against NumPy 1.x); or use device='dump'"
    ])
    assert "Traceback" not in result.stdout.str()


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.skipif(not _cuda_available(), reason="no CUDA GPU here: the cuda path is not run")
def test_pytorch_dump_rerun_on_cuda() -> None:
    cases = plan(load_dumps(dump("pt_fp32", "L1_tensor") / "step0"), device="cuda")
    results = [run_case(c) for c in cases]
    counts = collections.Counter((r.direction, r.status) for r in results)
    assert counts == {("forward", "pass"): 61, ("backward", "pass"): 61}
    assert all(r.device.startswith("cuda (torch") for r in results)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None or _cuda_available(),
                    reason="needs torch without a CUDA device")
def test_an_absent_cuda_device_is_one_line_at_collection(pytester: pytest.Pytester) -> None:
    """Not a traceback per replayed call (244 of them, 114 s): one line, before any runs."""
    result = pytester.runpytest(f"--acc-npu={dump('pt_bug', 'L1_tensor')}", "--acc-precheck",
                                "--acc-device=cuda", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines(["--acc-precheck: device='cuda': this machine's torch * has no "
                                 "usable cuda device; use device='cpu' or 'dump'"])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_a_device_index_that_is_no_number_is_named() -> None:
    from pytest_accuracy.precheck.runner import _torch_device_problem

    assert _torch_device_problem("cuda:x") == "cuda:x names no device index"
    assert _torch_device_problem("cpu") is None
