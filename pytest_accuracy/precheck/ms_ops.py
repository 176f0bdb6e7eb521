"""Allow-listed MindSpore callables per canonical op, for re-running an API with MindSpore.

Keyed by the canonical op the registry resolved, never by a name from a dump.  Each op
runs the ``mindspore.mint`` API (what a MindSpore model runs on Ascend).  Where
MindSpore's CPU backend has no kernel for that mint API (MindSpore 2.10: log_softmax,
gelu, layer_norm, rms_norm, embedding, full, cumsum, tril, clone, swiglu), the CPU
re-run uses the equivalent ``mindspore.ops`` kernel, or a composition of mint ops for the
fused ones, as ``torch_ops`` does off the NPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_accuracy.precheck.args import Bound, DType, Unsupported


@dataclass(frozen=True)
class MsEnv:
    """The imported ``mindspore`` module and whether the re-run is on its CPU backend."""

    ms: Any
    cpu: bool

    @property
    def mint(self) -> Any:
        return self.ms.mint

    @property
    def ops(self) -> Any:
        return self.ms.ops

    @property
    def F(self) -> Any:  # mint.nn.functional, as MindSpore code names it
        return self.ms.mint.nn.functional


MsFn = Callable[[MsEnv, Bound], Any]


def _v(b: Bound, name: str) -> Any:
    return b.values[name]


def ms_dtype(ms: Any, name: str) -> Any:
    """A canonical dtype name as a MindSpore dtype, through a fixed table."""
    table = {
        "float64": ms.float64,
        "float32": ms.float32,
        "float16": ms.float16,
        "bfloat16": ms.bfloat16,
        "int64": ms.int64,
        "int32": ms.int32,
        "int16": ms.int16,
        "int8": ms.int8,
        "uint8": ms.uint8,
        "bool": ms.bool_,
    }
    if name not in table:
        raise Unsupported(f"dtype {name!r} has no MindSpore equivalent here")
    return table[name]


def _dtype(env: MsEnv, b: Bound) -> Any:
    value = b.get("dtype")
    return ms_dtype(env.ms, value.name) if isinstance(value, DType) else None


def _cast_input(env: MsEnv, b: Bound) -> Any:
    """The input cast to the ``dtype`` argument first, as the APIs with one do."""
    x, dtype = _v(b, "input"), _dtype(env, b)
    return x if dtype is None else x.astype(dtype)


def _dim_kwargs(b: Bound) -> dict[str, Any]:
    """``dim`` only when recorded: otherwise the MindSpore API's own default applies."""
    return {} if b.get("dim") is None else {"dim": b.integer("dim")}


def _softmax(env: MsEnv, b: Bound) -> Any:
    return env.F.softmax(_cast_input(env, b), **_dim_kwargs(b))


def _log_softmax(env: MsEnv, b: Bound) -> Any:
    x = _cast_input(env, b)
    if env.cpu:  # LogSoftmaxExt has no CPU kernel
        return env.ops.LogSoftmax(b.integer("dim", -1))(x)
    return env.F.log_softmax(x, **_dim_kwargs(b))


def _gelu(env: MsEnv, b: Bound) -> Any:
    approximate = str(b.get("approximate", "none"))
    if env.cpu:  # GeluExt has no CPU kernel
        return env.ops.gelu(_v(b, "input"), approximate=approximate)
    return env.F.gelu(_v(b, "input"), approximate=approximate)


def _layer_norm(env: MsEnv, b: Bound) -> Any:
    x, shape, eps = _v(b, "input"), b.ints("normalized_shape") or [], b.number("eps", 1e-5)
    w, bias = b.get("weight"), b.get("bias")
    if not env.cpu:
        return env.F.layer_norm(x, tuple(shape), w, bias, eps)
    # LayerNormExt has no CPU kernel: the LayerNorm primitive, with weight 1 / bias 0.
    mint = env.mint
    w = w if w is not None else mint.ones(tuple(shape), dtype=x.dtype)
    bias = bias if bias is not None else mint.zeros(tuple(shape), dtype=x.dtype)
    return env.ops.LayerNorm(-len(shape), -len(shape), eps)(x, w, bias)[0]


def _rms_norm(env: MsEnv, b: Bound) -> Any:
    x, w, eps = _v(b, "input"), b.get("weight"), b.number("eps", 1e-6)
    if not b.get("fused", False):
        raise Unsupported("MindSpore has no unfused rms_norm API to re-run")
    if not env.cpu:
        return env.ops.rms_norm(x, w, eps)
    # RmsNorm has no CPU kernel: rstd in float32, as the fused kernel computes it.
    mint = env.mint
    dims = tuple(range(x.ndim - w.ndim, x.ndim))
    x32 = x.astype(env.ms.float32)
    rstd = mint.rsqrt(mint.mean(x32 * x32, dim=dims, keepdim=True) + eps)
    return (x32 * rstd).astype(x.dtype) * w, rstd


