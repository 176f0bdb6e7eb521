"""Sharded runs (--acc-ranks / --acc-steps-select) merged into one verdict, on real 4-rank dumps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.report.merge import load_part, merge_files, merge_parts, rank_table
from pytest_accuracy.report.merge_cli import main as merge_main
from tests.helpers import ROOT, rerun

MULTIRANK = ROOT / "tests" / "data" / "multirank"
BUG, GOLDEN, TP1 = (MULTIRANK / n for n in ("bug_tp2dp2", "golden_tp2dp2", "golden_tp1dp2"))
FIRST = ("First divergence: Tensor.__add__.0.forward (step 0, rank 2), output.0: relative error "
         "0.0714 (up to 0.0001 allowed); cosine 0.999763 (at least 0.99999 required). Likely "
         "cause: non-tensor argument differs (input.1: 1e-05 vs bench 1e-06). At *")


def run_part(pytester: pytest.Pytester, name: str, *select: str, npu: Path = BUG,
             bench: Path = GOLDEN) -> Path:
    out = pytester.path / f"{name}.json"
    pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", f"--acc-json={out}",
                       "-p", "no:cacheprovider", *select)
    assert out.is_file()
    return out


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


@pytest.mark.slow
def test_merged_parts_equal_one_run_over_all_ranks(pytester: pytest.Pytester) -> None:
    whole = load(run_part(pytester, "whole"))
    # sharded by rank: twins (a step identical between the runs) need the earlier step in the
    # same shard, so steps of one rank stay together (README, "Diagnosis")
    parts = [run_part(pytester, f"r{r}", f"--acc-ranks={r}") for r in ("0,2", "1", "3")]
    merged = merge_files(list(reversed(parts)))  # the order of the parts does not matter
    assert merged["verdict"] == whole["verdict"] == "fail"
    assert merged["compare"]["first_divergence"] == whole["compare"]["first_divergence"]
    assert merged["compare"]["coverage"] == whole["compare"]["coverage"]
    # every node, in execution order, with its status, metrics and first-divergence flag (the
    # worker's own wording of why a node carries or makes an error depends on what it saw)
    def judged(doc: dict) -> list[dict]:  # type: ignore[type-arg]
        return [{k: v for k, v in n.items() if k not in ("reason", "divergence_kind")}
                for n in doc["compare"]["nodes"]]

    assert judged(merged) == judged(whole)
    assert merged["inputs"] == whole["inputs"] and merged["criteria"] == whole["criteria"]
    first = whole["compare"]["first_divergence"]
    assert (first["npu_name"], first["step"], first["rank"], first["kind"]) == (
        "Tensor.__add__.0.forward", 0, 2, "appears")
    # the part of rank 3 alone names its all-reduce: only the merge finds rank 2
    assert load(parts[2])["compare"]["first_divergence"]["npu_name"] == (
        "Distributed.all_reduce.0.forward")
    grid = [run_part(pytester, f"s{s}r{r}", f"--acc-steps-select={s}", f"--acc-ranks={r}")
            for s in ("0", "1") for r in ("0,2", "1,3")]
    assert_merge_option_output(pytester, grid, merge_files(grid))


def assert_merge_option_output(pytester: pytest.Pytester, parts: list[Path],
                               merged: dict[str, Any]) -> None:
    pytester.makepyfile(test_other="def test_not_run():\n    raise AssertionError\n")
    out = pytester.path / "merged.json"
    result = pytester.runpytest(*(f"--acc-merge={p}" for p in parts), f"--acc-json={out}",
                                "-p", "no:cacheprovider")
    assert result.ret == 1
    assert result.parseoutcomes() == {"failed": 1}  # only accuracy::merge, never test_other
    result.stdout.fnmatch_lines([
        "*= accuracy =*",
        "Merged 4 parts: verdict fail.",
        *(f"  {p} failed" for p in parts),
        "  * compared nodes did not pass",
        FIRST,
        "Matched 168 of 168 NPU nodes (100.0%; at least 50% required).",
        "step rank  pass  fail other  first failing node",
        "   0    0  *  -",
        "   0    1  *  -",
        "   0    2  *  Tensor.__add__.0.forward",
        "   0    3  *  Distributed.all_reduce.0.forward",
        "   1    0  *  Tensor.__mul__.1.forward",
        "   1    1  *  Tensor.__mul__.1.forward",
        "   1    2  *  Tensor.__add__.0.forward",
        "   1    3  *  Tensor.__mul__.1.forward",
        "FAILED accuracy::merge - Merged 4 parts: verdict fail.",
    ])
    doc = load(out)
    assert doc["compare"] == merged["compare"] and doc["verdict"] == "fail"
    assert [(p["steps"], p["ranks"], p["nodes"]) for p in doc["merge"]["parts"]] == [
        ([0], [0, 2], 42), ([0], [1, 3], 42), ([1], [0, 2], 42), ([1], [1, 3], 42)]
    assert doc["compare"]["ranks"][3] == {"step": 0, "rank": 3, "pass": 10, "fail": 11,
                                          "neutral": 0,
                                          "first_failing": "Distributed.all_reduce.0.forward"}


@pytest.mark.slow
def test_merge_of_golden_parts_passes_under_xdist(pytester: pytest.Pytester) -> None:
    npu = rerun(GOLDEN, pytester.path)  # a deterministic rerun: its own files, equal values
    parts = [run_part(pytester, f"s{s}", f"--acc-steps-select={s}", npu=npu) for s in "01"]
    result = pytester.runpytest(*(f"--acc-merge={p}" for p in parts), "-n", "2",
                                "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["Merged 2 parts: verdict pass.", "Matched 168 of 168 NPU *",
                                 "   1    3  *  -", "*1 passed*"])


def _doc(path: Path, nodes: list[dict[str, Any]], verdict: str = "pass", **extra: Any) -> Path:
    doc = {"version": 1, "plugin_version": "0.1.0", "verdict": verdict, "inputs": {"npu": "a"},
           "criteria": {"compare": {"min_matched": 0.5}},
           "compare": {"first_divergence": None, "first_nonfinite": None,
                       "coverage": {"matched": len(nodes), "total": len(nodes),
                                    "matched_share": 1.0, "min_matched": 0.5},
                       "nodes": nodes}, **extra}
    path.write_text(json.dumps(doc))
    return path


def _node(step: int, rank: int, name: str, status: str = "pass", **extra: Any) -> dict[str, Any]:
    return {"npu_name": name, "step": step, "rank": rank, "status": status, **extra}


def test_carried_and_unknown_statuses_fail_and_new_fields_pass_through(tmp_path: Path) -> None:
    a = _doc(tmp_path / "a.json", [_node(0, 0, "x"), _node(0, 0, "y", "skip")])
    b = _doc(tmp_path / "b.json", [_node(0, 1, "x", "carried", carried_from="z", tolerance=1),
                                   _node(0, 1, "y", "brand_new")])
    doc = merge_files([a, b])
    assert doc["verdict"] == "fail"
    assert doc["merge"]["fail_reasons"] == ["2 compared nodes did not pass"]
    assert doc["compare"]["nodes"][2] == _node(0, 1, "x", "carried", carried_from="z",
                                                tolerance=1)
    assert rank_table(doc["compare"]["nodes"]) == [
        {"step": 0, "rank": 0, "pass": 1, "fail": 0, "neutral": 1, "first_failing": None},
        {"step": 0, "rank": 1, "pass": 0, "fail": 2, "neutral": 0, "first_failing": "x"}]


def test_passing_parts_pass_and_low_summed_coverage_fails(tmp_path: Path) -> None:
    a = _doc(tmp_path / "a.json", [_node(0, 0, "x")])
    b = _doc(tmp_path / "b.json", [_node(1, 0, "x"), _node(1, 0, "y", "unmatched")])
    assert merge_files([a, b])["verdict"] == "pass"
    low = load(b)
    low["compare"]["coverage"] = {"matched": 0, "total": 3, "matched_share": 0.0,
                                  "min_matched": 0.5}
    b.write_text(json.dumps(low))
    doc = merge_files([a, b])
    assert doc["verdict"] == "fail"
    assert doc["merge"]["fail_reasons"] == [
        "matched 1 of 4 NPU nodes over all parts (at least 50% required)"]


def test_a_part_that_says_pass_and_checked_nothing_fails(tmp_path: Path) -> None:
    a = _doc(tmp_path / "a.json", [_node(0, 0, "x")])
    b = _doc(tmp_path / "b.json", [_node(1, 0, "x", "unmatched"), _node(1, 0, "y", "skip")])
    doc = merge_files([a, b])
    assert doc["verdict"] == "fail"
    assert doc["merge"]["fail_reasons"] == [
        f"{b} says pass but checked nothing (no compared node, loss, config or precheck "
        "result)"]


def test_refuses_overlapping_shards_naming_both_files(tmp_path: Path) -> None:
    a = _doc(tmp_path / "a.json", [_node(0, 0, "x"), _node(0, 1, "x")])
    b = _doc(tmp_path / "b.json", [_node(0, 1, "x")])
    with pytest.raises(AccuracyInputError) as err:
        merge_files([a, b])
    assert str(err.value) == (
        f"{b}: step 0 rank 1 is also in {a}: shards must not overlap (give each CI job its own "
        "--acc-ranks / --acc-steps-select)")


def test_refuses_parts_of_other_inputs_or_criteria(tmp_path: Path) -> None:
    a = _doc(tmp_path / "a.json", [_node(0, 0, "x")])
    b = _doc(tmp_path / "b.json", [_node(0, 1, "x")])
    other = load(b)
    other["criteria"]["compare"]["min_matched"] = 0.9
    b.write_text(json.dumps(other))
    with pytest.raises(AccuracyInputError, match=r"b\.json: its criteria differ from those of "
                       r".*a\.json \(compare\.min_matched: 0\.5 vs 0\.9\); parts must come "
                       r"from one command line"):
        merge_files([a, b])
    other["criteria"]["compare"]["min_matched"] = 0.5
    other["inputs"] = {"npu": "elsewhere"}
    b.write_text(json.dumps(other))
    with pytest.raises(AccuracyInputError, match=r"its inputs differ .*npu: 'a' vs 'elsewhere'"):
        merge_files([a, b])


@pytest.mark.parametrize(("text", "problem"), [
    ("{", "not valid JSON: "),
    ('{"compare": {}}', "not a pytest-accuracy --acc-json document (no version or verdict)"),
    ('{"version": 2, "verdict": "pass"}', "document version 2; this pytest-accuracy merges "
                                          "version 1"),
    ('{"version": 1, "verdict": "pass", "compare": {"nodes": [{"step": 0}]}}',
     "a compare node lacks step, rank or status"),
])
def test_bad_part_is_an_error_naming_the_file(tmp_path: Path, text: str, problem: str) -> None:
    part = tmp_path / "part.json"
    part.write_text(text)
    with pytest.raises(AccuracyInputError) as err:
        load_part(part)
    assert str(err.value).startswith(f"{part}: {problem}")


def test_bad_part_under_acc_merge_is_a_collection_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--acc-merge=missing.json", "-p", "no:cacheprovider")
    assert result.ret == 2
    result.stdout.fnmatch_lines([
        "unreadable input: missing.json: cannot read file (No such file or directory)"])


def test_acc_merge_refuses_inputs_to_compare(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--acc-merge=a.json", f"--acc-npu={BUG}", "-p", "no:cacheprovider")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["ERROR: --acc-merge combines finished parts; it takes no "
                                 "inputs to compare (--acc-npu given)"])


def test_console_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _doc(tmp_path / "a.json", [_node(0, 0, "x")])
    b = _doc(tmp_path / "b.json", [_node(0, 1, "x", "fail")], verdict="fail")
    out = tmp_path / "out" / "merged.json"
    assert merge_main([str(a), str(b), "-o", str(out), "--report", str(tmp_path / "html")]) == 1
    assert capsys.readouterr().out.splitlines()[:3] == [
        "Merged 2 parts: verdict fail.", f"  {b} failed", "  1 compared nodes did not pass"]
    assert load(out)["verdict"] == "fail"
    page = (tmp_path / "html/index.html").read_text()
    assert "<header class='fail'>" in page and f"<li>{b} failed</li>" in page
    assert merge_main([str(a)]) == 0
    assert merge_main([str(a), str(a)]) == 2
    assert capsys.readouterr().err.startswith(f"pytest-accuracy-merge: {a}: step 0 rank 0 is "
                                              f"also in {a}")


def test_merge_parts_keeps_unsharded_sections_that_agree(tmp_path: Path) -> None:
    loss = {"items": [{"name": "first_loss", "status": "pass"}]}
    a = load_part(_doc(tmp_path / "a.json", [_node(0, 0, "x")], loss=loss))
    b = load_part(_doc(tmp_path / "b.json", [_node(0, 1, "x")], loss=loss))
    assert merge_parts([a, b])["loss"] == loss
    c = load_part(_doc(tmp_path / "c.json", [_node(0, 2, "x")], loss={"items": []}))
    with pytest.raises(AccuracyInputError, match="its loss section differs from that of"):
        merge_parts([a, c])


def _statuses(doc: dict[str, Any], step: int, rank: int) -> dict[str, str]:
    return {n["npu_name"]: n["status"] for n in doc["compare"]["nodes"]
            if (n["step"], n["rank"]) == (step, rank)}


def test_tp2_against_tp1_bench_is_never_a_silent_pass(pytester: pytest.Pytester) -> None:
    """NPU TP=2 x DP=2 against a bench run without tensor parallelism (TP=1 x DP=2). With
    every rank the layouts are inferred (tests/test_layouts.py); a part of the ranks, with no
    layout given, pairs rank by number and fails."""
    whole = load(run_part(pytester, "whole", "--acc-steps-select=0", npu=GOLDEN, bench=TP1))
    assert whole["verdict"] == "pass"
    assert whole["compare"]["layouts"]["npu"] == "tp=2,dp=2,pp=1"
    assert whole["compare"]["layouts"]["inferred"].startswith("inferred from the dumps")
    doc = load(run_part(pytester, "by_name", "--acc-steps-select=0", "--acc-ranks=0,1",
                        npu=GOLDEN, bench=TP1))
    assert doc["verdict"] == "fail"
    assert "layouts" not in doc["compare"]
    rank0 = _statuses(doc, 0, 0)
    # column-parallel shards: [2, 4, 16] against the bench's [2, 4, 32]
    assert rank0["Functional.linear.0.forward"] in ("fail", "carried")
    # row-parallel partial sums have the full shape and fail on their values
    assert rank0["Functional.linear.1.forward"] in ("fail", "carried")
    assert rank0["Distributed.all_reduce.0.forward"] == "unmatched"
    assert rank0["Tensor.__add__.1.forward"] == "pass"  # after the all-reduce the runs agree
    # ranks pair by number: NPU rank 1 is (dp 0, tp 1), bench rank 1 is (dp 1): other data
    assert set(_statuses(doc, 0, 1).values()) == {"fail", "carried", "unmatched"}

    aligned = load(run_part(pytester, "aligned", "--acc-steps-select=0", "--acc-ranks=0",
                            "--acc-align=always", npu=GOLDEN, bench=TP1))
    rank0 = _statuses(aligned, 0, 0)
    # the aligner refuses pairs whose shapes differ: shards are skipped, never passed
    # the aligner refuses pairs whose shapes differ: shards are skipped, never passed; the
    # row-parallel partial sum is left too, since the all-reduce's output holds the value the
    # bench's linear makes (a value anchor)
    assert [n for n, s in rank0.items() if s == "unmatched"] == [
        "Functional.linear.0.forward", "Functional.silu.0.forward",
        "Functional.linear.1.forward", "Functional.silu.0.backward",
        "Functional.linear.0.backward", "Distributed.all_reduce.1.forward"]
    assert rank0["Distributed.all_reduce.0.forward"] == "pass"
    node = next(n for n in aligned["compare"]["nodes"]
                if n["npu_name"] == "Distributed.all_reduce.0.forward" and n["rank"] == 0)
    assert node["bench_name"] == "Functional.linear.1.forward"


def test_a_missing_part_fails_the_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    a = _doc(tmp_path / "a.json", [_node(0, 0, "x"), _node(1, 0, "x")])
    b = _doc(tmp_path / "b.json", [_node(0, 1, "x")])  # the part holding step 1 rank 1 is gone
    doc = merge_files([a, b])
    assert doc["verdict"] == "fail"
    assert doc["merge"]["missing"] == [[1, 1]]
    assert doc["merge"]["fail_reasons"] == [
        "no part holds step 1 rank 1: a part is missing or its selection matched nothing"]
    # only the expected shards tell that all of ranks 2-3 went missing
    c = _doc(tmp_path / "c.json", [_node(1, 1, "x")])
    assert merge_files([a, b, c])["verdict"] == "pass"
    assert merge_main([str(a), str(b), str(c), "--ranks=0-3", "--steps=0-1"]) == 1
    assert "  no part holds step 0 rank 2, step 0 rank 3, step 1 rank 2, step 1 rank 3: " \
           "a part is missing or its selection matched nothing" in capsys.readouterr().out


def test_acc_merge_takes_the_expected_shards_from_the_selection(pytester: pytest.Pytester
                                                                ) -> None:
    a = _doc(pytester.path / "a.json", [_node(0, 0, "x")])
    result = pytester.runpytest(f"--acc-merge={a}", "--acc-ranks=0-1", "-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["  no part holds step 0 rank 1: a part is missing *"])
    assert pytester.runpytest(f"--acc-merge={a}", "--acc-ranks=0", "-p",
                              "no:cacheprovider").ret == 0


def test_step_shards_carry_the_same_call_making_its_error_again(pytester: pytest.Pytester) -> None:
    # the bundled eps bug at L0: the RMSNorm makes its error in step 0 and again in step 1;
    # one run carries step 1's as one cause, and so does the merge of per-step shards
    npu, bench = (ROOT / "example_data" / "dumps" / v / "L0_tensor" for v in ("pt_bug", "pt_fp32"))
    parts = [run_part(pytester, f"s{s}", f"--acc-steps-select={s}", npu=npu, bench=bench)
             for s in ("0", "1")]
    name = "Module.layers.1.n1.RMSNorm.forward.0"
    alone = {n["npu_name"]: n for n in load(parts[1])["compare"]["nodes"]}[name]
    assert (alone["status"], alone["finding"]) == ("fail", "local_error")  # its shard alone
    for part in parts:  # each shard judges its own step's gradients: not a sharded section
        doc = load(part)
        doc.pop("gradients", None)
        part.write_text(json.dumps(doc))
    merged = merge_files(parts)
    norms = [n for n in merged["compare"]["nodes"] if n["npu_name"] == name]
    assert [(n["step"], n["status"], n["carried_from"]) for n in norms] == [
        (0, "fail", None), (1, "carried", f"{name} (step 0, rank 0)")]
    assert [n["npu_name"] for n in merged["compare"]["nodes"] if n["status"] == "fail"] == [name]
