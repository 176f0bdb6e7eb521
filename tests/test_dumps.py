"""msprobe and native dump readers on the bundled real dumps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.model import ScalarArg, TensorRecord, canonical_dtype
from pytest_accuracy.dumps.msprobe import parse_node_name
from pytest_accuracy.errors import AccuracyInputError
from tests.helpers import ROOT, dump


@pytest.mark.parametrize(("variant", "config", "mode", "level", "n_calls"), [
    ("pt_fp32", "L1_tensor", "tensor", "L1", 122),
    ("pt_fp32", "L0_tensor", "tensor", "L0", 63),
    ("pt_fp32", "mix_statistics", "statistics", "mix", 185),
    ("pt_fp32", "L1_md5", "md5", "L1", 122),
    ("ms_fp32", "L1_tensor", "tensor", "L1", 171),
    ("ms_fp32", "mix_statistics", "statistics", "mix", 234),
])
def test_layouts_modes_and_node_counts(variant: str, config: str, mode: str, level: str,
                                       n_calls: int) -> None:
    dumps = load_dumps(dump(variant, config))
    assert dumps.keys() == [(0, 0), (1, 0)]  # proc<PID> becomes rank 0, never the PID
    first = next(iter(dumps))
    assert (first.mode, first.level, len(first)) == (mode, level, n_calls)


def test_every_layout_level_reads_the_same_dump() -> None:
    root = dump("pt_fp32", "mix_statistics_dist")
    rank_dir = root / "step1" / "rank0"
    assert load_dumps(root).keys() == [(0, 0), (1, 0)]
    assert load_dumps(root / "step1").keys() == [(1, 0)]
    assert load_dumps(rank_dir).keys() == [(1, 0)]
    assert load_dumps(rank_dir / "dump.json").keys() == [(1, 0)]
    assert load_dumps(root, steps={1}).keys() == [(1, 0)]


def test_forward_backward_and_parameter_grad_records() -> None:
    d = load_dumps(dump("pt_fp32", "L0_tensor")).dumps[(0, 0)]
    fwd = d.get("Module.layers.0.n1.RMSNorm.forward.0")
    assert fwd is not None and (fwd.kind, fwd.direction, fwd.op, fwd.scope) == (
        "module", "forward", "RMSNorm", "layers.0.n1")
    assert [p.path for p in fwd.parameters] == ["parameters.weight"]
    grad = d.get("Module.layers.0.attn.qkv.Linear.parameters_grad.0")
    assert grad is not None and grad.kind == "params_grad"
    assert [(o.path, o.shape) for o in grad.output_tensors] == [("grad.weight", (96, 32))]
    bwd = d.get("Module.emb.Embedding.backward.0")
    assert bwd is not None and bwd.direction == "backward" and bwd.outputs == []


def test_non_tensor_argument_kinds() -> None:
    d = load_dumps(dump("args_zoo", "pt")).dumps[(0, 0)]
    setitem = d.get("Tensor.__setitem__.0.forward")
    assert setitem is not None
    scalars = {a.path: (a.type_name, a.value) for a in setitem.scalar_inputs}
    assert scalars["input.1.1"] == ("slice", [1, 3, None])
    assert scalars["input.1.2"] == ("ellipsis", "...")
    total = d.get("Torch.sum.0.forward")
    assert total is not None
    assert {a.path: a.value for a in total.scalar_inputs}["input.dtype"] == "torch.float64"
    out = total.output_tensors[0]
    assert out.dtype == "float64" and out.stats.mean is None  # PT float64: no Mean/Norm


def test_stack_and_construct_are_attached() -> None:
    d = load_dumps(dump("pt_bug", "mix_statistics")).dumps[(0, 0)]
    call = d.get("Tensor.__add__.5.forward")
    assert call is not None and call.parent == "Module.layers.1.n1.RMSNorm.forward.0"
    assert call.stack_line() == (
        "File /data/fixtures/scripts/tinyllama_pt.py, line 34, in forward, return x * "
        "torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight")
    arg = call.inputs[1]
    assert isinstance(arg, ScalarArg) and arg.value == 1e-05


def test_tensor_records_load_lazily_with_original_dtype() -> None:
    d = load_dumps(dump("pt_bf16", "L1_tensor")).dumps[(0, 0)]
    call = d.get("Functional.linear.0.forward")
    assert call is not None
    out = call.output_tensors[0]
    assert isinstance(out, TensorRecord) and out.raw_dtype == "torch.bfloat16"
    array = out.load()
    assert str(array.dtype) == "bfloat16" and array.shape == out.shape


@pytest.mark.parametrize(("name", "parsed"), [
    ("Functional.linear.0.forward", ("api", "forward", "Functional", "linear", 0)),
    ("Tensor.__add__.7.backward", ("api", "backward", "Tensor", "__add__", 7)),
    ("Module.layers.0.attn.qkv.Linear.backward.2",
     ("module", "backward", "Module", "Linear", 2)),
    ("Cell.head.Dense.parameters_grad.0", ("params_grad", "params_grad", "Cell", "Dense", 0)),
])
def test_node_names(name: str, parsed: tuple[object, ...]) -> None:
    assert parse_node_name(name) == parsed


@pytest.mark.parametrize(("raw", "canonical"), [
    ("torch.float32", "float32"), ("Float32", "float32"), ("BFloat16", "bfloat16"),
    ("torch.bfloat16", "bfloat16"), ("torch.int64", "int64"), ("Bool", "bool"),
])
def test_dtype_names(raw: str, canonical: str) -> None:
    assert canonical_dtype(raw) == canonical


def test_native_mindspore_dump() -> None:
    dumps = load_dumps(ROOT / "example_data" / "native" / "ms_native_cpu")
    assert dumps.keys() == [(0, 0), (1, 0)]
    calls = next(iter(dumps)).calls
    assert [c.name for c in calls][:2] == ["MatMul.Expand__MatMulExt_MatMul-op0",
                                           "ReLU.Default_ReLU-op0"]
    relu = calls[1]
    assert relu.output_tensors[0].load().min() >= 0


def test_invalid_records_name_the_file_and_node(tmp_path: Path) -> None:
    bad = tmp_path / "dump.json"
    bad.write_text(json.dumps({"task": "tensor", "data": {"X.y.0.forward": {
        "input_args": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": "oops"}]}}}))
    with pytest.raises(AccuracyInputError, match=r"node 'X.y.0.forward': input.0 has an invalid"):
        load_dumps(bad)
    (tmp_path / "dump.json").write_text("[]")
    with pytest.raises(AccuracyInputError, match="no 'data' object at top level"):
        load_dumps(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AccuracyInputError, match=r"no dump\.json found"):
        load_dumps(empty)
