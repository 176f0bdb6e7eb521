"""Findings where the two runs' calls differ in form: positional scalars, module classes."""

from __future__ import annotations

from pytest_accuracy.compare.findings import module_class_finding, scalar_diffs
from pytest_accuracy.compare.results import ScalarDiff
from pytest_accuracy.dumps.model import Call, ScalarArg, Stats, TensorRecord


def _add(prefix: str, op: str, eps: float) -> Call:
    x = TensorRecord("input.0", "input", "float32", "float32", (2, 8), Stats())
    return Call(f"{prefix}.{op}.5.forward", "api", "forward", 0, prefix=prefix, op=op, index=5,
                inputs=[x, ScalarArg("input.1", "float", eps)])


def test_positional_eps_compared_across_frameworks_where_the_op_is_the_same() -> None:
    """RMSNorm's ``x + eps``: Tensor.__add__ in both frameworks, eps its positional input.1.
    Only shared keywords were compared across frameworks: an eps of 1e-5 vs 1e-6 hid."""
    ms, pt = _add("Tensor", "__add__", 1e-5), _add("Tensor", "__add__", 1e-6)
    assert scalar_diffs(ms, pt, same_framework=False) == [ScalarDiff("input.1", 1e-5, 1e-6)]
    # MindSpore's Mint.add is torch.add under the built-in map: the same op
    assert scalar_diffs(_add("Mint", "add", 1e-5), _add("Torch", "add", 1e-6), False)
    # another op on the bench side (an aligned pair of different APIs): positions mean nothing
    assert scalar_diffs(_add("Tensor", "__add__", 1e-5), _add("Torch", "mul", 1e-6), False) == []
    # keywords other than those of a shared meaning differ by design (a group's name)
    ms.inputs.append(ScalarArg("input.group", "str", "tp-0-1-2-3"))
    pt.inputs.append(ScalarArg("input.group", "NoneType", None))
    assert scalar_diffs(ms, pt, same_framework=False) == [ScalarDiff("input.1", 1e-5, 1e-6)]


def _module(cls: str) -> Call:
    return Call(f"Module.layers.1.mlp.act_fn.{cls}.forward.0", "module", "forward", 0,
                prefix="Module", op=cls, scope="layers.1.mlp.act_fn")


def test_module_class_differs_is_a_finding() -> None:
    gelu, silu = _module("GELUActivation"), _module("SiLUActivation")
    found = module_class_finding(gelu, silu, same_framework=True)
    assert found is not None and found.kind == "module_class"
    assert "npu GELUActivation vs bench SiLUActivation at layers.1.mlp.act_fn" in found.detail
    # across frameworks classes are named apart (LLamaDecodeLayer vs Block): only an
    # activation computing another function is a finding
    assert module_class_finding(gelu, silu, same_framework=False) is not None
    assert module_class_finding(_module("LLamaDecodeLayer"), _module("Block"), False) is None
    assert module_class_finding(_module("SiLU"), _module("SiLUActivation"), False) is None
    assert module_class_finding(_module("Swish"), _module("SiLU"), False) is None
    assert module_class_finding(silu, silu, same_framework=True) is None
