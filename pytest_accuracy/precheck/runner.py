"""Plan one precheck case per dumped API call and run it against the float64 reference."""

from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import Any

import numpy as np

from pytest_accuracy.dumps.model import Call, Dump, DumpSet, TensorRecord
from pytest_accuracy.errors import MissingExtraError
from pytest_accuracy.precheck.args import Bound, Unsupported, rebuild
from pytest_accuracy.precheck.budget import allocation_over_budget
from pytest_accuracy.precheck.casting import autocast_dtype as _autocast_dtype
from pytest_accuracy.precheck.casting import to_reference as _to_reference
from pytest_accuracy.precheck.executors import (
    DeviceJob,
    Executor,
    NumpyInDtype,
    RecordedOutputs,
    installed,
    make_executor,
    mindspore_problem,
    parse_device,
)
from pytest_accuracy.precheck.grads import (
    align_grads,
    differentiable,
    param_of,
    recorded_grads_problem,
)
from pytest_accuracy.precheck.inputs import (
    source_for,
    tensor_value,
    upcast,
)
from pytest_accuracy.precheck.nonfinite import nan_input_reason, overflow_verdict
from pytest_accuracy.precheck.registry import ApiSpec, no_reference_reason, resolve
from pytest_accuracy.precheck.results import (
    OutputCheck,
    PrecheckCase,
    PrecheckResult,
    Status,
)
from pytest_accuracy.precheck.standards import Standard, dtype_name, get_standard

_NOTHING_TO_REPLAY = (
    "the statistics dump recorded no output values and its framework is not installed: "
    "the numpy reference against itself would check no kernel (install torch, or dump with "
    "task tensor)"
)
_REF_ERRORS = (ValueError, IndexError, TypeError, ArithmeticError)
# Prefix of the checks of what the dump recorded, made beside a re-run's own checks.
RECORDED = "recorded_"


def plan(dumps: DumpSet, *, device: str = "dump", standard: str = "default") -> list[PrecheckCase]:
    """One case per dumped API call: forward, and backward where the dump has gradients.

    Raises ValueError for an unknown device or standard, MissingExtraError when the
    device needs a framework that is not installed.
    """
    get_standard(standard)
    cases: list[PrecheckCase] = []
    for dump in dumps:
        _check_device(device, dump.framework)
        for call in dump.calls:
            if call.kind == "api" and call.direction in ("forward", "backward"):
                cases.append(_case(dump, call, device, standard))
    return cases


def _check_device(device: str, framework: str) -> None:
    backend, target = parse_device(device, framework)
    if backend == "torch" and target.startswith("npu") and not installed("torch_npu"):
        raise MissingExtraError(f"torch_npu is not installed: device={device!r} needs it")
    if backend == "torch" and not installed("torch"):
        raise MissingExtraError(
            f"torch is not installed: device={device!r} re-runs {framework} APIs with it "
            "(pip install 'pytest-accuracy[torch]', or use device='dump')"
        )
    if backend == "torch":
        problem = _torch_device_problem(target)
        if problem:
            raise ValueError(f"device={device!r}: {problem}; use device='cpu' or 'dump'")
    if backend == "mindspore":
        problem = mindspore_problem()
        if problem:
            raise MissingExtraError(f"device={device!r}: {problem}; or use device='dump'")
        _executor(device, framework, "tensor")  # MindSpore's device is set now, or refused


def _torch_device_problem(target: str) -> str | None:
    """Why torch cannot run on ``target`` here (a CUDA device absent, a build without CUDA),
    else None: said once, not in a traceback per replayed call."""
    kind, _, index = target.partition(":")
    if kind == "cpu":
        return None
    if index and not index.isdigit():
        return f"{target} names no device index"
    import torch

    if kind == "npu":
        import torch_npu  # noqa: F401  (adds torch.npu)

        usable, count = torch.npu.is_available(), torch.npu.device_count()  # type: ignore[attr-defined]
    else:
        usable, count = torch.cuda.is_available(), torch.cuda.device_count()
    if not usable:
        return f"this machine's torch {torch.__version__} has no usable {kind} device"
    count = int(count)
    if index and int(index) >= count:
        return f"{kind}:{index} is not here ({count} {kind} device(s))"
    return None


