"""The precheck's numpy references and gradients agree with torch in float64; arg rebuilding."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from pytest_accuracy.dumps.model import ScalarArg, Stats, TensorRecord
from pytest_accuracy.precheck.args import Bound, DType, Signature, Unsupported, rebuild
from pytest_accuracy.precheck.inputs import case_seed, generate
from pytest_accuracy.precheck.registry import REFERENCES, no_reference_reason, resolve

RNG = np.random.default_rng(7)


def _r(*shape: int, positive: bool = False) -> np.ndarray:
    x = RNG.standard_normal(shape)
    return np.abs(x) + 0.5 if positive else x


def _ints(high: int, *shape: int) -> np.ndarray:
    return RNG.integers(0, high, size=shape).astype(np.int64)


UNARY_OPS = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "square", "sin", "cos", "tanh")
UNARY_OPS += ("sigmoid", "relu", "silu")

# canonical op -> argument sets (canonical parameter names), float64 tensors as numpy.
SAMPLES: dict[str, list[dict[str, Any]]] = {
    "linear": [
        {"input": _r(2, 3, 4), "weight": _r(5, 4), "bias": _r(5)},
        {"input": _r(3, 4), "weight": _r(4, 4), "bias": None},
    ],
    "matmul": [
        {"input": _r(2, 3, 4), "other": _r(4, 5)},
        {"input": _r(4), "other": _r(2, 4, 3)},
        {"input": _r(2, 1, 3, 4), "other": _r(5, 4, 2)},
        {"input": _r(3, 4), "other": _r(4)},
    ],
    "add": [{"input": _r(2, 3), "other": _r(3), "alpha": 2.0}, {"input": _r(2, 3), "other": 0.5}],
    "sub": [{"input": _r(2, 3), "other": _r(2, 1), "alpha": 0.5}],
    "rsub": [{"input": _r(2, 3), "other": _r(3)}],
    "mul": [{"input": _r(2, 3), "other": _r(2, 3)}, {"input": _r(2, 3), "other": 0.25}],
    "div": [{"input": _r(2, 3), "other": _r(3, positive=True)}],
    "rdiv": [{"input": _r(2, 3, positive=True), "other": 2.0}],
    "pow": [
        {"input": _r(2, 3), "exponent": 2},
        {"input": _r(2, 3, positive=True), "exponent": _r(3)},
    ],
    "maximum": [{"input": _r(2, 3), "other": _r(3)}],
    "minimum": [{"input": _r(2, 3), "other": _r(2, 3)}],
    "where": [{"condition": RNG.random((2, 3)) > 0.5, "input": _r(2, 3), "other": _r(3)}],
    "masked_fill": [{"input": _r(2, 3), "mask": RNG.random((2, 3)) > 0.5, "value": 0.5}],
    **{op: [{"input": _r(3, 4, positive=op in ("log", "sqrt", "rsqrt"))}] for op in UNARY_OPS},
    "gelu": [
        {"input": _r(3, 4), "approximate": "none"},
        {"input": _r(3, 4), "approximate": "tanh"},
    ],
    "softmax": [{"input": _r(2, 3, 4), "dim": -1}, {"input": _r(2, 3, 4), "dim": None}],
    "log_softmax": [{"input": _r(2, 5), "dim": 1}],
    "sum": [{"input": _r(2, 3, 4), "dim": [0, 2], "keepdim": True}, {"input": _r(2, 3)}],
    "mean": [{"input": _r(2, 3, 4), "dim": -1, "keepdim": False}],
    "max": [{"input": _r(3, 4), "dim": 1, "keepdim": False}, {"input": _r(3, 4)}],
    "min": [{"input": _r(3, 4), "dim": 0, "keepdim": True}],
    "cross_entropy": [
        {"input": _r(6, 5), "target": _ints(5, 6)},
        {
            "input": _r(6, 5),
            "target": np.array([0, 1, -100, 4, 2, 2]),
            "weight": _r(5, positive=True),
            "label_smoothing": 0.1,
        },
        {"input": _r(2, 5, 3), "target": _ints(5, 2, 3), "reduction": "sum"},
        {"input": _r(4, 5), "target": _ints(5, 4), "reduction": "none"},
        {"input": _r(4, 5), "target": np.abs(_r(4, 5)), "label_smoothing": 0.2},
    ],
    "layer_norm": [
        {"input": _r(2, 3, 4), "normalized_shape": [4], "weight": _r(4), "bias": _r(4)},
        {"input": _r(2, 3, 4), "normalized_shape": [3, 4], "eps": 1e-3},
    ],
    "rms_norm": [{"input": _r(2, 3, 4), "normalized_shape": [4], "weight": _r(4), "eps": 1e-6}],
    "embedding": [{"input": _ints(6, 2, 3), "weight": _r(6, 4)}],
    "transpose": [{"input": _r(2, 3, 4), "dim0": 0, "dim1": 2}],
    "permute": [{"input": _r(2, 3, 4), "dims": [2, 0, 1]}],
    "reshape": [{"input": _r(2, 3, 4), "shape": [4, -1]}],
    "flatten": [{"input": _r(2, 3, 4), "start_dim": 1}],
    "unsqueeze": [{"input": _r(2, 3), "dim": -1}],
    "squeeze": [{"input": _r(2, 1, 3), "dim": [1]}],
    "split": [
        {"input": _r(2, 7), "split_size_or_sections": 3, "dim": 1},
        {"input": _r(6, 2), "split_size_or_sections": [1, 5]},
    ],
    "chunk": [{"input": _r(7, 2), "chunks": 3}],
    "cat": [{"tensors": [_r(2, 3), _r(1, 3)], "dim": 0}],
    "triu": [{"input": _r(2, 4, 4), "diagonal": 1}],
    "tril": [{"input": _r(4, 5), "diagonal": -1}],
    "cumsum": [{"input": _r(3, 4), "dim": 1}],
    "swiglu": [{"input": _r(2, 3, 8), "dim": -1}],
    "rotary_mul": [{"input": _r(2, 3, 4, 8), "r1": _r(1, 3, 1, 8), "r2": _r(1, 3, 1, 8)}],
    "sdpa": [
        {"query": _r(2, 2, 5, 4), "key": _r(2, 2, 6, 4), "value": _r(2, 2, 6, 4)},
        {
            "query": _r(1, 2, 4, 4),
            "key": _r(1, 2, 4, 4),
            "value": _r(1, 2, 4, 4),
            "is_causal": True,
        },
    ],
    "full": [{"size": [2, 3], "fill_value": -1.5}],
    "gt": [{"input": _r(3, 4), "other": 0.1}],
    "cast": [{"input": _r(3)}],
    "getitem": [
        {"input": _r(2, 3, 4), "index": [slice(None), slice(1, 3, None), Ellipsis]},
        {"input": _r(4, 3), "index": [np.array([0, 2, 2]), 1]},
        {"input": _r(4, 3), "index": -1},
    ],
}

CASES = [(op, i) for op, samples in SAMPLES.items() for i in range(len(samples))]


def _to_torch(torch: Any, value: Any, grad: bool) -> Any:
    if isinstance(value, np.ndarray):
        tensor = torch.from_numpy(value.copy())
        if grad and tensor.is_floating_point():
            tensor.requires_grad_(True)
        return tensor
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return [_to_torch(torch, v, grad) for v in value]
    return value


@pytest.mark.parametrize(("op", "index"), CASES, ids=[f"{o}-{i}" for o, i in CASES])
def test_reference_matches_torch_float64(op: str, index: int) -> None:
    """Forward and (where we have one) gradient of every reference equal torch's in float64."""
    torch = pytest.importorskip("torch")
    from pytest_accuracy.precheck.torch_ops import TORCH_OPS

    values = SAMPLES[op][index]
    ref = REFERENCES[op]
    grad = {k: k not in ref.no_grad for k in values}
    expected_bound = Bound({k: _to_torch(torch, v, grad[k]) for k, v in values.items()}, {})
    result = TORCH_OPS[op](torch, expected_bound)
    expected = list(result) if isinstance(result, (tuple, list)) else [result]
    got = ref.forward(Bound(values, {}))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e.detach().numpy(), rtol=1e-9, atol=1e-12)
    if ref.backward is None:
        return
    seeds = [RNG.standard_normal(e.shape) if e.is_floating_point() else None for e in expected]
    pairs = [(e, s) for e, s in zip(expected, seeds, strict=True) if s is not None]
    leaves = {
        k: v
        for k, v in expected_bound.values.items()
        if isinstance(v, torch.Tensor) and v.requires_grad
    }
    grads = torch.autograd.grad(
        [e for e, _ in pairs],
        list(leaves.values()),
        [torch.from_numpy(s) for _, s in pairs],
        allow_unused=True,
    )
    ours = ref.backward(Bound(values, {}), seeds)
    for name, grad in zip(leaves, grads, strict=True):
        if grad is None:
            continue
        assert name in ours, f"{op}: no gradient for {name}"
        np.testing.assert_allclose(ours[name], grad.numpy(), rtol=1e-9, atol=1e-12)


