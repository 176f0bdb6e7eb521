"""The HTML report as a suite author reads it (issue 38): precheck failures first with a filter,
a first-divergence card that does not contradict its cause, tables readable at 800 px, and
waived nodes listed with their reasons, never "no divergence"."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_accuracy.report.html import render
from pytest_accuracy.report.html_compare import compare_section_parts, headline
from pytest_accuracy.report.html_first import what_it_does
from pytest_accuracy.report.html_logs import precheck_section
from pytest_accuracy.report.html_page import SCRIPT, STYLE, joined
from tests.helpers import dump

_EVIL = "<script>alert(1)</script>"


def _page(pytester: pytest.Pytester, *args: str) -> tuple[str, pytest.RunResult]:
    out = pytester.path / "report"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--acc-report={out}", *args)
    assert (out / "index.html").exists(), result.stdout.str()[-3000:]
    return (out / "index.html").read_text(), result


def _section(page: str, anchor: str) -> str:
    found = re.search(rf"<section id='{anchor}'>.*?</section>", page, re.S)
    assert found, anchor
    return found.group()


def _statuses(table: str) -> list[str]:
    return re.findall(r"<tr data-status='([^']*)'", table)


# ---- 1. the precheck table: failures first, with the node table's filter -------------------


def test_precheck_table_lists_failures_first_and_can_be_filtered(
        pytester: pytest.Pytester, copy_dump: Any) -> None:
    npu = copy_dump("ms_fp32", "L1_tensor")
    target = next(npu.rglob("Mint.softmax.0.forward.output.0.npy"))
    np.save(target, np.load(target) * np.float32(1.01))  # as tests/test_precheck.py corrupts
    page, result = _page(pytester, f"--acc-npu={npu}", "--acc-precheck")
    assert result.ret == 1
    table = _section(page, "precheck")
    statuses = _statuses(table)
    assert len(statuses) == 342 and statuses[0] == "fail" and statuses.count("fail") == 1
    assert re.search(r"<tr data-status='fail'><td class='name'><code>0/0/Mint\.softmax\.0"
                     r"\.forward</code>", table)
    # the compare table's filter, on this table: the same script, called with its id
    assert "<input id='precheck-table-q' placeholder='filter: API name, reason...' " \
           "oninput=\"accFilter('precheck-table')\">" in table
    assert "<option value='fail'>fail</option><option value='pass'>pass</option>" in table
    assert "showing <b id='precheck-table-n'>342</b> of 342 rows" in table
    assert "<table id='precheck-table' class='sortable'>" in table
    assert page.count("function accFilter(") == 1 == SCRIPT.count("function accFilter(")


def test_precheck_order_is_fail_then_pass_then_skip_and_stable_within_each() -> None:
    names = [("a", "pass"), ("b", "skip"), ("c", "fail"), ("d", "pass"), ("e", "weird"),
             ("f", "fail"), ("g", "skip"), (_EVIL, "fail")]
    html = precheck_section({"apis": [{"name": n, "status": s, "reason": _EVIL}
                                      for n, s in names]})
    shown = re.findall(r"<tr data-status='([^']*)'><td class='name'><code>([^<]*)</code>", html)
    evil = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert shown == [("fail", "c"), ("fail", "f"), ("fail", evil), ("weird", "e"),
                     ("pass", "a"), ("pass", "d"), ("skip", "b"), ("skip", "g")]
    assert "<script>" not in html
    options = re.findall(r"<option value='(\w+)'>", html)
    assert options == ["fail", "weird", "pass", "skip"]


# ---- 2. the "Where it diverges" card agrees with its likely cause --------------------------


def test_a_non_tensor_argument_is_said_so_in_the_what_line(pytester: pytest.Pytester) -> None:
    page, _ = _page(pytester, f"--acc-npu={dump('pt_bug', 'L1_tensor')}",
                    f"--acc-bench={dump('pt_fp32', 'L1_tensor')}")
    card = _section(page, "first")
    assert ("<dt>what</dt><dd>its tensor inputs match the bench; a non-tensor argument "
            "differs</dd>") in card
    assert "<dt>likely cause</dt><dd><b>non-tensor argument differs (input.1: 1e-05" in card
    assert "its inputs match the bench" not in card  # the contradiction the issue showed


def _first(**extra: Any) -> dict[str, Any]:
    return {"npu_name": "Torch.op.1.forward", "step": 0, "rank": 0, "kind": "appears", **extra}


def _rows(*results: tuple[str, str]) -> list[dict[str, str]]:
    return [{"NPU Name": f"Torch.op.1.forward.{path}", "Result": r} for path, r in results]


def test_the_what_line_claims_only_what_the_node_s_record_shows() -> None:
    node = {"npu_name": "Torch.op.1.forward", "scalar_diffs": ["input.1: 2 vs bench 3"]}
    argument = _first(finding="argument")
    # no rows (a merged document): nothing said of the inputs
    assert what_it_does(argument, node) == "a non-tensor argument differs"
    matched = {**node, "rows": _rows(("input.0", "pass"), ("output.0", "fail"))}
    assert what_it_does(argument, matched) == ("its tensor inputs match the bench; a non-tensor "
                                               "argument differs")
    differ = {**node, "rows": _rows(("input.0", "fail"), ("output.0", "fail"))}
    assert what_it_does(argument, differ).startswith("its tensor inputs differ from the bench's;")
    # an argument finding without a differing scalar of its own (a region's mask or scale)
    assert "non-tensor" not in what_it_does(argument, {"npu_name": "Torch.op.1.forward"})
    precision = what_it_does(_first(finding="precision"), matched)
    assert precision == ("its tensor inputs match the bench; it computes in another precision "
                         "than the bench")
    assert what_it_does(_first(), None) == ("its inputs match the bench and its outputs do not: "
                                            "the error appears here")


# ---- 3. readable at 800 px: every table scrolls sideways in a box of its own --------------


class _Boxes(HTMLParser):
    """For each table, the classes of the elements it sits in."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, str]] = []
        self.tables: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "table":
            self.tables.append((values.get("id") or values.get("class") or "",
                                [c for _, cls in self.open for c in cls.split()]))
        if tag in ("div", "section", "main", "body"):
            self.open.append((tag, values.get("class") or ""))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("div", "section", "main", "body"):
            while self.open and self.open.pop()[0] != tag:
                pass


