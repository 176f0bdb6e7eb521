"""Hostile statistics dumps for the precheck: huge replays skip with the reason, junk is named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.precheck.runner import plan, run_case


def _t(shape: list[int], dtype: str = "torch.float32", lo: Any = -1.0, hi: Any = 1.0) -> dict:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Max": hi, "Min": lo,
            "Mean": 0.0, "Norm": 1.0, "requires_grad": False}


def _write(root: Path, data: dict[str, Any]) -> Path:
    rank = root / "step0" / "rank0"
    rank.mkdir(parents=True)
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch", "data": data}
    (rank / "dump.json").write_text(json.dumps(doc))
    return root


def _results(root: Path) -> dict[str, Any]:
    return {case.node: run_case(case) for case in plan(load_dumps(root))}


BIG = [20000, 20000]
HUGE_CALLS = {
    "Torch.full.0.forward": {
        "input_args": [[{"type": "int", "value": 20000}, {"type": "int", "value": 20000}],
                       {"type": "float", "value": 1.0}],
        "input_kwargs": {}, "output": [_t(BIG, lo=1.0, hi=1.0)]},
    "Functional.relu.0.forward": {"input_args": [_t(BIG)], "input_kwargs": {},
                                  "output": [_t(BIG, lo=0.0)]},
    "Torch.matmul.0.forward": {"input_args": [_t(BIG), _t(BIG)], "input_kwargs": {},
                               "output": [_t(BIG)]},
    "Functional.scaled_dot_product_attention.0.forward": {
        "input_args": [_t([1, 1, 20000, 8])] * 3, "input_kwargs": {},
        "output": [_t([1, 1, 20000, 8])]},
}


@pytest.mark.parametrize("node", sorted(HUGE_CALLS))
def test_replays_past_the_budget_skip_with_the_reason(tmp_path: Path, node: str) -> None:
    result = _results(_write(tmp_path / "d", {node: HUGE_CALLS[node]}))[node]
    assert result.status == "skip"
    assert result.reason.startswith("replay needs about ")
    assert result.reason.endswith(
        "is over the limit 2147483648 (bytes one precheck replay may allocate: inputs, "
        "reference and torch run; ACC_MAX_PRECHECK_BYTES raises it)"
    )


def test_negative_shape_is_a_named_error(tmp_path: Path) -> None:
    root = _write(tmp_path / "d", {"Functional.relu.0.forward": {
        "input_args": [_t([4, -3])], "input_kwargs": {}, "output": [_t([4, 3])]}})
    with pytest.raises(AccuracyInputError, match=r"input\.0 has an invalid shape \[4, -3\]"):
        load_dumps(root)


def test_infinite_max_of_an_integer_input_skips(tmp_path: Path) -> None:
    node = "Torch.add.0.forward"
    root = _write(tmp_path / "d", {node: {
        "input_args": [_t([4], "torch.int64", 0, "inf"), _t([4], "torch.int64", 0, 3)],
        "input_kwargs": {}, "output": [_t([4], "torch.int64", 0, 6)]}})
    result = _results(root)[node]
    assert result.status == "skip"
    assert result.reason == "input.0: integer tensor with Min 0.0 / Max inf"


def test_infinite_float_max_still_runs(tmp_path: Path) -> None:
    node = "Functional.relu.0.forward"
    root = _write(tmp_path / "d", {node: {
        "input_args": [_t([4], lo=-1.0, hi="inf")], "input_kwargs": {},
        "output": [_t([4], lo=0.0, hi="inf")]}})
    assert _results(root)[node].status in ("pass", "fail")


def test_absurd_slice_of_getitem_is_never_a_pass(tmp_path: Path) -> None:
    node = "Tensor.__getitem__.0.forward"
    index = {"type": "slice", "value": [10**15, 10**16, None]}
    root = _write(tmp_path / "d", {node: {
        "input_args": [_t([4, 3]), index], "input_kwargs": {}, "output": [_t([0, 3])]}})
    result = _results(root)[node]
    assert result.status == "skip"
    assert result.reason == "every compared output is empty: there is no value to judge"
