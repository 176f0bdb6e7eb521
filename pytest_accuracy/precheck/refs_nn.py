"""Numpy references for neural-network APIs (linear, softmax, norms, losses, attention)."""

from __future__ import annotations

import numpy as np

from pytest_accuracy.dumps.model import FLOAT_EPS
from pytest_accuracy.precheck.args import Bound, Unsupported
from pytest_accuracy.precheck.refs_math import Arrays, Grads, Seeds, seed, unbroadcast

# ---- linear algebra -----------------------------------------------------------------


def linear(b: Bound) -> Arrays:
    y = np.matmul(b.tensor("input"), np.swapaxes(b.tensor("weight"), -1, -2))
    bias = b.opt_tensor("bias")
    return [y + bias if bias is not None else y]


def linear_bw(b: Bound, grads: Seeds) -> Grads:
    x, w, g = b.tensor("input"), b.tensor("weight"), seed(grads)
    if w.ndim != 2:
        raise Unsupported("linear gradient reference needs a 2-D weight")
    g2 = g.reshape(-1, w.shape[0])
    out = {
        "input": np.matmul(g, w).reshape(x.shape),
        "weight": g2.T @ x.reshape(-1, w.shape[1]),
    }
    if b.has("bias"):
        out["bias"] = g2.sum(axis=0).reshape(b.tensor("bias").shape)
    return out


def matmul(b: Bound) -> Arrays:
    # contiguous operands: numpy multiplies stacked non-contiguous matrices (a transposed k)
    # without BLAS, 25x slower; the values are the same up to float64 summation order
    x, o = np.ascontiguousarray(b.tensor("input")), np.ascontiguousarray(b.tensor("other"))
    return [np.asarray(np.matmul(x, o))]


def matmul_bw(b: Bound, grads: Seeds) -> Grads:
    x, o, g = b.tensor("input"), b.tensor("other"), seed(grads)
    x2 = x[None, :] if x.ndim == 1 else x
    o2 = o[:, None] if o.ndim == 1 else o
    g2 = g
    if x.ndim == 1:
        g2 = np.expand_dims(g2, -2 if o.ndim > 1 else 0)
    if o.ndim == 1:
        g2 = np.expand_dims(g2, -1)
    gx = unbroadcast(np.matmul(g2, np.swapaxes(o2, -1, -2)), x2.shape)
    go = unbroadcast(np.matmul(np.swapaxes(x2, -1, -2), g2), o2.shape)
    return {"input": gx.reshape(x.shape), "other": go.reshape(o.shape)}


# ---- softmax family -----------------------------------------------------------------


def _softmax_dim(b: Bound, ndim: int) -> int:
    dim = b.get("dim")
    if dim is None:  # torch's legacy implicit dim
        return 0 if ndim in (0, 1, 3) else 1
    return b.integer("dim")


def _softmax(x: np.ndarray, dim: int) -> np.ndarray:
    shifted = x - np.max(x, axis=dim, keepdims=True)
    e = np.exp(shifted)
    return np.asarray(e / e.sum(axis=dim, keepdims=True))


def _log_softmax(x: np.ndarray, dim: int) -> np.ndarray:
    shifted = x - np.max(x, axis=dim, keepdims=True)
    return np.asarray(shifted - np.log(np.exp(shifted).sum(axis=dim, keepdims=True)))


def softmax(b: Bound) -> Arrays:
    x = b.tensor("input")
    return [_softmax(x, _softmax_dim(b, x.ndim))]


def softmax_bw(b: Bound, grads: Seeds) -> Grads:
    x, g = b.tensor("input"), seed(grads)
    dim = _softmax_dim(b, x.ndim)
    y = _softmax(x, dim)
    return {"input": y * (g - (g * y).sum(axis=dim, keepdims=True))}


def log_softmax(b: Bound) -> Arrays:
    x = b.tensor("input")
    return [_log_softmax(x, _softmax_dim(b, x.ndim))]


def log_softmax_bw(b: Bound, grads: Seeds) -> Grads:
    x, g = b.tensor("input"), seed(grads)
    dim = _softmax_dim(b, x.ndim)
    return {"input": g - np.exp(_log_softmax(x, dim)) * g.sum(axis=dim, keepdims=True)}


# ---- normalisation ------------------------------------------------------------------


def _norm_axes(b: Bound, x: np.ndarray) -> tuple[int, ...]:
    shape = b.ints("normalized_shape")
    if shape is None:  # fused rms_norm: reduce over the weight's dimensions
        shape = list(b.tensor("weight").shape)
    return tuple(range(x.ndim - len(shape), x.ndim))


def layer_norm(b: Bound) -> Arrays:
    x = b.tensor("input")
    axes = _norm_axes(b, x)
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + b.number("eps", 1e-5))
    w, bias = b.opt_tensor("weight"), b.opt_tensor("bias")
    y = y * w if w is not None else y
    return [y + bias if bias is not None else y]