def _scrolling_classes() -> set[str]:
    """The classes whose CSS rule lets their box scroll sideways."""
    out = set()
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", STYLE):
        if re.search(r"overflow(-x)?:\s*auto", body):
            out |= set(re.findall(r"^\s*\.([\w-]+)\s*$", selectors.replace("\n", ""), re.M))
    return out


def _unboxed(page: str) -> list[str]:
    parser = _Boxes()
    parser.feed(page)
    assert parser.tables
    scrolling = _scrolling_classes()
    assert {"scroll", "wide"} <= scrolling
    return [name for name, classes in parser.tables if not scrolling & set(classes)]


def _every_section_doc(tmp_path: Path) -> dict[str, Any]:
    long = "Module.layers.1.n1.RMSNorm.forward.0.some.very.long.module.path.name"
    nodes = [{"npu_name": f"{long}.{i}", "bench_name": "x", "step": i % 2, "rank": 0,
              "status": "fail" if i == 1 else "pass", "rel_l2_err": 0.1, "reason": _EVIL}
             for i in range(4)]
    return {"verdict": "fail", "compare": {"nodes": nodes, "first_divergence": None},
            "config": {"keys": [{"name": _EVIL, "status": "fail", "summary": "s"}]},
            "loss": {"checks": {"mean_loss": {"status": "fail", "message": "m"}}},
            "precheck": {"apis": [{"name": long, "status": "fail"}]},
            "suites": {"tests": [{"name": "t", "status": "fail", "reason": _EVIL}]},
            "merge": {"parts": [{"file": "p.json", "verdict": "fail"}]},
            "inputs": {"npu": str(tmp_path / long)}}


