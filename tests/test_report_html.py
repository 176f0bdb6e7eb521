"""The HTML report's structure: what a person must find on the page, self-contained."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.helpers import ROOT, dump, rerun

LOGS = ROOT / "example_data" / "logs"
BENCH_LOGS = [f"--acc-bench-log={LOGS / 'megatron_bench_a.log'}",
              f"--acc-bench-log={LOGS / 'megatron_bench_b.log'}"]


class _Tags(HTMLParser):
    """Counts tags and collects every external reference (there must be none)."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.external: list[str] = []
        self.rows: dict[str, int] = {}
        self._table: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        values = dict(attrs)
        for key in ("src", "href"):
            ref = values.get(key) or ""
            if re.match(r"^(https?:)?//", ref) or tag == "link":
                self.external.append(ref)
        if tag == "table":
            self._table = values.get("id")
        if tag == "tr" and self._table and "data-status" in values:
            self.rows[self._table] = self.rows.get(self._table, 0) + 1


def report(pytester: pytest.Pytester, *args: str, isolated: bool = False
           ) -> tuple[str, _Tags]:
    out = pytester.path / "report"
    run = pytester.runpytest_subprocess if isolated else pytester.runpytest
    result = run("-p", "no:cacheprovider", f"--acc-report={out}", *args)
    assert (out / "index.html").exists(), result.stdout.str()[-3000:]
    text = (out / "index.html").read_text()
    tags = _Tags()
    tags.feed(text)
    assert tags.external == []  # works from a CI artifact, offline
    return text, tags


def compare_args(config: str) -> list[str]:
    return [f"--acc-npu={dump('pt_bug', config)}", f"--acc-bench={dump('pt_fp32', config)}"]


def test_l1_compare_report_answers_where_how_bad_why(pytester: pytest.Pytester) -> None:
    text, tags = report(pytester, *compare_args("L1_tensor"))
    assert "<title>pytest-accuracy: FAIL</title>" in text
    assert ("Compare: 1 of 244 NPU nodes fail; 197 carry an earlier error; first divergence "
            "<b>Tensor.__add__.5.forward</b> (step 0, rank 0); 244 of 244 matched") in text
    assert ("<dt>likely cause</dt><dd><b>non-tensor argument differs (input.1: 1e-05 vs bench "
            "1e-06)</b></dd>") in text
    assert "<dt>stack</dt><dd><code>File " in text and "tinyllama_pt.py, line 34" in text
    assert tags.tags["svg"] == 2 and text.count(">first divergence</text>") == 1  # two steps
    assert tags.rows["nodes-table"] == 244  # every node, never cut
    assert "showing <b id='nodes-table-n'>244</b> of 244 rows" in text
    assert "No module structure in this dump" in text
    assert "<a href='compare_result.csv'>compare_result.csv</a>" in text


def test_l0_compare_report_has_the_module_tree(pytester: pytest.Pytester) -> None:
    text, tags = report(pytester, *compare_args("L0_tensor"))
    assert tags.tags["details"] >= 10
    assert ("Module.layers.1.n1.RMSNorm.forward.0 <span class='s-fail'>fail</span> error 0.01246 "
            "<b>← first divergence</b>") in text
    assert "<summary><span class='sw' style='background:#b71c1c'></span>Module.layers.1.Block" \
           ".forward.0" in text  # worst own error beyond 100x its tolerance
    assert tags.rows["nodes-table"] == 126


def test_logs_report_leads_with_the_criteria_table(pytester: pytest.Pytester) -> None:
    text, tags = report(pytester, f"--acc-npu-log={LOGS / 'npu_spike.log'}", *BENCH_LOGS)
    assert text.index("Migration standard (training logs)") < text.index("<img")
    assert "The loss curves diverge from <b>step 200</b>." in text
    assert re.search(r"mean loss <code>mean_loss</code></td><td>mean_abs <b>0.1008</b>.*?"
                     r"<td>mean_abs <b>0.01</b><br>mean_rel <b>0.01</b></td><td><span "
                     r"class='s-fail'>fail</span>", text)
    assert tags.tags["img"] == 3 and text.count("src='data:image/png;base64,") == 3
    assert "compare_result.csv" not in text  # no link to a file that is not there


