"""What a fused attention call promises, checked on the other run's eager chain."""

from __future__ import annotations

import math

from pytest_accuracy.compare.contract import chain_contract
from pytest_accuracy.dumps.model import Call, ScalarArg, Stats, TensorRecord


def _rec(path: str, dtype: str = "float32", shape: tuple[int, ...] = (2, 4, 8, 8)) -> TensorRecord:
    role = "output" if path.startswith("output") else "input"
    return TensorRecord(path, role, dtype, f"torch.{dtype}", shape, Stats(1.0, -1.0, 0.0, 3.0))


def _call(name: str, *scalars: tuple[str, object], dtype: str = "float32") -> Call:
    op = name.split(".")[-3]
    inputs: list[TensorRecord | ScalarArg] = [_rec("input.0")]
    inputs += [ScalarArg(path, type(v).__name__, v) for path, v in scalars]
    return Call(name, "api", "forward", 0, inputs=inputs, outputs=[_rec("output.0", dtype)],
                prefix=name.split(".")[0], op=op)


def _sdpa(scale: object = None, dtype: str = "float32") -> Call:
    call = _call("Functional.scaled_dot_product_attention.0.forward",
                 ("input.scale", scale), ("input.is_causal", True), dtype=dtype)
    call.inputs[1:1] = [_rec("input.1"), _rec("input.2")]
    return call


def _chain(scale: float, softmax_dtype: str = "float32") -> list[Call]:
    return [_call("Torch.einsum.0.forward"), _call("Tensor.__mul__.0.forward", ("input.1", scale)),
            _call("Functional.softmax.0.forward", dtype=softmax_dtype),
            _call("Torch.einsum.1.forward")]


def test_the_default_scale_is_one_over_the_root_of_the_head_size() -> None:
    """scale=None: 1/sqrt(8) for a query of last dimension 8; the chain's mul keeps it."""
    assert chain_contract(_chain(1 / math.sqrt(8)), _sdpa(None), "float32") is None
    found = chain_contract(_chain(1 / 8), _sdpa(None), "float32")
    assert found is not None and (found.kind, found.via) == ("argument", "Tensor.__mul__.0.forward")
    assert "scaled by 0.125" in found.detail and "scales by 0.353553" in found.detail
    # a division by sqrt(d) is the same scale; the given scale wins over the default
    div = [_call("Tensor.__truediv__.0.forward", ("input.1", math.sqrt(8)))]
    assert chain_contract(div, _sdpa(None), "float32") is None
    assert chain_contract(div, _sdpa(0.5), "float32") is not None


def test_a_chain_below_the_fused_calls_precision_is_named_unless_the_step_went_there() -> None:
    found = chain_contract(_chain(1 / math.sqrt(8), "float16"), _sdpa(), "float32")
    assert found is not None and (found.kind, found.via) == (
        "precision", "Functional.softmax.0.forward")
    # both runs already went through float16 (the step's effective dtype): two codebases
    # place their casts apart
    assert chain_contract(_chain(1 / math.sqrt(8), "float16"), _sdpa(), "float16") is None
    # a chain with no scaling call says nothing of the scale
    assert chain_contract([_call("Torch.einsum.0.forward")], _sdpa(0.1), "float32") is None


def test_a_causal_fused_call_holds_the_chains_softmax_to_a_first_row_of_one() -> None:
    """Statistics only: a causal first row attends to itself alone, so the chain's softmax
    has Max 1; a mask shifted by one leaves no row of one position (Max 0.52)."""
    def softmax(high: float) -> Call:
        call = _call("Functional.softmax.0.forward")
        call.outputs = [TensorRecord("output.0", "output", "float32", "torch.float32",
                                     (2, 4, 8, 8), Stats(high, 0.0, 0.125, 4.66))]
        return call

    chain = [_call("Torch.einsum.0.forward"), softmax(0.5169), _call("Torch.einsum.1.forward")]
    found = chain_contract(chain, _sdpa(None), "float32")
    assert found is not None and (found.kind, found.via) == (
        "argument", "Functional.softmax.0.forward")
    assert "the region's mask is not causal" in found.detail
    chain[1] = softmax(1.0)
    assert chain_contract(chain, _sdpa(None), "float32") is None
    not_causal = _sdpa(None)
    not_causal.inputs = [a for a in not_causal.inputs
                         if getattr(a, "path", "") != "input.is_causal"]
    chain[1] = softmax(0.5169)
    assert chain_contract(chain, not_causal, "float32") is None  # nothing promised
