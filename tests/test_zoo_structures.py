"""Real msprobe dumps of code the project did not write (transformers models, MindSpore twins),
diagnosed as their truth.json says: runs whose calls differ (sdpa vs eager, casts and views
only MindSpore records, a residual left out, another activation) still name the bug."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"
CASES = [
    (case.parent, level, entry)
    for zoo in ("zoo_tp", "zoo_ms")
    for case in sorted((DATA / zoo).glob("*/truth.json"))
    for level, entry in json.loads(case.read_text())["levels"].items()
    if (case.parent / "npu" / level).is_dir()
]


def _run(pytester: pytest.Pytester, case: Path, level: str) -> tuple[int, dict[str, Any], str]:
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={case / 'npu' / level}",
                                f"--acc-bench={case / 'bench' / level}", f"--acc-json={out}",
                                "-p", "no:cacheprovider", "-rf")
    return int(result.ret), json.loads(out.read_text()), result.stdout.str()


@pytest.mark.parametrize(("case", "level", "truth"), CASES,
                         ids=[f"{c.parent.name}-{c.name}-{lv}" for c, lv, _ in CASES])
def test_the_injected_bug_is_named(pytester: pytest.Pytester, case: Path, level: str,
                                   truth: dict[str, Any]) -> None:
    ret, doc, out = _run(pytester, case, level)
    compare = doc["compare"]
    expected = truth.get("expected")
    if json.loads((case / "truth.json").read_text())["benign"]:
        # another call structure or kernel noise only: never a failure
        assert ret == 0 and compare["first_divergence"] is None, out
        return
    assert truth["detectable"] and expected
    assert ret == 1
    first = compare["first_divergence"]
    # a site only the NPU run records (a cast, a mask op msprobe-PyTorch filters) is named as
    # what made the difference at the first node both runs record
    assert expected in (first["npu_name"], first.get("through")), out
    assert first["step"] == truth["step"]
    failed = [n["npu_name"] for n in compare["nodes"] if n["status"] == "fail"]
    assert failed and failed[0] == first["npu_name"] and len(failed) <= 2, failed
