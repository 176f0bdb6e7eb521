"""The report page's part for a user's own ``@accuracy`` tests: a table linking to one block per
test (failing tests first) with its outcome, summary, inputs, the first divergence its compare
found and the loss checks its logs were held to, all as the test computed them."""

from __future__ import annotations

import math
from typing import Any

from pytest_accuracy.report.html_page import esc, section, wide

# failing outcomes first, then the rest as they came
_ORDER = {"fail": 0, "error": 0, "xpass": 1, "skip": 2, "xfail": 2, "pass": 3}


def suite_tests(suites: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in suites.get("tests") or [] if isinstance(t, dict)]


def anchor(index: int) -> str:
    return f"suite-{index}"


def suites_section(suites: dict[str, Any]) -> str:
    """The table of tests (each row linked to its block), then the blocks, failing first."""
    tests = suite_tests(suites)
    rows = "".join(
        f"<tr data-status='{esc(t.get('status'))}'><td><a href='#{anchor(i)}'><code>"
        f"{esc(t.get('name'))}</code></a></td><td class='s-{esc(t.get('status'))}'>"
        f"{esc(t.get('status'))}</td><td>{esc(t.get('reason'))}</td></tr>"
        for i, t in enumerate(tests))
    table = wide("<table class='sortable'><thead><tr><th>test</th><th>status</th>"
                 f"<th>reason</th></tr></thead><tbody>{rows}</tbody></table>")
    order = sorted(enumerate(tests), key=lambda it: (_ORDER.get(str(it[1].get("status")), 2),
                                                     it[0]))
    blocks = "".join(suite_block(i, t) for i, t in order)
    return section("Your suites (@accuracy tests)", table + blocks, "suites")


def suite_block(index: int, test: dict[str, Any]) -> str:
    """One test: status, summary, inputs, first divergence, loss checks."""
    status = esc(test.get("status"))
    parts = [f"<div class='suite-test' id='{anchor(index)}' data-status='{status}'>",
             f"<h3><code>{esc(test.get('name'))}</code> <span class='s-{status}'>{status}"
             "</span></h3>"]
    if test.get("summary"):
        parts.append(f"<p class='summary'>{esc(test.get('summary'))}</p>")
    parts.append(_inputs_list(test.get("inputs")))
    first = test.get("first_divergence")
    if isinstance(first, dict):
        from pytest_accuracy.report.html_first import first_card

        parts.append("<h4>Where it diverges</h4>" + first_card(first, {}))
    chart = test.get("chart")
    if isinstance(chart, dict):
        parts.append(_error_charts(chart, first if isinstance(first, dict) else None))
    table = test.get("table")
    if isinstance(table, str) and table.startswith("suites/") and ".." not in table:
        parts.append(f"<p>Every tensor compared: <a href='{esc(table)}'><code>{esc(table)}"
                     "</code></a> (the built-in compare's columns).</p>")
    loss = test.get("loss")
    if isinstance(loss, dict):
        parts.append(_loss_part(loss))
    parts.append("</div>")
    return "".join(parts)


def _error_charts(chart: dict[str, Any], first: dict[str, Any] | None) -> str:
    """The built-in compare's error charts (one per step and rank) of the test's compare."""
    from pytest_accuracy.report.html_compare import charts, number

    nodes, errors, tolerances = [], [], []
    for row in chart.get("nodes") or []:
        if not (isinstance(row, list) and len(row) == 6):
            continue
        name, step, rank, status, error, tolerance = row
        nodes.append({"npu_name": str(name), "step": step, "rank": rank, "status": status})
        errors.append(math.inf if error == "inf" else number(error))
        tolerances.append(number(tolerance))
    if not nodes:
        return ""
    total = chart.get("total")
    note = (f"<p class='note'>Charts of the first {len(nodes)} of {esc(total)} nodes.</p>"
            if isinstance(total, int) and total > len(nodes) else "")
    return "<h4>Relative error per node</h4>" + charts(nodes, errors, tolerances, first) + note


def _inputs_list(inputs: Any) -> str:
    if not isinstance(inputs, dict) or not inputs:
        return "<p class='note'>No inputs named by its marker.</p>"
    from pytest_accuracy.report.html_compare import breakable

    rows = []
    for key, value in inputs.items():
        paths = value if isinstance(value, (list, tuple)) else [value]
        shown = ", ".join(f"<code>{breakable(p)}</code>" for p in paths)
        rows.append(f"<dt>{esc(key)}</dt><dd>{shown}</dd>")
    return f"<dl class='card'>{''.join(rows)}</dl>"