def layer_norm_bw(b: Bound, grads: Seeds) -> Grads:
    x, g = b.tensor("input"), seed(grads)
    axes = _norm_axes(b, x)
    batch = tuple(range(x.ndim - len(axes)))
    mu = x.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + b.number("eps", 1e-5))
    xhat = (x - mu) * rstd
    w = b.opt_tensor("weight")
    gy = g * w if w is not None else g
    gx = rstd * (
        gy - gy.mean(axis=axes, keepdims=True) - xhat * (gy * xhat).mean(axis=axes, keepdims=True)
    )
    out = {"input": gx}
    if w is not None:
        out["weight"] = (g * xhat).sum(axis=batch)
    if b.has("bias"):
        out["bias"] = g.sum(axis=batch)
    return out


# torch_npu.npu_rms_norm(x, gamma, epsilon=1e-06) and mindspore.ops.rms_norm(x, gamma,
# epsilon=1e-6): the fused kernels' documented default, not the dtype's machine epsilon.
FUSED_RMS_EPS = 1e-6


def _rms_eps(b: Bound) -> float:
    if b.has("eps"):
        return b.number("eps")
    if b.get("fused", False):
        return FUSED_RMS_EPS
    # torch.nn.functional.rms_norm with eps=None uses the input dtype's machine epsilon.
    return FLOAT_EPS.get(b.dtype_of("input"), FLOAT_EPS["float32"])


def rms_norm(b: Bound) -> Arrays:
    x = b.tensor("input")
    axes = _norm_axes(b, x)
    rstd = 1.0 / np.sqrt((x * x).mean(axis=axes, keepdims=True) + _rms_eps(b))
    w = b.opt_tensor("weight")
    y = x * rstd * w if w is not None else x * rstd
    return [y, rstd] if b.get("fused", False) else [y]


def rms_norm_bw(b: Bound, grads: Seeds) -> Grads:
    x, g = b.tensor("input"), seed(grads)
    if len(grads) > 1 and grads[1] is not None and np.any(grads[1]):
        raise Unsupported("no gradient reference through rms_norm's rstd output")
    axes = _norm_axes(b, x)
    rstd = 1.0 / np.sqrt((x * x).mean(axis=axes, keepdims=True) + _rms_eps(b))
    xhat = x * rstd
    w = b.opt_tensor("weight")
    gy = g * w if w is not None else g
    out = {"input": rstd * (gy - xhat * (gy * xhat).mean(axis=axes, keepdims=True))}
    if w is not None:
        out["weight"] = unbroadcast(g * xhat, w.shape)
    return out


# ---- lookups ------------------------------------------------------------------------


def _indices(b: Bound, name: str, size: int) -> np.ndarray:
    idx = b.tensor(name)
    if idx.dtype.kind not in "iu":
        raise Unsupported(f"{name} must be an integer tensor, got {idx.dtype}")
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise Unsupported(f"{name} holds indices outside [0, {size})")
    return idx.astype(np.int64)


def embedding(b: Bound) -> Arrays:
    if b.has("max_norm"):
        raise Unsupported("embedding with max_norm rewrites the weight in place")
    w = b.tensor("weight")
    return [w[_indices(b, "input", w.shape[0])]]


def embedding_bw(b: Bound, grads: Seeds) -> Grads:
    if b.get("scale_grad_by_freq", False):
        raise Unsupported("no gradient reference for scale_grad_by_freq")
    w, g = b.tensor("weight"), seed(grads)
    idx = _indices(b, "input", w.shape[0])
    gw = np.zeros(w.shape, dtype=g.dtype)
    np.add.at(gw, idx, g)
    if b.has("padding_idx"):
        gw[b.integer("padding_idx")] = 0
    return {"weight": gw}


def gather(b: Bound) -> Arrays:
    """MindSpore ops.gather: np.take along ``axis`` (torch.gather is a different op)."""
    if b.integer("batch_dims", 0) != 0:
        raise Unsupported("gather with batch_dims")
    params = b.tensor("input")
    axis = b.integer("axis", 0) % params.ndim
    return [np.take(params, _indices(b, "indices", params.shape[axis]), axis=axis)]


def gather_bw(b: Bound, grads: Seeds) -> Grads:
    params, g = b.tensor("input"), seed(grads)
    axis = b.integer("axis", 0) % params.ndim
    idx = _indices(b, "indices", params.shape[axis])
    out = np.zeros(params.shape, dtype=g.dtype)
    moved = np.moveaxis(out, axis, 0)  # a view: add.at writes through to ``out``
    g_moved = np.moveaxis(g, list(range(axis, axis + idx.ndim)), list(range(idx.ndim)))
    np.add.at(moved, idx, g_moved)
    return {"input": out}