def test_fused_rms_norm_and_gather_match_their_definitions() -> None:
    x, w = _r(2, 3, 4), _r(4)
    y, rstd = REFERENCES["rms_norm"].forward(Bound({"input": x, "weight": w, "fused": True}, {}))
    # 1e-6: the documented default of torch_npu.npu_rms_norm and mindspore.ops.rms_norm
    expected_rstd = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(rstd, expected_rstd, rtol=1e-12)
    np.testing.assert_allclose(y, x * expected_rstd * w, rtol=1e-12)
    params, idx = _r(6, 4), _ints(4, 2, 3)
    (taken,) = REFERENCES["gather"].forward(Bound({"input": params, "indices": idx, "axis": 1}, {}))
    np.testing.assert_array_equal(taken, np.take(params, idx, axis=1))
    grads = REFERENCES["gather"].backward(  # type: ignore[misc]
        Bound({"input": params, "indices": idx, "axis": 1}, {}), [np.ones(taken.shape)]
    )
    counts = np.zeros(4)
    np.add.at(counts, idx.ravel(), 1)
    np.testing.assert_allclose(grads["input"], np.broadcast_to(counts, (6, 4)))


def test_fusion_attention_layouts_and_masks_agree_with_plain_attention() -> None:
    q, k, v = _r(2, 5, 8), _r(2, 5, 8), _r(2, 5, 8)  # BSH, 2 heads of 4
    base = {"query": q, "key": k, "value": v, "head_num": 2, "input_layout": "BSH"}
    (causal,) = REFERENCES["fusion_attention"].forward(
        Bound({**base, "scale": 0.5, "sparse_mode": 2}, {})
    )
    qh, kh, vh = (a.reshape(2, 5, 2, 4).transpose(0, 2, 1, 3) for a in (q, k, v))
    scores = qh @ kh.transpose(0, 1, 3, 2) * 0.5
    scores = np.where(np.triu(np.ones((5, 5), bool), 1), -np.inf, scores)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    expected = (probs @ vh).transpose(0, 2, 1, 3).reshape(2, 5, 8)
    np.testing.assert_allclose(causal, expected, rtol=1e-9, atol=1e-12)
    mask = np.triu(np.ones((5, 5), dtype=bool), 1)
    (masked,) = REFERENCES["fusion_attention"].forward(
        Bound({**base, "scale": 0.5, "atten_mask": mask}, {})
    )
    np.testing.assert_allclose(masked, expected, rtol=1e-9, atol=1e-12)
    with pytest.raises(Unsupported, match="keep_prob"):
        REFERENCES["fusion_attention"].forward(Bound({**base, "keep_prob": 0.9}, {}))


