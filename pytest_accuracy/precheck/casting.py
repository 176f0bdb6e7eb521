"""How a replay casts recorded arguments: autocast's compute dtype, then float64."""

from __future__ import annotations

from typing import Any

import numpy as np

from pytest_accuracy.dumps.model import Call
from pytest_accuracy.precheck.args import Bound
from pytest_accuracy.precheck.inputs import is_float, numpy_dtype, upcast


def autocast_dtype(call: Call) -> np.dtype[Any] | None:
    """The dtype autocast ran an API in: a bf16/fp16 output from wider float inputs.

    Autocast casts the inputs before the kernel runs, so the reference starts from the
    inputs rounded to that dtype: the kernel under test never saw the fp32 values.
    """
    outs = [r.dtype for r in call.output_tensors if r.dtype in ("bfloat16", "float16")]
    ins = {r.dtype for r in call.input_tensors if r.dtype.startswith(("float", "bfloat"))}
    if outs and ins & {"float32", "float64"} and ins <= {outs[0], "float32", "float64"}:
        return numpy_dtype(outs[0])
    return None


def to_reference(bound: Bound, autocast: np.dtype[Any] | None = None) -> Bound:
    def conv(value: object) -> object:
        if isinstance(value, np.ndarray):
            if autocast is not None and is_float(value):
                value = value.astype(autocast)
            return upcast(value, np.dtype(np.float64))
        if isinstance(value, list):
            return [conv(v) for v in value]
        return value

    return Bound({k: conv(v) for k, v in bound.values.items()}, bound.dtypes)