# ---- losses -------------------------------------------------------------------------


def _ce_parts(b: Bound) -> tuple[np.ndarray, np.ndarray, float, int]:
    """(log-probabilities, per-class coefficients, mean divisor, class dim) of cross_entropy.

    loss_i = -sum_c a_ic * logp_ic covers class-index and probability targets, class
    weights, ignore_index and label smoothing in one form, with torch's normalisation.
    """
    for legacy in ("size_average", "reduce"):
        if b.get(legacy) is not None:
            raise Unsupported(f"cross_entropy with legacy {legacy}=")
    x, target = b.tensor("input"), b.tensor("target")
    cdim = 1 if x.ndim >= 2 else 0
    z = np.moveaxis(x, cdim, -1)
    classes = z.shape[-1]
    logp = z - np.max(z, axis=-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(axis=-1, keepdims=True))
    w = b.opt_tensor("weight")
    w = np.ones(classes, dtype=x.dtype) if w is None else w
    eps = b.number("label_smoothing", 0.0)
    if target.dtype.kind == "f":
        t = np.moveaxis(target, cdim, -1) * (1 - eps) + eps / classes
        return logp, w * t, float(np.prod(z.shape[:-1])), cdim
    tgt = target.astype(np.int64)
    valid = tgt != b.integer("ignore_index", -100)
    safe = np.where(valid, tgt, 0)
    if safe.size and (safe.min() < 0 or safe.max() >= classes):
        raise Unsupported(f"cross_entropy target outside [0, {classes})")
    onehot = np.arange(classes) == safe[..., None]
    wy = w[safe] * valid
    coeff = (1 - eps) * onehot * wy[..., None] + (eps / classes) * w * valid[..., None]
    return logp, coeff, float(wy.sum()), cdim


def cross_entropy(b: Bound) -> Arrays:
    logp, coeff, divisor, _ = _ce_parts(b)
    per_item = -(coeff * logp).sum(axis=-1)
    reduction = b.get("reduction", "mean")
    if reduction == "none":
        return [per_item]
    total = per_item.sum()
    return [np.asarray(total / divisor if reduction == "mean" else total)]


def cross_entropy_bw(b: Bound, grads: Seeds) -> Grads:
    logp, coeff, divisor, cdim = _ce_parts(b)
    g = seed(grads)
    reduction = b.get("reduction", "mean")
    upstream = g[..., None] if reduction == "none" else (g / divisor if reduction == "mean" else g)
    dz = coeff.sum(axis=-1, keepdims=True) * np.exp(logp) - coeff
    out = {"input": np.moveaxis(dz * upstream, -1, cdim)}
    target = b.tensor("target")
    if target.dtype.kind == "f":  # probability targets are differentiable too
        w = b.opt_tensor("weight")
        scale = 1.0 - b.number("label_smoothing", 0.0)
        dt = -scale * (w if w is not None else 1.0) * logp * upstream
        out["target"] = np.moveaxis(dt, -1, cdim)
    return out


# ---- fused activations --------------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def swiglu(b: Bound) -> Arrays:
    a, c = np.split(b.tensor("input"), 2, axis=b.integer("dim", -1))
    return [a * _sigmoid(a) * c]


def swiglu_bw(b: Bound, grads: Seeds) -> Grads:
    dim = b.integer("dim", -1)
    a, c = np.split(b.tensor("input"), 2, axis=dim)
    g, s = seed(grads), _sigmoid(a)
    ga = g * c * s * (1 + a * (1 - s))
    return {"input": np.concatenate([ga, g * a * s], axis=dim)}


def _rotate_half(x: np.ndarray) -> np.ndarray:
    x1, x2 = np.split(x, 2, axis=-1)
    return np.concatenate([-x2, x1], axis=-1)


def rotary_mul(b: Bound) -> Arrays:
    if b.get("rotary_mode", "half") != "half":
        raise Unsupported(f"rotary_mode={b.get('rotary_mode')!r} has no reference")
    x, r1, r2 = b.tensor("input"), b.tensor("r1"), b.tensor("r2")
    return [r1 * x + r2 * _rotate_half(x)]


def rotary_mul_bw(b: Bound, grads: Seeds) -> Grads:
    x, r1, r2, g = b.tensor("input"), b.tensor("r1"), b.tensor("r2"), seed(grads)
    h1, h2 = np.split(unbroadcast(r2 * g, x.shape), 2, axis=-1)
    return {
        "input": unbroadcast(r1 * g, x.shape) + np.concatenate([h2, -h1], axis=-1),
        "r1": unbroadcast(g * x, r1.shape),
        "r2": unbroadcast(g * _rotate_half(x), r2.shape),
    }
