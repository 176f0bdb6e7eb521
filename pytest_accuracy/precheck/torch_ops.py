"""Allow-listed torch callables per canonical op, for re-running an API on a torch device.

Keyed by the canonical op the registry resolved, never by a name from a dump.  Fused
NPU ops use torch_npu on an NPU and a composition of plain torch ops elsewhere (as
msprobe's CPU bench functions do).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_accuracy.precheck.args import Bound, DType, Unsupported

TorchFn = Callable[[Any, Bound], Any]


def _v(b: Bound, name: str) -> Any:
    return b.values[name]


def _dtype(torch: Any, b: Bound) -> Any:
    """A dtype kwarg as a torch dtype, through a fixed table."""
    value = b.get("dtype")
    if not isinstance(value, DType):
        return None
    table = {
        "float64": torch.float64,
        "float32": torch.float32,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
        "int64": torch.int64,
        "int32": torch.int32,
        "bool": torch.bool,
    }
    if value.name not in table:
        raise Unsupported(f"dtype {value.name!r} has no torch equivalent here")
    return table[value.name]


def _softmax_dim(b: Bound) -> int:
    if b.get("dim") is not None:
        return b.integer("dim")
    ndim = _v(b, "input").dim()
    return 0 if ndim in (0, 1, 3) else 1


def _reduce(fn_name: str) -> TorchFn:
    def run(torch: Any, b: Bound) -> Any:
        fn = torch.sum if fn_name == "sum" else torch.mean
        dims, dtype = b.ints("dim"), _dtype(torch, b)
        if not dims:
            return fn(_v(b, "input"), dtype=dtype)
        return fn(_v(b, "input"), dim=dims, keepdim=bool(b.get("keepdim", False)), dtype=dtype)

    return run


def _extremum(kind: str) -> TorchFn:
    def run(torch: Any, b: Bound) -> Any:
        fn = torch.max if kind == "max" else torch.min
        x, dim = _v(b, "input"), b.get("dim")
        if isinstance(dim, torch.Tensor) or b.has("other"):
            return fn(x, dim if isinstance(dim, torch.Tensor) else _v(b, "other"))
        if dim is None:
            return fn(x)
        return tuple(fn(x, dim=b.integer("dim"), keepdim=bool(b.get("keepdim", False))))

    return run


def _rms_norm(torch: Any, b: Bound) -> Any:
    x, w = _v(b, "input"), b.get("weight")
    if not b.get("fused", False):
        eps = b.number("eps") if b.has("eps") else None
        return torch.nn.functional.rms_norm(x, b.ints("normalized_shape"), w, eps)
    eps = b.number("eps", 1e-6)
    if x.device.type == "npu":
        import torch_npu  # fixed module name: the NPU's own fused kernel

        return torch_npu.npu_rms_norm(x, w, epsilon=eps)
    dims = list(range(x.dim() - w.dim(), x.dim()))
    rstd = torch.rsqrt(x.float().pow(2).mean(dim=dims, keepdim=True) + eps)
    return (x.float() * rstd).to(x.dtype) * w, rstd


def _swiglu(torch: Any, b: Bound) -> Any:
    x, dim = _v(b, "input"), b.integer("dim", -1)
    if x.device.type == "npu":
        import torch_npu

        return torch_npu.npu_swiglu(x, dim=dim)
    a, c = x.chunk(2, dim=dim)
    return torch.nn.functional.silu(a) * c


def _rotary_mul(torch: Any, b: Bound) -> Any:
    x, r1, r2 = _v(b, "input"), _v(b, "r1"), _v(b, "r2")
    if x.device.type == "npu":
        import torch_npu

        return torch_npu.npu_rotary_mul(x, r1, r2)
    x1, x2 = x.chunk(2, dim=-1)
    return r1 * x + r2 * torch.cat([-x2, x1], dim=-1)


def _fusion_attention(torch: Any, b: Bound) -> Any:
    if _v(b, "query").device.type != "npu":
        raise Unsupported("npu_fusion_attention can only be re-run on an NPU")
    import torch_npu

    keys = ("pse", "atten_mask", "scale", "keep_prob", "sparse_mode")
    kwargs = {k: b.values[k] for k in keys if b.values.get(k) is not None}
    return torch_npu.npu_fusion_attention(
        _v(b, "query"), _v(b, "key"), _v(b, "value"), b.integer("head_num"),
        str(b.get("input_layout", "BSH")), **kwargs,
    )  # fmt: skip


def _gather(torch: Any, b: Bound) -> Any:
    x, idx = _v(b, "input"), _v(b, "indices")
    axis = b.integer("axis", 0) % x.dim()
    picked = torch.index_select(x, axis, idx.reshape(-1))
    return picked.reshape(*x.shape[:axis], *idx.shape, *x.shape[axis + 1 :])


def _split(torch: Any, b: Bound) -> Any:
    sizes = b.get("split_size_or_sections")
    sections = (
        b.ints("split_size_or_sections")
        if isinstance(sizes, list)
        else b.integer("split_size_or_sections")
    )
    return torch.split(_v(b, "input"), sections, dim=b.integer("dim", 0))


def _squeeze(torch: Any, b: Bound) -> Any:
    dims = b.ints("dim")
    return _v(b, "input").squeeze(tuple(dims)) if dims else _v(b, "input").squeeze()


def _flatten(torch: Any, b: Bound) -> Any:
    return torch.flatten(_v(b, "input"), b.integer("start_dim", 0), b.integer("end_dim", -1))


def _cross_entropy(torch: Any, b: Bound) -> Any:
    return torch.nn.functional.cross_entropy(
        _v(b, "input"), _v(b, "target"), weight=b.get("weight"),
        ignore_index=b.integer("ignore_index", -100), reduction=str(b.get("reduction", "mean")),
        label_smoothing=b.number("label_smoothing", 0.0),
    )  # fmt: skip


def _sdpa(torch: Any, b: Bound) -> Any:
    return torch.nn.functional.scaled_dot_product_attention(
        _v(b, "query"), _v(b, "key"), _v(b, "value"), attn_mask=b.get("attn_mask"),
        dropout_p=b.number("dropout_p", 0.0), is_causal=bool(b.get("is_causal", False)),
        scale=b.get("scale"), enable_gqa=bool(b.get("enable_gqa", False)),
    )  # fmt: skip


def _unary(torch: Any, name: str) -> Any:
    table = {
        "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log,
        "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "square": torch.square, "sin": torch.sin,
        "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
        "silu": torch.nn.functional.silu, "cast": torch.clone,
    }  # fmt: skip
    return table[name]


_UNARY: tuple[str, ...] = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "square", "sin", "cos")
_UNARY += ("tanh", "sigmoid", "relu", "silu", "cast")
_COMPARE = ("gt", "ge", "lt", "le", "eq", "ne")


def _compare(name: str) -> TorchFn:
    def run(torch: Any, b: Bound) -> Any:
        fns = {"gt": torch.gt, "ge": torch.ge, "lt": torch.lt, "le": torch.le}
        fns |= {"eq": torch.eq, "ne": torch.ne}
        return fns[name](_v(b, "input"), _v(b, "other"))

    return run


def _unary_op(name: str) -> TorchFn:
    return lambda torch, b: _unary(torch, name)(_v(b, "input"))


TORCH_OPS: dict[str, TorchFn] = {
    **{name: _unary_op(name) for name in _UNARY},
    **{name: _compare(name) for name in _COMPARE},
    "linear": lambda t, b: t.nn.functional.linear(_v(b, "input"), _v(b, "weight"), b.get("bias")),
    "matmul": lambda t, b: t.matmul(_v(b, "input"), _v(b, "other")),
    "add": lambda t, b: t.add(_v(b, "input"), _v(b, "other"), alpha=b.get("alpha", 1)),
    "sub": lambda t, b: t.sub(_v(b, "input"), _v(b, "other"), alpha=b.get("alpha", 1)),
    "rsub": lambda t, b: t.rsub(_v(b, "input"), _v(b, "other"), alpha=b.get("alpha", 1)),
    "mul": lambda t, b: t.mul(_v(b, "input"), _v(b, "other")),
    "div": lambda t, b: t.div(_v(b, "input"), _v(b, "other"), rounding_mode=b.get("rounding_mode")),
    "rdiv": lambda t, b: _v(b, "other") / _v(b, "input"),
    "pow": lambda t, b: t.pow(_v(b, "input"), _v(b, "exponent")),
    "maximum": lambda t, b: t.maximum(_v(b, "input"), _v(b, "other")),
    "minimum": lambda t, b: t.minimum(_v(b, "input"), _v(b, "other")),
    "where": lambda t, b: t.where(_v(b, "condition").bool(), _v(b, "input"), _v(b, "other")),
    "masked_fill": lambda t, b: _v(b, "input").masked_fill(_v(b, "mask").bool(), _v(b, "value")),
    "gelu": lambda t, b: t.nn.functional.gelu(
        _v(b, "input"), approximate=str(b.get("approximate", "none"))
    ),
    "fast_gelu": lambda t, b: _v(b, "input") * t.sigmoid(1.702 * _v(b, "input")),
    "softmax": lambda t, b: t.softmax(_v(b, "input"), _softmax_dim(b), dtype=_dtype(t, b)),
    "log_softmax": lambda t, b: t.log_softmax(_v(b, "input"), _softmax_dim(b), dtype=_dtype(t, b)),
    "sum": _reduce("sum"),
    "mean": _reduce("mean"),
    "max": _extremum("max"),
    "min": _extremum("min"),
    "cross_entropy": _cross_entropy,
    "layer_norm": lambda t, b: t.nn.functional.layer_norm(
        _v(b, "input"),
        b.ints("normalized_shape"),
        b.get("weight"),
        b.get("bias"),
        b.number("eps", 1e-5),
    ),
    "rms_norm": _rms_norm,
    "embedding": lambda t, b: t.nn.functional.embedding(
        _v(b, "input"), _v(b, "weight"), padding_idx=b.get("padding_idx")
    ),
    "gather": _gather,
    "transpose": lambda t, b: t.transpose(_v(b, "input"), b.integer("dim0"), b.integer("dim1")),
    "permute": lambda t, b: _v(b, "input").permute(*(b.ints("dims") or [])),
    "reshape": lambda t, b: _v(b, "input").reshape(*(b.ints("shape") or [])),
    "flatten": _flatten,
    "unsqueeze": lambda t, b: t.unsqueeze(_v(b, "input"), b.integer("dim")),
    "squeeze": _squeeze,
    "split": _split,
    "chunk": lambda t, b: t.chunk(_v(b, "input"), b.integer("chunks"), dim=b.integer("dim", 0)),
    "getitem": lambda t, b: _v(b, "input")[
        tuple(_v(b, "index")) if isinstance(_v(b, "index"), list) else _v(b, "index")
    ],
    "cat": lambda t, b: t.cat(list(_v(b, "tensors")), dim=b.integer("dim", 0)),
    "triu": lambda t, b: t.triu(_v(b, "input"), b.integer("diagonal", 0)),
    "tril": lambda t, b: t.tril(_v(b, "input"), b.integer("diagonal", 0)),
    "full": lambda t, b: t.full(b.ints("size") or [], b.number("fill_value"), dtype=t.float64),
    "cumsum": lambda t, b: t.cumsum(_v(b, "input"), b.integer("dim")),
    "swiglu": _swiglu,
    "rotary_mul": _rotary_mul,
    "fusion_attention": _fusion_attention,
    "sdpa": _sdpa,
}
