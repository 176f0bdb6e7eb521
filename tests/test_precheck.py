"""Precheck on the bundled tiny-Llama dumps: clean runs pass, corrupted outputs fail, unknown
APIs are skipped (never executed), statistics dumps and torch re-runs work, reports are written."""

from __future__ import annotations

import collections
import csv
import dataclasses
import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.model import TensorRecord
from pytest_accuracy.errors import AccuracyInputError, MissingExtraError
from pytest_accuracy.precheck.report import precheck_json, write_precheck_csvs
from pytest_accuracy.precheck.results import PrecheckResult
from pytest_accuracy.precheck.runner import plan, run_case

DUMPS = Path(__file__).resolve().parent.parent / "example_data" / "dumps"
TENSOR = {"pytorch": DUMPS / "pt_fp32" / "L1_tensor", "mindspore": DUMPS / "ms_fp32" / "L1_tensor"}
# Outputs of order one (a softmax and an RMSNorm output), as the corruption targets.
TARGETS = {
    "pytorch": ["Torch.softmax.0.forward", "Tensor.__mul__.1.forward"],
    "mindspore": ["Mint.softmax.0.forward", "Tensor.__mul__.1.forward"],
}


def _run(path: Path, **kwargs: str) -> list[PrecheckResult]:
    return [run_case(case) for case in plan(load_dumps(path), **kwargs)]


def _counts(results: list[PrecheckResult]) -> collections.Counter[str]:
    return collections.Counter(r.status for r in results)


@pytest.fixture(scope="module")
def clean() -> dict[str, list[PrecheckResult]]:
    return {fw: _run(path) for fw, path in TENSOR.items()}


@pytest.mark.parametrize("framework", ["pytorch", "mindspore"])
def test_clean_fp32_dumps_pass_every_checkable_api(
    framework: str, clean: dict[str, list[PrecheckResult]]
) -> None:
    results = clean[framework]
    assert not [r.case_id for r in results if r.status == "fail"]
    forward = [r for r in results if r.direction == "forward"]
    assert forward and all(r.status == "pass" for r in forward)
    assert all(r.inputs == "dumped inputs" and r.device.startswith("dump") for r in results)


@pytest.mark.parametrize("framework", ["pytorch", "mindspore"])
def test_every_tiny_llama_api_is_checked_or_skipped_with_a_reason(
    framework: str, clean: dict[str, list[PrecheckResult]], capsys: pytest.CaptureFixture[str]
) -> None:
    results = clean[framework]
    dumps = load_dumps(TENSOR[framework])
    api_records = [c for d in dumps for c in d.calls if c.kind == "api"]
    assert len(results) == len(api_records)  # one case per dumped API record
    for r in results:
        assert r.status in ("pass", "skip")
        assert r.status == "pass" or r.reason, r.case_id
        assert r.status != "pass" or r.outputs, r.case_id  # a pass always compared something
    by_dir = collections.Counter((r.direction, r.status) for r in results)
    with capsys.disabled():
        print(f"\n{framework} L1_tensor precheck: {dict(sorted(by_dir.items()))}")


def _copy_step0(framework: str, tmp_path: Path) -> Path:
    src = TENSOR[framework] / "step0"
    dst = tmp_path / framework / "step0"
    shutil.copytree(src, dst)
    return tmp_path / framework


def _output_file(root: Path, node: str) -> Path:
    dump = next(iter(load_dumps(root)))
    call = dump.get(node)
    assert call is not None
    record = call.outputs[0]
    assert isinstance(record, TensorRecord) and record.data_root and record.data_name
    return record.data_root / record.data_name


def _rewrite(path: Path, change: Callable[[np.ndarray], np.ndarray]) -> None:
    """Apply ``change`` to a dumped tensor in place (.npy with numpy, .pt with torch)."""
    if path.suffix == ".npy":
        np.save(path, change(np.load(path)).astype(np.float32))
        return
    torch = pytest.importorskip("torch")
    tensor = torch.load(path, weights_only=True)
    changed = change(tensor.detach().numpy().copy()).astype(np.float32)
    torch.save(torch.from_numpy(changed), path)


def _scale(a: np.ndarray) -> np.ndarray:
    return a * 1.01


def _one_nan(a: np.ndarray) -> np.ndarray:
    a.reshape(-1)[0] = np.nan
    return a


def _bias(a: np.ndarray) -> np.ndarray:
    return a * (1 + 2e-4)


def _few(a: np.ndarray) -> np.ndarray:
    a.reshape(-1)[[1, 7, 20]] += 0.05
    return a


