"""Precheck references against independent sources: torch called directly, documented defaults.

tests/test_precheck_refs.py goes through the plugin's own torch op table, so a mistake the
table and a reference share is invisible there; these tests name the torch function itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pytest_accuracy.dumps.model import FLOAT_EPS
from pytest_accuracy.precheck.args import Bound
from pytest_accuracy.precheck.registry import REFERENCES

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(11)
X, W, B = RNG.standard_normal((2, 3, 8)), RNG.standard_normal(8), RNG.standard_normal(8)
M = RNG.standard_normal((8, 5))
T = torch.from_numpy

# (reference op, its arguments, the torch function called directly on the same float64 data)
CASES: list[tuple[str, dict[str, Any], Callable[[], Any]]] = [
    ("softmax", {"input": X, "dim": -1}, lambda: torch.softmax(T(X), -1)),
    ("log_softmax", {"input": X, "dim": 1}, lambda: torch.log_softmax(T(X), 1)),
    ("silu", {"input": X}, lambda: F.silu(T(X))),
    ("gelu", {"input": X, "approximate": "none"}, lambda: F.gelu(T(X))),
    ("gelu", {"input": X, "approximate": "tanh"}, lambda: F.gelu(T(X), approximate="tanh")),
    ("relu", {"input": X}, lambda: torch.relu(T(X))),
    ("sigmoid", {"input": X}, lambda: torch.sigmoid(T(X))),
    ("matmul", {"input": X, "other": M}, lambda: torch.matmul(T(X), T(M))),
    ("linear", {"input": X, "weight": M.T.copy(), "bias": None},
     lambda: F.linear(T(X), T(M.T.copy()))),
    ("layer_norm", {"input": X, "normalized_shape": [8], "weight": W, "bias": B, "eps": 1e-5},
     lambda: F.layer_norm(T(X), [8], T(W), T(B), 1e-5)),
    ("rms_norm", {"input": X, "normalized_shape": [8], "weight": W, "eps": 1e-6},
     lambda: F.rms_norm(T(X), [8], T(W), 1e-6)),
]


@pytest.mark.parametrize(("op", "args", "direct"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_reference_matches_the_torch_function_called_directly(
    op: str, args: dict[str, Any], direct: Callable[[], Any]
) -> None:
    (ours, *_) = REFERENCES[op].forward(Bound(args, {}))
    np.testing.assert_allclose(ours, direct().numpy(), rtol=1e-10, atol=1e-12)


def test_float_eps_is_each_dtype_machine_epsilon() -> None:
    import ml_dtypes

    for name, eps in FLOAT_EPS.items():
        finfo = np.finfo(name) if name in ("float64", "float32", "float16") else (
            ml_dtypes.finfo(getattr(ml_dtypes, name)))
        assert eps == float(finfo.eps), name
    assert FLOAT_EPS["float32"] == float(torch.finfo(torch.float32).eps)


def test_rms_norm_without_eps_uses_torch_default() -> None:
    # torch.nn.functional.rms_norm(eps=None) takes torch.finfo(input.dtype).eps.
    x32 = X.astype(np.float32)
    expected = F.rms_norm(T(x32).double(), [8], T(W), torch.finfo(torch.float32).eps)
    bound = Bound({"input": x32.astype(np.float64), "normalized_shape": [8], "weight": W},
                  {"input": "float32"})
    (ours,) = REFERENCES["rms_norm"].forward(bound)
    np.testing.assert_allclose(ours, expected.numpy(), rtol=1e-12)


def test_fused_rms_norm_defaults_to_the_documented_epsilon() -> None:
    # torch_npu.npu_rms_norm(x, gamma, epsilon=1e-06) and mindspore.ops.rms_norm(x, gamma,
    # epsilon=1e-6): both documented defaults are 1e-6, not the dtype's machine epsilon.
    bound = Bound({"input": X, "weight": W, "fused": True}, {"input": "float32"})
    y, rstd = REFERENCES["rms_norm"].forward(bound)
    expected_rstd = 1 / np.sqrt((X * X).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(rstd, expected_rstd, rtol=1e-12)
    np.testing.assert_allclose(y, F.rms_norm(T(X), [8], T(W), 1e-6).numpy(), rtol=1e-10)