def _case(dump: Dump, call: Call, device: str, standard: str) -> PrecheckCase:
    api = f"{call.prefix}.{call.op}.{call.index}"
    api_name = f"{call.prefix}.{call.op}"
    spec = resolve(dump.framework, api_name)
    forward = call if call.direction == "forward" else dump.get(f"{api}.forward")
    backward = call if call.direction == "backward" else None
    reason = None if spec else no_reference_reason(dump.framework, api_name)
    if spec and backward is not None:
        reason = _backward_skip(spec, forward, backward, dump, device)
    return PrecheckCase(
        id=f"{dump.step}/{dump.rank}/{call.name}",
        step=dump.step,
        rank=dump.rank,
        node=call.name,
        api=api,
        api_name=api_name,
        direction="forward" if call.direction == "forward" else "backward",
        framework=dump.framework,
        mode=dump.mode,
        op=spec.op if spec else None,
        device=device,
        standard=standard,
        inputs=source_for(dump.mode, f"{api}.forward"),
        forward_call=forward,
        backward_call=backward,
        skip_reason=reason,
    )


# Seen on msprobe 26.2.0's MindSpore dumps (Mul, Sub): a primitive's backward record lists the
# input gradients last input first, so they cannot be matched to the inputs by position.
PRIMITIVE_GRADS = (
    "msprobe-MindSpore records a primitive's input gradients last input first (output.0 is "
    "the gradient of its last input); its backward is not re-run, its forward is"
)


def _backward_skip(
    spec: ApiSpec, forward: Call | None, backward: Call, dump: Dump, device: str
) -> str | None:
    framework, mode, api_name = dump.framework, dump.mode, f"{backward.prefix}.{backward.op}"
    if forward is None:
        return "the dump has a backward record but no forward record for this call"
    if spec.ref.backward is None:
        return f"no gradient reference for {spec.op}"
    if api_name.startswith("Primitive."):
        return PRIMITIVE_GRADS
    if device == "dump" and mode == "tensor":
        problem = recorded_grads_problem(framework, api_name)
        if problem:
            return problem
        aligned = align_grads(spec, forward, backward)
        if isinstance(aligned, str):
            return aligned
    return None


def run_case(case: PrecheckCase) -> PrecheckResult:
    """Check one case.  Unreadable tensor files raise AccuracyInputError (let it propagate)."""
    if case.skip_reason:
        return _skip(case, case.skip_reason)
    spec = resolve(case.framework, case.api_name)
    if spec is None or case.forward_call is None:  # plan() gives these a skip_reason
        return _skip(case, no_reference_reason(case.framework, case.api_name))
    if over_budget := allocation_over_budget(case.api_name, case.forward_call, case.backward_call):
        return _skip(case, over_budget)
    if nan_input := nan_input_reason(case):
        return _skip(case, nan_input)
    try:
        executor = _executor(case.device, case.framework, case.mode)
        if isinstance(executor, NumpyInDtype):
            # The reference code on both sides checks no kernel: never a pass.
            return _skip(case, _NOTHING_TO_REPLAY, executor.description)
        if case.direction == "forward":
            checks = _run_forward(case, spec, executor)
        else:
            checks = _run_backward(case, spec, executor)
    except Unsupported as exc:
        return _skip(case, str(exc), _executor_label(case))
    except _DeviceError as exc:
        return _finish(case, "fail", str(exc), (), _executor_label(case))
    return overflow_verdict(case, _result(case, checks, executor.description))


@lru_cache(maxsize=16)
def _executor(device: str, framework: str, mode: str) -> Executor:
    return make_executor(device, framework, mode)


def _executor_label(case: PrecheckCase) -> str:
    try:
        return _executor(case.device, case.framework, case.mode).description
    except (ImportError, ValueError):
        return case.device


