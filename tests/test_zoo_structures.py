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
    cause = CAUSES.get((case.name, level))
    if cause is not None:  # the message says what kind of difference it is
        assert cause in str(first.get("likely_cause")), first


# the cause each class names, by case and level (the rest: the node is enough)
CAUSES = {
    ("act_gelu", "L1"): "another operation: npu Functional.gelu where the bench calls "
                        "Functional.silu",
    ("act_gelu", "L0"): "module class differs: npu GELUActivation vs bench SiLUActivation",
    ("wo_transposed", "L0"): "its parameter weight differs from the bench's",
    ("ms_rms_eps", "L1"): "non-tensor argument differs (input.1: 1e-05 vs bench 1e-06)",
    ("ms_softmax_fp16", "L1"): "made by Tensor.to.0.forward, which only the NPU run records",
    ("ms_mask_off_by_one", "L1"): "Mint.triu.0.forward made the differing input, and only the "
                                  "NPU run records it",
}
