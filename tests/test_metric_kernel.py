"""The compiled metric kernel: the numpy referee's results to the bit, on any pair of arrays."""

from __future__ import annotations

import math
import os

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pytest_accuracy.compare import fold as fold_mod
from pytest_accuracy.compare.fold import CHUNK, LANES, Folded, fold, fold_numpy
from pytest_accuracy.compare.metrics import tensor_metrics

REQUIRE_ENV = "PYTEST_ACCURACY_REQUIRE_COMPILED"
EXAMPLES_N = int(os.environ.get("ACC_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES_N,
    deadline=None,
    derandomize=not os.environ.get("ACC_FUZZ_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
needs_kernel = pytest.mark.skipif(
    fold_mod._compiled is None, reason="the compiled metric kernel is not built"
)
DTYPES = [np.dtype(d) for d in ("float64", "float32", "float16", "int8", "int16", "int32",
                                "int64", "uint8", "uint16", "uint32", "uint64", "bool")]
DTYPES.append(np.dtype(ml_dtypes.bfloat16))


def test_kernel_is_built_where_the_install_must_have_it() -> None:
    """CI sets PYTEST_ACCURACY_REQUIRE_COMPILED: a silently failed C build must not pass."""
    if not os.environ.get(REQUIRE_ENV):
        pytest.skip(f"{REQUIRE_ENV} not set")
    assert fold_mod._compiled is not None, "pytest_accuracy.compare._metrics was not built"


def test_lanes_and_chunk_are_the_kernels() -> None:
    if fold_mod._compiled is None:
        pytest.skip("the compiled metric kernel is not built")
    assert (fold_mod._compiled.LANES, fold_mod._compiled.CHUNK) == (LANES, CHUNK)


def every_path(n: np.ndarray, b: np.ndarray) -> list[Folded | None]:
    """numpy, the kernel's baseline loop and the kernel's best loop on the same pair."""
    return [fold_numpy(n, b), fold(n, b, baseline=True), fold(n, b)]


def assert_bitwise(paths: list[Folded | None]) -> None:
    def bits(f: Folded | None) -> object:
        if f is None:
            return None
        floats = (f.nn, f.bb, f.nb, f.dd, f.max_abs, f.max_rel)
        return ([float(x).hex() for x in floats], f.worst, f.below)

    ref = bits(paths[0])
    for other in paths[1:]:
        assert bits(other) == ref


def pair_of(dtype: np.dtype) -> st.SearchStrategy[tuple[np.ndarray, np.ndarray]]:
    """Two arrays of one shape: random, or the second a perturbed / sign-flipped copy."""
    shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=40)
    if dtype.kind == "V":  # bfloat16: draw float32 values, round them
        elements = st.floats(width=32, allow_nan=True, allow_infinity=True)

        def build(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
            return hnp.arrays(np.float32, shape, elements=elements).map(
                lambda a: a.astype(dtype))
    else:
        def build(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
            return hnp.arrays(dtype, shape)

    def both(shape: tuple[int, ...]) -> st.SearchStrategy[tuple[np.ndarray, np.ndarray]]:
        first = build(shape)
        return st.one_of(
            st.tuples(first, build(shape)),
            first.map(lambda a: (a, a.copy())),
            first.map(lambda a: (a, np.zeros_like(a))),
        )

    return shapes.flatmap(both)


@needs_kernel
@FUZZ
@given(st.sampled_from(DTYPES).flatmap(lambda d: pair_of(d)), st.data())
def test_kernel_matches_numpy_bit_for_bit(pair: tuple[np.ndarray, np.ndarray],
                                          data: st.DataObject) -> None:
    """Every dtype, NaN/Inf, zeros, subnormals, extremes; also as non-contiguous views."""
    n, b = pair
    assert_bitwise(every_path(n, b))
    step = data.draw(st.integers(2, 3))
    assert_bitwise(every_path(n.reshape(-1)[::step], b.reshape(-1)[::step]))  # strided
    assert_bitwise(every_path(n.T, b.T))  # transposed: not C-contiguous
    assert_bitwise(every_path(np.flip(n), b))


@needs_kernel
@FUZZ
@given(st.sampled_from(DTYPES), st.sampled_from(DTYPES), st.integers(0, 3 * LANES + 1),
       st.integers(0, 2**32 - 1))
def test_mixed_dtypes_match(dn: np.dtype, db: np.dtype, size: int, seed: int) -> None:
    """An NPU bf16 tensor against a bench fp32 one (and every other pairing)."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(size) * 10.0 ** rng.integers(-3, 3, size)
    n = values.astype(np.float32).astype(dn) if dn.kind != "b" else values > 0
    b = (values * 1.001).astype(np.float32).astype(db) if db.kind != "b" else values > 0.1
    assert_bitwise(every_path(np.asarray(n), np.asarray(b)))


@needs_kernel
@pytest.mark.parametrize("size", [CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 9, 300_001])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_across_chunk_boundaries(size: int, dtype: str) -> None:
    """Lanes restart every CHUNK elements in both paths; the largest error sits in a late chunk."""
    rng = np.random.default_rng(size)
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    b = (rng.standard_normal(size) * 100).astype(np.float32).astype(dt)
    n = (b.astype(np.float64) * (1 + 1e-3 * rng.standard_normal(size))).astype(np.float32)
    n = n.astype(dt)
    n[-3] = b[-3].astype(np.float64) + 500  # the worst element, past the first chunk
    paths = every_path(n, b)
    assert_bitwise(paths)
    assert paths[0] is not None and paths[0].worst == size - 3


@needs_kernel
def test_ties_pick_the_first_index_and_zero_bench_gives_inf() -> None:
    n = np.array([0.0, 2.0, 1.0, 2.0, 0.5] * 5)
    b = np.array([0.0, 0.0, 1.0, 0.0, 0.0] * 5)
    paths = every_path(n, b)
    assert_bitwise(paths)
    assert paths[2] is not None
    assert paths[2].worst == 1 and paths[2].max_rel == math.inf
    assert every_path(np.array([1.0, np.inf]), np.array([1.0, np.inf])) == [None] * 3


@needs_kernel
def test_tensor_metrics_is_the_same_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole TensorMetrics, NaN/Inf at matching positions included (masked path)."""
    rng = np.random.default_rng(7)
    b = rng.standard_normal((3, 70_000)).astype(np.float32)
    n = b + np.float32(1e-4) * rng.standard_normal(b.shape).astype(np.float32)
    n[1, 5] = b[1, 5] = np.nan
    n[2, 9] = b[2, 9] = -np.inf
    pairs = [(n, b), (n[:, ::2], b[:, ::2]), (n.astype(ml_dtypes.bfloat16), b)]
    for npu, bench in pairs:
        fast = tensor_metrics(npu, bench)
        monkeypatch.setenv(fold_mod.PURE_ENV, "1")
        pure = tensor_metrics(npu, bench)
        monkeypatch.delenv(fold_mod.PURE_ENV)
        assert fast == pure and fast.status == "ok"


@needs_kernel
def test_kernel_refuses_bad_arguments() -> None:
    kernel = fold_mod._compiled
    assert kernel is not None
    with pytest.raises(ValueError, match="unknown element kind"):
        kernel.fold(b"\0" * 8, 99, b"\0" * 8, 0, 1)
    with pytest.raises(ValueError, match="need more"):
        kernel.fold(b"\0" * 8, 0, b"\0" * 8, 0, 2)
    with pytest.raises(ValueError, match="need more"):
        kernel.fold(b"\0" * 8, 0, b"\0" * 8, 0, -1)