def _bind(case: PrecheckCase, spec: ApiSpec, call: Call) -> tuple[Bound, dict[str, Any]]:
    """The call's arguments in the dumped dtype, and which ones the dump says need grad."""
    counter = itertools.count()

    def value(record: TensorRecord) -> np.ndarray:
        return tensor_value(record, case.inputs, (0, next(counter)))

    args, kwargs = rebuild(call.inputs, value)
    values = spec.signature.bind(args, kwargs)
    dtypes: dict[str, str] = {}
    requires: dict[str, Any] = {}
    for record in call.input_tensors:
        name = param_of(spec.signature, record.path)
        if name is not None:
            dtypes.setdefault(name, record.dtype)
            requires.setdefault(name, record.requires_grad)
    return Bound(values, dtypes), requires


def _reference(fn: Any, *args: Any) -> Any:
    """Run reference code; a failure there is our limitation, so it skips, never fails."""
    try:
        with np.errstate(all="ignore"):
            return fn(*args)
    except _REF_ERRORS as exc:
        raise Unsupported(f"reference could not be computed: {type(exc).__name__}: {exc}") from exc


def _run_forward(case: PrecheckCase, spec: ApiSpec, executor: Executor) -> list[OutputCheck]:
    call = case.forward_call
    assert call is not None
    bound, _ = _bind(case, spec, call)
    refs = _reference(spec.ref.forward, _to_reference(bound, _autocast_dtype(call)))
    limit = spec.ref.compared_outputs
    if limit is None and len(refs) != len(call.outputs):
        raise Unsupported(
            f"the reference returns {len(refs)} outputs, the dump records {len(call.outputs)}"
        )
    job = DeviceJob(spec, bound, call.outputs)
    devices = _device(executor.forward, job)
    recorded = RecordedOutputs().forward(job) if _also_recorded(case, executor) else []
    standard = get_standard(case.standard)
    checks = []
    for i, record in enumerate(call.outputs[: limit or len(refs)]):
        if isinstance(record, TensorRecord):
            name = f"{case.api}.forward.{record.path}"
            dev = devices[i] if i < len(devices) else None
            checks.append(_check(name, dev, refs[i], record, standard))
            if i < len(recorded) and recorded[i] is not None:
                name = f"{case.api}.forward.{RECORDED}{record.path}"
                checks.append(_check(name, recorded[i], refs[i], record, standard))
    return checks


def _also_recorded(case: PrecheckCase, executor: Executor) -> bool:
    """A re-run of a tensor dump also judges what the run under test recorded."""
    return case.mode == "tensor" and not isinstance(executor, RecordedOutputs)


def _device(fn: Any, *args: Any) -> Any:
    """Run the device side; its exceptions become a failure of the case, with the message."""
    try:
        return fn(*args)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise _DeviceError(f"the device run raised {type(exc).__name__}: {exc}") from exc


class _DeviceError(Exception):
    """The API under test raised: a failed check, reported with the exception text."""


def _run_backward(case: PrecheckCase, spec: ApiSpec, executor: Executor) -> list[OutputCheck]:
    forward, backward = case.forward_call, case.backward_call
    assert forward is not None and backward is not None and spec.ref.backward is not None
    bound, requires = _bind(case, spec, forward)
    seeds_dev = _seeds(case, backward, len(forward.outputs))
    seeds_ref = [None if s is None else upcast(s, np.dtype(np.float64)) for s in seeds_dev]
    refs = _reference(spec.ref.backward, _to_reference(bound, _autocast_dtype(forward)), seeds_ref)
    aligned = align_grads(spec, forward, backward)
    names = aligned if isinstance(aligned, list) else []
    job = DeviceJob(spec, bound, forward.outputs, list(backward.outputs), names)
    devices = _device(executor.backward, job, seeds_dev)
    recorded = _recorded_grads(case, executor, job, aligned)
    records = _grad_records(spec, forward, backward, names)
    standard = get_standard(case.standard)
    autocast = _autocast_dtype(forward)
    judged_as = dtype_name(np.zeros(0, autocast)) if autocast is not None else None
    checks = []
    for name, (label, record) in records.items():
        if name in refs and requires.get(name) is not False:
            full = f"{case.api}.backward.{label}"
            dev = devices.get(name)
            checks.append(_check(full, dev, refs[name], record, standard, judged_as))
            if name in recorded:
                full = f"{case.api}.backward.{RECORDED}{label}"
                checks.append(_check(full, recorded[name], refs[name], record, standard, judged_as))
    return checks