CORRUPTIONS = {"x1.01": _scale, "one NaN": _one_nan, "+2e-4 rel": _bias, "+0.05 x3": _few}
CASES = [
    (fw, node, name) for fw, nodes in TARGETS.items() for node in nodes for name in CORRUPTIONS
]


@pytest.mark.parametrize(("framework", "node", "corruption"), CASES)
def test_a_corrupted_output_fails_exactly_that_api(
    framework: str, node: str, corruption: str, tmp_path: Path
) -> None:
    """Under both standards: these corruptions exceed the default thresholds on outputs of
    order one, and the dtype-aware standard catches all four."""
    root = _copy_step0(framework, tmp_path)
    _rewrite(_output_file(root, node), CORRUPTIONS[corruption])
    cases = plan(load_dumps(root))
    for standard in ("default", "dtype"):
        results = [run_case(dataclasses.replace(c, standard=standard)) for c in cases]
        failed = {r.name for r in results if r.status == "fail"}
        assert failed == {node}, f"{standard}/{corruption}: {sorted(failed)}"
        bad = next(r for r in results if r.name == node)
        assert bad.reason and bad.outputs[0].status == "fail" and bad.standard == standard


def test_nan_in_the_device_output_is_a_failure_never_a_warning(tmp_path: Path) -> None:
    root = _copy_step0("mindspore", tmp_path)
    _rewrite(_output_file(root, "Mint.rsqrt.0.forward"), _one_nan)
    (bad,) = [r for r in _run(root) if r.status == "fail"]
    assert bad.name == "Mint.rsqrt.0.forward" and "NaN/Inf" in bad.reason


def test_unreadable_tensor_file_raises_input_error(tmp_path: Path) -> None:
    root = _copy_step0("mindspore", tmp_path)
    _output_file(root, "Mint.softmax.0.forward").write_bytes(b"not a numpy file")
    case = next(c for c in plan(load_dumps(root)) if c.node == "Mint.softmax.0.forward")
    with pytest.raises(AccuracyInputError, match=r"Mint\.softmax\.0\.forward\.output\.0\.npy"):
        run_case(case)


def _crafted_dump(tmp_path: Path, framework: str, api: str, target: Path) -> Path:
    step = tmp_path / "crafted" / "step0" / "rank0"
    (step / "dump_tensor_data").mkdir(parents=True)
    ext = "npy" if framework == "mindspore" else "pt"
    np.save(step / "dump_tensor_data" / "x.npy", np.ones(4, np.float32))
    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4], "Max": 1.0,
              "Min": 1.0, "Mean": 1.0, "Norm": 2.0,
              "data_name": f"{api}.0.forward.input.0.{ext}"}  # fmt: skip
    record = {
        "input_args": [tensor, {"type": "str", "value": str(target)}],
        "input_kwargs": {},
        "output": [None],
    }
    doc = {"task": "tensor", "level": "L1", "framework": framework, "dump_data_dir": None,
           "data": {f"{api}.0.forward": record}}  # fmt: skip
    (step / "dump.json").write_text(json.dumps(doc), encoding="utf-8")
    return tmp_path / "crafted"


@pytest.mark.parametrize(
    ("framework", "api"),
    [("pytorch", "Torch.save"), ("mindspore", "Mint.save"), ("pytorch", "Tensor.__reduce_ex__")],
)
def test_save_and_other_unlisted_apis_are_skipped_and_never_run(
    framework: str, api: str, tmp_path: Path
) -> None:
    target = tmp_path / "WRITTEN_BY_CHECKER.pt"
    root = _crafted_dump(tmp_path, framework, api, target)
    (result,) = _run(root)
    assert result.status == "skip"
    assert api in result.reason and "allow-list" in result.reason
    assert not target.exists()
    if framework == "pytorch" and _installed("torch"):  # the re-run path skips it too
        (rerun,) = _run(root, device="cpu")
        assert rerun.status == "skip" and not target.exists()


def test_pytorch_dump_rerun_on_cpu_with_torch() -> None:
    pytest.importorskip("torch")
    results = _run(TENSOR["pytorch"] / "step0", device="cpu")
    counts = collections.Counter((r.direction, r.status) for r in results)
    # Re-running checks the backward of linear/matmul/cross_entropy too: every record passes.
    assert counts == {("forward", "pass"): 61, ("backward", "pass"): 61}
    assert all(r.device.startswith("cpu (torch") for r in results)


