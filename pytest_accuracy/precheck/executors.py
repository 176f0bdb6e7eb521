"""The device side of a precheck: recorded outputs, or a re-run in the dumped dtype.

One entry point, :func:`make_executor`, takes the device string:

* ``"dump"`` - the outputs (and input gradients) recorded in a tensor dump.  A
  statistics dump recorded no values, so ``"dump"`` re-runs on the CPU instead, with
  the dump's framework when it is installed, else with the numpy reference code fed
  inputs in the dumped dtype; the executor's description says which.
* ``"cpu"``, ``"cuda[:N]"``, ``"npu[:N]"``, ``"gpu"`` - re-run with the dump's
  framework (torch, plus torch_npu for ``npu``; MindSpore for MindSpore dumps).  A
  ``"torch:"`` or ``"mindspore:"`` prefix picks the framework explicitly, so
  ``"torch:cpu"`` re-runs a MindSpore dump's APIs with torch and ``"mindspore:cpu"``
  with MindSpore's CPU backend (the same ``mindspore.mint`` APIs that run on Ascend);
  ``"npu"`` means Ascend for both frameworks.  MindSpore needs numpy<2.

Callables come from allow-listed maps keyed by the canonical op (``torch_ops``,
``ms_ops``), never from the dump's API name.
"""

from __future__ import annotations

import importlib.util
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_accuracy.dumps.model import Arg, TensorRecord
from pytest_accuracy.errors import MissingExtraError, require
from pytest_accuracy.precheck.args import Bound, Unsupported
from pytest_accuracy.precheck.inputs import is_float, load_checked, numpy_dtype
from pytest_accuracy.precheck.registry import ApiSpec

_DEVICE_TYPES = ("cpu", "cuda", "npu", "gpu")
_BACKENDS = ("torch", "mindspore")
_FRAMEWORK_BACKEND = {"pytorch": "torch", "mindtorch": "torch", "mindspore": "mindspore"}


@dataclass
class DeviceJob:
    """What a device needs for one call: args in the dumped dtype and the dumped records."""

    spec: ApiSpec
    bound: Bound
    outputs: list[Arg]  # forward output records (dtype, shape; values in a tensor dump)
    grads: list[Arg] = field(default_factory=list)  # recorded input gradients (backward)
    grad_params: list[str | None] = field(default_factory=list)  # parameter of each grad


class Executor(ABC):
    """Produces the device-side outputs a reference is compared with."""

    description: str

    @abstractmethod
    def forward(self, job: DeviceJob) -> list[np.ndarray | None]:
        """Outputs aligned with ``job.outputs``."""

    @abstractmethod
    def backward(self, job: DeviceJob, seeds: list[np.ndarray | None]) -> dict[str, np.ndarray]:
        """Input gradients by parameter name, given the output gradients."""


class RecordedOutputs(Executor):
    """device="dump" on a tensor dump: the values the run under test wrote."""

    description = "dump (outputs recorded in the dump)"

    def forward(self, job: DeviceJob) -> list[np.ndarray | None]:
        return [load_checked(a) if isinstance(a, TensorRecord) else None for a in job.outputs]

    def backward(self, job: DeviceJob, seeds: list[np.ndarray | None]) -> dict[str, np.ndarray]:
        return {
            name: load_checked(rec)
            for rec, name in zip(job.grads, job.grad_params, strict=False)
            if name is not None and isinstance(rec, TensorRecord)
        }


def _out_dtype(arg: Arg) -> np.dtype[Any] | None:
    return numpy_dtype(arg.dtype) if isinstance(arg, TensorRecord) else None


def _round(values: list[Any], outputs: list[Arg]) -> list[np.ndarray | None]:
    """Device results in the dtype the dump recorded for each output."""
    out: list[np.ndarray | None] = []
    for i, value in enumerate(values):
        dtype = _out_dtype(outputs[i]) if i < len(outputs) else None
        if value is None:
            out.append(None)
        else:
            array = np.asarray(value)
            out.append(array.astype(dtype) if dtype is not None else array)
    return out


class NumpyInDtype(Executor):
    """The numpy reference code on inputs in the dumped dtype, computed in float32 at least.

    Only for statistics dumps when the dump's framework is not installed: it shows the
    cost of the dumped dtype, not the behaviour of any real kernel.
    """

    def __init__(self, reason: str) -> None:
        self.description = f"cpu (numpy in the dumped dtype; {reason})"

    @staticmethod
    def _compute(bound: Bound) -> Bound:
        values = {
            k: (np.asarray(v, np.float64 if v.dtype == np.float64 else np.float32))
            if isinstance(v, np.ndarray) and is_float(v)
            else v
            for k, v in bound.values.items()
        }
        return Bound(values, bound.dtypes)

    def forward(self, job: DeviceJob) -> list[np.ndarray | None]:
        return _round(list(job.spec.ref.forward(self._compute(job.bound))), job.outputs)

    def backward(self, job: DeviceJob, seeds: list[np.ndarray | None]) -> dict[str, np.ndarray]:
        backward = job.spec.ref.backward
        if backward is None:
            raise Unsupported(f"no gradient reference for {job.spec.op}")
        bound = self._compute(job.bound)
        cast = [None if s is None else np.asarray(s, np.float32) for s in seeds]
        grads = backward(bound, cast)
        return {k: g.astype(np.asarray(job.bound.values[k]).dtype) for k, g in grads.items()}


