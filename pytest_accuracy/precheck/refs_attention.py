"""Numpy references for fused attention (npu_fusion_attention, flash_attention_score, SDPA)."""

from __future__ import annotations

import math

import numpy as np

from pytest_accuracy.precheck.args import Bound, Unsupported
from pytest_accuracy.precheck.refs_math import Arrays

# msprobe's bench adds mask * -40000 rather than -inf, so fully masked rows stay finite.
_MASKED = -40000.0
_NO_LIMIT = 2147483647


def _to_bnsd(x: np.ndarray, layout: str, heads: int) -> np.ndarray:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(0, 2, 1, 3)
    if layout == "SBH":
        x = x.transpose(1, 0, 2)
    if layout in ("BSH", "SBH"):
        batch, seq, hidden = x.shape
        return x.reshape(batch, seq, heads, hidden // heads).transpose(0, 2, 1, 3)
    raise Unsupported(f"input_layout {layout!r} (TND and others have no reference)")


def _from_bnsd(x: np.ndarray, layout: str) -> np.ndarray:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(0, 2, 1, 3)
    batch, heads, seq, dim = x.shape
    bsh = x.transpose(0, 2, 1, 3).reshape(batch, seq, heads * dim)
    return bsh.transpose(1, 0, 2) if layout == "SBH" else bsh


def _band_mask(sq: int, skv: int, mode: int, pre: int, nxt: int) -> np.ndarray:
    """True where masked, per torch_npu's sparse_mode rules (msprobe's bench does the same)."""
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    if mode == 2:  # leftUpCausal
        return j > i
    offset = skv - sq
    if mode == 3:  # rightDownCausal
        return j > i + offset
    if mode == 4:  # band, aligned bottom-right
        return (j > i + offset + nxt) | (j < i + offset - pre)
    return (j > i + nxt) | (j < i - pre)  # mode 0/1 with pre/next tokens


def _attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    mask: np.ndarray | None,
    bias: np.ndarray | None,
) -> np.ndarray:
    """softmax((q k^T [+ bias]) * scale + masked) v on BNSD tensors, with GQA by repetition."""
    if k.shape[1] != q.shape[1]:
        if q.shape[1] % k.shape[1]:
            raise Unsupported("query heads are not a multiple of key/value heads")
        rep = q.shape[1] // k.shape[1]
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    scores = np.matmul(q, np.swapaxes(k, -1, -2))
    if bias is not None:
        scores = scores + bias
    scores = scores * scale
    if mask is not None:
        scores = scores + mask.astype(scores.dtype) * _MASKED
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    return np.asarray(np.matmul(probs, v))


def fusion_attention(b: Bound) -> Arrays:
    """torch_npu.npu_fusion_attention / MindSpore flash_attention_score: the attention output.

    Only output 0 is compared: softmax_max/sum are kernel internals.
    """
    if b.number("keep_prob", 1.0) < 1.0:
        raise Unsupported("keep_prob < 1: dropout inside attention is random")
    for name in ("prefix", "actual_seq_qlen", "actual_seq_kvlen"):
        if b.has(name):
            raise Unsupported(f"{name} (variable-length attention) has no reference")
    layout, heads = str(b.get("input_layout", "BSH")), b.integer("head_num")
    q = _to_bnsd(b.tensor("query"), layout, heads)
    head_dim = q.shape[-1]
    k = _to_bnsd(b.tensor("key"), layout, b.tensor("key").shape[-1] // head_dim)
    v = _to_bnsd(b.tensor("value"), layout, b.tensor("value").shape[-1] // head_dim)
    mode = b.integer("sparse_mode", 0)
    if mode not in (0, 1, 2, 3, 4):
        raise Unsupported(f"sparse_mode={mode} has no reference")
    pre, nxt = b.integer("pre_tokens", _NO_LIMIT), b.integer("next_tokens", _NO_LIMIT)
    mask = _band_mask(q.shape[2], k.shape[2], mode, pre, nxt)
    given = b.opt_tensor("atten_mask")
    if given is not None and mode in (0, 1):
        mask = mask | given.astype(bool)
    out = _attention(q, k, v, b.number("scale", 1.0), mask, b.opt_tensor("pse"))
    return [_from_bnsd(out, layout)]


def sdpa(b: Bound) -> Arrays:
    """torch.nn.functional.scaled_dot_product_attention on (..., L, E) tensors."""
    if b.number("dropout_p", 0.0) > 0.0:
        raise Unsupported("dropout_p > 0: scaled_dot_product_attention is random")
    q, k, v = b.tensor("query"), b.tensor("key"), b.tensor("value")
    scale = b.number("scale") if b.has("scale") else 1.0 / math.sqrt(q.shape[-1])
    if k.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        if not b.get("enable_gqa", False):
            raise Unsupported("key/value heads differ from query heads without enable_gqa")
        rep = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, rep, axis=-3), np.repeat(v, rep, axis=-3)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if b.get("is_causal", False):
        causal = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))
        scores = np.where(causal, scores, -np.inf)
    mask = b.opt_tensor("attn_mask")
    if mask is not None:
        # torch: a bool mask says which positions take part; a float mask is added.
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    scores = scores - scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores)
    probs = probs / probs.sum(axis=-1, keepdims=True)
    return [np.asarray(np.matmul(probs, v))]
