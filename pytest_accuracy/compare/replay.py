"""Float64 replays of one dumped call from its own recorded inputs (APIs and standard modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pytest_accuracy.dumps.model import Call, TensorRecord
from pytest_accuracy.precheck.args import Bound, Unsupported, rebuild
from pytest_accuracy.precheck.casting import autocast_dtype, to_reference
from pytest_accuracy.precheck.grads import param_of
from pytest_accuracy.precheck.inputs import is_float, upcast
from pytest_accuracy.precheck.registry import REFERENCES, ApiSpec

Replay = Callable[[Call], list[np.ndarray]]
Pick = Callable[[np.ndarray], np.ndarray]

# A matrix product's rows are independent: its local error is measured on at most this many
# rows, evenly spaced (first and last included), the same rows on both sides: thousands of
# values per row already measure a kernel's rounding, and a float64 replay of every row cost
# more than reading the tensors (a 626 MB pair: 10 of 25 s).
SAMPLE_ROWS = 64
_ROW_OPS = {"linear": "input", "matmul": "input"}


class Sampled(list[np.ndarray]):
    """Replayed outputs of a row sample; ``pick`` takes the same rows of a recorded output."""

    pick: Pick

    def __init__(self, refs: list[np.ndarray], pick: Pick) -> None:
        super().__init__(refs)
        self.pick = pick


def row_pick(rows: int, flat: bool) -> Pick | None:
    """How to take the sampled rows from an operand or an output, or None: all rows."""
    if rows <= SAMPLE_ROWS:
        return None
    index = np.unique(np.linspace(0, rows - 1, SAMPLE_ROWS).round().astype(np.intp))
    if flat:  # linear: every leading axis is a row
        return lambda a: a.reshape(-1, a.shape[-1])[index]
    return lambda a: np.take(a, index, axis=-2)


def _sample_rows(bound: Bound, op: str) -> tuple[Bound, Pick | None]:
    """Bound arguments with the product's left operand cut to the sampled rows."""
    name = _ROW_OPS.get(op)
    if name is None:
        return bound, None
    value, other = bound.values.get(name), bound.values.get("other")
    if not isinstance(value, np.ndarray) or value.ndim < 2:
        return bound, None
    if op == "matmul" and (not isinstance(other, np.ndarray) or other.ndim < 2):
        return bound, None  # a matrix-vector product has no row axis left in its output
    flat = op == "linear"
    rows = int(np.prod(value.shape[:-1])) if flat else value.shape[-2]
    pick = row_pick(rows, flat)
    if pick is None:
        return bound, None
    return Bound({**bound.values, name: pick(value)}, bound.dtypes), pick


def api_replay(spec: ApiSpec) -> Replay:
    """Replay an allow-listed API: its recorded arguments, upcast, through its reference."""

    def replay(call: Call) -> list[np.ndarray]:
        # the precheck's own binding rules, so compare and precheck replay identically
        args, kwargs = rebuild(call.inputs, _load)
        dtypes: dict[str, str] = {}
        for record in call.input_tensors:
            name = param_of(spec.signature, record.path)
            if name is not None:
                dtypes.setdefault(name, record.dtype)
        bound = Bound(spec.signature.bind(args, kwargs), dtypes)
        bound, pick = _sample_rows(bound, spec.op)
        with np.errstate(all="ignore"):
            outputs = list(spec.ref.forward(to_reference(bound, autocast_dtype(call))))
        return Sampled(outputs, pick) if pick is not None else outputs

    return replay


def _load(record: TensorRecord) -> np.ndarray:
    return np.asarray(record.load())


def _param(call: Call, name: str) -> np.ndarray | None:
    for record in call.parameters:
        if record.path.rsplit(".", 1)[-1] == name:
            return np.asarray(record.load(), dtype=np.float64)
    return None


def _first_recorded(call: Call) -> np.ndarray:
    """The call's first tensor input, as recorded."""
    tensors = call.input_tensors
    if not tensors:
        raise Unsupported("the module call records no tensor input")
    return np.asarray(tensors[0].load())


def _first_input(call: Call) -> np.ndarray:
    """The call's first tensor input, in float64 when it is floating."""
    value = _first_recorded(call)
    return upcast(value, np.dtype(np.float64)) if is_float(value) else value


def _linear(call: Call) -> list[np.ndarray]:
    weight = _param(call, "weight")
    if weight is None:
        raise Unsupported("Linear without a recorded weight")
    bias = _param(call, "bias")
    # rows sampled before the float64 copy: a whole activation in float64 is 8 bytes a value
    values: dict[str, Any] = {"input": _first_recorded(call), "weight": weight, "bias": bias}
    bound, pick = _sample_rows(Bound(values, {}), "linear")
    outputs = list(REFERENCES["linear"].forward(to_reference(bound)))
    return Sampled(outputs, pick) if pick is not None else outputs


def _embedding(call: Call) -> list[np.ndarray]:
    weight = _param(call, "weight")
    if weight is None:
        raise Unsupported("Embedding without a recorded weight")
    ids = np.asarray(call.input_tensors[0].load()) if call.input_tensors else None
    if ids is None:
        raise Unsupported("Embedding without recorded ids")
    return list(REFERENCES["embedding"].forward(Bound({"input": ids, "weight": weight}, {})))


def _unary(op: str) -> Replay:
    def replay(call: Call) -> list[np.ndarray]:
        return list(REFERENCES[op].forward(Bound({"input": _first_input(call)}, {})))

    return replay


_MODULES: dict[str, Replay] = {
    "Linear": _linear,
    "Dense": _linear,
    "Embedding": _embedding,
    "ReLU": _unary("relu"),
    "SiLU": _unary("silu"),
    "GELU": _unary("gelu"),
    "Tanh": _unary("tanh"),
    "Sigmoid": _unary("sigmoid"),
}


def module_replay(class_name: str) -> Replay | None:
    """The replay of a standard layer by its class name, or None.

    Only layers whose every input is recorded; norm layers, whose eps msprobe does not
    record, are replayed with the eps fitted to the bench (norms.py).
    """
    return _MODULES.get(class_name)
