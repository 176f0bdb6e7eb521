"""Local error of matrix products measured on a row sample (compare/replay.py)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np

from pytest_accuracy.compare.replay import (
    SAMPLE_ROWS,
    Sampled,
    _sample_rows,
    module_replay,
    row_pick,
)
from pytest_accuracy.dumps.model import Call, Role, Stats, TensorRecord
from pytest_accuracy.precheck.args import Bound
from pytest_accuracy.precheck.registry import REFERENCES


def test_row_pick_spans_first_and_last_row() -> None:
    assert row_pick(SAMPLE_ROWS, flat=True) is None  # small enough: every row
    pick = row_pick(1000, flat=True)
    assert pick is not None
    index = pick(np.arange(1000).reshape(1000, 1))[:, 0]  # the rows it takes, by number
    assert index[0] == 0 and index[-1] == 999 and len(index) == SAMPLE_ROWS
    assert np.all(np.diff(index) > 0)


def test_sampled_linear_equals_the_same_rows_of_the_full_product() -> None:
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(4, 300, 32)), rng.normal(size=(16, 32)), rng.normal(size=16)
    full = REFERENCES["linear"].forward(Bound({"input": x, "weight": w, "bias": b}, {}))[0]
    bound, pick = _sample_rows(Bound({"input": x, "weight": w, "bias": b}, {}), "linear")
    assert pick is not None
    sampled = REFERENCES["linear"].forward(bound)[0]
    # Equal up to the rounding of a 32-term dot product: which BLAS kernel runs (it is chosen
    # by CPU) may sum in another order, so bit equality would test the machine, not the rows.
    bound_ = 32 * np.finfo(np.float64).eps * (np.abs(x) @ np.abs(w).T + np.abs(b))
    np.testing.assert_array_less(np.abs(sampled - pick(full)), pick(bound_) + 1e-300)
    assert sampled.shape == (SAMPLE_ROWS, 16)
    # rows one off would differ far beyond that: the test tells a wrong pick from rounding
    assert np.abs(sampled[1:] - pick(full)[:-1]).max() > 1.0


def test_sampled_batched_matmul_keeps_batches_and_cuts_rows() -> None:
    rng = np.random.default_rng(1)
    a, o = rng.normal(size=(2, 3, 200, 8)), rng.normal(size=(2, 3, 8, 5))
    full = np.matmul(a, o)
    bound, pick = _sample_rows(Bound({"input": a, "other": o}, {}), "matmul")
    assert pick is not None
    sampled = REFERENCES["matmul"].forward(bound)[0]
    bound = 8 * np.finfo(np.float64).eps * np.matmul(np.abs(a), np.abs(o))  # kernel-independent
    np.testing.assert_array_less(np.abs(sampled - pick(full)), pick(bound) + 1e-300)
    assert sampled.shape == (2, 3, SAMPLE_ROWS, 5)
    # a matrix-vector product has no row axis in its output: not sampled
    _, vector_pick = _sample_rows(Bound({"input": a, "other": o[0, 0, :, 0]}, {}), "matmul")
    assert vector_pick is None


def _record(tmp_path: Path, path: str, role: Role, value: np.ndarray) -> TensorRecord:
    name = f"{path}.npy"
    np.save(tmp_path / name, value)
    return TensorRecord(path, role, str(value.dtype), str(value.dtype), value.shape, Stats(),
                        data_root=tmp_path, data_name=name)


def test_module_linear_samples_rows_before_its_float64_copy(tmp_path: Path) -> None:
    """An L0 Linear's replay takes the sampled rows of its recorded input, then widens them:
    widening the whole activation first took 8 bytes a value for rows it then dropped."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 512, 256)).astype(np.float32)  # 4 MiB; 8 MiB once in float64
    w, b = rng.normal(size=(16, 256)).astype(np.float32), rng.normal(size=16).astype(np.float32)
    call = Call("Module.fc.Linear.forward.0", "module", "forward", 0, op="Linear",
                inputs=[_record(tmp_path, "input.0", "input", x)],
                parameters=[_record(tmp_path, "parameters.weight", "parameter", w),
                            _record(tmp_path, "parameters.bias", "parameter", b)])
    replay = module_replay("Linear")
    assert replay is not None
    call.input_tensors[0].load()  # read once, as the compare has by now: not counted below
    tracemalloc.start()
    try:
        refs = replay(call)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(refs, Sampled)
    want = refs.pick(x).astype(np.float64) @ w.astype(np.float64).T + b.astype(np.float64)
    np.testing.assert_array_equal(refs[0], want)
    assert peak < x.size * 8 // 4, f"replay allocated {peak} bytes at its peak"
