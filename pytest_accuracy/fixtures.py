"""Fixtures for a user's own suites: loaded dumps, the compare, and (later) logs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_accuracy.marker import marker_kwargs
from pytest_accuracy.settings import compare_criteria, path_setting

if TYPE_CHECKING:  # loaded when a fixture is used, not when pytest starts
    from pytest_accuracy.dumps.model import DumpSet


def _marker_kwargs(request: pytest.FixtureRequest) -> dict[str, Any]:
    return marker_kwargs(request.node)


def _missing(request: pytest.FixtureRequest, what: str) -> None:
    """An input the test asks for is given nowhere: an error (a CI job whose ini lost its
    paths must not pass by skipping), or a skip where the user chose that."""
    from pytest_accuracy.settings import typed_setting

    if typed_setting(request.config, "missing_input") == "skip":
        pytest.skip(f"no {what}")
    pytest.fail(f"no {what}; a suite test needs its inputs (--acc-missing-input=skip, ini "
                "acc_missing_input = skip, skips such tests instead)", pytrace=False)


def _dump(request: pytest.FixtureRequest, name: str) -> DumpSet:
    from pytest_accuracy.dumps.layout import load_dumps

    path = path_setting(request.config, name, _marker_kwargs(request))
    if path is None:
        _missing(request, f"{name} dump given (--acc-{name}, ini acc_{name} or "
                          f"@accuracy({name}=...))")
    assert path is not None
    return load_dumps(path)


@pytest.fixture
def acc_npu_dump(request: pytest.FixtureRequest) -> DumpSet:
    """The NPU (device under test) dump: every step and rank, tensors loaded on demand."""
    return _dump(request, "npu")


@pytest.fixture
def acc_bench_dump(request: pytest.FixtureRequest) -> DumpSet:
    """The bench dump: every step and rank, tensors loaded on demand."""
    return _dump(request, "bench")


@pytest.fixture
def acc_compare(request: pytest.FixtureRequest, acc_npu_dump: DumpSet,
                acc_bench_dump: DumpSet) -> Any:
    """The compare of the two dumps: ``.pairs``, ``.table`` (DataFrame), ``.first_divergence``,
    ``.failures`` and ``.assert_close()`` raising an AssertionError naming the first divergence."""
    from pytest_accuracy.api import CompareReport
    from pytest_accuracy.compare import Comparison
    from pytest_accuracy.suite.pairing import choose_pairing
    from pytest_accuracy.suite.state import NoiseRunError, noise_run

    kwargs = _marker_kwargs(request)
    criteria = compare_criteria(request.config, kwargs)
    pairing = choose_pairing(request.config)
    try:
        noise = noise_run(request.config, acc_bench_dump, kwargs)
    except NoiseRunError as exc:
        pytest.fail(exc.problem, pytrace=False)
    return CompareReport(Comparison(acc_npu_dump, acc_bench_dump, criteria, pairing,
                                    inputs="all", noise=noise))


def _log_paths(request: pytest.FixtureRequest) -> tuple[Any, list[Any]]:
    from pathlib import Path

    from pytest_accuracy.settings import setting

    marker = _marker_kwargs(request)
    npu = path_setting(request.config, "npu_log", marker)
    benches = marker.get("bench_logs") or setting(request.config, "bench_logs") or []
    if isinstance(benches, (str, Path)):
        benches = [benches]
    return npu, [Path(str(b)) for b in benches]


@pytest.fixture
def acc_npu_log(request: pytest.FixtureRequest) -> Any:
    """The NPU training log as a ``LogTable`` (``.frame``: step-indexed loss, grad_norm, ...)."""
    from pytest_accuracy.logs import read_log
    from pytest_accuracy.settings import log_reading

    npu, _ = _log_paths(request)
    if npu is None:
        _missing(request, "NPU log given (--acc-npu-log, ini acc_npu_log or "
                          "@accuracy(npu_log=...))")
    return read_log(npu, **log_reading(request.config))


@pytest.fixture
def acc_bench_logs(request: pytest.FixtureRequest) -> list[Any]:
    """The bench logs as ``LogTable``s: the first is the bench, the others form the band."""
    from pytest_accuracy.logs import read_log

    _, benches = _log_paths(request)
    if not benches:
        _missing(request, "bench log given (--acc-bench-log, ini acc_bench_log or "
                          "@accuracy(bench_logs=[...]))")
    from pytest_accuracy.settings import log_reading

    return [read_log(p, **log_reading(request.config)) for p in benches]