class TorchExecutor(Executor):
    """Re-runs the API with torch on ``device`` in the dumped dtype."""

    def __init__(self, device: str, note: str = "") -> None:
        torch: Any = require("torch", "torch")
        self.torch = torch
        from pytest_accuracy.precheck import torch_run

        self._run = torch_run
        if device.startswith("npu"):
            try:
                import torch_npu  # noqa: F401  (fixed name: registers the npu device)
            except ImportError as exc:
                raise MissingExtraError(
                    "torch_npu is not installed: device='npu' needs Ascend's torch_npu"
                ) from exc
        self.device = device
        self.description = f"{device} (torch {torch.__version__}, dumped dtype{note})"

    def forward(self, job: DeviceJob) -> list[np.ndarray | None]:
        return _round(self._run.forward(self.torch, self.device, job), job.outputs)

    def backward(self, job: DeviceJob, seeds: list[np.ndarray | None]) -> dict[str, np.ndarray]:
        return self._run.backward(self.torch, self.device, job, seeds)


MINDSPORE_HINT = (
    "pip install 'pytest-accuracy[mindspore]' (mindspore==2.10.0 with numpy<2: its C "
    "extension is built against NumPy 1.x)"
)
_MS_TARGETS = {"cpu": "CPU", "npu": "Ascend", "cuda": "GPU", "gpu": "GPU"}


def mindspore_problem() -> str | None:
    """Why MindSpore cannot re-run APIs here (without importing it), or None."""
    if not installed("mindspore"):
        return f"mindspore is not installed: {MINDSPORE_HINT}"
    if int(np.__version__.split(".")[0]) >= 2:
        return f"mindspore cannot run with numpy {np.__version__}: {MINDSPORE_HINT}"
    return None


def _import_mindspore() -> Any:
    problem = mindspore_problem()
    if problem:
        raise MissingExtraError(problem)
    try:
        import mindspore  # fixed module name, imported only for a MindSpore re-run
    except Exception as exc:  # its C extension fails in many ways; all mean the same here
        raise MissingExtraError(f"mindspore cannot be imported ({exc}): {MINDSPORE_HINT}") from exc
    return mindspore


class MindSporeExecutor(Executor):
    """Re-runs the API with MindSpore (PyNative) on ``device`` in the dumped dtype."""

    def __init__(self, device: str, note: str = "") -> None:
        ms = _import_mindspore()
        kind, _, index = device.partition(":")
        target = _MS_TARGETS[kind]
        try:
            ms.set_device(target, int(index)) if index else ms.set_device(target)
        except (RuntimeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            where = f"precheck device 'mindspore:{device}'"
            raise ValueError(f"{where}: MindSpore cannot use {target}: {first}") from exc
        # Synchronous ops: an asynchronous op's kernel error is raised again by later,
        # unrelated calls, which would fail or skip the next cases.
        ms.runtime.launch_blocking()
        from pytest_accuracy.precheck import ms_run
        from pytest_accuracy.precheck.ms_ops import MsEnv

        self._run = ms_run
        self.env = MsEnv(ms, cpu=target == "CPU")
        self.description = f"{device} (mindspore {ms.__version__}, dumped dtype{note})"

    def forward(self, job: DeviceJob) -> list[np.ndarray | None]:
        return _round(self._run.forward(self.env, job), job.outputs)

    def backward(self, job: DeviceJob, seeds: list[np.ndarray | None]) -> dict[str, np.ndarray]:
        return self._run.backward(self.env, job, seeds)


def parse_device(device: str, framework: str) -> tuple[str, str]:
    """(backend, device type) for a device string; backend "dump" for recorded outputs."""
    if device == "dump":
        return "dump", "dump"
    backend, _, rest = device.partition(":") if device.split(":")[0] in _BACKENDS else ("", "", "")
    target = rest if backend else device
    if target.split(":")[0] not in _DEVICE_TYPES:
        raise ValueError(
            f"unknown precheck device {device!r}: use 'dump', 'cpu', 'cuda[:N]', 'npu[:N]' "
            "(optionally prefixed 'torch:' or 'mindspore:')"
        )
    backend = backend or _FRAMEWORK_BACKEND.get(framework, "torch")
    if backend == "torch" and target.startswith("gpu"):
        target = "cuda" + target[3:]
    return backend, target


def installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (torch takes seconds)."""
    if module in sys.modules:
        return sys.modules[module] is not None  # None: imports of it are blocked
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def make_executor(device: str, framework: str, mode: str) -> Executor:
    """The executor for ``device``; raises MissingExtraError when its framework is absent."""
    backend, target = parse_device(device, framework)
    if backend == "dump":
        if mode == "tensor":
            return RecordedOutputs()
        note = "; the statistics dump recorded no output values"
        preferred = _FRAMEWORK_BACKEND.get(framework, "torch")
        usable = installed(preferred) if preferred == "torch" else mindspore_problem() is None
        if usable:
            return _backend(preferred, "cpu", note)
        return NumpyInDtype(f"the statistics dump recorded no output values; {preferred} is absent")
    return _backend(backend, target, "")


def _backend(backend: str, target: str, note: str) -> Executor:
    if backend == "torch":
        return TorchExecutor(target, note)
    return MindSporeExecutor(target, note)
