"""The ``@accuracy`` marker as an assertion: the migration standard, or the compare of two dumps."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_accuracy.marker import marker_kwargs
from pytest_accuracy.settings import loss_criteria
from pytest_accuracy.suite.suite_records import (
    MARKER_COMPARE_KEY,
    MARKER_CURVES_KEY,
    MARKER_LOSS_KEY,
)


def assert_marker(item: pytest.Item) -> None:
    """Fail ``item`` with the missed criteria, as its own failure (no plugin traceback).

    Logs: when the marker names them or the test takes ``acc_npu_log`` and ``acc_bench_logs``.
    Dumps: when the marker names both and the test does not take ``acc_compare`` (a test that
    does asserts on the compare itself, e.g. that a known bug is localised).
    """
    marker = marker_kwargs(item)
    funcargs: dict[str, Any] = getattr(item, "funcargs", {})
    lines: list[str] = []
    logs = "acc_npu_log" in funcargs and "acc_bench_logs" in funcargs
    if logs or marker.get("npu_log") or marker.get("bench_logs"):
        lines += _standard_lines(item, marker, funcargs)
    if marker.get("npu") and marker.get("bench") and "acc_compare" not in funcargs:
        lines += _compare_lines(item, marker, funcargs)
    if lines:
        path, line, name = item.location
        head = f"{name} ({path}:{(line or 0) + 1}) misses its @accuracy criteria:"
        pytest.fail("\n".join([head, *lines]), pytrace=False)


def _standard_lines(item: pytest.Item, marker: dict[str, Any], funcargs: dict[str, Any]
                    ) -> list[str]:
    from pytest_accuracy.curves import evaluate
    from pytest_accuracy.curves.sampled import loss_curves

    if "acc_npu_log" in funcargs and "acc_bench_logs" in funcargs:
        npu, benches = funcargs["acc_npu_log"], funcargs["acc_bench_logs"]
    else:
        npu, benches = _read_logs(item, marker)
    report = evaluate(npu, benches, loss_criteria(item.config, marker))
    item.stash[MARKER_LOSS_KEY] = report  # its record shows these checks (suite_records)
    item.stash[MARKER_CURVES_KEY] = loss_curves(npu, benches, report.criteria,
                                                report.divergence_step)  # and its plots
    failed = [c for c in report.checks if c.status == "fail"]
    if not failed:
        return []
    lines = [f"Migration standard missed ({len(failed)} of {len(report.checks)} checks):"]
    for check in failed:
        lines += [f"[{check.name}] {check.message}"]
    return lines


def _read_logs(item: pytest.Item, marker: dict[str, Any]) -> tuple[Any, list[Any]]:
    from pathlib import Path

    from pytest_accuracy.logs import read_log
    from pytest_accuracy.settings import log_reading, path_setting, setting

    npu = path_setting(item.config, "npu_log", marker)
    benches = marker.get("bench_logs") or setting(item.config, "bench_logs") or []
    if isinstance(benches, (str, Path)):
        benches = [benches]
    if npu is None or not benches:
        key, flag = ("npu_log", "--acc-npu-log") if npu is None else ("bench_logs",
                                                                        "--acc-bench-log")
        pytest.fail(f"{item.name}: @accuracy names a training log but no {key}: add "
                    f"@accuracy({key}=...) or {flag}=PATH", pytrace=False)
    how = log_reading(item.config, marker)
    return read_log(npu, **how), [read_log(Path(str(b)), **how) for b in benches]


def _compare_lines(item: pytest.Item, marker: dict[str, Any], funcargs: dict[str, Any]
                   ) -> list[str]:
    from pytest_accuracy.api import CompareReport
    from pytest_accuracy.compare import Comparison
    from pytest_accuracy.dumps.layout import load_dumps
    from pytest_accuracy.dumps.tasks import task_mismatch
    from pytest_accuracy.settings import compare_criteria, path_setting
    from pytest_accuracy.suite.pairing import choose_pairing
    from pytest_accuracy.suite.state import NoiseRunError, noise_run

    dumps = []
    for side in ("npu", "bench"):
        given = funcargs.get(f"acc_{side}_dump")
        path = path_setting(item.config, side, marker)
        dumps.append(given if given is not None else load_dumps(str(path)))
    npu, bench = dumps
    criteria = compare_criteria(item.config, marker)
    pairing = choose_pairing(item.config)
    try:
        noise = noise_run(item.config, bench, marker)
    except NoiseRunError as exc:
        return [f"Compare of {npu.root} with {bench.root}:", exc.problem]
    cmp = Comparison(npu, bench, criteria, pairing, noise=noise)
    head = f"Compare of {npu.root} with {bench.root}:"
    mismatch = task_mismatch(npu, bench)
    if mismatch is not None and not mismatch.comparable:
        return [head, mismatch.problem()]
    if mismatch is not None:
        head += " " + mismatch.note()
    share = cmp.matched_share() if len(cmp) else 0.0
    if share == 0.0 or share < criteria.min_matched:
        return [head, f"only {round(share * len(cmp))} of {len(cmp)} NPU nodes found a bench "
                f"counterpart (at least {criteria.min_matched:.0%} required)."]
    report = item.stash[MARKER_COMPARE_KEY] = CompareReport(cmp)  # its record's divergence
    try:
        report.assert_close()
    except AssertionError as exc:
        return [head, *str(exc).splitlines()]
    return []
