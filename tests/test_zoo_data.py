"""The committed bug-zoo subset is consistent: each truth's expected node is in the npu dump."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ZOO = Path(__file__).parent / "data" / "zoo"
TRUTHS = sorted(ZOO.glob("*/truth.json"))


def _step_dump(root: Path, step: int) -> dict:
    dumps = sorted((root / f"step{step}").glob("*/dump.json"))
    assert len(dumps) == 1, f"{root}/step{step}: expected one proc/rank dir, found {dumps}"
    return json.loads(dumps[0].read_text())["data"]


def _levels(truth_file: Path) -> list[tuple[Path, str, dict]]:
    truth = json.loads(truth_file.read_text())
    return [(truth_file.parent, lv, t) for lv, t in truth["levels"].items()
            if (truth_file.parent / "npu" / lv).is_dir()]


CASES = [c for f in TRUTHS for c in _levels(f)]


def test_zoo_subset_present() -> None:
    names = {f.parent.name for f in TRUTHS}
    assert {"fp32_noise", "softmax_fp16", "ln_eps"} <= names
    assert len(CASES) >= 4


@pytest.mark.parametrize("case,level,truth", CASES,
                         ids=[f"{c.name}-{lv}" for c, lv, _ in CASES])
def test_expected_node_in_npu_dump(case: Path, level: str, truth: dict) -> None:
    assert (case / "bench" / level).is_dir()
    if truth["expected"] is None:
        assert truth["step"] is None
        return
    data = _step_dump(case / "npu" / level, truth["step"])
    assert truth["expected"] in data
    bench = _step_dump(case / "bench" / level, truth["step"])
    assert truth["expected"] in bench
    assert truth.get("matches_injection", True)


@pytest.mark.parametrize("case,level,truth", CASES,
                         ids=[f"{c.name}-{lv}" for c, lv, _ in CASES])
def test_same_node_lists(case: Path, level: str, truth: dict) -> None:
    npu, bench = case / "npu" / level, case / "bench" / level
    steps = sorted(p.name for p in npu.glob("step*"))
    assert steps == sorted(p.name for p in bench.glob("step*"))
    for s in steps:
        n = int(s[4:])
        assert list(_step_dump(npu, n)) == list(_step_dump(bench, n))