def _loss_part(loss: dict[str, Any]) -> str:
    """The migration standard's checks of the test's logs, as the built-in loss table."""
    from pytest_accuracy.report.html_logs import criteria_table

    checks = loss.get("checks")
    checks = checks if isinstance(checks, dict) else {}
    failed = [n for n, c in checks.items() if isinstance(c, dict) and c.get("status") == "fail"]
    head = (f"<h4>Training logs: {len(failed)} of {len(checks)} criteria missed"
            + (f": {esc(', '.join(failed))}" if failed else "") + "</h4>")
    clean = {str(n): c for n, c in checks.items() if isinstance(c, dict)}
    curves = loss.get("curves")
    plots = _loss_charts(curves) if isinstance(curves, dict) else ""
    return head + criteria_table(loss, clean) + plots


def _loss_charts(curves: dict[str, Any]) -> str:
    """The built-in loss plots' two panels, drawn inline: both runs' loss, and NPU - bench
    with the per-step tolerance around zero."""
    from pytest_accuracy.report.svg_lines import Series, line_chart

    steps = [int(s) for s in curves.get("steps") or [] if isinstance(s, int)]
    npu, tol = _values(curves.get("npu")), _values(curves.get("tolerance"))
    benches = [_values(b) for b in curves.get("benches") or []]
    if not steps or len(npu) != len(steps) or not benches or len(benches[0]) != len(steps):
        return ""
    mark = curves.get("divergence_step")
    mark = mark if isinstance(mark, int) else None
    column = str(curves.get("column") or "loss")
    runs = [Series(f"bench {i}" if len(benches) > 1 else "bench", b, _GREYS[i % len(_GREYS)])
            for i, b in enumerate(benches) if len(b) == len(steps)]
    loss = line_chart(steps, [*runs, Series("npu", npu, "#c62828")], title=column,
                      y_label=column, mark_step=mark)
    diff = [None if a is None or b is None else a - b for a, b in zip(npu, benches[0],
                                                                      strict=True)]
    band = tol if len(tol) == len(steps) else [None] * len(steps)
    diff_chart = line_chart(
        steps, [Series("npu - bench", diff, "#c62828"),
                Series("tolerance", band, "#1565c0", dashed=True),
                Series("", [None if t is None else -t for t in band], "#1565c0",
                       dashed=True)],
        title=f"{column} difference (NPU - bench)", y_label="difference", mark_step=mark)
    paired = curves.get("steps_paired")
    note = (f"<p class='note'>{len(steps)} of {esc(paired)} paired steps drawn.</p>"
            if isinstance(paired, int) and paired > len(steps) else "")
    return loss + diff_chart + note


_GREYS = ("#455a64", "#90a4ae", "#78909c")


def _values(raw: Any) -> list[float | None]:
    if not isinstance(raw, list):
        return []
    return [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
            for v in raw]


def suite_input_rows(suites: dict[str, Any]) -> str:
    """The Inputs section's rows for the suite tests: each distinct path, the key it was given
    as and the tests (linked) that read it."""
    from pytest_accuracy.report.html_compare import breakable

    seen: dict[tuple[str, str], list[int]] = {}
    for index, test in enumerate(suite_tests(suites)):
        inputs = test.get("inputs")
        for key, value in (inputs.items() if isinstance(inputs, dict) else []):
            for path in value if isinstance(value, (list, tuple)) else [value]:
                seen.setdefault((str(key), str(path)), []).append(index)
    tests = suite_tests(suites)
    rows = []
    for (key, path), used in seen.items():
        links = ", ".join(f"<a href='#{anchor(i)}'>{esc(_short(tests[i].get('name')))}</a>"
                          for i in used)
        rows.append(f"<tr><td class='key'>{esc(key)}</td><td><code>{breakable(path)}</code>"
                    f"</td><td>{links}</td></tr>")
    return "".join(rows)


def _short(name: Any) -> str:
    """A test's node id without its file: ``test_x[param]``."""
    return str(name).rsplit("::", 1)[-1]
