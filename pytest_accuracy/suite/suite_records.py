"""A user's own ``@accuracy`` tests as records of the ``suites`` group: each reaches the JSON
document, the report page, the terminal summary and the Markdown summary like the built-in
items (its outcome, the first line of its failure, its inputs, the first divergence its compare
found, the loss checks its logs were held to)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.marker import PATH_KEYS, marker_kwargs
from pytest_accuracy.text import headline

_FIXTURES = ("acc_compare", "acc_npu_dump", "acc_bench_dump", "acc_npu_log", "acc_bench_logs")
_FIRST_KEYS = ("npu_name", "bench_name", "step", "rank", "tensor", "reason", "likely_cause")
# what the report's card needs to say what the node does; kept where the divergence has them
_FIRST_MORE = ("kind", "finding", "previous", "through")
_CHECK_KEYS = ("status", "measured", "allowed", "worst_steps", "message")
_LOSS_KEYS = ("status", "divergence_step", "steps_compared", "steps_skipped")
# What the marker's own assertion (suite.marker_check) computed, kept on the item for its
# record: the CompareReport of a marker-only compare, the LossReport of its logs
MARKER_COMPARE_KEY = pytest.StashKey[Any]()
MARKER_LOSS_KEY = pytest.StashKey[Any]()
# nodes a test's record keeps for its charts: the page draws the first 8 dumps' nodes at most
CHART_MOST = 20_000
MARKER_CURVES_KEY = pytest.StashKey[dict[str, Any]]()  # the logs' curves, thinned for a chart


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
    record.update(_compare_parts(item))
    loss = _loss(item)
    if loss is not None:
        record["loss"] = loss
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


def _compare_report(item: pytest.Item) -> Any:
    """The test's ``acc_compare``, or the compare the marker itself asserted."""
    report = getattr(item, "funcargs", {}).get("acc_compare")
    return report if report is not None else item.stash.get(MARKER_COMPARE_KEY, None)


def _compare_parts(item: pytest.Item) -> dict[str, Any]:
    """``chart`` and, with --acc-report, ``table`` of the test's compare, from one record per
    node; only when the test used its compare (one it never looked at is not run for this)."""
    report = _compare_report(item)
    used = report is not None and {"results", "first_divergence"} & set(vars(report))
    if not used or not report.results:  # asked only for the first divergence: the rest too
        return {}
    from pytest_accuracy.report.records import node_record
    from pytest_accuracy.settings import setting

    first = vars(report).get("first_divergence")
    root = setting(item.config, "report")
    nodes = [node_record(result, first, rows=bool(root)) for result in report.results]
    parts: dict[str, Any] = {"chart": _chart(nodes)}
    table = _table(item, Path(str(root)), nodes, first) if root else None
    return {**parts, "table": table} if table else parts


def _chart(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """What the report's error charts need of each node (name, step, rank, status, error,
    tolerance), as rows."""
    from pytest_accuracy.report.html_compare import node_error, node_tolerance

    rows = []
    for node in nodes[:CHART_MOST]:
        error = node_error(node)
        rows.append([node["npu_name"], node["step"], node["rank"], node["status"],
                     "inf" if error is not None and math.isinf(error) else error,
                     node_tolerance(node, {})])
    return {"nodes": rows, "total": len(nodes)}


def _table(item: pytest.Item, root: Path, nodes: list[dict[str, Any]], first: Any
           ) -> str | None:
    """The test's compare as the built-in's ``compare_result.csv``, in ``suites/<test>/`` of
    the report folder; its path there."""
    from pytest_accuracy.nextstep.names import safe_name
    from pytest_accuracy.report.document import write_compare_csv
    from pytest_accuracy.safe_io import ensure_dir

    folder = Path("suites") / safe_name(item.nodeid)
    written = write_compare_csv(nodes, ensure_dir(root / folder),
                                first.as_dict() if first is not None else None)
    return str(folder / written.name) if written is not None else None


def _first_divergence(item: pytest.Item) -> dict[str, Any] | None:
    """The first divergence of the test's ``acc_compare``, or of the compare the marker itself
    asserted, when it was computed (a report does not recompute a compare no one asked for)."""
    report = _compare_report(item)
    first = vars(report).get("first_divergence") if report is not None else None
    if first is None:
        return None
    data = first.as_dict()
    more = {k: data[k] for k in _FIRST_MORE if data.get(k) is not None}
    return {**{k: data.get(k) for k in _FIRST_KEYS}, **more}


def _loss(item: pytest.Item) -> dict[str, Any] | None:
    """The loss checks the marker held the test's logs to, as ``loss.checks`` of the JSON
    document has them (name -> status, measured, allowed, worst steps, message)."""
    report = item.stash.get(MARKER_LOSS_KEY, None)
    if report is None:
        return None
    data = report.to_dict()
    out: dict[str, Any] = {k: data.get(k) for k in _LOSS_KEYS}
    out["checks"] = {str(c.get("name")): {k: c.get(k) for k in _CHECK_KEYS}
                     for c in data.get("checks") or []}
    curves = item.stash.get(MARKER_CURVES_KEY, None)
    if curves:
        out["curves"] = curves
    return out
