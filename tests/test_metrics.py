"""Tensor metrics, statistics deltas and the dtype-aware criteria: edge cases pinned."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from pytest_accuracy.compare.criteria import (
    CompareCriteria,
    judge_stats,
    judge_tensor,
    load_waivers,
)
from pytest_accuracy.compare.metrics import stats_metrics, tensor_metrics
from pytest_accuracy.dumps.model import Stats
from pytest_accuracy.errors import AccuracyInputError


def test_identical_tensors() -> None:
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    m = tensor_metrics(a, a.copy())
    assert (m.cosine, m.max_abs_err, m.rel_l2_err, m.one_thousandth_err_ratio) == (1.0, 0, 0, 1)


def test_hand_checked_values() -> None:
    n = np.array([1.0, 2.0, 0.0, 4.0])
    b = np.array([1.0, 2.0, 0.0, 3.0])
    m = tensor_metrics(n, b)
    assert m.max_abs_err == 1.0 and m.worst_index == (3,)
    assert m.max_rel_err == pytest.approx(1 / 3)
    assert m.rel_l2_err == pytest.approx(1 / math.sqrt(14))
    assert m.cosine == pytest.approx(17 / (math.sqrt(21) * math.sqrt(14)))
    assert m.euc_dist == 1.0 and m.five_thousandths_err_ratio == 0.75


def test_scale_error_keeps_cosine_but_not_relative_error() -> None:
    b = np.random.default_rng(0).normal(size=1000)
    m = tensor_metrics(b * 1.02, b)
    assert m.cosine == pytest.approx(1.0) and m.rel_l2_err == pytest.approx(0.02)
    tol = CompareCriteria().tolerance("float32")
    assert judge_tensor(m, "float32", tol).detail == "relative error 0.02 (up to 0.0001 allowed)"


def test_zeros() -> None:
    z = np.zeros(4)
    assert tensor_metrics(z, z).cosine == 1.0 and tensor_metrics(z, z).rel_l2_err == 0.0
    m = tensor_metrics(np.array([0.0, 1e-3]), np.zeros(2))
    assert m.rel_l2_err == math.inf and m.max_rel_err == math.inf and m.cosine == 0.0


def test_nan_inf_same_positions_are_ignored_else_mismatch() -> None:
    a = np.array([1.0, np.nan, np.inf, 2.0])
    assert tensor_metrics(a, a.copy()).status == "ok"
    m = tensor_metrics(np.array([1.0, np.nan]), np.array([1.0, 2.0]))
    assert (m.status, m.nonfinite_npu, m.nonfinite_bench) == ("nonfinite_mismatch", 1, 0)
    assert judge_tensor(m, "float32", CompareCriteria().tolerance("float32")).detail == (
        "NaN/Inf at different positions (NPU 1, bench 0 non-finite elements)")


def test_shapes_squeeze_or_mismatch() -> None:
    assert tensor_metrics(np.ones((2, 1, 3)), np.ones((2, 3))).status == "ok"
    assert tensor_metrics(np.ones((2, 3)), np.ones((3, 2))).status == "shape_mismatch"
    assert tensor_metrics(np.ones((0,)), np.ones((0,))).status == "empty"


def test_bfloat16_is_upcast() -> None:
    a = np.array([1.0, 2.5, -3.0], dtype=ml_dtypes.bfloat16)
    m = tensor_metrics(a, np.array([1.0, 2.5, -3.0], dtype=np.float32))
    assert m.max_abs_err == 0.0


def test_integers_must_be_equal() -> None:
    m = tensor_metrics(np.array([1, 2, 3]), np.array([1, 2, 4]))
    assert not judge_tensor(m, "int64", CompareCriteria().tolerance("int64")).ok


def test_dtype_tolerances_and_overrides() -> None:
    c = CompareCriteria()
    assert c.tolerance("bfloat16").rel_err == 4e-2 and c.tolerance("float32").rel_err == 1e-4
    assert CompareCriteria(rel_err=0.5).tolerance("float32").rel_err == 0.5
    assert CompareCriteria(dtype_aware=False).tolerance("bfloat16").rel_err == 1e-4


def test_statistics_deltas_are_scale_relative() -> None:
    npu = Stats(max=2.0, min=-2.0, mean=1e-9, norm=10.0)
    bench = Stats(max=2.0, min=-2.0, mean=2e-9, norm=10.0)
    m = stats_metrics(npu, bench)
    assert m.mean_relative_err == pytest.approx(0.5)  # msprobe would report 50 %
    assert m.range_rel_err == pytest.approx(0.5e-9)  # relative to |max| = 2
    assert judge_stats(m, "float32", CompareCriteria().tolerance("float32")).ok


def test_waivers_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "w.yaml"
    path.write_text("- pattern: 'Functional.softmax*'\n  reason: fused\n  rel_err: 0.01\n")
    (waiver,) = load_waivers(path)
    assert waiver.matches("Functional.softmax.0.forward", "softmax") and waiver.rel_err == 0.01
    path.write_text("- pattern: x\n  reason: y\n  rel_eror: 1\n")
    with pytest.raises(AccuracyInputError, match=r"unknown keys \['rel_eror'\]"):
        load_waivers(path)


def test_json_document_is_strict_json_with_infinite_metrics(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from pytest_accuracy.report.document import write_json

    path = write_json({"a": math.inf, "b": [-math.inf, math.nan, 1.5]}, tmp_path / "d.json")
    assert json.loads(path.read_text()) == {"a": "inf", "b": ["-inf", None, 1.5]}
