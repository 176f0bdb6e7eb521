"""Float64 replays of norm layers (LayerNorm, RMSNorm) with the eps that reproduces the bench.

msprobe records a norm module's input, weight, bias and output but not its eps. The eps is
therefore fitted: the one that brings a float64 replay of the *bench's* own input closest to
the bench's output. The replay counts as a reference only when that fit reproduces the bench
to rounding level (a variant formula, such as a (1 + weight) scale, does not, and the node
keeps the value rule); the NPU is then replayed with the bench's eps, so a different eps on
the NPU shows as a local error of its own, with the eps its output fits named beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pytest_accuracy.dumps.model import FLOAT_EPS, Call
from pytest_accuracy.precheck.args import Unsupported

# The fit must reproduce the bench within FIT_EPS units of its output dtype (relative L2).
FIT_EPS = 4.0
# log10(eps) searched: a coarse grid, then golden-section refinement around its best point.
_LOG_RANGE = (-12.0, -1.0)
_GRID_STEP = 0.25
_REFINE_STEPS = 40


@dataclass(frozen=True)
class Rows:
    """A norm call as rows over its last axis: y ~ x * s(eps) * w + b, per-row sums."""

    mean_square: np.ndarray  # per row: mean of x^2 (x centred for LayerNorm)
    tt: np.ndarray  # per row: sum (y - b)^2
    tz: np.ndarray  # per row: sum (y - b) * x * w
    zz: np.ndarray  # per row: sum (x * w)^2
    zb: np.ndarray  # per row: sum x * w * b
    bb: float  # sum b^2 (the same every row)

    def error(self, eps: float) -> float:
        """Relative L2 error of the recorded output vs the replay with ``eps``."""
        s = 1.0 / np.sqrt(self.mean_square + eps)
        diff = float(np.sum(self.tt - 2.0 * s * self.tz + s * s * self.zz))
        norm = float(np.sum(s * s * self.zz + 2.0 * s * self.zb)) + self.bb * len(s)
        if norm <= 0.0:
            return math.inf
        return math.sqrt(max(diff, 0.0) / norm)


def norm_kind(class_name: str) -> str | None:
    """"rms" or "layer" for a norm class by its name (LlamaRMSNorm, FusedLayerNorm, ...)."""
    if class_name.endswith("RMSNorm"):
        return "rms"
    if class_name.endswith("LayerNorm"):
        return "layer"
    return None


@dataclass(frozen=True)
class NormCall:
    """One norm call's recorded data as rows over the last axis (x centred for LayerNorm)."""

    x: np.ndarray
    y: np.ndarray
    w: np.ndarray
    b: np.ndarray

    def rows(self) -> Rows:
        t, z = self.y - self.b, self.x * self.w
        return Rows(np.mean(self.x * self.x, axis=1), np.sum(t * t, axis=1),
                    np.sum(t * z, axis=1), np.sum(z * z, axis=1), z @ self.b,
                    float(self.b @ self.b))

    def error(self, eps: float) -> float:
        """Relative L2 error of the output vs the replay with ``eps``, computed directly (the
        per-row sums cancel at rounding level: good for the fit, not for the measure)."""
        want = self.x / np.sqrt(np.mean(self.x * self.x, axis=1, keepdims=True) + eps)
        want = want * self.w + self.b
        norm = float(np.linalg.norm(want))
        diff = float(np.linalg.norm(self.y - want))
        if norm == 0.0:
            return 0.0 if diff == 0.0 else math.inf
        return diff / norm


def load_norm(call: Call, kind: str) -> NormCall:
    """One norm call's recorded input, weight, bias and output, as rows."""
    if not call.input_tensors or not call.output_tensors:
        raise Unsupported("the norm call records no tensor input or output")
    x = np.asarray(call.input_tensors[0].load(), dtype=np.float64)
    y = np.asarray(call.output_tensors[0].load(), dtype=np.float64)
    if x.ndim == 0 or x.shape != y.shape or x.size == 0:
        raise Unsupported(f"norm input {x.shape} and output {y.shape} do not pair")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise Unsupported("non-finite values in the norm's input or output")
    width = x.shape[-1]
    # MindSpore's nn.LayerNorm names them gamma and beta; x-transformers' RMSNorm g,
    # TransformerLens' norms w and b
    weight = _param(call, _WEIGHTS, width)
    bias = _param(call, _BIASES, width)
    known = {*_WEIGHTS, *_BIASES}
    unknown = [r.path for r in call.parameters if r.path.rsplit(".", 1)[-1] not in known]
    if unknown:  # a replay with a weight of ones would call a right norm wrong
        raise Unsupported(f"norm parameter(s) {', '.join(unknown)} of unknown role")
    x, y = x.reshape(-1, width), y.reshape(-1, width)
    if kind == "layer":
        x = x - x.mean(axis=1, keepdims=True)
    return NormCall(x, y, np.ones(width) if weight is None else weight,
                    np.zeros(width) if bias is None else bias)


_WEIGHTS = ("weight", "gamma", "g", "scale", "w")
_BIASES = ("bias", "beta", "b")


def _param(call: Call, names: tuple[str, ...], width: int) -> np.ndarray | None:
    for record in call.parameters:
        name = record.path.rsplit(".", 1)[-1]
        if name in names:
            value = np.asarray(record.load(), dtype=np.float64).reshape(-1)
            if value.size != width:
                raise Unsupported(f"norm {name} of {value.size} values over a last axis of {width}")
            return value
    return None


def fit_eps(rows: Rows) -> tuple[float, float]:
    """The eps (and its relative error) that brings the replay closest to the output."""
    grid = np.arange(_LOG_RANGE[0], _LOG_RANGE[1] + _GRID_STEP / 2, _GRID_STEP)
    errors = [rows.error(10.0 ** g) for g in grid]
    best = int(np.argmin(errors))
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    return _golden(lambda g: rows.error(10.0 ** g), low, high)


def _golden(f: Callable[[float], float], low: float, high: float) -> tuple[float, float]:
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = low + (1 - ratio) * (high - low), low + ratio * (high - low)
    fa, fb = f(a), f(b)
    for _ in range(_REFINE_STEPS):
        if fa <= fb:
            high, b, fb = b, a, fa
            a = low + (1 - ratio) * (high - low)
            fa = f(a)
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = f(b)
    g = a if fa <= fb else b
    return 10.0 ** g, min(fa, fb)


@dataclass(frozen=True)
class NormFit:
    """Both sides' local errors with the bench's eps, and the eps each side's output fits."""

    npu_error: float
    bench_error: float
    bench_eps: float
    npu_eps: float

    def detail(self) -> str:
        return (f"; eps {self.bench_eps:.2g} reproduces the bench's output, the NPU's fits "
                f"{self.npu_eps:.2g}")


def fit_pair(npu: Call, bench: Call, kind: str) -> NormFit:
    """Fit the bench's eps; refuse (Unsupported) where no eps reproduces the bench."""
    theirs, ours = load_norm(bench, kind), load_norm(npu, kind)
    eps, _ = fit_eps(theirs.rows())
    bench_error = theirs.error(eps)
    dtype = bench.output_tensors[0].dtype
    bound = FIT_EPS * FLOAT_EPS.get(dtype, FLOAT_EPS["float32"])
    if not bench_error <= bound:
        raise Unsupported(f"no eps reproduces the bench's output with the standard {kind} norm "
                          f"formula (best {bench_error:.3g}, up to {bound:.3g})")
    return NormFit(ours.error(eps), bench_error, eps, fit_eps(ours.rows())[0])
