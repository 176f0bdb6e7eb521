"""A user's own ``@accuracy`` tests as records of the ``suites`` group: each reaches the JSON
document, the report page, the terminal summary and the Markdown summary like the built-in
items (its outcome, the first line of its failure, its inputs, the first divergence its compare
found)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_accuracy.marker import PATH_KEYS, marker_kwargs
from pytest_accuracy.text import headline

_FIXTURES = ("acc_compare", "acc_npu_dump", "acc_bench_dump", "acc_npu_log", "acc_bench_logs")
_FIRST_KEYS = ("npu_name", "bench_name", "step", "rank", "tensor", "reason", "likely_cause")


def is_suite_test(item: pytest.Item) -> bool:
    """A test function with the marker or one of the plugin's fixtures."""
    if not isinstance(item, pytest.Function):
        return False
    names = getattr(item, "fixturenames", ())
    return item.get_closest_marker("accuracy") is not None or any(f in names for f in _FIXTURES)


def suite_record(item: pytest.Item, report: pytest.TestReport) -> dict[str, Any]:
    """The record of one phase's report: call, or a setup that did not pass."""
    status = {"passed": "pass", "failed": "fail"}.get(report.outcome, "skip")
    if hasattr(report, "wasxfail"):
        status = "xfail" if report.skipped else "xpass"
    text = _message(report)
    line = headline(text)
    record: dict[str, Any] = {
        "group": "suites", "name": item.nodeid, "status": status,
        "reason": line, "summary": line, "inputs": _inputs(item),
    }
    first = _first_divergence(item)
    if first is not None:
        record["first_divergence"] = first
    return record


def _message(report: pytest.TestReport) -> str:
    """The report's message as text: a skip's is its reason, not the tuple pytest keeps
    ``(path, line, "Skipped: ...")``."""
    if report.passed:
        return ""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ").strip()
    return str(report.longreprtext or "").strip()


def _inputs(item: pytest.Item) -> dict[str, Any]:
    kwargs = marker_kwargs(item)
    return {k: kwargs[k] for k in PATH_KEYS if kwargs.get(k) is not None}


def _first_divergence(item: pytest.Item) -> dict[str, Any] | None:
    """The first divergence of the test's ``acc_compare``, when the test had it computed (a
    report does not recompute a compare the test did not ask for)."""
    report = getattr(item, "funcargs", {}).get("acc_compare")
    first = vars(report).get("first_divergence") if report is not None else None
    if first is None:
        return None
    data = first.as_dict()
    return {k: data.get(k) for k in _FIRST_KEYS}
