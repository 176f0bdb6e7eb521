"""The HTML report at every width (issue 26, item 8), checked without a browser: the legend
matches the markers, the chart has an x axis, numbers don't wrap, carried rows are compact,
the logs inputs are a list, the page has no fixed width beyond 800 px and the loss-difference
plot marks the divergence step."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.report.html import render
from pytest_accuracy.report.html_compare import compare_section_parts
from pytest_accuracy.report.html_logs import config_section, precheck_section
from pytest_accuracy.report.html_page import STYLE, joined
from pytest_accuracy.report.svg import COLOURS, Point, error_chart, x_ticks
from tests.helpers import ROOT

LOGS = ROOT / "example_data" / "logs"
_EVIL = "<script>alert(1)</script>"


def _node(i: int, status: str, **extra: Any) -> dict[str, Any]:
    return {"npu_name": f"Torch.op.{i}.forward", "bench_name": f"Torch.op.{i}.forward",
            "step": 0, "rank": 0, "status": status, "rel_l2_err": 10.0 ** -(6 - i),
            "cosine": 0.999912345, "max_abs_err": 1.23456e-05, "effective_dtype": "float32",
            "tensor": "output.0", "reason": "relative error and a long reason " * 4, **extra}


def _compare() -> dict[str, Any]:
    nodes = [_node(0, "pass"), _node(1, "fail", first_divergence=True, finding="argument"),
             _node(2, "carried", carried_from="Torch.op.1.forward"), _node(3, "pass")]
    first = {"npu_name": "Torch.op.1.forward", "bench_name": "Torch.op.1.forward", "step": 0,
             "rank": 0, "tensor": "output.0", "reason": "too far"}
    return {"nodes": nodes, "first_divergence": first, "coverage": None}


def _html() -> str:
    return "".join(joined(p) for p in compare_section_parts(_compare(), {}))


def _rules(selector_part: str) -> list[str]:
    """The declarations of every CSS rule whose selector mentions ``selector_part``."""
    return [body for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", STYLE)
            if selector_part in selectors.replace("\n", "")]


def test_the_legend_colour_is_the_first_divergence_marker_colour() -> None:
    page = _html()
    legend = re.search(r"<i class='dot' style='background:(#[0-9a-f]{6})'></i>first divergence",
                       page)
    marker = re.search(r"<circle [^>]*fill='(#[0-9a-f]{6})'[^>]*><title>#1 Torch\.op\.1", page)
    assert legend and marker
    assert legend.group(1) == marker.group(1) == COLOURS["first"]
    # the carried swatch is hollow like its markers, not filled
    assert f"background:white;border:1.5px solid {COLOURS['carried']}" in page
    assert "exact matches sit in the 0 lane".lower() in page.lower()


def test_the_chart_has_x_axis_labels_and_its_divergence_label_covers_no_point() -> None:
    points = [Point(i, 1e-3 if i % 3 else 1e-2, "carried", f"#{i}") for i in range(150)]
    points.append(Point(150, float("inf"), "fail", "#150 inf"))
    svg = error_chart(points, first_x=40, title="t")
    ticks = re.findall(r"<text x='[\d.]+' y='[\d.]+' class='ax' text-anchor='middle'>(\d+)"
                       r"</text>", svg)
    assert ticks == [str(i) for i in x_ticks(151)] and ticks[:2] == ["0", "20"]
    assert "node index, in execution order" in svg
    label = re.search(r"<text x='[\d.]+' y='([\d.]+)'[^>]*>first divergence</text>", svg)
    tops = [float(y) - 3 for y in re.findall(r"<circle [^>]*cy='([\d.]+)'", svg)]
    assert label and float(label.group(1)) < min(tops)  # the text sits above every point
    assert svg.count(">first divergence</text>") == 1


def test_x_ticks_are_round_and_few() -> None:
    assert x_ticks(0) == [] and x_ticks(5) == [0, 1, 2, 3, 4]
    assert x_ticks(122) == [0, 20, 40, 60, 80, 100, 120]
    assert len(x_ticks(10_000)) <= 12


def test_numbers_do_not_wrap() -> None:
    assert any("white-space:nowrap" in body for body in _rules("td.num"))
    page = _html()
    for value in ("0.9999", "1.235e-05", "0.0001"):
        assert re.search(rf"<td (data-v='[^']*' )?class='num'>{re.escape(value)}</td>", page), value
    precheck = precheck_section({"apis": [{"name": "0/0/Torch.add.0.forward", "status": "pass",
                                           "cosine": 0.99991, "max_abs": 5.821e-11}]})
    assert "<td class='num'>5.821e-11</td>" in precheck
    config = config_section({"keys": [{"name": "hidden_size", "status": "pass",
                                       "npu_value": 4096, "bench_value": "rmsnorm"}]})
    assert "<td class='val nowrap'>4096</td>" in config and "<td class='val'>rmsnorm</td>" in config
    assert any("white-space:nowrap" in body for body in _rules(".nowrap"))
    # measured values in the logs criteria table are <b> in a cell
    assert any("white-space:nowrap" in body for body in _rules("td b"))


def test_carried_rows_are_compact() -> None:
    rows = re.findall(r"<tr data-status='(\w+)'([^>]*)>(.*?)</tr>", _html())
    by_status = {status: (attrs, cells) for status, attrs, cells in rows}
    attrs, cells = by_status["carried"]
    assert "compact" in attrs and "<div class='clip' title='" in cells
    assert "compact" not in by_status["fail"][0] and "first" in by_status["fail"][0]
    assert "clip" not in by_status["fail"][1]  # the failing row shows its whole reason
    clip = " ".join(_rules(".clip"))
    assert "text-overflow:ellipsis" in clip and "white-space:nowrap" in clip
    assert any("padding-top:0" in body for body in _rules("tr.compact td"))


def test_the_node_table_scrolls_in_its_own_box() -> None:
    page = _html()
    assert "<div class='scroll'><table id='nodes-table'" in page
    assert any("overflow:auto" in body for body in _rules(".scroll"))
    assert any("white-space:nowrap" in body for body in _rules("td.name"))


def test_the_page_has_no_fixed_width_wider_than_800px() -> None:
    widths = re.findall(r"(?<![-\w])(?:min-)?width:\s*(\d+)px", STYLE)
    assert widths and all(int(w) <= 800 for w in widths), widths
    assert any("max-width:100%" in body for body in _rules(".controls input"))


def test_logs_inputs_are_a_list_of_paths_not_a_python_repr(tmp_path: Path) -> None:
    doc = {"verdict": "pass", "inputs": {"npu_log": "/l/npu.log",
                                         "bench_logs": ["/l/a.log", f"/l/{_EVIL}.log"]}}
    page = render(doc, tmp_path, [])
    inputs = page.split("<section id='inputs'>")[1].split("</section>")[0]
    assert "[&#x27;" not in inputs and "['" not in inputs
    assert re.search(r"<ul class='paths'><li><code>/<wbr>l/<wbr>a.<wbr>log</code></li>"
                     r"<li><code>/<wbr>l/<wbr>&lt;script&gt;alert\(1\)&lt;/<wbr>script&gt;.<wbr>log"
                     r"</code></li></ul>", inputs), inputs
    assert "<code>/<wbr>l/<wbr>npu.<wbr>log</code>" in inputs
    assert "<script>alert" not in page


def test_the_loss_difference_plot_marks_the_divergence_step(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from pytest_accuracy.curves import evaluate
    from pytest_accuracy.logs import read_log
    from pytest_accuracy.report import plots

    npu = read_log(LOGS / "npu_spike.log")
    benches = [read_log(LOGS / "megatron_bench_a.log"), read_log(LOGS / "megatron_bench_b.log")]
    marked: list[int] = []
    real = plots.mark_divergence
    monkeypatch.setattr(plots, "mark_divergence",
                        lambda ax, step: marked.append(step) or real(ax, step))
    written = plots.plot_loss_report(npu, benches, tmp_path)
    expected = evaluate(npu, benches).divergence_step
    assert expected == 200 and marked == [200]  # the step the report names, on one plot
    assert (tmp_path / "loss_diff.png") in written
    plots.plot_loss_report(npu, benches, tmp_path, divergence_step=123)
    assert marked == [200, 123]


def test_a_run_that_does_not_diverge_gets_no_mark(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from pytest_accuracy.logs import read_log
    from pytest_accuracy.report import plots

    bench = read_log(LOGS / "megatron_bench_a.log")
    marked: list[int] = []
    monkeypatch.setattr(plots, "mark_divergence", lambda ax, step: marked.append(step))
    plots.plot_loss_report(bench, [bench], tmp_path)
    assert marked == []


def test_the_divergence_line_is_on_the_axes_with_its_legend_label() -> None:
    pytest.importorskip("matplotlib")
    from pytest_accuracy.report import plots

    plt = plots._pyplot()
    fig, ax = plt.subplots()
    try:
        line = plots.mark_divergence(ax, 153)
        assert list(line.get_xdata()) == [153, 153]
        assert line.get_label() == "diverges from step 153"
    finally:
        plt.close(fig)


def test_a_marker_hidden_under_a_later_one_of_the_same_look_is_not_drawn() -> None:
    """20k exact matches: about one circle per 0.1 px; each drawn circle is the last of its
    spot (the one a pointer finds) and counts the others; a marker of another look between
    them is kept in its place."""
    points = [Point(i, 0.0, "pass", f"#{i} n{i}") for i in range(20_000)]
    points[7] = Point(7, 0.0, "fail", "#7 n7")
    svg = error_chart(points, first_x=None, title="t")
    circles = re.findall(r"<circle cx='([\d.]+)' cy='([\d.]+)' r='[\d.]+' fill='([^']+)'"
                         r"[^>]*><title>#(\d+) n\d+(?: \(and (\d+) more nodes? drawn here\))?"
                         r"</title>", svg)
    assert len(circles) == svg.count("<circle") < 12_000
    spots = [(cx, cy, fill) for cx, cy, fill, _, _ in circles]
    assert len(set(spots)) == len(spots)  # no spot drawn twice alike
    shown = [int(i) for _, _, _, i, _ in circles]
    assert shown == sorted(shown) and 7 in shown  # in drawing order; the fail kept
    assert sum(1 + int(more or 0) for *_, more in circles) == len(points)  # every node counted
    # each pass drawn is the last of the run of passes at its spot, and counts that run
    previous = -1
    for _, _, _, index, more in circles:
        i = int(index)
        if i == 7:
            continue
        assert i - previous - (previous < 7 < i) == 1 + int(more or 0)
        previous = i