def _embedding(env: MsEnv, b: Bound) -> Any:
    ids, weight = _v(b, "input"), _v(b, "weight")
    if env.cpu:  # Embedding has no CPU kernel; padding_idx only changes the gradient
        if b.get("padding_idx") is not None:
            raise Unsupported("embedding with padding_idx has no CPU kernel in MindSpore")
        return env.ops.gather(weight, ids, 0)
    return env.F.embedding(ids, weight, padding_idx=b.get("padding_idx"))


def _reduce(kind: str) -> MsFn:
    def run(env: MsEnv, b: Bound) -> Any:
        fn = env.mint.sum if kind == "sum" else env.mint.mean
        dims, dtype = b.ints("dim"), _dtype(env, b)
        if not dims:
            return fn(_v(b, "input"), dtype=dtype)
        keep = bool(b.get("keepdim", False))
        return fn(_v(b, "input"), dim=tuple(dims), keepdim=keep, dtype=dtype)

    return run


def _extremum(kind: str) -> MsFn:
    def run(env: MsEnv, b: Bound) -> Any:
        fn = env.mint.max if kind == "max" else env.mint.min
        x, dim = _v(b, "input"), b.get("dim")
        if isinstance(dim, env.ms.Tensor) or b.has("other"):
            other = dim if isinstance(dim, env.ms.Tensor) else _v(b, "other")
            return (env.mint.maximum if kind == "max" else env.mint.minimum)(x, other)
        if dim is None:
            return fn(x)
        return tuple(fn(x, b.integer("dim"), bool(b.get("keepdim", False))))

    return run


def _split(env: MsEnv, b: Bound) -> Any:
    sizes = b.get("split_size_or_sections")
    sections: Any = (
        b.ints("split_size_or_sections")
        if isinstance(sizes, list)
        else b.integer("split_size_or_sections")
    )
    return env.mint.split(_v(b, "input"), sections, dim=b.integer("dim", 0))


def _squeeze(env: MsEnv, b: Bound) -> Any:
    dims = b.ints("dim")
    x = _v(b, "input")
    return env.mint.squeeze(x, tuple(dims)) if dims else env.mint.squeeze(x)


def _getitem(env: MsEnv, b: Bound) -> Any:
    index = _v(b, "index")
    return _v(b, "input")[tuple(index) if isinstance(index, list) else index]


def _full(env: MsEnv, b: Bound) -> Any:
    size, value = tuple(b.ints("size") or []), b.number("fill_value")
    dtype = _dtype(env, b) or env.ms.float32
    if env.cpu:  # FillScalar has no CPU kernel
        return env.ops.full(size, value, dtype=dtype)
    return env.mint.full(size, value, dtype=dtype)


def _cumsum(env: MsEnv, b: Bound) -> Any:
    if env.cpu:  # CumsumExt has no CPU kernel
        return env.ops.cumsum(_v(b, "input"), b.integer("dim"))
    return env.mint.cumsum(_v(b, "input"), b.integer("dim"))


def _tril(env: MsEnv, b: Bound) -> Any:
    if env.cpu:  # TrilExt has no CPU kernel
        return env.ops.tril(_v(b, "input"), b.integer("diagonal", 0))
    return env.mint.tril(_v(b, "input"), b.integer("diagonal", 0))


def _cast(env: MsEnv, b: Bound) -> Any:
    # .float() / .contiguous() / .clone(): the executor rounds to the dumped output dtype.
    x = _v(b, "input")
    return env.ops.deepcopy(x) if env.cpu else env.mint.clone(x)  # Clone: no CPU kernel


def _swiglu(env: MsEnv, b: Bound) -> Any:
    x, dim = _v(b, "input"), b.integer("dim", -1)
    if not env.cpu:
        return env.ops.swiglu(x, dim)
    a, c = env.mint.chunk(x, 2, dim)  # Swiglu has no CPU kernel
    return env.F.silu(a) * c


def _fusion_attention(env: MsEnv, b: Bound) -> Any:
    raise Unsupported(
        "re-running flash_attention_score with MindSpore is not implemented (no CPU kernel)"
    )


def _cross_entropy(env: MsEnv, b: Bound) -> Any:
    # ops.cross_entropy: mint's needs LogSoftmaxExt (no CPU kernel) and is the Functional API
    # MindSpore dumps name (Functional.cross_entropy).
    return env.ops.cross_entropy(
        _v(b, "input"), _v(b, "target"), weight=b.get("weight"),
        ignore_index=b.integer("ignore_index", -100), reduction=str(b.get("reduction", "mean")),
        label_smoothing=b.number("label_smoothing", 0.0),
    )  # fmt: skip


def _gather(env: MsEnv, b: Bound) -> Any:
    return env.ops.gather(
        _v(b, "input"), _v(b, "indices"), b.integer("axis", 0), b.integer("batch_dims", 0)
    )