def test_every_table_scrolls_sideways_in_its_own_box(tmp_path: Path) -> None:
    page = render(_every_section_doc(tmp_path), tmp_path, [])
    assert _unboxed(page) == []
    assert len(re.findall(r"<table", page)) >= 8
    # a long node name in the per-step table may break at its dots instead
    dumps = page.split("<section id='dumps'>")[1].split("</section>")[0]
    assert "<code>Module.<wbr>layers.1.<wbr>n1.<wbr>" in dumps
    assert "<script>alert" not in page


def test_the_l0_report_has_no_table_wider_than_its_box(pytester: pytest.Pytester) -> None:
    """At 800 px the per-step table's last column ran off the page (the first failing node,
    an L0 module name); every table now sits in a box that scrolls sideways."""
    page, _ = _page(pytester, f"--acc-npu={dump('pt_bug', 'L0_tensor')}",
                    f"--acc-bench={dump('pt_fp32', 'L0_tensor')}")
    assert _unboxed(page) == []
    assert any("overflow-wrap:anywhere" in body for selectors, body in
               re.findall(r"([^{}]+)\{([^{}]*)\}", STYLE) if ".card dd" in selectors)


# ---- 4. waived nodes: listed with their reasons, never "no divergence" ---------------------


def test_waived_nodes_are_listed_with_their_reason_and_the_header_says_so(
        pytester: pytest.Pytester) -> None:
    waivers = pytester.path / "waivers.yaml"
    waivers.write_text("- pattern: 'Module.layers.1.n1.*'\n"
                       "  reason: eps change under review <b>JIRA-1</b>\n"
                       "  known_divergence: true\n")
    out = pytester.path / "acc.json"
    page, result = _page(pytester, f"--acc-npu={dump('pt_bug', 'L0_tensor')}",
                         f"--acc-bench={dump('pt_fp32', 'L0_tensor')}",
                         f"--acc-waivers={waivers}", f"--acc-json={out}",
                         "-k", "not local_norm and not gradient_steps")
    assert result.ret == 0
    nodes = json.loads(out.read_text())["compare"]["nodes"]
    own = [n for n in nodes if n["status"] == "waived" and n["waiver"]]
    waived = sum(n["status"] == "waived" for n in nodes)
    passed = sum(n["status"] == "pass" for n in nodes)
    assert own and waived > len(own)
    header = page.split("</header>")[0]
    assert "no divergence:" not in page.lower()
    assert (f"no divergence beyond the {waived} waived nodes (listed below): the other "
            f"{passed} compared nodes meet the criteria") in header
    assert f"No node misses the criteria beyond the {waived} waived nodes listed below." in page
    section = _section(page, "waived")
    listed = re.findall(r"<tr data-status='waived'><td class='name'><code>(.*?)</code></td>"
                        r"<td class='num'>(\d+)</td><td class='num'>(\d+)</td>"
                        r"<td class='text'>(.*?)</td></tr>", section)
    assert [(re.sub("<wbr>", "", name), int(s), int(r)) for name, s, r, _ in listed] == [
        (n["npu_name"], n["step"], n["rank"]) for n in own]
    assert {reason for *_, reason in listed} == {
        "eps change under review &lt;b&gt;JIRA-1&lt;/b&gt;"}
    assert f"{waived - len(own)} more carry their divergences" in section
    assert "<b>JIRA-1</b>" not in page


def test_the_headline_never_says_no_divergence_beside_waived_or_carried_nodes() -> None:
    def node(status: str) -> dict[str, Any]:
        return {"npu_name": "n", "step": 0, "rank": 0, "status": status}

    assert headline({"nodes": [node("pass")] * 3}) == (
        "no divergence: 3 compared nodes meet the criteria")
    waived = headline({"nodes": [node("pass"), node("waived")]})
    assert waived == ("no divergence beyond the 1 waived nodes (listed below): the other 1 "
                      "compared nodes meet the criteria")
    carried = headline({"nodes": [node("pass"), node("carried")]})  # its cause deselected
    assert "no divergence" not in carried and "was not among the items run" in carried
    card = "".join(joined(p) for p in compare_section_parts(
        {"nodes": [node("pass"), node("carried")], "first_divergence": None}, {}))
    assert "No node misses the criteria" not in card
