"""Whether a cross-framework API backward pair can be compared at all."""

from __future__ import annotations

from pytest_accuracy.dumps.model import Call, Dump
from pytest_accuracy.pairing.mapfiles import ApiMap, load_api_map
from pytest_accuracy.pairing.naming import api_name


def incomparable_backward(
    npu: Dump, bench: Dump, npu_call: Call, bench_call: Call, api_map: ApiMap | None = None
) -> str | None:
    """Why the outputs of a cross-framework API backward pair cannot be compared, else None.

    PyTorch's msprobe hooks ``output.grad_fn`` of an API, so for composite APIs (linear on 3-D
    input, 4-D matmul, cross_entropy) the backward record holds the gradients of the *last
    internal autograd node*, not w.r.t. the API inputs; MindSpore records the true input
    gradients. The incoming gradients (the record's inputs) stay comparable. Detected from
    the built-in list and from output shapes that are no forward input's shape.
    """
    if npu.framework == bench.framework or "backward" not in (npu_call.direction,):
        return None
    side = [(d, c) for d, c in ((bench, bench_call), (npu, npu_call)) if d.framework == "pytorch"]
    if not side or side[0][1].kind != "api":
        return None
    dump, call = side[0]
    api = api_name(call)
    if (api_map or load_api_map()).is_composite_backward(api):
        return f"PyTorch records {api} backward on an internal autograd node (composite API)"
    fwd = dump.get(call.name.removesuffix("backward") + "forward")
    shapes = {r.shape for r in fwd.input_tensors} if fwd is not None else set()
    odd = [r.shape for r in call.output_tensors if fwd is not None and r.shape not in shapes]
    if odd:
        return f"PyTorch {api} backward output shape {odd[0]} is no input's shape"
    return None
