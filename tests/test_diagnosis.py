"""The diagnosis rules end to end (issue 10): local error, twins, nothing compared."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import dump


def run(pytester: pytest.Pytester, npu: Path, bench: Path, *args: str) -> pytest.RunResult:
    return pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", "-p", "no:cacheprovider",
                              *args)


def _scale(root: Path, step: int, name: str, factor: float) -> None:
    """Scale one recorded tensor file of a copied MindSpore dump (its .npy data) and its
    record's statistics, as the run that made it would have recorded them."""
    rank = next((root / f"step{step}").iterdir())
    path = rank / "dump_tensor_data" / f"{name}.npy"
    data = np.load(path)
    scaled = (data.astype(np.float64) * factor).astype(data.dtype)
    np.save(path, scaled)
    doc = json.loads((rank / "dump.json").read_text())
    _restat(doc, path.name, scaled.astype(np.float64))
    (rank / "dump.json").write_text(json.dumps(doc))


def _restat(value: object, data_name: str, data: np.ndarray) -> None:
    if isinstance(value, list):
        for item in value:
            _restat(item, data_name, data)
    elif isinstance(value, dict):
        if value.get("data_name") == data_name:
            value.update(Max=float(data.max()), Min=float(data.min()),
                         Mean=float(data.mean()), Norm=float(np.linalg.norm(data)))
        for item in value.values():
            _restat(item, data_name, data)


def test_local_error_inside_the_band_is_found(pytester: pytest.Pytester, copy_dump) -> None:  # type: ignore[no-untyped-def]
    # rsqrt's output off by 3e-5: inside the fp32 band (1e-4), but its own inputs replayed in
    # float64 say the NPU kernel made it; nothing downstream reads the changed file
    npu = copy_dump("ms_fp32", "L1_tensor")
    _scale(npu, 0, "Mint.rsqrt.0.forward.output.0", 1 + 3e-5)
    result = run(pytester, npu, dump("ms_fp32", "L1_tensor"))
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "First divergence: Mint.rsqrt.0.forward (step 0, rank 0), output.0: its own computation "
        "is off: local error 3e-05 vs bench *e-08 (output.0), replaying each side's own inputs "
        "in float64.*"])
    result.stdout.fnmatch_lines([
        "This node MAKES an error of its own: its outputs are further from a float64 replay of "
        "its own inputs than the bench's are."])
    assert result.parseoutcomes()["failed"] == 1


def test_twins_hold_the_next_step_to_rounding_and_blame_the_update(
        pytester: pytest.Pytester, copy_dump) -> None:  # type: ignore[no-untyped-def]
    # step 0 identical; in step 1 the embedding table differs by 2e-6 (an optimizer
    # difference): far inside fp32's 1e-4, but twins are held to rounding level
    npu = copy_dump("ms_fp32", "L1_tensor")
    for tensor in ("input.0", "output.0"):
        _scale(npu, 1, f"Functional.gather.0.forward.{tensor}", 1 + 2e-6)
    result = run(pytester, npu, dump("ms_fp32", "L1_tensor"))
    assert result.ret == 1
    # the table's statistics moved with it, as msprobe records them: the update finding
    result.stdout.fnmatch_lines([
        "First divergence: Functional.gather.0.forward (step 1, rank 0), output.0: input.0 "
        "differs from the bench's although step 0 was identical: the update between step 0 and "
        "step 1 changed it differently; relative error 2e-06 (up to 2.38419e-07 allowed)*"
        "Step 0 was identical between "
        "the runs (same weights, data and deterministic kernels), so the difference was made by "
        "the update between step 0 and step 1: compare the optimizer settings (lr, betas, eps, "
        "weight decay and the parameters it applies to), gradient clipping and loss scaling.*"])


