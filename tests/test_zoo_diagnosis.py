"""The committed bug-zoo subset diagnosed as truth.json says (truth by construction: the
bug alone, without kernel noise, against the golden run), with the rules' messages pinned."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_accuracy.compare.metrics import stats_metrics
from pytest_accuracy.dumps.model import Stats

ZOO = Path(__file__).parent / "data" / "zoo"
CASES = [
    (case.parent, level, entry)
    for case in sorted(ZOO.glob("*/truth.json"))
    for level, entry in json.loads(case.read_text())["levels"].items()
    if (case.parent / "npu" / level).is_dir()
]


def run(pytester: pytest.Pytester, case: Path, level: str, *args: str) -> pytest.RunResult:
    flags = json.loads((case / "truth.json").read_text()).get("flags") or []
    return pytester.runpytest(f"--acc-npu={case / 'npu' / level}",
                              f"--acc-bench={case / 'bench' / level}", "-p", "no:cacheprovider",
                              *flags, *args)


@pytest.mark.parametrize(("case", "level", "truth"), CASES,
                         ids=[f"{c.name}-{lv}" for c, lv, _ in CASES])
def test_first_divergence_is_the_injected_bug(pytester: pytest.Pytester, case: Path, level: str,
                                              truth: dict) -> None:
    out = pytester.path / "acc.json"
    result = run(pytester, case, level, f"--acc-json={out}")
    compare = json.loads(out.read_text())["compare"]
    if truth["expected"] is None:  # a benign pair: kernel noise only
        assert result.ret == 0 and compare["first_divergence"] is None
        return
    assert result.ret == 1
    first = compare["first_divergence"]
    assert (first["npu_name"], first["step"]) == (truth["expected"], truth["step"])
    failed = [n["npu_name"] for n in compare["nodes"] if n["status"] == "fail"]
    assert failed[0] == truth["expected"] and len(failed) <= 3


def test_a_parameter_stored_in_another_dtype_is_a_precision_finding(
        pytester: pytest.Pytester) -> None:
    # the guide's case: the embedding table kept in another dtype than the bench's; its input
    # arrives in another dtype, but no recorded node produced it
    result = run(pytester, ZOO / "embedding_fp32_in_bf16", "mix")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "First divergence: Functional.embedding.0.forward (step 0, rank 0), output.0: precision "
        "differs: npu bfloat16 vs bench float32 (output.0); input.1 is npu bfloat16 vs bench "
        "float32, stored so (no recorded node produced it). At File *"])
    result.stdout.no_fnmatch_line("*Likely cause*")  # the cause is already the reason
    assert result.parseoutcomes()["failed"] == 1


def test_at_l0_a_module_whose_own_code_made_the_error_is_named(
        pytester: pytest.Pytester) -> None:
    # a mask one diagonal off inside Attention: L0 records only modules, so the first record
    # that differs is the c_proj Linear after it, whose inputs Attention's own code computed
    out = pytester.path / "acc.json"
    result = run(pytester, ZOO / "mask_off_by_one", "L0", f"--acc-json={out}")
    result.stdout.fnmatch_lines([
        "First divergence: Module.blocks.0.attn.Attention.forward.0 (step 0, rank 0), output.0: "
        "relative error 0.433 (up to 0.0001 allowed); cosine 0.902360 (at least 0.99999 "
        "required); made by its own code between its recorded submodules "
        "(Module.blocks.0.attn.c_proj.Linear.forward.0 only carries it). At File *"])
    nodes = {n["npu_name"]: n for n in json.loads(out.read_text())["compare"]["nodes"]
             if n["step"] == 0}
    linear = nodes["Module.blocks.0.attn.c_proj.Linear.forward.0"]
    assert linear["status"] == "carried"
    assert linear["carried_from"] == "Module.blocks.0.attn.Attention.forward.0"
    assert linear["reason"].startswith(
        "its inputs already differ, computed by Module.blocks.0.attn.Attention.forward.0's own "
        "code between its recorded submodules and it adds no error of its own")


def test_statistics_with_a_masked_infinity_still_compare_the_finite_ones(
        pytester: pytest.Pytester) -> None:
    # both sides fill the mask with -inf (Min, Mean, Norm infinite alike); Max differs by 26%
    result = run(pytester, ZOO / "mask_off_by_one", "mix")
    result.stdout.fnmatch_lines([
        "First divergence: Tensor.masked_fill.0.forward (step 0, rank 0), output.0: "
        "Max/Min/Mean relative error 0.256 (up to 0.0001 allowed). At File *"])
    result.stdout.no_fnmatch_line("First NaN/Inf on the NPU*")  # -inf on both sides: by design


def test_stats_metrics_with_equal_infinities() -> None:
    inf = math.inf
    m = stats_metrics(Stats(max=1.0709369, min=-inf, mean=-inf, norm=inf),
                      Stats(max=0.8529338, min=-inf, mean=-inf, norm=inf))
    assert m.min_diff == m.mean_diff == m.l2norm_diff == 0.0
    assert m.range_rel_err == pytest.approx((1.0709369 - 0.8529338) / 0.8529338)
    # an infinity on one side only is a difference, never a NaN that compares as a pass
    one_sided = stats_metrics(Stats(max=1.0, min=-inf, mean=0.0, norm=2.0),
                              Stats(max=1.0, min=-1.0, mean=0.0, norm=2.0))
    assert one_sided.min_diff == inf and one_sided.range_rel_err == inf


def test_a_norm_module_with_another_eps_inside_a_bf16_run(pytester: pytest.Pytester) -> None:
    # the "bug ~2x the bf16 noise": LayerNorm eps 1e-4 vs 1e-5 under bf16 autocast,
    # dumped at L0 (modules only: msprobe records no eps). The norm runs in fp32 inside the
    # bf16 run, so its local error is held to fp32's band, and the eps that reproduces the
    # bench is fitted; step 1's call makes the same error again and is carried as one cause
    result = run(pytester, ZOO / "ln_eps_bf16", "L0", "-rx")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "First divergence: Module.blocks.0.ln_2.LayerNorm.forward.0 (step 0, rank 0), output.0: "
        "its own computation is off: local error 3.27e-05 vs bench 4.62e-08 (output.0; eps "
        "1e-05 reproduces the bench's output, the NPU's fits 0.0001), replaying each side's "
        "own inputs in float64*"])
    result.stdout.fnmatch_lines([
        "XFAIL accuracy::compare::1/0/Module.blocks.0.ln_2.LayerNorm.forward.0 - carried from "
        "Module.blocks.0.ln_2.LayerNorm.forward.0 (step 0, rank 0): the same call made an error "
        "of its own in an earlier step and makes one again*"])
    assert result.parseoutcomes()["failed"] == 1
