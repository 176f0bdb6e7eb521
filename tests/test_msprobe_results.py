"""msprobe acc_check / api_precision_compare CSVs: each release's layout, real and bad files."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.precheck.msprobe_csv import load_run
from pytest_accuracy.precheck.msprobe_judge import growth, judge_call, our_check

REAL = Path(__file__).parent / "data" / "real" / "msprobe" / "acc_check"


def _raw(directory: str, kind: str = "details") -> str:
    path = next((REAL / directory).glob(f"*_{kind}_*.csv"))
    return path.read_bytes().decode("utf-8-sig")  # line ends kept: msprobe writes \r\n


def _cell(text: str, name: str, index: int) -> str:
    """Field ``index`` of the raw line that starts with ``name,`` (first 22 fields never quote
    a comma except Shape, which this skips by splitting after it)."""
    line = next(ln for ln in text.splitlines() if ln.startswith(name + ","))
    _, _, rest = line.partition('",')  # after the quoted shape
    return rest.split(",")[index]


# ------------------------------------------------------------------ real files (msprobe 26.2.0)


def test_fp32_injected_rsqrt_msprobe_passes_ours_fails() -> None:
    raw = _raw("pt_26.2.0_fp32_injected")
    mean_rel = _cell(raw, "Torch.rsqrt.0.forward.output.0", 10)
    assert mean_rel == "0.00020003722445"
    assert re.search(r"^Torch\.rsqrt\.0\.forward\.output\.0,.*,pass,\"$", raw, re.M)
    run = load_run(REAL / "pt_26.2.0_fp32_injected")
    row = next(r for r in run.outputs if r.name == "Torch.rsqrt.0.forward.output.0")
    assert row.status == "pass" and row.device_dtype == "float32" and row.shape == (2, 15, 1)
    assert row.metrics["mean_rel_err_normal"] == float(mean_rel)
    verdict = our_check(row)
    assert verdict.ours == "fail"
    assert verdict.problems == ("mean relative error 0.0002 (up to 6.1e-05 allowed for float32)",)
    call = judge_call(run, "Torch.rsqrt.0", "forward", [row])
    assert (call.status, call.msprobe, call.ours) == ("fail", "pass", "fail")
    assert call.lines[0] == ("Torch.rsqrt.0.forward: msprobe says pass, our standard says fail "
                             "(they disagree)")


def test_mask_add_of_minus_1e9_passes_despite_max_abs_error_above_one() -> None:
    raw = _raw("pt_26.2.0_fp32_injected")
    assert _cell(raw, "Tensor.__add__.1.forward.output.0", 1) == "1.15396702289581"
    run = load_run(REAL / "pt_26.2.0_fp32_injected")
    row = next(r for r in run.outputs if r.name == "Tensor.__add__.1.forward.output.0")
    assert row.metrics["max_abs_err"] == 1.15396702289581
    assert our_check(row).ours == "pass"


def test_result_file_is_read_with_its_ragged_rows() -> None:
    raw = _raw("pt_26.2.0_fp32_injected", "result")
    assert "Torch.softmax.0,error,error\r\n" in raw  # 3 fields under a 4-column header
    run = load_run(REAL / "pt_26.2.0_fp32_injected" / "accuracy_checking_result_20261122073704.csv")
    assert run.results["Torch.softmax.0"].forward == "error"
    assert run.results["Functional.silu.0"].backward == "pass"
    assert run.layout.release.startswith("msprobe acc_check / run_ut, 23 columns")


def test_growth_against_the_clean_run_is_msprobes_own_ratio() -> None:
    before = load_run(REAL / "pt_26.2.0_fp32_clean")
    after = load_run(REAL / "pt_26.2.0_fp32_injected")
    name = "Torch.rsqrt.0.forward.output.0"
    assert _cell(_raw("pt_26.2.0_fp32_clean"), name, 10) == "0.00000002743783"
    grew = growth(*(next(r for r in run.outputs if r.name == name) for run in (after, before)),
                  factor=2.0)
    # 0.00020003722445 / max(2.7e-08, 2^-14): the 3.28 msprobe's api_precision_compare reports
    assert grew[0] == ("mean relative error grew 3.28x: 2.74e-08 before, 0.0002 now "
                       "(up to 2x allowed)")


def test_nan_and_inf_are_failures_where_msprobe_only_warns() -> None:
    raw = _raw("pt_26.2.0_nan_inf")
    assert re.search(r'^Torch\.matmul\.1\.forward\.output\.0,torch\.float64,torch\.float32,'
                     r'"\(256, 256\)",nan,inf,', raw, re.M)
    run = load_run(REAL / "pt_26.2.0_nan_inf")
    row = next(r for r in run.outputs if r.name == "Torch.matmul.1.forward.output.0")
    assert row.status == "warning" and math.isnan(row.metrics["cosine"] or 0.0)
    assert our_check(row).problems[0] == ("cosine nan, max abs error inf: NaN/Inf in the outputs "
                                          "(none allowed)")


def test_bf16_warnings_pass_on_our_standard() -> None:
    raw = _raw("pt_26.2.0_bf16")
    assert re.search(r"^Tensor\.pow\.0\.forward\.output\.0,.*,warning,", raw, re.M)
    run = load_run(REAL / "pt_26.2.0_bf16")
    call = judge_call(run, "Tensor.pow.0", "forward",
                      [r for r in run.outputs if r.api == "Tensor.pow.0"
                       and r.direction == "forward"])
    assert (call.status, call.msprobe, call.ours) == ("pass", "warning", "pass")


def test_all_skip_api_that_msprobe_calls_pass_is_skipped_not_passed() -> None:
    assert _raw("pt_26.2.0_vf_false_pass", "result").endswith("VF.lstm.0,pass, \r\n")
    run = load_run(REAL / "pt_26.2.0_vf_false_pass")
    call = judge_call(run, "VF.lstm.0", "forward", list(run.outputs))
    assert call.status == "skip"
    assert "yet its result says pass" in call.reason


def test_mindspore_layout() -> None:
    raw = _raw("ms_26.2.0_fp32")
    assert raw.startswith("API Name,Bench Dtype,Tested Dtype,Shape,Cosine,MaxAbsErr,")
    run = load_run(REAL / "ms_26.2.0_fp32")
    assert run.layout.framework == "mindspore"
    row = next(r for r in run.outputs if r.name == "Mint.matmul.0.forward.output.0")
    assert row.metrics == {"cosine": 0.9999999999999963, "max_abs_err": 3.814697265625e-06,
                           "max_rel_err": 6.657871934882208e-06}
    assert row.device_dtype == "float32" and our_check(row).ours == "pass"
    assert run.results["Mint.mul.0"].backward is None  # blank: no backward


def test_api_precision_compare_carries_msprobes_verdict() -> None:
    raw = _raw("apc_26.2.0")
    assert "比对结果,比对算法,Message" in raw.splitlines()[0]
    run = load_run(REAL / "apc_26.2.0")
    assert run.layout.kind == "compare_details"
    assert run.layout.release.startswith("api_precision_compare, 28 columns")
    rows = [r for r in run.outputs if r.api == "Torch.rsqrt.0" and r.direction == "forward"]
    call = judge_call(run, "Torch.rsqrt.0", "forward", rows)
    assert (call.status, call.msprobe, call.ours) == ("fail", "error", "n/a")


# ------------------------------------------------------------- layouts of earlier releases
# Headers as written by the source at these Ascend/mstt commits (debug/accuracy_tools/...).
_PT_HEADERS = {
    # api_accuracy_checker/compare/compare.py @ 8be1b5a84 (2023-12-08)
    "English headers": "Npu Name,Bench Dtype,NPU Dtype,Shape,Cosine Similarity,Max Abs Error,"
    "Relative Error (dual hundredth),Relative Error (dual thousandth),"
    "Relative Error (dual ten thousandth),Error Rate,Status,Message",
    # api_accuracy_checker/compare/compare_utils.py @ d8c27c6b6 (2024-02-04)
    "16-17 columns": "API Name,Bench Dtype,DEVICE Dtype,Shape,余弦相似度,最大绝对误差,双百指标,"
    "双千指标,双万指标,错误率,误差均衡性,均方根误差,小值域错误占比,相对误差最大值,相对误差平均值,"
    "Status,Message",
    # same file @ bc201aaae (2024-03-11)
    "20 columns": "API Name,Bench Dtype,DEVICE Dtype,Shape,余弦相似度,最大绝对误差,双百指标,"
    "双千指标,双万指标,二进制一致错误率,误差均衡性,均方根误差,小值域错误占比,相对误差最大值,相对误差平均值,"
    "inf/nan错误率,相对误差错误率,绝对误差错误率,Status,Message",
    # same file @ e295da294 (2024-04-08)
    "24 columns with ULP min": "API Name,Bench Dtype,DEVICE Dtype,Shape,余弦相似度,最大绝对误差,"
    "双百指标,双千指标,双万指标,二进制一致错误率,误差均衡性,均方根误差,小值域错误占比,相对误差最大值,"
    "相对误差平均值,inf/nan错误率,相对误差错误率,绝对误差错误率,ULP误差最大值,ULP误差最小值,"
    "ULP误差平均值,ULP误差大于阈值占比,Status,Message",
}


@pytest.mark.parametrize("release", sorted(_PT_HEADERS))
def test_earlier_pytorch_layouts(tmp_path: Path, release: str) -> None:
    header = _PT_HEADERS[release].split(",")
    values = {"Npu Name": "Torch.rsqrt.0.forward.output.0",
              "API Name": "Torch.rsqrt.0.forward.output.0", "Bench Dtype": "torch.float64",
              "NPU Dtype": "torch.float32", "DEVICE Dtype": "torch.float32",
              "Shape": '"(2, 1)"', "Status": "pass", "Message": "",
              "余弦相似度": "0.5", "Cosine Similarity": "0.5"}
    row = [values.get(h, "0.0") for h in header]
    path = tmp_path / "accuracy_checking_details_20240101000000.csv"
    path.write_text(",".join(header) + "\n" + ",".join(row) + "\n", encoding="utf-8")
    run = load_run(path)
    assert release in run.layout.release
    (out,) = run.outputs
    assert out.metrics["cosine"] == 0.5 and out.device_dtype == "float32"
    assert our_check(out).problems[0] == "cosine 0.500000 (more than 0.99 required)"


@pytest.mark.parametrize(("columns", "release"), [(18, "2024-03"), (22, "2024-03"),
                                                  (24, "2024-04"), (26, "2024-04-15")])
def test_earlier_api_precision_compare_layouts(tmp_path: Path, columns: int,
                                               release: str) -> None:
    # compare_utils.py get_detail_csv_title() @ fd0783f75, f5c224a91, 37b669725, f0ddefaba
    header = (["API Name", "小值域错误比值"] + [f"c{i}" for i in range(columns - 6)]
              + ["比对结果", "比对算法", "Message"])
    header.insert(2, "均方根误差比值")
    header = header[:columns - 3] + header[-3:]
    path = tmp_path / "api_precision_compare_details_1.csv"
    row = ["Torch.add.0.forward.output.0"] + ["1"] * (columns - 4) + ["pass", "标杆比对法", ""]
    path.write_text(",".join(header) + "\n" + ",".join(row) + "\n", encoding="utf-8")
    run = load_run(path)
    assert run.layout.kind == "compare_details" and release in run.layout.release
    assert run.outputs[0].status == "pass"


def test_old_result_words_true_false_and_na(tmp_path: Path) -> None:
    # compare.py @ 9c05ebc09 (2023-11): booleans and N/A in the result file
    (tmp_path / "accuracy_checking_details_1.csv").write_text(
        _PT_HEADERS["English headers"] + "\nFunctional*linear*0.forward.output.0,torch.float64,"
        "torch.float32,\"(2,)\",1.0,0.0,1,1,1, ,pass,\n", encoding="utf-8")
    (tmp_path / "accuracy_checking_result_1.csv").write_text(
        "API name,Forward Test Success,Backward Test Success,Message\n"
        "Functional*linear*0,True,N/A\n", encoding="utf-8")
    run = load_run(tmp_path)
    assert run.results["Functional*linear*0"].forward == "pass"
    assert run.results["Functional*linear*0"].backward is None
    assert list(run.calls()) == [("Functional*linear*0", "forward")]


# ------------------------------------------------------------------------- hostile inputs
_HEADER = "API Name,Bench Dtype,DEVICE Dtype,Shape,余弦相似度,最大绝对误差,Status,Message\n"
_ROW = 'Torch.add.0.forward.output.0,torch.float64,torch.float32,"(2,)",1.0,0.0,pass,\n'


@pytest.mark.parametrize(("text", "problem"), [
    ("", "is empty"),
    (_HEADER, "has a header but no rows"),
    ("a,b,c\n1,2,3\n", "is not an msprobe acc_check details CSV"),
    (_HEADER + _ROW.replace("Torch.add", "=HYPERLINK(\"x\")"), "a spreadsheet formula"),
    (_HEADER + _ROW.replace(",pass,", ",maybe,"), "status maybe is none of"),
    (_HEADER + _ROW.replace("1.0,0.0", "=1+1,0.0"), "=1+1 is not a number"),
    (_HEADER + _ROW.replace(",pass,\n", ",pass\n"), "7 fields, the header has 8"),
    (_HEADER + _ROW + _ROW, "line 3 repeats Torch.add.0.forward.output.0 (first at line 2)"),
    (_HEADER + _ROW.replace("1.0,0.0", '"1.0,0.0'), "malformed CSV"),
    (_HEADER + _ROW.replace(",pass,", ",pass,\"" + "x" * 200_000 + "\""), "malformed CSV"),
    (_HEADER.replace("Status,", "Verdict,") + _ROW, "no 'Status' column"),
    (_HEADER + "Torch.add.0,torch.float64,torch.float32,\"(2,)\",1.0,0.0,pass,\n",
     "is not an output name"),
])
def test_bad_details_file_is_named(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "accuracy_checking_details_1.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(AccuracyInputError) as info:
        load_run(path)
    assert str(path) in str(info.value) and problem in str(info.value)


@pytest.mark.parametrize(("data", "problem"), [
    (b"\xff\xfe" + "API Name".encode("utf-16-le"), "NUL bytes"),
    (b"API Name,\xe9\n", "not UTF-8 text"),
])
def test_binary_files_are_named(tmp_path: Path, data: bytes, problem: str) -> None:
    path = tmp_path / "accuracy_checking_details_1.csv"
    path.write_bytes(data)
    with pytest.raises(AccuracyInputError, match=problem):
        load_run(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "accuracy_checking_details_1.csv"
    os.mkfifo(path)
    with pytest.raises(AccuracyInputError, match="not a regular file"):
        load_run(path)


def test_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "accuracy_checking_details_1.csv"
    path.write_text(_HEADER + _ROW, encoding="utf-8")
    monkeypatch.setenv("ACC_MAX_CSV_BYTES", "50")
    with pytest.raises(AccuracyInputError, match="CSV size"):
        load_run(path)


def test_folder_and_pairing_errors(tmp_path: Path) -> None:
    with pytest.raises(AccuracyInputError, match="no accuracy_checking_details"):
        load_run(tmp_path)
    for stamp in ("1", "2"):
        (tmp_path / f"accuracy_checking_details_{stamp}.csv").write_text(_HEADER + _ROW)
    with pytest.raises(AccuracyInputError, match="2 details files"):
        load_run(tmp_path)
    lone = tmp_path / "other" / "accuracy_checking_result_3.csv"
    lone.parent.mkdir()
    lone.write_text("API name,Forward Test Success,Backward Test Success,Message\n")
    with pytest.raises(AccuracyInputError, match="needs its details file"):
        load_run(lone)
    with pytest.raises(AccuracyInputError, match="does not exist"):
        load_run(tmp_path / "missing.csv")


def test_result_rows_are_checked_too(tmp_path: Path) -> None:
    (tmp_path / "accuracy_checking_details_1.csv").write_text(_HEADER + _ROW)
    (tmp_path / "accuracy_checking_result_1.csv").write_text(
        "API name,Forward Test Success,Backward Test Success,Message\n@SUM(A1),pass,pass\n")
    with pytest.raises(AccuracyInputError, match="spreadsheet formula"):
        load_run(tmp_path)