def test_logs_report_without_matplotlib_says_how_to_get_plots(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("import sys\nsys.modules['matplotlib'] = None\n")
    text, tags = report(pytester, f"--acc-npu-log={LOGS / 'npu_spike.log'}", *BENCH_LOGS)
    assert "img" not in tags.tags
    assert ("No plots: matplotlib is not installed: pip install &#x27;pytest-accuracy[plot]&#x27;. "
            "Install the plot extra and run again: <code>pip install "
            "&#x27;pytest-accuracy[plot]&#x27;</code>") in text


def test_local_norm_bars_name_the_parameters_that_differ(pytester: pytest.Pytester) -> None:
    sample = ROOT / "tests/data/log_samples/mindformers_trainingstatemonitor_local_norm_doc.txt"
    changed = pytester.path / "npu.log"
    changed.write_text(sample.read_text().replace("model.layers.1.attention_norm.weight: 0.1092",
                                                  "model.layers.1.attention_norm.weight: 0.2184"))
    text, _ = report(pytester, f"--acc-npu-log={changed}", f"--acc-bench-log={sample}",
                     isolated=True)
    chart = text.split("the parameters that differ most")[1].split("</svg>")[0]
    assert "relative difference of the local norm at step 1, worst first" in chart
    first_bar = re.search(r"<text[^>]*>([^<]+)</text><rect", chart)
    assert first_bar and first_bar.group(1) == "model.layers.1.attention_norm.weight"
    assert "allowed 0.1" in chart


def test_report_page_is_written_for_a_passing_run(pytester: pytest.Pytester) -> None:
    text, _ = report(pytester, f"--acc-npu={dump('pt_fp32', 'L1_tensor')}",
                     f"--acc-bench={rerun(dump('pt_fp32', 'L1_tensor'), pytester.path)}")
    assert "<header class='pass'>" in text
    assert "no divergence: 244 compared nodes meet the criteria" in text


def test_a_lone_surrogate_in_a_node_name_is_written_as_text(pytester: pytest.Pytester) -> None:
    """JSON can hold "\\ud800" in a node name; UTF-8 cannot: the page is still written (it
    raised UnicodeEncodeError at session finish), the surrogate as the text \\ud800 and the
    markup around it escaped."""
    import shutil

    for side, run in (("npu", "pt_bug"), ("bench", "pt_fp32")):
        shutil.copytree(dump(run, "mix_statistics"), pytester.path / side)
        for path in (pytester.path / side).rglob("dump.json"):
            text = path.read_text().replace('"Tensor.__add__.5.forward"',
                                            '"Tensor.__add__\\ud800<b>x</b>.5.forward"', 1)
            path.write_text(text)
    text, _ = report(pytester, f"--acc-npu={pytester.path / 'npu'}",
                     f"--acc-bench={pytester.path / 'bench'}", isolated=True)
    assert "first divergence <b>Tensor.__add__\\ud800&lt;b&gt;x&lt;/b&gt;.5.forward</b>" in text
    assert "<b>x</b>" not in text


def test_the_page_written_piece_by_piece_is_render_s_page(tmp_path: Path) -> None:
    """write_html writes the page's lines and the node table's rows one by one, never joined
    (the joined page was the report run's peak memory): the bytes are render()'s page, lone
    surrogate included, encoded whole."""
    from pytest_accuracy.report.document import write_html
    from pytest_accuracy.report.html import render

    nodes = [{"npu_name": f"Tensor.add.{i}.forward" + ("\ud800<b>" if i == 3 else ""),
              "bench_name": f"Tensor.add.{i}.forward", "step": 0, "rank": 0, "order": i,
              "status": "fail" if i == 3 else "pass", "reason": "", "tensor": "output.0",
              "rows": []} for i in range(50)]
    doc = {"verdict": "fail", "compare": {"nodes": nodes, "first_divergence": None}}
    page = write_html(doc, tmp_path, []).read_bytes()
    assert page == render(doc, tmp_path, []).encode("utf-8", "backslashreplace")
    assert page.count(b"<tr data-status=") == 50 and b"\\ud800&lt;b&gt;" in page