def _recorded_grads(
    case: PrecheckCase, executor: Executor, job: DeviceJob, aligned: list[str | None] | str
) -> dict[str, np.ndarray]:
    """The dumped input gradients, where a re-run also judges them (lined up and reliable)."""
    if not _also_recorded(case, executor) or isinstance(aligned, str):
        return {}
    if recorded_grads_problem(case.framework, case.api_name):
        return {}
    return RecordedOutputs().backward(job, [])


def _seeds(case: PrecheckCase, backward: Call, count: int) -> list[np.ndarray | None]:
    """The recorded output gradients (the backward record's inputs), one per forward output."""
    seeds: list[np.ndarray | None] = [None] * max(count, len(backward.inputs))
    for i, arg in enumerate(backward.inputs):
        if isinstance(arg, TensorRecord):
            seeds[i] = tensor_value(arg, case.inputs, (1, i))
    return seeds


def _grad_records(
    spec: ApiSpec, forward: Call, backward: Call, names: list[str | None]
) -> dict[str, tuple[str, TensorRecord]]:
    """Per parameter: the label of its gradient row and the record giving its dtype/shape."""
    out: dict[str, tuple[str, TensorRecord]] = {}
    for name, entry in zip(names, backward.outputs, strict=False):
        if name is not None and isinstance(entry, TensorRecord):
            out[name] = (entry.path, entry)
    if not names:  # gradients not lined up (re-run devices): label by forward position
        for name, record in differentiable(spec.signature, forward):
            out.setdefault(name, (f"output.{record.path.split('.')[1]}", record))
    return out


def _check(
    name: str,
    device: np.ndarray | None,
    ref: np.ndarray,
    record: TensorRecord,
    standard: Standard,
    judged_as: str | None = None,
) -> OutputCheck:
    shape = tuple(record.shape)
    if device is None:
        return OutputCheck(name, "skip", "float64", record.dtype, shape, {}, "no device value")
    judgement = standard.judge(np.asarray(device), np.asarray(ref), judged_as)
    return OutputCheck(
        name=name,
        status="pass" if judgement.passed else "fail",
        bench_dtype="float64" if np.asarray(ref).dtype.kind == "f" else str(np.asarray(ref).dtype),
        device_dtype=dtype_name(np.asarray(device)),
        shape=tuple(np.asarray(device).shape),
        metrics=judgement.metrics,
        message=judgement.reason,
    )


def _result(case: PrecheckCase, checks: list[OutputCheck], device: str) -> PrecheckResult:
    compared = [c for c in checks if c.status != "skip"]
    failed = [c for c in compared if c.status == "fail"]
    if not compared:
        return _finish(case, "skip", "no output could be compared", tuple(checks), device)
    if not failed and all(math.prod(c.shape) == 0 for c in compared):
        # Nothing was measured (e.g. a slice past the end): no metric is never a pass.
        reason = "every compared output is empty: there is no value to judge"
        return _finish(case, "skip", reason, tuple(checks), device)
    if failed:
        reason = "; ".join(
            f"{c.name.rsplit('.', 2)[-2]}.{c.name.rsplit('.', 1)[-1]}: {c.message}" for c in failed
        )
        return _finish(case, "fail", reason, tuple(checks), device)
    return _finish(case, "pass", "", tuple(checks), device)


def _skip(case: PrecheckCase, reason: str, device: str | None = None) -> PrecheckResult:
    return _finish(case, "skip", reason, (), device or case.device)


def _finish(
    case: PrecheckCase, status: Status, reason: str, checks: tuple[OutputCheck, ...], device: str
) -> PrecheckResult:
    cosines = [c.metrics.get("cosine") for c in checks if c.status != "skip"]
    max_abs = [c.metrics.get("max_abs_err") for c in checks if c.status != "skip"]
    return PrecheckResult(
        case_id=case.id,
        name=case.node,
        api=case.api,
        direction=case.direction,
        framework=case.framework,
        status=status,
        cosine=min((v for v in cosines if v is not None), default=None),
        max_abs=max((v for v in max_abs if v is not None), default=None),
        reason=reason,
        inputs=case.inputs.describe(),
        device=device,
        standard=case.standard,
        outputs=checks,
    )
