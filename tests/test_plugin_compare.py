"""The built-in compare suite end to end, through pytester, on the bundled real dumps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import dump, rerun


def run(pytester: pytest.Pytester, npu: Path, bench: Path, *args: str) -> pytest.RunResult:
    return pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", "-p", "no:cacheprovider",
                              *args)


def test_eps_bug_fails_naming_first_divergence_l1(pytester: pytest.Pytester) -> None:
    result = run(pytester, dump("pt_bug", "L1_tensor"), dump("pt_fp32", "L1_tensor"))
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*= accuracy =*",
        "First divergence: Tensor.__add__.5.forward (step 0, rank 0), output.0: relative error "
        "0.0184 (up to 0.0001 allowed); cosine 0.999975 (at least 0.99999 required). Likely "
        "cause: non-tensor argument differs (input.1: 1e-05 vs bench 1e-06).*",
    ])
    result.stdout.fnmatch_lines([
        "*_ accuracy::compare::0/0/Tensor.__add__.5.forward _*",
        "Outputs of Tensor.__add__.5.forward (step 0, rank 0) are not close to bench "
        "Tensor.__add__.5.forward!",
        "",
        "argument: non-tensor argument differs (input.1: 1e-05 vs bench 1e-06)",
        "output.0: relative error 0.0184 (up to 0.0001 allowed); cosine 0.999975 (at least "
        "0.99999 required)",
        "Greatest absolute difference: 9e-06 at index *",
        "",
        "This node MAKES an error of its own: it is called with different non-tensor "
        "arguments.",
        "",
        "Inputs vs outputs:",
        "  input  input.0 * rel err 0  cosine 1.000000*ok",
        "  output output.0 * rel err 0.0184  cosine 0.999975*MISMATCH",
        "",
        "Stack: File */tinyllama_pt.py, line 34, in forward, return x * torch.rsqrt(*",
    ])
    # everything before the bug is bit-identical and passes; one bug gives one failure:
    # every node downstream only carries it (xfail), and step 1 repeats the same finding
    outcomes = result.parseoutcomes()
    assert (outcomes["passed"], outcomes["failed"], outcomes["xfailed"]) == (48, 1, 197)
    # the answer is the last sentence of the summary
    section = result.stdout.str().split("= accuracy =")[1].splitlines()
    assert section[-2].startswith("First divergence: Tensor.__add__.5.forward (step 0")


def test_eps_bug_fails_naming_first_divergence_l0(pytester: pytest.Pytester) -> None:
    result = run(pytester, dump("pt_bug", "L0_tensor"), dump("pt_fp32", "L0_tensor"), "-rx")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*= accuracy =*",
        "First divergence: Module.layers.1.n1.RMSNorm.forward.0 (step 0, rank 0), output.0: "
        "its own computation is off: local error 0.0125 vs bench 4.81e-08 (output.0; eps 1e-06 "
        "reproduces the bench's output, the NPU's fits 1e-05), replaying each side's own inputs "
        "in float64; relative error 0.0125 (up to 0.0001 allowed)*",
    ])
    # step 1's call of the same module makes the same error: carried as one cause
    result.stdout.fnmatch_lines([
        "*XFAIL*1/0/Module.layers.1.n1.RMSNorm.forward.0 - carried from "
        "Module.layers.1.n1.RMSNorm.forward.0 (step 0, rank 0): the same call made an error of "
        "its own in an earlier step and makes one again: one cause, failed once at*"])
    assert result.parseoutcomes()["failed"] == 3  # the node, local_norm, gradient_steps
    result.stdout.fnmatch_lines([
        "108 nodes only carry an earlier divergence (xfailed: their inputs already differ and "
        "they add no error of their own).",
        "1 node repeats an earlier failure's cause (xfailed: the same finding, or the same "
        "call's own error in a later step; one cause fails once).",
        "First divergence: *"])


@pytest.mark.parametrize("config", ["mix_statistics", "L1_md5"])
def test_statistics_and_md5_dumps_give_a_verdict(pytester: pytest.Pytester, config: str) -> None:
    result = run(pytester, dump("pt_bug", config), dump("pt_fp32", config))
    assert result.ret == 1
    result.stdout.fnmatch_lines(["First divergence: Tensor.__add__.5.forward (step 0, rank 0)*"])
    same = run(pytester, dump("pt_fp32", config), rerun(dump("pt_fp32", config), pytester.path))
    assert same.ret == 0


@pytest.mark.parametrize("config", ["L1_tensor", "L0_tensor", "mix_statistics"])
def test_identical_runs_pass(pytester: pytest.Pytester, config: str) -> None:
    """A deterministic rerun (the same values, its own files) passes."""
    result = run(pytester, dump("pt_fp32", config), rerun(dump("pt_fp32", config), pytester.path))
    assert result.ret == 0
    result.stdout.fnmatch_lines(["No divergence: * compared nodes meet the criteria."])


@pytest.mark.parametrize(("config", "first"), [
    ("L1_tensor", "Functional.linear.0.forward"),
    ("L0_tensor", "Module.layers.0.attn.qkv.Linear.forward.0"),
    ("mix_statistics", "Functional.linear.0.forward"),
])
def test_bf16_against_fp32_is_a_precision_finding_unless_declared(
        pytester: pytest.Pytester, config: str, first: str) -> None:
    result = run(pytester, dump("pt_bf16", config), dump("pt_fp32", config))
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        f"First divergence: {first} (step 0, rank 0), output.0: precision differs: npu "
        "bfloat16 vs bench float32 (output.0) from inputs of the same dtypes.*"])
    # every later bf16 Linear repeats the same precision change: one failure for one cause
    assert result.parseoutcomes()["failed"] == 1
    declared = run(pytester, dump("pt_bf16", config), dump("pt_fp32", config),
                   "--acc-allow-precision=bfloat16:float32")
    assert declared.ret == 0


def test_bf16_fails_when_judged_as_fp32(pytester: pytest.Pytester) -> None:
    result = run(pytester, dump("pt_bf16", "L1_tensor"), dump("pt_fp32", "L1_tensor"),
                 "--acc-no-dtype-aware")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["First divergence: Functional.linear.0.forward (step 0, rank 0)*"])


def test_json_document(pytester: pytest.Pytester) -> None:
    out = pytester.path / "acc.json"
    run(pytester, dump("pt_bug", "L1_tensor"), dump("pt_fp32", "L1_tensor"), f"--acc-json={out}")
    doc = json.loads(out.read_text())
    assert doc["version"] == 1 and doc["verdict"] == "fail"
    assert doc["plugin_version"] and doc["inputs"]["npu"].endswith("pt_bug/L1_tensor")
    assert doc["criteria"]["compare"]["tolerances"]["float32"] == {"rel_err": 1e-4,
                                                                   "min_cosine": 0.99999}
    first = doc["compare"]["first_divergence"]
    assert (first["npu_name"], first["bench_name"], first["step"], first["rank"],
            first["tensor"]) == ("Tensor.__add__.5.forward", "Tensor.__add__.5.forward", 0, 0,
                                 "output.0")
    nodes = doc["compare"]["nodes"]
    assert len(nodes) == 244
    assert {n["status"] for n in nodes} == {"pass", "fail", "carried"}
    node = next(n for n in nodes if n["npu_name"] == "Tensor.__add__.5.forward" and n["step"] == 0)
    assert node["status"] == "fail" and node["rel_l2_err"] == pytest.approx(0.0184, abs=1e-4)
    assert node["cosine"] == pytest.approx(0.999975, abs=1e-6) and "max_abs_err" in node
    assert node["finding"] == "argument" and node["first_divergence"] is True
    assert node["tolerance"] == {"rel_err": 1e-4, "min_cosine": 0.99999}
    assert [n["npu_name"] for n in nodes if n["first_divergence"]] == ["Tensor.__add__.5.forward"]
    carried = [n for n in nodes if n["status"] == "carried"]
    assert len(carried) == 197
    assert {n["carried_from"] for n in carried} == {"Tensor.__add__.5.forward"}
    rsqrt = next(n for n in carried if n["npu_name"] == "Torch.rsqrt.2.forward")
    assert rsqrt["local_error"]["npu"] == pytest.approx(rsqrt["local_error"]["bench"], rel=0.5)


def test_xdist_writes_one_document(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    out = pytester.path / "acc.json"
    result = pytester.runpytest_subprocess(
        f"--acc-npu={dump('pt_bug', 'L0_tensor')}", f"--acc-bench={dump('pt_fp32', 'L0_tensor')}",
        "-n", "2", f"--acc-json={out}", "-p", "no:cacheprovider")
    assert result.ret == 1
    doc = json.loads(out.read_text())
    assert doc["compare"]["first_divergence"]["npu_name"] == "Module.layers.1.n1.RMSNorm.forward.0"
    assert len(doc["compare"]["nodes"]) == 126


def test_report_folder(pytester: pytest.Pytester) -> None:
    import pandas as pd

    out = pytester.path / "rep"
    run(pytester, dump("pt_bug", "L1_tensor"), dump("pt_fp32", "L1_tensor"), f"--acc-report={out}")
    table = pd.read_csv(out / "compare_result.csv")
    assert {"NPU Name", "Bench Name", "Cosine", "MaxAbsErr", "Result"} <= set(table.columns)
    assert table["Cosine"].dtype.kind == "f" and (table["Result"] == "fail").any()
    assert "Tensor.__add__.5.forward" in (out / "index.html").read_text()


def test_selection_by_step_and_scope(pytester: pytest.Pytester) -> None:
    result = run(pytester, dump("pt_bug", "L0_tensor"), dump("pt_fp32", "L0_tensor"),
                 "--acc-steps-select=1", "--acc-scope=Module.layers.0.*", "--collect-only", "-q")
    lines = [line for line in result.stdout.lines if line.startswith("accuracy::")]
    allowed = ("accuracy::compare::1/0/Module.layers.0.", "accuracy::compare::coverage",
               "accuracy::compare::local_norm", "accuracy::compare::gradient_steps",
               "accuracy::compare::inputs")
    assert lines and all(line.startswith(allowed) for line in lines)


def test_waivers_relax_or_mark_known_divergence(pytester: pytest.Pytester) -> None:
    waivers = pytester.path / "waivers.yaml"
    waivers.write_text(
        "- pattern: 'Module.layers.1.n1.*'\n  reason: eps change under review (JIRA-1)\n"
        "  known_divergence: true\n"
        "- pattern: 'Module.*'\n  reason: layer-1 eps change propagates\n  rel_err: 0.5\n"
        "  min_cosine: 0.9\n")
    out = pytester.path / "rep"
    result = run(pytester, dump("pt_bug", "L0_tensor"), dump("pt_fp32", "L0_tensor"),
                 f"--acc-waivers={waivers}", f"--acc-report={out}", "-rx")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*XFAIL*Module.layers.1.n1.RMSNorm.forward.0*JIRA-1*"])
    assert "eps change under review (JIRA-1)" in (out / "index.html").read_text()


def test_unmatched_nodes_are_skipped_and_listed(pytester: pytest.Pytester) -> None:
    result = run(pytester, dump("ms_fp32", "L0_tensor"), dump("pt_fp32", "L0_tensor"),
                 "--acc-align=name", "-rs", "-k",
                 "not local_norm and not gradient_steps and not inputs")
    assert result.ret == 1  # nothing comparable matched: the coverage item fails
    result.stdout.fnmatch_lines([
        "*Nothing comparable matched: 0 of 126 NPU nodes found a bench counterpart.*",
        "*NPU nodes had no bench counterpart (skipped, never counted as passes)*",
    ])
    assert "passed" not in result.parseoutcomes()


def test_low_matched_share_fails_coverage(pytester: pytest.Pytester) -> None:
    result = run(pytester, dump("ms_fp32", "L1_tensor"), dump("pt_fp32", "L1_tensor"),
                 "--acc-align=name", "--acc-min-matched=0.9")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*Only * of 342 NPU nodes (*%) found a bench counterpart "
                                 "(at least 90% required).*"])


def test_first_nan_producing_node_is_reported(pytester: pytest.Pytester, copy_dump) -> None:  # type: ignore[no-untyped-def]
    npu = copy_dump("pt_fp32", "mix_statistics")
    dump_json = next((npu / "step0").iterdir()) / "dump.json"
    doc = json.loads(dump_json.read_text())
    names = list(doc["data"])
    start = names.index("Torch.softmax.1.forward")
    for name in names[start:]:  # overflow from the second softmax on
        for key in ("output", "input_args"):
            for rec in doc["data"][name].get(key) or []:
                carried = key == "output" or name != names[start]
                if isinstance(rec, dict) and "Max" in rec and carried:
                    rec["Max"] = float("nan")
    dump_json.write_text(json.dumps(doc))
    out = pytester.path / "acc.json"
    result = run(pytester, npu, dump("pt_fp32", "mix_statistics"), f"--acc-json={out}")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["First NaN/Inf on the NPU: Torch.softmax.1.forward (step 0, "
                                 "rank 0), output.0, from finite inputs."])
    assert json.loads(out.read_text())["compare"]["first_nonfinite"]["npu_name"] == (
        "Torch.softmax.1.forward")


def test_local_norms_name_the_bugged_parameter_first(pytester: pytest.Pytester) -> None:
    result = run(pytester, dump("pt_bug", "L0_tensor"), dump("pt_fp32", "L0_tensor"),
                 "-k", "local_norm or gradient_steps")
    result.stdout.fnmatch_lines([
        "Local gradient norms differ at step 0, rank 0: * parameters beyond 0.0001 relative, "
        "worst first:",
        "  layers.1.n1.weight: norm 0.0112134 vs bench 0.0113152 (relative difference 0.00899)",
    ])
    result.stdout.fnmatch_lines(["Gradients part at step 0 (of steps ?0, 1?): *",
                                 "  layers.1.n1.weight: *"])
    assert run(pytester, dump("pt_bf16", "L0_tensor"), dump("pt_fp32", "L0_tensor"),
               "-k", "local_norm or gradient_steps").ret == 0


def test_error_made_in_undumped_code_names_the_module_around_it(
        pytester: pytest.Pytester, copy_dump) -> None:  # type: ignore[no-untyped-def]
    npu = copy_dump("pt_bug", "L0_tensor")
    dump_json = next((npu / "step0").iterdir()) / "dump.json"
    doc = json.loads(dump_json.read_text())
    del doc["data"]["Module.layers.1.n1.RMSNorm.forward.0"]  # as if it had not been dumped
    dump_json.write_text(json.dumps(doc))
    result = run(pytester, npu, dump("pt_fp32", "L0_tensor"))
    # the qkv Linear's input differs and no recorded node made it; the Block around it got
    # inputs equal to the bench's: its own (unrecorded) code made the error
    result.stdout.fnmatch_lines([
        "First divergence: Module.layers.1.Block.forward.0 (step 0, rank 0), output.0: relative "
        "error 0.00286 (up to 0.0001 allowed); made by its own code between its recorded "
        "submodules (Module.layers.1.attn.qkv.Linear.forward.0 only carries it). At File *"])


def test_waived_nodes_are_listed_with_their_reason_and_a_stale_waiver_is_said(
        pytester: pytest.Pytester) -> None:
    """A waiver is a decision a CI log must show: the waived node and its reason, a final
    sentence that is not "no divergence", and a waiver that matched nothing (stale)."""
    waivers = pytester.path / "waivers.yaml"
    waivers.write_text(
        "- pattern: 'Module.layers.1.n1.*'\n  reason: eps change under review (JIRA-1)\n"
        "  known_divergence: true\n"
        "- pattern: 'Module.layers.9.*'\n  reason: a layer this model lost\n"
        "  known_divergence: true\n")
    md = pytester.path / "summary.md"
    result = run(pytester, dump("pt_bug", "L0_tensor"), dump("pt_fp32", "L0_tensor"),
                 f"--acc-waivers={waivers}", f"--acc-markdown={md}",
                 "-k", "not local_norm and not gradient_steps")  # gradients: not waivable
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "Waiver 'Module.layers.9.*' (a layer this model lost) matched no compared node: remove "
        "it or fix its pattern*",
        "* waived as known divergences*: Module.layers.1.n1.RMSNorm.forward.0 (step 0, rank 0): "
        "eps change under review (JIRA-1)*",
        "No divergence beyond the * waived nodes above: the other * compared nodes meet the "
        "criteria."])
    assert "No divergence: all" not in result.stdout.str()
    text = md.read_text()
    assert "Waived: Module.layers.1.n1.RMSNorm.forward.0" in text and "JIRA-1" in text
    strict = run(pytester, dump("pt_bug", "L0_tensor"), dump("pt_fp32", "L0_tensor"),
                 f"--acc-waivers={waivers}", "--acc-strict-waivers",
                 "-k", "not local_norm and not gradient_steps and not inputs")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED  # a strict CI: the stale waiver fails
    strict.stdout.fnmatch_lines(["*--acc-strict-waivers: Waiver 'Module.layers.9.*' (a layer "
                                 "this model lost) matched no compared node*"])
