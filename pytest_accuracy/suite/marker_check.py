"""The ``@accuracy`` marker as an assertion on a user's test that uses the log fixtures."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_accuracy.settings import loss_criteria


def assert_migration_standard(item: pytest.Item, npu: Any, benches: list[Any]) -> None:
    """Fail the test with every failing check's message when the standard is missed."""
    __tracebackhide__ = True
    from pytest_accuracy.curves import evaluate

    marker: dict[str, Any] = {}
    for mark in reversed(list(item.iter_markers("accuracy"))):
        marker.update(mark.kwargs)
    report = evaluate(npu, benches, loss_criteria(item.config, marker))
    failed = [c for c in report.checks if c.status == "fail"]
    if failed:
        lines = [f"Migration standard missed ({len(failed)} of {len(report.checks)} checks):"]
        for check in failed:
            lines += [f"[{check.name}] {check.message}"]
        raise AssertionError("\n".join(lines))
