"""The report's step x rank map (issue 39): which rank makes the first divergence, which receive
it through a collective and which carry it, per step; readable at 1,024 ranks (checked in
headless Chromium where it is installed: the purple cell is rank 517's column)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.report.html import render
from pytest_accuracy.report.html_ranks import cells, spans

RANKS, MAKER, TP = 1024, 517, 8
NAMES = ("Functional.linear.0.forward", "Tensor.__add__.0.forward",
         "Distributed.all_reduce.0.forward", "Functional.linear.1.forward")


def _node(step: int, rank: int, name: str, status: str) -> dict[str, Any]:
    return {"npu_name": name, "bench_name": name, "step": step, "rank": rank, "status": status,
            "rel_l2_err": 0.0 if status == "pass" else 0.07, "effective_dtype": "float32"}


def _nodes() -> list[dict[str, Any]]:
    """Step 0: rank 517 makes the error at its add; its TP group (512-519) receives it through
    the all-reduce; later nodes there carry it. Step 1: every rank carries it (DP reduce)."""
    out = []
    group = range(MAKER // TP * TP, MAKER // TP * TP + TP)
    for rank in range(RANKS):
        for name in NAMES:
            status = "pass"
            if rank == MAKER and name != NAMES[0]:
                status = "fail" if name == NAMES[1] else "carried"
            elif rank in group and name in NAMES[2:]:
                status = "fail" if name == NAMES[2] else "carried"
            out.append(_node(0, rank, name, status))
    out += [_node(1, r, n, "pass" if n == NAMES[0] else "carried")
            for r in range(RANKS) for n in NAMES]
    return out


FIRST = {"npu_name": NAMES[1], "bench_name": NAMES[1], "step": 0, "rank": MAKER,
         "tensor": "output.0", "reason": "relative error 0.07", "likely_cause": None}


def _page(tmp_path: Path) -> str:
    doc = {"verdict": "fail", "inputs": {}, "compare": {"nodes": _nodes(),
                                                         "first_divergence": FIRST}}
    return render(doc, tmp_path, [])


def test_cells_name_the_maker_the_receivers_and_the_carriers() -> None:
    grid = {(c.step, c.rank): c for c in cells(_nodes(), FIRST)}
    assert len(grid) == 2 * RANKS
    assert (grid[0, MAKER].status, grid[0, MAKER].node) == ("first", NAMES[1])
    assert {grid[0, r].status for r in (512, 516, 518, 519)} == {"received"}
    assert grid[0, 512].node == NAMES[2]
    assert {grid[0, r].status for r in (0, 511, 520, 1023)} == {"pass"}
    assert {c.status for (s, _), c in grid.items() if s == 1} == {"carried"}
    assert spans([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"


def test_the_map_at_1024_ranks_says_it_in_words_and_stays_small(tmp_path: Path) -> None:
    page = _page(tmp_path)
    section = re.search(r"<section id='dumps'>.*?</section>", page, re.S)
    assert section
    text = section.group()
    assert ("step 0 (<code>Tensor.__add__.0.forward</code> on rank 517): makes the first "
            "divergence: 517; receives it through a collective: 512-516, 518-519; passes: "
            "0-511, 520-1023") in text
    assert "step 1: carries an earlier error: 0-1023" in text
    svg = re.search(r"<svg class='chart rankmap'.*?</svg>", text, re.S)
    assert svg and "rank 517, step 0: first divergence" in svg.group()
    # runs of equal cells are one rectangle each: 5 runs on step 0, 1 on step 1, the maker
    # drawn again at least 2 px wide
    assert svg.group().count("<rect ") == 7
    assert "step 0, ranks 520-1023: passes" in svg.group()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which(
        "google-chrome")


def test_the_map_renders_in_headless_chromium_and_reads_right(tmp_path: Path) -> None:
    """Read as a person reads it: on the picture Chromium draws, the step-0 row is green, then
    orange around one purple cell at rank 517's place, then green; step 1 is pink."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium here (apt install chromium): the map is checked as HTML above")
    pil = pytest.importorskip("PIL.Image")
    np = pytest.importorskip("numpy")
    svg = re.search(r"<svg class='chart rankmap'.*?</svg>", _page(tmp_path), re.S)
    assert svg
    page = tmp_path / "map.html"
    page.write_text("<html><body style='margin:0;background:#fff'>"
                    f"<div style='width:1100px'>{svg.group()}</div></body></html>")
    shot = tmp_path / "map.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", "--window-size=1100,400", f"--screenshot={shot}",
                    page.as_uri()], check=True, capture_output=True, timeout=120)
    pixels = np.asarray(pil.open(shot).convert("RGB")).astype(int)

    def where(colour: str) -> tuple[Any, Any]:
        rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
        return np.nonzero((np.abs(pixels - rgb) <= 12).all(axis=2))

    ys, xs = where("#6a1b9a")
    cell = ys > 41  # the grid starts at y=40: above it, the pointer and its label
    ys, xs = ys[cell], xs[cell]
    assert len(xs), "no purple cell drawn"
    left, right = 64, 1100 - 12
    column = (right - left) / RANKS
    rank_at = (np.median(xs) - left) / column
    assert abs(rank_at - (MAKER + 0.5)) < 2, rank_at
    row = int(np.median(ys))  # the step-0 row
    line = pixels[row]
    green = (np.abs(line - [0x2e, 0x7d, 0x32]) <= 12).all(axis=1)
    orange = (np.abs(line - [0xef, 0x6c, 0x00]) <= 12).all(axis=1)
    assert green[left + 5] and green[right - 5] and green[int(left + column * 400)]
    assert orange[int(left + column * 513.5)] and orange[int(left + column * 519.5)]
    assert not orange[int(left + column * 400)] and not green[int(left + column * 513.5)]


def test_the_real_tp_dp_dumps_map_rank_2_as_the_maker(pytester: pytest.Pytester) -> None:
    """tests/data/multirank (gloo, TP=2 x DP=2): rank 2's eps makes the error, rank 3 gets it
    through the TP all-reduce, step 1 carries it everywhere after the DP gradient average."""
    data = Path(__file__).parent / "data" / "multirank"
    report = pytester.path / "report"
    pytester.runpytest(f"--acc-npu={data / 'bug_tp2dp2'}", f"--acc-bench={data / 'golden_tp2dp2'}",
                       f"--acc-report={report}", "-p", "no:cacheprovider")
    page = (report / "index.html").read_text()
    assert ("step 0 (<code>Tensor.__add__.0.forward</code> on rank 2): makes the first "
            "divergence: 2; receives it through a collective: 3; passes: 0-1") in page
    assert "step 1: carries an earlier error: 0-3" in page
    assert "rank 2, step 0: first divergence" in page