def test_mindspore_dump_rerun_with_torch_by_explicit_backend() -> None:
    pytest.importorskip("torch")
    cases = plan(load_dumps(TENSOR["mindspore"] / "step0"), device="torch:cpu")[:40]
    results = [run_case(c) for c in cases]
    assert results and all(r.status == "pass" for r in results)
    assert all(r.device.startswith("cpu (torch") for r in results)


def test_statistics_dump_uses_reproducible_generated_inputs() -> None:
    path = DUMPS / "ms_fp32" / "mix_statistics"
    first = _run(path, standard="dtype")
    assert first and not [r.case_id for r in first if r.status == "fail"]
    assert all(r.inputs.startswith("generated from statistics, seed ") for r in first)
    assert all("statistics dump recorded no output values" in r.device for r in first)
    again = _run(path, standard="dtype")
    assert [(r.inputs, r.max_abs) for r in first] == [(r.inputs, r.max_abs) for r in again]


def test_plan_rejects_unknown_device_standard_and_missing_frameworks() -> None:
    dumps = load_dumps(TENSOR["mindspore"] / "step0")
    with pytest.raises(ValueError, match="unknown precheck device"):
        plan(dumps, device="tpu")
    with pytest.raises(ValueError, match="unknown precheck standard"):
        plan(dumps, standard="strict")
    if not _installed("torch_npu"):
        with pytest.raises(MissingExtraError, match="torch_npu is not installed"):
            plan(load_dumps(TENSOR["pytorch"] / "step0"), device="npu:0")
    if not _installed("mindspore"):
        with pytest.raises(MissingExtraError, match="mindspore is not installed"):
            plan(dumps, device="cpu")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def test_reports_use_msprobe_layouts(
    clean: dict[str, list[PrecheckResult]], tmp_path: Path
) -> None:
    pt_result, pt_details = write_precheck_csvs(clean["pytorch"], tmp_path / "pt", timestamp="1")
    ms_result, ms_details = write_precheck_csvs(clean["mindspore"], tmp_path / "ms", timestamp="1")
    assert pt_result.name == "accuracy_checking_result_1.csv"
    with pt_details.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0])[:6] == [
        "API Name",
        "Bench Dtype",
        "DEVICE Dtype",
        "Shape",
        "Cosine",
        "MaxAbsErr",
    ]
    assert len(rows[0]) == 23
    assert float(rows[0]["Cosine"]) > 0.99 and rows[0]["Status"] == "pass"
    with pt_result.open(encoding="utf-8") as handle:
        result_rows = list(csv.reader(handle))
    assert result_rows[0] == [
        "API name",
        "Forward Test Success",
        "Backward Test Success",
        "Message",
    ]
    assert all(len(row) == 4 for row in result_rows)  # never ragged, unlike msprobe's
    skipped = [row for row in result_rows if row[2] == "SKIP"]
    assert skipped and all(row[3] for row in skipped)
    with ms_details.open(encoding="utf-8") as handle:
        header = next(csv.reader(handle))
    assert header == ["API Name", "Bench Dtype", "Tested Dtype", "Shape", "Cosine", "MaxAbsErr",
                      "MaxRelativeErr", "Status", "Message"]  # fmt: skip
    assert ms_result.exists()
    doc = precheck_json(clean["mindspore"])
    assert json.loads(json.dumps(doc)) == doc
    assert set(doc[0]) >= {"name", "status", "cosine", "max_abs", "reason"}
    assert doc[0]["name"].startswith("0/0/")


_NO_TORCH = """
import sys
for name in ("torch", "torch_npu", "mindspore"):
    sys.modules[name] = None  # every import of them fails, as when not installed
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.errors import MissingExtraError
from pytest_accuracy.precheck.runner import plan, run_case
for path in sys.argv[1:]:
    results = [run_case(c) for c in plan(load_dumps(path))]
    assert results and all(r.status in ("pass", "skip") for r in results), path
    if "statistics" in path:  # nothing recorded, nothing to run: every case skips, none passes
        assert all(r.status == "skip" for r in results), path
        assert any("would check no kernel" in r.reason for r in results), path
    print(results[0].device)
try:
    plan(load_dumps(sys.argv[1]), device="cpu")
    raise SystemExit("device=cpu without torch must be refused")
except MissingExtraError:
    pass
"""


def test_core_works_without_torch_installed() -> None:
    paths = [TENSOR["pytorch"] / "step0", DUMPS / "pt_fp32" / "mix_statistics" / "step0"]
    proc = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, *map(str, paths)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "dump (outputs recorded in the dump)",
        "cpu (numpy in the dumped dtype; the statistics dump recorded no output values; "
        "torch is absent)",
    ]
