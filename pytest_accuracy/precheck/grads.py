"""Line up an API's recorded input gradients with its forward parameters."""

from __future__ import annotations

from pytest_accuracy.dumps.model import Arg, Call, ScalarArg, TensorRecord
from pytest_accuracy.precheck.args import Signature
from pytest_accuracy.precheck.registry import ApiSpec

# msprobe's PyTorch hooks record the input gradients of an API output's grad_fn, i.e.
# of the API's *last* internal autograd node.  For these composites that node's inputs
# are intermediates with the inputs' shapes (cross_entropy records d/d log_softmax,
# 2-D linear d/d weight^T), so the shape check cannot catch it: their recorded
# gradients are never compared.  Re-running (device="cpu"...) checks them properly.
UNRELIABLE_RECORDED_GRADS: dict[str, frozenset[str]] = {
    "pytorch": frozenset(
        {
            "Functional.linear",
            "Functional.cross_entropy",
            "Functional.rms_norm",
            "Functional.scaled_dot_product_attention",
        }
    ),
}


def recorded_grads_problem(framework: str, api_name: str) -> str | None:
    family = "pytorch" if framework in ("pytorch", "mindtorch") else framework
    if api_name in UNRELIABLE_RECORDED_GRADS.get(family, frozenset()):
        return (
            f"msprobe's PyTorch backward hook records the gradients of {api_name}'s last "
            "internal autograd node, not of its inputs; re-run with a device (e.g. "
            "device='cpu') to check its gradients"
        )
    return None


def param_of(signature: Signature, path: str) -> str | None:
    """The parameter a recorded argument path belongs to ("input.1.0" -> params[1])."""
    parts = path.split(".")
    if len(parts) < 2:
        return None
    head = parts[1]
    if head.isdigit():
        index = int(head)
        if index < len(signature.params):
            return signature.params[index]
        return signature.varargs
    return signature.aliases.get(head, head)


def _top_level(args: list[Arg]) -> dict[str, list[Arg]]:
    groups: dict[str, list[Arg]] = {}
    for arg in args:
        parts = arg.path.split(".")
        groups.setdefault(parts[1] if len(parts) > 1 else "", []).append(arg)
    return groups


def differentiable(signature: Signature, forward: Call) -> list[tuple[str, TensorRecord]]:
    """Float tensor arguments that take part in autograd, in call order."""
    out: list[tuple[str, TensorRecord]] = []
    for record in forward.input_tensors:
        name = param_of(signature, record.path)
        floating = record.dtype.startswith(("float", "bfloat"))
        if name is not None and floating and record.requires_grad is not False:
            out.append((name, record))
    return out


def align_grads(spec: ApiSpec, forward: Call, backward: Call) -> list[str | None] | str:
    """The parameter of each recorded gradient, or why they cannot be lined up.

    msprobe writes one entry per positional argument (None for non-tensors) for most
    APIs, only the differentiable tensors for others, and for some PyTorch functionals
    the gradient of an intermediate (linear's reshaped output): so positions are
    matched first, then differentiable tensors, and every shape must agree.
    """
    entries = [items[0] for items in _top_level(backward.outputs).values() if len(items) == 1]
    if len(entries) != len(_top_level(backward.outputs)):
        return "the recorded gradients are nested; they cannot be lined up with the inputs"
    groups = _top_level(forward.inputs)
    positional = sorted(int(k) for k in groups if k.isdigit())
    names: list[str | None]
    if positional and len(entries) == positional[-1] + 1:
        names = [
            param_of(spec.signature, f"input.{i}") if isinstance(e, TensorRecord) else None
            for i, e in enumerate(entries)
        ]
    else:
        tensors = [e for e in entries if isinstance(e, TensorRecord)]
        wanted = differentiable(spec.signature, forward)
        if len(tensors) != len(wanted):
            return (
                f"the dump records {len(tensors)} input gradients for "
                f"{len(wanted)} differentiable inputs; they cannot be lined up"
            )
        it = iter(wanted)
        names = [next(it)[0] if isinstance(e, TensorRecord) else None for e in entries]
    return _check_shapes(spec, forward, entries, names)


def _check_shapes(
    spec: ApiSpec, forward: Call, entries: list[Arg], names: list[str | None]
) -> list[str | None] | str:
    shapes = {
        param_of(spec.signature, r.path): r.shape
        for r in forward.input_tensors
        if len(r.path.split(".")) == 2
    }
    for i, (entry, name) in enumerate(zip(entries, names, strict=True)):
        if name is None or isinstance(entry, ScalarArg):
            continue
        assert isinstance(entry, TensorRecord)
        if shapes.get(name) != entry.shape:
            return (
                f"recorded gradient {i} has shape {entry.shape} but input {name!r} has shape "
                f"{shapes.get(name)}: msprobe recorded the gradient of an intermediate tensor"
            )
    return names