def test_rebuild_positional_keyword_nested_and_holes() -> None:
    def t(path: str) -> TensorRecord:
        return TensorRecord(path, "input", "float32", "torch.float32", (2,), Stats())

    args = [
        t("input.0"),
        ScalarArg("input.1.0", "int", 1),
        ScalarArg("input.1.1", "int", 2),
        ScalarArg("input.3", "slice", [None, 4, 2]),
        ScalarArg("input.dim.0", "int", 0),
        ScalarArg("input.dtype", "torch.dtype", "torch.bfloat16"),
        ScalarArg("input.device", "torch.device", "npu:0"),
        ScalarArg("input.4", "ellipsis", "..."),
    ]
    positional, kwargs = rebuild(args, lambda r: r.path)
    assert positional == ["input.0", [1, 2], [], slice(None, 4, 2), Ellipsis]
    assert kwargs == {"dim": [0], "dtype": DType("bfloat16")}


def test_signature_binding_rules() -> None:
    sig = Signature(("input", "dim"), aliases={"axis": "dim"})
    assert sig.bind([1], {"axis": 2}) == {"input": 1, "dim": 2}
    assert sig.bind([1], {"inplace": True}) == {"input": 1}
    with pytest.raises(Unsupported, match="keyword argument 'out'"):
        sig.bind([1], {"out": 3})
    with pytest.raises(Unsupported, match="positional"):
        sig.bind([1, 2, 3], {})
    varargs = Signature(("input",), varargs="shape")
    assert varargs.bind(["x", 2, -1], {}) == {"input": "x", "shape": [2, -1]}
    assert varargs.bind(["x", [2, -1]], {}) == {"input": "x", "shape": [2, -1]}
    with pytest.raises(Unsupported, match="not supported"):
        rebuild([ScalarArg("input.0", "builtins.function", "os.system")], lambda r: r)


