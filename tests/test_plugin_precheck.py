"""Precheck items through the plugin: clean dumps pass, a corrupted API fails, names are safe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import dump


def test_clean_mindspore_l1_dump_passes(pytester: pytest.Pytester) -> None:
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={dump('ms_fp32', 'L1_tensor')}", "--acc-precheck",
                                f"--acc-json={out}", "-p", "no:cacheprovider")
    assert result.ret == 0
    apis = json.loads(out.read_text())["precheck"]["apis"]
    assert len(apis) == 342 and {a["status"] for a in apis} == {"pass"}


def test_corrupted_output_fails_exactly_that_api(pytester: pytest.Pytester,
                                                 copy_dump: Any) -> None:
    npu = copy_dump("ms_fp32", "L1_tensor")
    step0 = next((npu / "step0").iterdir())
    target = step0 / "dump_tensor_data" / "Mint.softmax.0.forward.output.0.npy"
    np.save(target, np.load(target) * np.float32(1.01))
    rep = pytester.path / "rep"
    result = pytester.runpytest(f"--acc-npu={npu}", "--acc-precheck", f"--acc-report={rep}",
                                "-p", "no:cacheprovider")
    assert result.ret == 1
    failed = [line.split()[1] for line in result.stdout.lines if line.startswith("FAILED")]
    assert failed == ["accuracy::precheck::0/0/Mint.softmax.0.forward"]
    result.stdout.fnmatch_lines(["Mint.softmax.0.forward disagrees with the float64 CPU "
                                 "reference [default standard, *"])
    table = (rep / "precheck_accuracy_checking_result.csv").read_text()
    assert "0/0/Mint.softmax.0,error" in table


def test_unsafe_api_names_are_skipped_never_called(pytester: pytest.Pytester,
                                                   tmp_path: Path) -> None:
    target = tmp_path / "written_by_dump.pt"
    rank = tmp_path / "dump" / "step0" / "rank0"
    rank.mkdir(parents=True)
    record = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0,
              "Min": 0.0, "Mean": 0.5, "Norm": 1.0, "requires_grad": False}
    data = {"Torch.save.0.forward": {"input_args": [record, {"type": "str", "value": str(target)}],
                                     "input_kwargs": {}, "output": [None]}}
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1",
                                                "framework": "pytorch", "data": data}))
    result = pytester.runpytest(f"--acc-npu={tmp_path / 'dump'}", "--acc-precheck", "-rs",
                                "-p", "no:cacheprovider")
    assert not target.exists()
    assert result.ret != 0 or "skipped" in result.parseoutcomes()
    result.stdout.fnmatch_lines(["*SKIPPED*Torch.save*"])
