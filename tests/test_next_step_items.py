"""Failing items end with the guide's next action (issue 39): an L0 compare failure, the APIs
inside the module that makes the error; an L1 one, the precheck of that API; a loss check,
the steps to dump. With --acc-report the msprobe configs are written there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import ROOT, dump

LOGS = ROOT / "example_data" / "logs"


def test_an_l0_failure_says_which_module_to_dump_next(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(f"--acc-npu={dump('pt_bug', 'L0_tensor')}",
                                f"--acc-bench={dump('pt_fp32', 'L0_tensor')}",
                                "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([
        "*_ accuracy::compare::0/0/Module.layers.1.n1.RMSNorm.forward.0 _*",
        "This node MAKES an error of its own*",
        "Next: dump step 0 rank 0 as tensors at level mix inside Module.layers.1.n1; "
        "--acc-report=DIR writes the msprobe configs for it into DIR/next_step/ with the "
        "commands to run them."])


def test_an_l1_failure_writes_the_precheck_of_its_api(pytester: pytest.Pytester) -> None:
    report = pytester.path / "report"
    npu = dump("pt_bug", "L1_tensor")
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={dump('pt_fp32', 'L1_tensor')}",
                                f"--acc-report={report}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "Next: precheck Tensor.__add__.5 at step 0 rank 0 *: msprobe config written to *",
        f"  pytest --acc-npu={npu} --acc-precheck --acc-steps-select=0 --acc-ranks=0 "
        "-k Tensor.__add__.5."])
    (folder,) = (report / "next_step").iterdir()
    config = json.loads((folder / "config_pytorch.json").read_text())
    assert (config["task"], config["level"], config["step"]) == ("tensor", "L1", [0])
    assert config["tensor"]["list"] == ["Tensor.__add__.5."]
    assert "Next: precheck Tensor.__add__.5" in (folder / "next_step.txt").read_text()


def test_the_precheck_command_said_selects_that_api(pytester: pytest.Pytester) -> None:
    npu = pytester.path / "npu"
    shutil.copytree(dump("pt_bug", "L1_tensor"), npu)
    result = pytester.runpytest(f"--acc-npu={npu}", "--acc-precheck", "--acc-steps-select=0",
                                "--acc-ranks=0", "-k", "Tensor.__add__.5.", "--co", "-q",
                                "-p", "no:cacheprovider")
    assert [line for line in result.outlines if "::" in line] == [
        "accuracy::precheck::0/0/Tensor.__add__.5.forward",
        "accuracy::precheck::0/0/Tensor.__add__.5.backward"]


def test_a_loss_divergence_says_which_steps_to_dump(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(f"--acc-npu-log={LOGS / 'npu_late_drift.log'}",
                                f"--acc-bench-log={LOGS / 'megatron_bench_a.log'}",
                                f"--acc-bench-log={LOGS / 'megatron_bench_b.log'}",
                                "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([
        "*_ accuracy::loss::divergence _*",
        "Loss curves diverge from step 153:*",
        "",
        "Next: dump steps 151 and 152 on every rank at L0 statistics; --acc-report=DIR writes*"])


def test_a_next_step_folder_is_named_safely(pytester: pytest.Pytester) -> None:
    from pytest_accuracy.nextstep.writer import next_step_dir

    folder = next_step_dir(pytester.path, "accuracy::compare::0/0/../../etc\nx")
    assert folder.parent == pytester.path / "next_step" and "/" not in folder.name
    assert "\n" not in folder.name and ".." not in Path(folder.name).parts


MONITOR = ROOT / "example_data" / "monitor"


def poisoned(where: Path) -> Path:
    """The clean mix dump with one add's output made NaN (and its consumer's input)."""
    npu = where / "npu"
    shutil.copytree(dump("pt_fp32", "mix_statistics"), npu)
    path = next(npu.glob("step0/*/dump.json"))
    doc = json.loads(path.read_text())
    doc["data"]["Tensor.__add__.0.forward"]["output"][0]["Max"] = float("nan")
    doc["data"]["Torch.rsqrt.0.forward"]["input_args"][0]["Max"] = float("nan")
    path.write_text(json.dumps(doc))
    return npu


def _configs(report: Path) -> dict[str, dict[str, object]]:
    (folder,) = (report / "next_step").iterdir()
    assert (folder / "next_step.txt").read_text().startswith("Next: ")
    return {p.name: json.loads(p.read_text()) for p in folder.glob("*.json")}


def test_an_overflow_writes_the_replay_of_the_api_that_made_it(pytester: pytest.Pytester
                                                              ) -> None:
    report = pytester.path / "report"
    result = pytester.runpytest(f"--acc-npu={poisoned(pytester.path)}",
                                f"--acc-report={report}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "First NaN/Inf on the NPU: Tensor.__add__.0.forward (step 0, rank 0)*",
        "Next: dump step 0 rank 0 the inputs of Tensor.__add__.0 as tensors (L1), to replay it "
        "(about * MB): msprobe configs written to *",
        "  pytest --acc-npu=*dump_npu --acc-precheck --acc-steps-select=0 --acc-ranks=0 "
        "-k Tensor.__add__.0."])
    configs = _configs(report)
    plain, nan = configs["config_pytorch.json"], configs["config_pytorch_nan_check.json"]
    assert (plain["task"], plain["level"], plain["step"]) == ("tensor", "L1", [0])
    assert plain["tensor"] == {"scope": [], "list": ["Tensor.__add__.0."], "data_mode": ["all"]}
    assert (nan["task"], nan["level"], nan["step"]) == ("nan_check", "L1", [0])


def test_a_precheck_miss_writes_msprobes_own_check_of_that_api(pytester: pytest.Pytester
                                                              ) -> None:
    import numpy as np

    npu = pytester.path / "npu"
    shutil.copytree(dump("ms_fp32", "L1_tensor"), npu)
    target = next(npu.glob("step0/*/dump_tensor_data/Mint.softmax.0.forward.output.0.npy"))
    np.save(target, np.load(target) * np.float32(1.01))
    report = pytester.path / "report"
    result = pytester.runpytest(f"--acc-npu={npu}", "--acc-precheck", "-k", "softmax",
                                f"--acc-report={report}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "Next: precheck Mint.softmax.0 at step 0 rank 0 *: msprobe config written to *",
        f"  msprobe acc_check -api_info {npu}/step0/*/dump.json -o *acc_check",
        f"  pytest --acc-npu={npu} --acc-precheck --acc-steps-select=0 --acc-ranks=0 "
        "-k Mint.softmax.0."])
    config = _configs(report)["config_mindspore.json"]
    assert (config["task"], config["level"], config["step"]) == ("tensor", "L1", [0])
    assert config["tensor"]["list"] == ["Mint.softmax.0."]  # type: ignore[index]


def test_a_monitor_parting_writes_the_dump_inside_that_parameters_module(
        pytester: pytest.Pytester) -> None:
    report = pytester.path / "report"
    result = pytester.runpytest(f"--acc-npu-monitor={MONITOR / 'bug'}",
                                f"--acc-bench-monitor={MONITOR / 'bench'}",
                                f"--acc-report={report}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "Next: dump step 2 rank 0 as tensors at level mix inside "
        "Module.model.layers.1.mlp.down_proj (size unknown*): msprobe configs written to *"])
    configs = _configs(report)
    assert set(configs) == {"config_npu_pytorch.json", "config_bench_pytorch.json"}
    for config in configs.values():  # the step the gradients part at, that module only
        assert (config["task"], config["level"], config["step"]) == ("tensor", "mix", [2])
        assert config["tensor"]["list"] == [  # type: ignore[index]
            "Module.model.layers.1.mlp.down_proj."]
