"""Norm layers replayed with the eps fitted to the bench (compare/norms.py), against torch."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_accuracy.compare.norms import FIT_EPS, NormCall, fit_eps, norm_kind

torch = pytest.importorskip("torch")


def _norm_call(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: np.ndarray, kind: str) -> NormCall:
    """As load_norm builds it from a dump: rows over the last axis, centred for LayerNorm."""
    x = x.reshape(-1, x.shape[-1]).astype(np.float64)
    if kind == "layer":
        x = x - x.mean(axis=1, keepdims=True)
    return NormCall(x, y.reshape(x.shape).astype(np.float64), w.astype(np.float64),
                    b.astype(np.float64))


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    # rows of small variance, as after a residual stream scaled down: eps matters there
    x = torch.randn(16, 8, 64, generator=gen) * torch.logspace(-3, 0, 8).reshape(1, 8, 1)
    return x, 1 + 0.1 * torch.randn(64, generator=gen), 0.1 * torch.randn(64, generator=gen)


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 1e-3])
def test_fit_recovers_torch_layer_norm_eps(eps: float) -> None:
    x, w, b = _inputs(0)
    y = torch.nn.functional.layer_norm(x, (64,), w, b, eps)  # float32, torch's own kernel
    call = _norm_call(x.numpy(), y.numpy(), w.numpy(), b.numpy(), "layer")
    fitted, _ = fit_eps(call.rows())
    assert fitted == pytest.approx(eps, rel=0.05)
    assert call.error(fitted) <= FIT_EPS * 2.0**-23  # reproduces torch to fp32 rounding
    assert call.error(eps * 10) > 10 * call.error(fitted)  # another eps is visibly off


def test_fit_recovers_a_llama_rms_norm_eps() -> None:
    x, w, _ = _inputs(1)
    # transformers' LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * weight, in float32
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    call = _norm_call(x.numpy(), y.numpy(), w.numpy(), np.zeros(64), "rms")
    fitted, _ = fit_eps(call.rows())
    assert fitted == pytest.approx(1e-6, rel=0.05)
    assert call.error(fitted) <= FIT_EPS * 2.0**-23


def test_a_variant_formula_is_not_reproduced_by_any_eps() -> None:
    # Gemma's RMSNorm scales by (1 + weight): no eps makes the standard formula fit, so the
    # replay is refused (the node keeps the value rule) instead of inventing an error
    x, w, _ = _inputs(2)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + w)
    call = _norm_call(x.numpy(), y.numpy(), w.numpy(), np.zeros(64), "rms")
    fitted, _ = fit_eps(call.rows())
    assert call.error(fitted) > 100 * FIT_EPS * 2.0**-23


@pytest.mark.parametrize(("name", "kind"), [
    ("LayerNorm", "layer"), ("FusedLayerNorm", "layer"), ("MixedFusedLayerNorm", "layer"),
    ("RMSNorm", "rms"), ("LlamaRMSNorm", "rms"), ("Qwen2RMSNorm", "rms"),
    ("Linear", None), ("BatchNorm1d", None), ("GroupNorm", None)])
def test_norm_kind_by_class_name(name: str, kind: str | None) -> None:
    assert norm_kind(name) == kind