def _restate(root: Path, step: int, node: str, arg: int) -> None:
    """Rewrite one input's statistics in dump.json from its (changed) tensor file, as msprobe
    would have recorded them."""
    rank = next((root / f"step{step}").iterdir())
    doc = json.loads((rank / "dump.json").read_text())
    record = doc["data"][node]["input_args"][arg]
    data = np.load(rank / "dump_tensor_data" / record["data_name"]).astype(np.float64)
    record.update(Max=float(data.max()), Min=float(data.min()), Mean=float(data.mean()),
                  Norm=float(np.linalg.norm(data)))
    (rank / "dump.json").write_text(json.dumps(doc))


def _scalar_only_dump(root: Path) -> Path:
    rank = root / "step0" / "rank0"
    rank.mkdir(parents=True)
    node = {"input_args": [{"type": "int", "value": 3}], "input_kwargs": {},
            "output": [{"type": "int", "value": 3}]}
    doc = {"task": "statistics", "level": "L1", "framework": "pytorch",
           "dump_data_dir": None, "data": {"Torch.abs.0.forward": node}}
    # each run writes its own file (indented by the run's name: the same run twice is refused)
    (rank / "dump.json").write_text(json.dumps(doc, indent=len(root.name)))
    return root


def test_a_compare_that_compared_no_tensor_fails(pytester: pytest.Pytester) -> None:
    npu = _scalar_only_dump(pytester.path / "npu")
    bench = _scalar_only_dump(pytester.path / "bench")
    result = run(pytester, npu, bench)
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "Nothing was compared: none of the 1 matched NPU nodes has a tensor output that the "
        "bench also recorded, so no accuracy was checked.",
    ])
    result.stdout.fnmatch_lines(["Nothing was compared: none of the 1 NPU nodes had a tensor "
                                 "to compare with the bench (see the skip reasons)."])


def test_under_xdist_the_first_divergence_leads_the_failures_and_ends_the_summary(
        pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    out = pytester.path / "acc.json"
    result = pytester.runpytest_subprocess(
        f"--acc-npu={dump('pt_bug', 'L0_tensor')}", f"--acc-bench={dump('pt_fp32', 'L0_tensor')}",
        "-n", "2", "-p", "no:cacheprovider", f"--acc-json={out}")
    assert result.ret == 1
    text = result.stdout.str()
    blocks = [line for line in text.splitlines() if line.startswith("_") and "accuracy::" in line]
    assert "accuracy::compare::0/0/Module.layers.1.n1.RMSNorm.forward.0" in blocks[0]
    section = text.split("= accuracy =")[1].splitlines()
    last = [line for line in section if line and not line.startswith(("=", "FAILED"))][-1]
    assert last.startswith("First divergence: Module.layers.1.n1.RMSNorm.forward.0 (step 0")
    serial = pytester.path / "serial.json"
    pytester.runpytest_subprocess(
        f"--acc-npu={dump('pt_bug', 'L0_tensor')}", f"--acc-bench={dump('pt_fp32', 'L0_tensor')}",
        "-p", "no:cacheprovider", f"--acc-json={serial}")
    statuses = {(n["step"], n["npu_name"]): n["status"]
                for n in json.loads(out.read_text())["compare"]["nodes"]}
    assert statuses == {(n["step"], n["npu_name"]): n["status"]
                        for n in json.loads(serial.read_text())["compare"]["nodes"]}


def test_a_parameter_the_update_changed_fails_below_rounding_level(
        pytester: pytest.Pytester, copy_dump) -> None:  # type: ignore[no-untyped-def]
    # step 0 identical; in step 1 the embedding table read by gather differs by 1e-7 relative
    # (an Adam eps of 1e-6 vs 1e-8 moves a first update about this much) and its output is
    # unchanged: under every value tolerance, but after an identical step any change in a
    # parameter no recorded node produced was made by the update
    npu = copy_dump("ms_fp32", "L1_tensor")
    _scale(npu, 1, "Functional.gather.0.forward.input.0", 1 + 1e-7)
    _restate(npu, 1, "Functional.gather.0.forward", 0)
    result = run(pytester, npu, dump("ms_fp32", "L1_tensor"))
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "First divergence: Functional.gather.0.forward (step 1, rank 0)*input.0 differs from "
        "the bench's although step 0 was identical: the update between step 0 and step 1 "
        "changed it differently*"])
    assert result.parseoutcomes()["failed"] == 1


