"""Run one API with MindSpore (PyNative) in the dumped dtype: forward, and backward by vjp.

The backward re-run is ``mindspore.vjp`` of the API with the dumped output gradients
as the sensitivities, so it yields exactly the input gradients the dump recorded.  The
executor runs MindSpore's ops synchronously (``launch_blocking``) so that a kernel error
is raised by its own call, inside the guard that turns a missing kernel into a skip.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_accuracy.dumps.model import TensorRecord
from pytest_accuracy.precheck.args import Bound, Unsupported
from pytest_accuracy.precheck.inputs import is_float
from pytest_accuracy.precheck.ms_ops import MS_OPS, MsEnv, ms_dtype

if TYPE_CHECKING:
    from pytest_accuracy.precheck.executors import DeviceJob

_FLOATS = ("float64", "float32", "float16", "bfloat16")
_LOW = ("bfloat16", "float16")
# MindSpore's messages when a backend has no kernel for an op or a dtype: a skip, not a failure.
_NO_KERNEL = ("unregistered", "Unsupported data type", "Create kernelmod for op")


def to_ms(env: MsEnv, array: np.ndarray, dtype_name: str) -> Any:
    """A tensor in the dumped dtype; bf16 goes through float32 (exact) as numpy has no bf16."""
    if not is_float(array):
        return env.ms.Tensor(np.array(array))
    if dtype_name not in _FLOATS:
        raise Unsupported(f"dtype {dtype_name} cannot be re-run with MindSpore here")
    wide = np.array(array, dtype=np.float64 if array.dtype == np.float64 else np.float32)
    return env.ms.Tensor(wide).astype(ms_dtype(env.ms, dtype_name))


def to_numpy(env: MsEnv, value: Any) -> Any:
    if not isinstance(value, env.ms.Tensor):
        return value
    if value.dtype == env.ms.bfloat16:
        value = value.astype(env.ms.float32)
    return np.asarray(value.asnumpy())


def _amp_dtype(job: DeviceJob) -> str | None:
    """msprobe's rule: an output dtype below the inputs' float dtype means mixed precision ran."""
    out = [a.dtype for a in job.outputs if isinstance(a, TensorRecord) and a.dtype in _FLOATS]
    ins = {job.bound.dtype_of(k) for k, v in job.bound.values.items() if isinstance(v, np.ndarray)}
    if out and out[0] in _LOW and ins & {"float32", "float64"} and ins <= {out[0], *_FLOATS[:2]}:
        return out[0]
    return None


def _convert(env: MsEnv, job: DeviceJob) -> Bound:
    amp = _amp_dtype(job)

    def conv(value: Any, name: str) -> Any:
        if isinstance(value, np.ndarray):
            dtype = job.bound.dtype_of(name)
            return to_ms(env, value, amp if amp and dtype in _FLOATS else dtype)
        if isinstance(value, list):
            return [conv(v, name) for v in value]
        return value

    return Bound({k: conv(v, k) for k, v in job.bound.values.items()}, job.bound.dtypes)


def _flatten(result: Any) -> list[Any]:
    if isinstance(result, (tuple, list)):
        return [item for r in result for item in _flatten(r)]
    return [result]


def _call(env: MsEnv, job: DeviceJob, bound: Bound) -> list[Any]:
    fn = MS_OPS.get(job.spec.op)
    if fn is None:
        raise Unsupported(f"no MindSpore executor for {job.spec.op}")
    return _flatten(fn(env, bound))


@contextlib.contextmanager
def _kernel_guard(env: MsEnv, job: DeviceJob) -> Iterator[None]:
    """A backend without a kernel for this op or dtype skips the case, with MindSpore's words."""
    try:
        yield
    except (RuntimeError, TypeError, ValueError) as exc:
        text = str(exc).strip().splitlines()
        first = text[0] if text else type(exc).__name__
        if any(marker in first for marker in _NO_KERNEL):
            target = env.ms.get_context("device_target")
            raise Unsupported(
                f"MindSpore's {target} backend cannot run {job.spec.op} here: {first}"
            ) from exc
        raise


def forward(env: MsEnv, job: DeviceJob) -> list[Any]:
    with _kernel_guard(env, job):
        bound = _convert(env, job)
        return [to_numpy(env, o) for o in _call(env, job, bound)]


def _is_float_tensor(env: MsEnv, value: Any) -> bool:
    return isinstance(value, env.ms.Tensor) and value.is_floating_point()


def backward(env: MsEnv, job: DeviceJob, seeds: list[np.ndarray | None]) -> dict[str, np.ndarray]:
    with _kernel_guard(env, job):
        return _backward(env, job, seeds)


def _backward(env: MsEnv, job: DeviceJob, seeds: list[np.ndarray | None]) -> dict[str, np.ndarray]:
    bound = _convert(env, job)
    no_grad = job.spec.ref.no_grad
    leaves = {
        k: v for k, v in bound.values.items() if _is_float_tensor(env, v) and k not in no_grad
    }
    picked: list[int] = []

    def run(*tensors: Any) -> tuple[Any, ...]:
        values = {**bound.values, **dict(zip(leaves, tensors, strict=True))}
        outputs = _call(env, job, Bound(values, bound.dtypes))
        picked[:] = [
            i
            for i, o in enumerate(outputs)
            if i < len(seeds) and seeds[i] is not None and _is_float_tensor(env, o)
        ]
        if not picked:
            raise Unsupported("no differentiable output with a recorded gradient")
        return tuple(outputs[i] for i in picked)

    if not leaves:
        raise Unsupported("no floating-point input to differentiate")
    outputs, vjp_fn = env.ms.vjp(run, *leaves.values())
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    sens = tuple(
        to_ms(env, np.asarray(seeds[i]), _dtype_name(env, o))
        for i, o in zip(picked, outputs, strict=True)
    )
    grads = vjp_fn(sens)
    grads = grads if isinstance(grads, tuple) else (grads,)
    return {
        name: np.asarray(to_numpy(env, g)).astype(np.asarray(job.bound.values[name]).dtype)
        for name, g in zip(leaves, grads, strict=True)
        if g is not None
    }


def _dtype_name(env: MsEnv, tensor: Any) -> str:
    table = {env.ms.float64: "float64", env.ms.float32: "float32", env.ms.float16: "float16"}
    return table.get(tensor.dtype, "bfloat16" if tensor.dtype == env.ms.bfloat16 else "float32")