def _unary(name: str) -> MsFn:
    def run(env: MsEnv, b: Bound) -> Any:
        m, f = env.mint, env.F
        table = {
            "neg": m.neg, "abs": m.abs, "exp": m.exp, "log": m.log, "sqrt": m.sqrt,
            "rsqrt": m.rsqrt, "square": m.square, "sin": m.sin, "cos": m.cos, "tanh": m.tanh,
            "sigmoid": m.sigmoid, "relu": f.relu, "silu": f.silu,
            "fast_gelu": env.ops.fast_gelu,
        }  # fmt: skip
        return table[name](_v(b, "input"))

    return run


def _compare(name: str) -> MsFn:
    def run(env: MsEnv, b: Bound) -> Any:
        m = env.mint
        table = {"gt": m.gt, "ge": m.ge, "lt": m.lt, "le": m.le, "eq": m.eq, "ne": m.ne}
        return table[name](_v(b, "input"), _v(b, "other"))

    return run


def _alpha(b: Bound) -> Any:
    return b.get("alpha", 1)


def _rsub(env: MsEnv, b: Bound) -> Any:
    x, other = _v(b, "input"), _v(b, "other")
    if not isinstance(other, env.ms.Tensor):
        other = env.ms.Tensor(other, dtype=x.dtype)
    return env.mint.sub(other, x, alpha=_alpha(b))


_UNARY: tuple[str, ...] = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "square", "sin", "cos")
_UNARY += ("tanh", "sigmoid", "relu", "silu", "fast_gelu")

MS_OPS: dict[str, MsFn] = {
    **{name: _unary(name) for name in _UNARY},
    **{name: _compare(name) for name in ("gt", "ge", "lt", "le", "eq", "ne")},
    "cast": _cast,
    "linear": lambda e, b: e.F.linear(_v(b, "input"), _v(b, "weight"), b.get("bias")),
    "matmul": lambda e, b: e.mint.matmul(_v(b, "input"), _v(b, "other")),
    "add": lambda e, b: e.mint.add(_v(b, "input"), _v(b, "other"), alpha=_alpha(b)),
    "sub": lambda e, b: e.mint.sub(_v(b, "input"), _v(b, "other"), alpha=_alpha(b)),
    "rsub": _rsub,
    "mul": lambda e, b: e.mint.mul(_v(b, "input"), _v(b, "other")),
    "div": lambda e, b: e.mint.div(
        _v(b, "input"), _v(b, "other"), rounding_mode=b.get("rounding_mode")
    ),
    "rdiv": lambda e, b: _v(b, "other") / _v(b, "input"),
    "pow": lambda e, b: e.mint.pow(_v(b, "input"), _v(b, "exponent")),
    "maximum": lambda e, b: e.mint.maximum(_v(b, "input"), _v(b, "other")),
    "minimum": lambda e, b: e.mint.minimum(_v(b, "input"), _v(b, "other")),
    "where": lambda e, b: e.mint.where(
        _v(b, "condition").astype(e.ms.bool_), _v(b, "input"), _v(b, "other")
    ),
    "masked_fill": lambda e, b: e.ops.masked_fill(  # mint has no masked_fill
        _v(b, "input"), _v(b, "mask").astype(e.ms.bool_), _v(b, "value")
    ),
    "gelu": _gelu,
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "sum": _reduce("sum"),
    "mean": _reduce("mean"),
    "max": _extremum("max"),
    "min": _extremum("min"),
    "cross_entropy": _cross_entropy,
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "embedding": _embedding,
    "gather": _gather,
    "transpose": lambda e, b: e.mint.transpose(
        _v(b, "input"), b.integer("dim0"), b.integer("dim1")
    ),
    "permute": lambda e, b: e.mint.permute(_v(b, "input"), tuple(b.ints("dims") or [])),
    "reshape": lambda e, b: e.mint.reshape(_v(b, "input"), tuple(b.ints("shape") or [])),
    "flatten": lambda e, b: e.mint.flatten(
        _v(b, "input"), b.integer("start_dim", 0), b.integer("end_dim", -1)
    ),
    "unsqueeze": lambda e, b: e.mint.unsqueeze(_v(b, "input"), b.integer("dim")),
    "squeeze": _squeeze,
    "split": _split,
    "chunk": lambda e, b: e.mint.chunk(_v(b, "input"), b.integer("chunks"), b.integer("dim", 0)),
    "getitem": _getitem,
    "cat": lambda e, b: e.mint.cat(list(_v(b, "tensors")), dim=b.integer("dim", 0)),
    "triu": lambda e, b: e.mint.triu(_v(b, "input"), b.integer("diagonal", 0)),
    "tril": _tril,
    "full": _full,
    "cumsum": _cumsum,
    "swiglu": _swiglu,
    "fusion_attention": _fusion_attention,
}
