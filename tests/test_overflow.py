"""Overflow of one run alone: the first node whose output is NaN/Inf from finite inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_accuracy.compare.overflow import first_overflow
from pytest_accuracy.dumps.layout import load_dumps
from tests.helpers import dump


def _poison(root: Path, node: str, value: float) -> None:
    """An output statistic of ``node`` becomes ``value`` (inf/nan), as msprobe records it."""
    path = next(root.glob("step0/*/dump.json"))
    doc = json.loads(path.read_text())
    doc["data"][node]["output"][0]["Max"] = value
    for later in ("Torch.rsqrt.0.forward",):  # its consumer gets the non-finite input
        if later != node:
            doc["data"][later]["input_args"][0]["Max"] = value
    path.write_text(json.dumps(doc))


def test_the_first_node_making_a_nan_from_finite_inputs_is_named(copy_dump) -> None:  # type: ignore[no-untyped-def]
    npu = copy_dump("pt_fp32", "mix_statistics")
    _poison(npu, "Tensor.__add__.0.forward", math.inf)
    found = first_overflow(load_dumps(npu).dumps[(0, 0)])
    assert found.node is not None and found.node.name == "Tensor.__add__.0.forward"
    assert (found.tensor, found.value) == ("output.0", "Max inf")
    # the consumer's input is already inf: it only carries it; and a clean dump has none
    clean = first_overflow(load_dumps(dump("pt_fp32", "mix_statistics")).dumps[(0, 0)])
    assert clean.node is None and clean.checked > 100


def test_overflow_items_fail_naming_the_node(pytester: pytest.Pytester, copy_dump) -> None:  # type: ignore[no-untyped-def]
    npu = copy_dump("pt_fp32", "mix_statistics")
    _poison(npu, "Tensor.__add__.0.forward", math.nan)
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-json={out}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*First NaN/Inf on the NPU: Tensor.__add__.0.forward (step 0, "
                                 "rank 0), output.0 has Max nan while every input is finite*"])
    assert result.parseoutcomes() == {"failed": 1, "passed": 1}  # step 1 is clean
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "fail"
    assert doc["overflow"]["keys"][0]["node"] == "Tensor.__add__.0.forward"
