"""Numpy references for elementwise, reduction and shape APIs, with their gradients."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pytest_accuracy.precheck.args import Bound, DType, Unsupported

Arrays = list[np.ndarray]
Grads = dict[str, np.ndarray]
Seeds = list[np.ndarray | None]


def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum a broadcast gradient back to an input's shape."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad


def seed(grads: Seeds, index: int = 0) -> np.ndarray:
    if index >= len(grads) or grads[index] is None:
        raise Unsupported(f"no output gradient recorded for output {index}")
    value = grads[index]
    assert value is not None
    return value


def _is_tensor(b: Bound, name: str) -> bool:
    return isinstance(b.values.get(name), np.ndarray)


def _binary_grads(b: Bound, gx: np.ndarray, go: np.ndarray) -> Grads:
    """Gradients for (input, other), only for the arguments that are tensors."""
    out: Grads = {}
    for name, grad in (("input", gx), ("other", go)):
        if _is_tensor(b, name):
            out[name] = unbroadcast(grad, b.tensor(name).shape)
    return out


# ---- binary elementwise -------------------------------------------------------------


def add(b: Bound) -> Arrays:
    return [np.asarray(b.tensor("input") + b.number("alpha", 1) * b.tensor("other"))]


def add_bw(b: Bound, grads: Seeds) -> Grads:
    g = seed(grads)
    return _binary_grads(b, g, b.number("alpha", 1) * g)


def sub(b: Bound) -> Arrays:
    return [np.asarray(b.tensor("input") - b.number("alpha", 1) * b.tensor("other"))]


def sub_bw(b: Bound, grads: Seeds) -> Grads:
    g = seed(grads)
    return _binary_grads(b, g, -b.number("alpha", 1) * g)


def rsub(b: Bound) -> Arrays:
    return [np.asarray(b.tensor("other") - b.number("alpha", 1) * b.tensor("input"))]


def rsub_bw(b: Bound, grads: Seeds) -> Grads:
    g = seed(grads)
    return _binary_grads(b, -b.number("alpha", 1) * g, g)


def mul(b: Bound) -> Arrays:
    return [np.asarray(b.tensor("input") * b.tensor("other"))]


def mul_bw(b: Bound, grads: Seeds) -> Grads:
    g = seed(grads)
    return _binary_grads(b, g * b.tensor("other"), g * b.tensor("input"))


def div(b: Bound) -> Arrays:
    x, o = b.tensor("input"), b.tensor("other")
    with np.errstate(divide="ignore", invalid="ignore"):
        y = x / o
    mode = b.get("rounding_mode")
    if mode == "trunc":
        y = np.trunc(y)
    elif mode == "floor":
        y = np.floor(y)
    elif mode is not None:
        raise Unsupported(f"rounding_mode={mode!r}")
    return [np.asarray(y)]


def div_bw(b: Bound, grads: Seeds) -> Grads:
    if b.get("rounding_mode") is not None:
        raise Unsupported("no gradient reference for rounded division")
    g, x, o = seed(grads), b.tensor("input"), b.tensor("other")
    return _binary_grads(b, g / o, -g * x / (o * o))


def rdiv(b: Bound) -> Arrays:
    return [np.asarray(b.tensor("other") / b.tensor("input"))]


def rdiv_bw(b: Bound, grads: Seeds) -> Grads:
    g, x, o = seed(grads), b.tensor("input"), b.tensor("other")
    return _binary_grads(b, -g * o / (x * x), g / x)


def pow_(b: Bound) -> Arrays:
    x, e = b.tensor("input"), b.tensor("exponent")
    with np.errstate(divide="ignore", invalid="ignore"):
        return [np.asarray(np.power(x, e))]


def pow_bw(b: Bound, grads: Seeds) -> Grads:
    g, x, e = seed(grads), b.tensor("input"), b.tensor("exponent")
    out: Grads = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        if _is_tensor(b, "input"):
            out["input"] = unbroadcast(g * e * np.power(x, e - 1), x.shape)
        if _is_tensor(b, "exponent"):
            ge = g * np.power(x, e) * np.where(x > 0, np.log(np.where(x > 0, x, 1)), 0)
            out["exponent"] = unbroadcast(ge, e.shape)
    return out


def maximum(b: Bound) -> Arrays:
    return [np.maximum(b.tensor("input"), b.tensor("other"))]


def minimum(b: Bound) -> Arrays:
    return [np.minimum(b.tensor("input"), b.tensor("other"))]


def _extremum_bw(b: Bound, grads: Seeds, sign: float) -> Grads:
    g, x, o = seed(grads), b.tensor("input"), b.tensor("other")
    wins = (sign * (x - o) > 0) + 0.5 * (x == o)  # ties share the gradient, as torch does
    return _binary_grads(b, g * wins, g * (1.0 - wins))


def maximum_bw(b: Bound, grads: Seeds) -> Grads:
    return _extremum_bw(b, grads, 1.0)


def minimum_bw(b: Bound, grads: Seeds) -> Grads:
    return _extremum_bw(b, grads, -1.0)


def where(b: Bound) -> Arrays:
    cond = b.tensor("condition").astype(bool)
    return [np.asarray(np.where(cond, b.tensor("input"), b.tensor("other")))]


def where_bw(b: Bound, grads: Seeds) -> Grads:
    g, cond = seed(grads), b.tensor("condition").astype(bool)
    zero = np.zeros_like(g)
    return _binary_grads(b, np.where(cond, g, zero), np.where(cond, zero, g))


def masked_fill(b: Bound) -> Arrays:
    x, mask = b.tensor("input"), b.tensor("mask").astype(bool)
    return [np.where(mask, b.tensor("value").astype(x.dtype), x)]


def masked_fill_bw(b: Bound, grads: Seeds) -> Grads:
    g, mask = seed(grads), b.tensor("mask").astype(bool)
    return {"input": unbroadcast(np.where(mask, 0.0, g), b.tensor("input").shape)}


_COMPARISONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "gt": np.greater,
    "ge": np.greater_equal,
    "lt": np.less,
    "le": np.less_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}


def comparison(name: str) -> Callable[[Bound], Arrays]:
    fn = _COMPARISONS[name]
    return lambda b: [np.asarray(fn(b.tensor("input"), b.tensor("other")))]


# ---- unary elementwise --------------------------------------------------------------
# Each entry: forward f(x) and d y / d x as g(x, y).

_ERF = np.frompyfunc(math.erf, 1, 1)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(_ERF(x), dtype=x.dtype if x.dtype.kind == "f" else np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_PI * (x + 0.044715 * x**3)))


def _gelu_tanh_grad(x: np.ndarray) -> np.ndarray:
    t = np.tanh(_SQRT_2_PI * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _SQRT_2_PI * (1 + 3 * 0.044715 * x * x)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_grad(x: np.ndarray) -> np.ndarray:
    cdf = 0.5 * (1.0 + _erf(x / math.sqrt(2.0)))
    return cdf + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _silu_grad(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    s = _sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


UnaryFn = Callable[[np.ndarray], np.ndarray]
UnaryGrad = Callable[[np.ndarray, np.ndarray], np.ndarray]

UNARY: dict[str, tuple[UnaryFn, UnaryGrad | None]] = {
    "neg": (np.negative, lambda x, y: -np.ones_like(x)),
    "abs": (np.abs, lambda x, y: np.sign(x)),
    "exp": (np.exp, lambda x, y: y),
    "log": (np.log, lambda x, y: 1.0 / x),
    "sqrt": (np.sqrt, lambda x, y: 0.5 / y),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), lambda x, y: -0.5 * y * y * y),
    "square": (np.square, lambda x, y: 2.0 * x),
    "sin": (np.sin, lambda x, y: np.cos(x)),
    "cos": (np.cos, lambda x, y: -np.sin(x)),
    "tanh": (np.tanh, lambda x, y: 1.0 - y * y),
    "sigmoid": (_sigmoid, lambda x, y: y * (1.0 - y)),
    "relu": (lambda x: np.maximum(x, 0), lambda x, y: (x > 0).astype(x.dtype)),
    "silu": (lambda x: x * _sigmoid(x), _silu_grad),
    "gelu_none": (_gelu, lambda x, y: _gelu_grad(x)),
    "gelu_tanh": (_gelu_tanh, lambda x, y: _gelu_tanh_grad(x)),
    # torch_npu's fast_gelu formula, as in msprobe's bench function.
    "fast_gelu": (
        lambda x: x / (1 + np.exp(-1.702 * np.abs(x))) * np.exp(0.851 * (x - np.abs(x))),
        None,
    ),
    "identity": (lambda x: x.copy(), lambda x, y: np.ones_like(x)),
}


def unary(name: str) -> tuple[Callable[[Bound], Arrays], Callable[[Bound, Seeds], Grads] | None]:
    fn, grad = UNARY[name]

    def forward(b: Bound) -> Arrays:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return [np.asarray(fn(b.tensor("input")))]

    if grad is None:
        return forward, None
    dfn = grad

    def backward(b: Bound, grads: Seeds) -> Grads:
        x = b.tensor("input")
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return {"input": seed(grads) * dfn(x, np.asarray(fn(x)))}

    return forward, backward


def gelu(b: Bound) -> Arrays:
    return unary(_gelu_kind(b))[0](b)


def gelu_bw(b: Bound, grads: Seeds) -> Grads:
    backward = unary(_gelu_kind(b))[1]
    assert backward is not None
    return backward(b, grads)


def _gelu_kind(b: Bound) -> str:
    approximate = b.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise Unsupported(f"gelu approximate={approximate!r}")
    return f"gelu_{approximate}"


# ---- reductions ---------------------------------------------------------------------


def _axes(b: Bound, ndim: int) -> tuple[int, ...]:
    dims = b.ints("dim")
    if not dims:  # None or [] both mean "every dimension"
        return tuple(range(ndim))
    return tuple(sorted(d % max(ndim, 1) for d in dims))


def _reduce(b: Bound, fn: Callable[..., np.ndarray]) -> Arrays:
    x = b.tensor("input")
    dtype = b.get("dtype")
    if isinstance(dtype, DType) and dtype.name in ("float64", "float32"):
        # sum(x, dtype=...) casts before reducing; widen only, so the reference stays float64.
        target = np.dtype(dtype.name)
        if x.dtype.kind != "f" or target.itemsize > x.dtype.itemsize:
            x = x.astype(target)
    return [np.asarray(fn(x, axis=_axes(b, x.ndim), keepdims=bool(b.get("keepdim", False))))]


def sum_(b: Bound) -> Arrays:
    return _reduce(b, np.sum)


def mean(b: Bound) -> Arrays:
    return _reduce(b, np.mean)


def _expand(b: Bound, grad: np.ndarray) -> tuple[np.ndarray, int]:
    x = b.tensor("input")
    axes = _axes(b, x.ndim)
    if not b.get("keepdim", False):
        grad = np.expand_dims(grad, axes) if axes else grad
    count = int(np.prod([x.shape[a] for a in axes])) if x.ndim else 1
    return np.broadcast_to(grad, x.shape).copy(), count


def sum_bw(b: Bound, grads: Seeds) -> Grads:
    return {"input": _expand(b, seed(grads))[0]}


def mean_bw(b: Bound, grads: Seeds) -> Grads:
    grad, count = _expand(b, seed(grads))
    return {"input": grad / count}


def extremum(kind: str) -> Callable[[Bound], Arrays]:
    """torch.max/min: full reduction, (values, indices) along ``dim``, or elementwise."""
    reduce_fn, arg_fn, pair_fn = (
        (np.max, np.argmax, np.maximum) if kind == "max" else (np.min, np.argmin, np.minimum)
    )

    def forward(b: Bound) -> Arrays:
        x, dim = b.tensor("input"), b.get("dim")
        if isinstance(dim, np.ndarray) or b.has("other"):
            return [pair_fn(x, dim if isinstance(dim, np.ndarray) else b.tensor("other"))]
        if dim is None:
            return [np.asarray(reduce_fn(x))]
        axis, keep = b.integer("dim"), bool(b.get("keepdim", False))
        values = reduce_fn(x, axis=axis, keepdims=keep)
        return [np.asarray(values), np.asarray(arg_fn(x, axis=axis, keepdims=keep), np.int64)]

    return forward


def extremum_bw(kind: str) -> Callable[[Bound, Seeds], Grads]:
    arg_fn = np.argmax if kind == "max" else np.argmin

    def backward(b: Bound, grads: Seeds) -> Grads:
        x, dim, g = b.tensor("input"), b.get("dim"), seed(grads)
        if isinstance(dim, np.ndarray) or b.has("other"):
            raise Unsupported(f"no gradient reference for elementwise {kind}()")
        if dim is None:  # torch spreads the gradient evenly over tied extrema
            hits = x == (x.max() if kind == "max" else x.min())
            return {"input": hits * (g / hits.sum())}
        axis = b.integer("dim") % x.ndim
        idx = np.expand_dims(arg_fn(x, axis=axis), axis)
        gk = g if b.get("keepdim", False) else np.expand_dims(g, axis)
        out = np.zeros(x.shape, dtype=g.dtype)
        np.put_along_axis(out, idx, gk, axis=axis)
        return {"input": out}

    return backward