def test_dump_names_resolve_only_by_exact_lookup() -> None:
    assert resolve("pytorch", "Functional.linear").op == "linear"  # type: ignore[union-attr]
    assert resolve("mindspore", "Functional.dense").op == "linear"  # type: ignore[union-attr]
    assert resolve("mindspore", "Functional.gather").op == "gather"  # type: ignore[union-attr]
    assert resolve("pytorch", "NPU.npu_rms_norm").op == "rms_norm"  # type: ignore[union-attr]
    for name in (
        "Torch.save",
        "Mint.save",
        "Tensor.__reduce_ex__",
        "Functional.linear ",
        "os.system",
    ):
        assert resolve("pytorch", name) is None and resolve("mindspore", name) is None
    assert resolve("pytorch", "Mint.matmul") is None  # MindSpore names are not PyTorch names
    assert resolve("tensorflow", "Functional.linear") is None


def test_precheck_sources_never_resolve_names_dynamically() -> None:
    from pathlib import Path

    import pytest_accuracy.precheck as pkg

    for path in Path(pkg.__file__).parent.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        for banned in ("getattr(", "eval(", "exec(", "import_module(", "__import__("):
            assert banned not in text, f"{path.name} uses {banned}"


def _record(
    dtype: str, shape: tuple[int, ...], low: float | None, high: float | None
) -> TensorRecord:
    return TensorRecord("input.0", "input", dtype, dtype, shape, Stats(max=high, min=low))


@pytest.mark.parametrize(
    ("dtype", "low", "high"),
    [("float32", -2.0, 3.0), ("bfloat16", 0.0, 1.0), ("int64", 1, 63), ("bool", 0, 1)],
)
def test_generated_inputs_span_the_recorded_range(dtype: str, low: float, high: float) -> None:
    values = generate(_record(dtype, (4, 50), low, high), np.random.default_rng(1))
    assert values.shape == (4, 50)
    flat = values.astype(np.float64).ravel()
    assert flat[0] == low and flat[-1] == high
    assert flat.min() >= low and flat.max() <= high


def test_generation_handles_nan_and_missing_statistics() -> None:
    nan = generate(_record("float32", (3,), 0.0, math.nan), np.random.default_rng(0))
    assert np.isnan(nan).all()
    with pytest.raises(Unsupported, match="Max/Min"):
        generate(_record("float32", (3,), None, None), np.random.default_rng(0))


def test_case_seed_is_stable_across_processes() -> None:
    # sha256-based: the same number in every process and Python version.
    assert case_seed("Functional.linear.0.forward") == 509383941


def test_random_and_in_place_mindspore_apis_skip_with_the_reason() -> None:
    assert no_reference_reason("mindspore", "Mint.randn") == (
        "Mint.randn draws random numbers; a re-run cannot reproduce it"
    )
    assert no_reference_reason("mindspore", "Tensor.add_") == (
        "Tensor.add_ works in place (it overwrites its input); not re-run"
    )
    assert resolve("mindspore", "Tensor.add_") is None
    assert "in place" not in no_reference_reason("mindspore", "Tensor.__iadd__x")
