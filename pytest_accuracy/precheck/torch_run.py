"""Run one API with torch on a device, in the dumped dtype, forward and backward."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_accuracy.dumps.model import TensorRecord
from pytest_accuracy.precheck.args import Bound, Unsupported
from pytest_accuracy.precheck.inputs import is_float
from pytest_accuracy.precheck.torch_ops import TORCH_OPS

if TYPE_CHECKING:
    from pytest_accuracy.precheck.executors import DeviceJob

_TORCH_DTYPES = ("float64", "float32", "float16", "bfloat16")


def _torch_dtype(torch: Any, name: str) -> Any:
    table = {
        "float64": torch.float64,
        "float32": torch.float32,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
    }
    return table.get(name)


def to_torch(torch: Any, array: np.ndarray, dtype_name: str, device: str) -> Any:
    """A tensor in the dumped dtype; bf16 goes through float32 (exact) as numpy has no bf16."""
    if is_float(array):
        target = _torch_dtype(torch, dtype_name)
        if target is None:
            raise Unsupported(f"dtype {dtype_name} cannot be re-run with torch here")
        return torch.from_numpy(
            np.array(array, dtype=np.float32 if array.dtype != np.float64 else np.float64)
        ).to(device=device, dtype=target)
    return torch.from_numpy(np.array(array)).to(device)


def to_numpy(torch: Any, value: Any) -> np.ndarray:
    tensor = value.detach().cpu()
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.float()
    return np.asarray(tensor.numpy())


def _convert(torch: Any, job: DeviceJob, device: str) -> Bound:
    def conv(value: Any, name: str) -> Any:
        if isinstance(value, np.ndarray):
            return to_torch(torch, value, job.bound.dtype_of(name), device)
        if isinstance(value, list):
            return [conv(v, name) for v in value]
        return value

    return Bound({k: conv(v, k) for k, v in job.bound.values.items()}, job.bound.dtypes)


def _autocast(torch: Any, job: DeviceJob, device: str) -> Any:
    """msprobe's rule: an output dtype below the inputs' float dtype means autocast ran."""
    out = [a.dtype for a in job.outputs if isinstance(a, TensorRecord) and a.dtype in _TORCH_DTYPES]
    ins = {job.bound.dtype_of(k) for k, v in job.bound.values.items() if isinstance(v, np.ndarray)}
    low = {"bfloat16", "float16"}
    if (
        out
        and out[0] in low
        and ins & {"float32", "float64"}
        and ins <= {out[0], "float32", "float64"}
    ):
        return torch.autocast(device_type=device.split(":")[0], dtype=_torch_dtype(torch, out[0]))
    return contextlib.nullcontext()


def _flatten(torch: Any, result: Any) -> list[Any]:
    if isinstance(result, (tuple, list)):
        return [item for r in result for item in _flatten(torch, r)]
    return [result]


def _call(torch: Any, job: DeviceJob, bound: Bound, device: str) -> list[Any]:
    fn = TORCH_OPS.get(job.spec.op)
    if fn is None:
        raise Unsupported(f"no torch executor for {job.spec.op}")
    with _autocast(torch, job, device):
        return _flatten(torch, fn(torch, bound))


def forward(torch: Any, device: str, job: DeviceJob) -> list[Any]:
    bound = _convert(torch, job, device)
    with torch.no_grad():
        outputs = _call(torch, job, bound, device)
    return [to_numpy(torch, o) if isinstance(o, torch.Tensor) else o for o in outputs]


def backward(
    torch: Any, device: str, job: DeviceJob, seeds: list[np.ndarray | None]
) -> dict[str, np.ndarray]:
    bound = _convert(torch, job, device)
    leaves = {
        k: v
        for k, v in bound.values.items()
        if isinstance(v, torch.Tensor) and v.is_floating_point() and k not in job.spec.ref.no_grad
    }
    for tensor in leaves.values():
        tensor.requires_grad_(True)
    outputs = _call(torch, job, bound, device)
    pairs = [
        (o, s)
        for o, s in zip(outputs, seeds, strict=False)
        if s is not None and isinstance(o, torch.Tensor) and o.requires_grad
    ]
    if not pairs:
        raise Unsupported("no differentiable output with a recorded gradient")
    grads = torch.autograd.grad(
        [o for o, _ in pairs],
        list(leaves.values()),
        [to_torch(torch, s, _dtype_name(o), device) for o, s in pairs],
        allow_unused=True,
    )
    return {
        name: to_numpy(torch, g).astype(np.asarray(job.bound.values[name]).dtype)
        for name, g in zip(leaves, grads, strict=True)
        if g is not None
    }


def _dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).rsplit(".", 1)[-1]
