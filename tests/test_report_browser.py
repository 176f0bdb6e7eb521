"""The HTML reports, with script payloads in every field an input can reach, opened in a real
headless Chromium: nothing runs (Debian's chromium; skipped where it is not installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.report.document import write_html
from pytest_accuracy.report.merge import merge_files
from tests.helpers import dump, rerun

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt install chromium)")]

# each payload changes the page if any of it runs: the title, or an element of its own
_PAYLOADS = ("<script>document.title='PWNED'</script>",
             "<img src=x onerror=\"document.title='PWNED'\">",
             "</td></tr></table><svg onload=\"document.title='PWNED'\">",
             "javascript:document.title='PWNED'")


def _dom(page: Path) -> str:
    """The page's DOM after Chromium loaded it and ran whatever it would run."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--virtual-time-budget=3000",
             "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "<html" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def _nothing_ran(dom: str, shown: str = "&lt;script&gt;document.title='PWNED'&lt;/script&gt;"
                 ) -> None:
    assert "<title>PWNED" not in dom
    assert "<img src=\"x\"" not in dom and "<svg onload" not in dom
    assert shown in dom  # the payload is on the page, as text


def test_merged_report_with_payloads_in_every_part_field(tmp_path: Path) -> None:
    evil = "".join(_PAYLOADS)
    node: dict[str, Any] = {
        "npu_name": evil, "bench_name": evil, "step": 0, "rank": 0, "status": "fail",
        "reason": evil, "rel_l2_err": evil, "tolerance": {"rel_err": evil},
        "effective_dtype": evil, "parent": evil, "carried_from": evil, "finding": evil,
        "first_divergence": True}
    first = {"npu_name": evil, "bench_name": evil, "step": 0, "rank": 0, "tensor": evil,
             "reason": evil, "kind": "between", "previous": evil, "likely_cause": evil,
             "stack": evil, "finding": evil, "twin_step": None, "through": evil, "index": 0}
    loss = {"steps_compared": evil, "steps_skipped": evil, "divergence_step": evil,
            "checks": {evil: {"status": evil, "measured": {evil: evil}, "message": evil,
                              "worst_steps": [evil], "bars": [{"param": evil, "rel_diff": evil}]}}}
    part = tmp_path / "part.json"
    part.write_text(json.dumps({
        "version": 1, "verdict": "fail", "inputs": {"npu": evil, "bench": evil},
        "criteria": {evil: evil}, "loss": loss,
        "compare": {"first_divergence": first, "coverage": None, "nodes": [node]}}))
    page = write_html(merge_files([part]), tmp_path, [])
    _nothing_ran(_dom(page))


def test_compare_report_with_payloads_in_node_names(pytester: pytest.Pytester) -> None:
    evil = "Torch." + "".join(_PAYLOADS).replace(".", "_") + ".0.forward"
    roots = []
    for side in ("npu", "bench"):
        root = pytester.path / side
        # the bench a rerun: the same values in its own files (one run twice is refused)
        source = dump("pt_fp32", "mix_statistics")
        shutil.copytree(source if side == "npu" else rerun(source, pytester.path), root)
        for path in root.glob("step*/*/*.json"):
            path.write_text(path.read_text().replace("Torch.rsqrt.0.forward",
                                                     evil.replace('"', '\\"')))
        roots.append(root)
    report = pytester.path / "report"
    result = pytester.runpytest(f"--acc-npu={roots[0]}", f"--acc-bench={roots[1]}",
                                f"--acc-report={report}", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    page = report / "index.html"
    assert "<script>document.title" not in page.read_text()
    _nothing_ran(_dom(page), "&lt;script&gt;document_title='PWNED'&lt;/script&gt;")