def test_an_output_identical_to_the_bench_is_not_blamed_for_its_inputs(
        pytester: pytest.Pytester, copy_dump) -> None:  # type: ignore[no-untyped-def]
    # rsqrt's dumped input off by 3e-5 and its output bit-identical to the bench's: a float64
    # replay of the NPU's own input would call that output "off" by 3e-5; it is the bench's
    npu = copy_dump("ms_fp32", "L1_tensor")
    _scale(npu, 0, "Mint.rsqrt.0.forward.input.0", 1 + 3e-5)
    result = run(pytester, npu, dump("ms_fp32", "L1_tensor"), "--acc-json=acc.json")
    assert "Mint.rsqrt.0.forward (step 0" not in result.stdout.str()
    nodes = json.loads((pytester.path / "acc.json").read_text())["compare"]["nodes"]
    rsqrt = next(n for n in nodes if n["npu_name"] == "Mint.rsqrt.0.forward" and n["step"] == 0)
    assert (rsqrt["status"], rsqrt["local_error"], rsqrt["finding"]) == ("pass", None, None)


def _layers_dump(root: Path, layers: list[int]) -> Path:
    """A statistics dump of a model whose decoder layers are ``layers`` (each output a little
    larger than the last), construct.json giving each layer the model as parent."""
    rank = root / "step0" / "rank0"
    rank.mkdir(parents=True)
    data, parents = {}, {"Module.model.Model.forward.0": None}
    for n in layers:
        stats = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 4],
                 "Max": 1.0 + n, "Min": -1.0, "Mean": 0.5, "Norm": 3.0 + n}
        name = f"Module.model.layers.{n}.Block.forward.0"
        data[name] = {"input_args": [], "input_kwargs": {}, "output": [stats]}
        parents[name] = "Module.model.Model.forward.0"
    data["Module.model.Model.forward.0"] = {"input_args": [], "input_kwargs": {},
                                            "output": [data[name]["output"][0]]}
    doc = {"task": "statistics", "level": "L0", "framework": "pytorch", "dump_data_dir": None,
           "data": data}
    (rank / "dump.json").write_text(json.dumps(doc))
    (rank / "construct.json").write_text(json.dumps(parents))
    return root


def test_a_decoder_layer_the_npu_run_skips_fails_coverage_naming_it(
        pytester: pytest.Pytester) -> None:
    """Every NPU node pairs (100 %), yet the bench's layer 2 of 4 has no NPU counterpart: a
    layer the NPU model leaves out is named, and the bench's unpaired nodes are counted."""
    npu = _layers_dump(pytester.path / "npu", [0, 1, 3])
    bench = _layers_dump(pytester.path / "bench", [0, 1, 2, 3])
    out = pytester.path / "acc.json"
    result = run(pytester, npu, bench, f"--acc-json={out}")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*The NPU run skips 1 bench module call(s) whose like siblings all have an NPU "
        "counterpart:*",
        "*step 0 rank 0: bench Module.model.layers.2.Block.forward.0 has no NPU counterpart "
        "while 3 of its 4 like siblings pair*",
        "Matched 4 of 4 NPU nodes (100.0%; at least 50% required). 1 of 5 bench nodes have no "
        "NPU counterpart."])
    coverage = json.loads(out.read_text())["compare"]["coverage"]
    assert (coverage["bench_matched"], coverage["bench_total"]) == (4, 5)


def test_all_layers_present_pass_coverage(pytester: pytest.Pytester) -> None:
    npu = _layers_dump(pytester.path / "npu", [0, 1, 2, 3])
    bench = _layers_dump(pytester.path / "bench", [0, 1, 2, 3])
    (bench / "step0" / "rank0" / "dump.json").write_text(
        (bench / "step0" / "rank0" / "dump.json").read_text() + "\n")  # a rerun's own file
    result = run(pytester, npu, bench, "-k", "coverage")
    assert result.ret == 0
