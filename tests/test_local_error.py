"""The local error's relative L2 distance (compare/local.py) against an independent sum."""

from __future__ import annotations

import math
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

from pytest_accuracy.compare.local import _rel_l2


def _fsum_rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    """Exactly rounded sums of squares over float64 values: the reference."""
    g, w = got.astype(np.float64).tolist(), want.astype(np.float64).tolist()
    diff = math.sqrt(math.fsum((a - b) ** 2 for a, b in zip(g, w, strict=True)))
    return diff / math.sqrt(math.fsum(b * b for b in w))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_rel_l2_of_a_recorded_output_against_its_float64_replay(dtype: type) -> None:
    rng = np.random.default_rng(3)
    want = rng.normal(size=70_001)  # not a multiple of any chunk or lane count
    got = want.astype(dtype)  # the output as the kernel stored it: rounded to its dtype
    assert _rel_l2(got, want) == pytest.approx(_fsum_rel_l2(got, want), rel=1e-12)


def test_rel_l2_leaves_out_nan_and_inf_only_where_both_have_them() -> None:
    want = np.array([1.0, np.nan, 3.0, np.inf, 2.0])
    got = np.array([1.5, np.nan, 3.0, np.inf, 2.0], dtype=np.float32)
    assert _rel_l2(got, want) == pytest.approx(0.5 / math.sqrt(1 + 9 + 4), rel=1e-15)
    moved = np.array([1.0, 2.0, 3.0, np.inf, np.nan], dtype=np.float32)
    assert _rel_l2(moved, want) == math.inf


def test_rel_l2_of_a_zero_reference() -> None:
    zeros = np.zeros(8)
    assert _rel_l2(zeros.astype(np.float32), zeros) == 0.0
    assert _rel_l2(np.ones(8, dtype=np.float32), zeros) == math.inf


def test_rel_l2_makes_no_float64_copy_of_the_output() -> None:
    """One pass: no widened copy of the recorded output, no difference array (each would be
    8 bytes a value: 32 MB here, for a node under the replay limit)."""
    rng = np.random.default_rng(4)
    want = rng.normal(size=1 << 22)
    got = want.astype(np.float32)
    tracemalloc.start()
    try:
        _rel_l2(got, want)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < want.nbytes // 4, f"{peak} bytes at the peak"
