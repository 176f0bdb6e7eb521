"""Errors a node makes whatever its value error: a precision change, a differing argument."""

from __future__ import annotations

import math
from collections.abc import Callable

from pytest_accuracy.compare.results import Finding, ScalarDiff
from pytest_accuracy.dumps.model import Call, ScalarArg, TensorRecord, is_float_dtype

# Keyword arguments whose meaning is the same in MindSpore and PyTorch, so a difference
# across frameworks is a finding; positional arguments are compared within a framework only.
SHARED_KWARGS = frozenset({
    "eps", "epsilon", "approximate", "p", "scale", "alpha", "beta", "negative_slope",
    "momentum", "dropout_p", "is_causal", "keep_prob", "scale_value",
})


def parse_allowed_precisions(text: str | None) -> frozenset[tuple[str, str]]:
    """``"bfloat16:float32,float16:float32"`` -> {(npu dtype, bench dtype), ...}."""
    from pytest_accuracy.dumps.model import canonical_dtype

    pairs = set()
    for item in (text or "").replace(";", ",").split(","):
        if not item.strip():
            continue
        npu, sep, bench = item.partition(":")
        npu_dtype, bench_dtype = canonical_dtype(npu.strip()), canonical_dtype(bench.strip())
        if not sep or not is_float_dtype(npu_dtype) or not is_float_dtype(bench_dtype):
            raise ValueError(
                f"expected NPU_DTYPE:BENCH_DTYPE pairs of float dtypes such as "
                f"'bfloat16:float32', got {item.strip()!r}"
            )
        pairs.add((npu_dtype, bench_dtype))
    return frozenset(pairs)


def precision_finding(
    npu: Call,
    bench: Call,
    allowed: frozenset[tuple[str, str]],
    produced: Callable[[TensorRecord], bool] = lambda record: True,
    one_sided: Callable[[TensorRecord], str | None] = lambda record: None,
) -> Finding | None:
    """A different float output dtype from inputs that arrive alike: the node changed precision.

    An input that arrives in another dtype from an earlier recorded node carries that
    node's change, and so does the output here; one that no recorded node produced (a
    parameter or buffer stored in another dtype, the guide's embedding kept in float32)
    brings the change in at this node, and so does one cast by a node only the NPU run
    records (msprobe-PyTorch records no cast: this is the first node both runs record).
    Backward records take the forward's dtypes.
    """
    if npu.direction != "forward":
        return None
    bench_inputs = {r.path: r.dtype for r in bench.input_tensors + bench.parameters}
    stored: list[str] = []
    cast: list[str] = []
    vias: list[str] = []
    for record in npu.input_tensors + npu.parameters:
        theirs = bench_inputs.get(record.path)
        if theirs is None or theirs == record.dtype:
            continue
        if (record.dtype, theirs) in allowed:
            return None
        via = one_sided(record)
        if via is not None:
            vias.append(via)
            cast.append(f"{record.path} is npu {record.dtype} vs bench {theirs}, made by {via}, "
                        "which only the NPU run records")
            continue
        if produced(record):
            return None
        stored.append(f"{record.path} is npu {record.dtype} vs bench {theirs}")
    bench_outputs = {r.path: r.dtype for r in bench.output_tensors}
    for record in npu.output_tensors:
        theirs = bench_outputs.get(record.path)
        if (
            theirs is not None
            and theirs != record.dtype
            and is_float_dtype(record.dtype)
            and is_float_dtype(theirs)
            and (record.dtype, theirs) not in allowed
        ):
            source = "".join(
                [f"; {', '.join(stored)}, stored so (no recorded node produced it)"] * bool(stored)
                + [f"; {'; '.join(cast)}"] * bool(cast)) or " from inputs of the same dtypes"
            inner = one_sided(record) if npu.kind == "module" else None
            if inner is not None:  # a module whose output a cast inside it made
                source += f"; cast inside it by {inner}, which only the NPU run records"
                vias.append(inner)
            return Finding(
                "precision",
                f"precision differs: npu {record.dtype} vs bench {theirs} ({record.path})"
                + source,
                via=vias[0] if vias else None,
            )
    return None


def scalar_diffs(npu: Call, bench: Call, same_framework: bool) -> list[ScalarDiff]:
    """Non-tensor arguments recorded on both sides with different values: keywords of a shared
    meaning always, positional ones within a framework or where both sides call the same op."""
    ours = npu.scalar_inputs
    if not ours:
        return []
    theirs = {a.path: a for a in bench.inputs if isinstance(a, ScalarArg)}
    diffs, op = [], None
    for arg in ours:
        other = theirs.get(arg.path)
        if other is None or same_value(arg.value, other.value):
            continue
        key = arg.path.rsplit(".", 1)[-1]
        if not same_framework and key not in SHARED_KWARGS:
            op = same_op(npu, bench) if op is None else op
            if not (op and key.isdigit()):  # other keywords (a group's name) differ by design
                continue
        diffs.append(ScalarDiff(arg.path, arg.value, other.value))
    return diffs


def same_op(npu: Call, bench: Call) -> bool:
    """A MindSpore API whose PyTorch name is the bench's API and whose arguments keep their
    order (``x + eps`` is ``Tensor.__add__`` on both sides, eps its ``input.1``)."""
    if npu.kind != "api" or bench.kind != "api":
        return False
    from pytest_accuracy.pairing.mapfiles import load_api_map
    from pytest_accuracy.pairing.naming import api_name

    amap = load_api_map()
    mine = amap.ms_key(api_name(npu))
    # a primitive's positional inputs keep its own order (Gather(weight, ids, axis) against
    # embedding(ids, weight, padding_idx)): only its shared keywords are compared
    return (amap.to_pt(mine) == api_name(bench) and mine not in amap.arg_maps
            and not mine.startswith("Primitive."))


def op_finding(npu: Call, bench: Call, same_framework: bool) -> Finding | None:
    """Another operation at the same place (an aligned pair of different ops: gelu for silu)."""
    if npu.kind != "api" or bench.kind != "api":
        return None
    from pytest_accuracy.pairing.mapfiles import ApiMap, load_api_map
    from pytest_accuracy.pairing.naming import api_name

    mine, theirs = ApiMap.ms_key(api_name(npu)), api_name(bench)
    if same_framework and mine == theirs:
        return None  # the same op: no need of the API map (a YAML file parsed, 0.07 s)
    amap = load_api_map()
    if not same_framework:
        if theirs in amap.alternatives.get(mine, ()):
            return None
        mine = amap.to_pt(mine)
    if mine == theirs or amap.base_op(mine) == amap.base_op(theirs):
        return None
    return Finding("op", f"another operation: npu {api_name(npu)} where the bench calls "
                   f"{theirs} (inputs and outputs of the same shapes)")


# Activation classes: two modules at one place computing different functions (GELU vs SiLU)
_ACTIVATIONS = ("gelu", "silu", "relu", "tanh", "sigmoid", "softplus", "mish")


def module_class_finding(npu: Call, bench: Call, same_framework: bool) -> Finding | None:
    """A module of another class at the same place: within a framework any class; across
    frameworks (whose classes are named apart) an activation computing another function."""
    if npu.kind != "module" or bench.kind != "module" or npu.op == bench.op:
        return None
    if not same_framework and _activation(npu.op) in (None, _activation(bench.op)):
        return None
    return Finding("module_class", f"module class differs: npu {npu.op} vs bench {bench.op} "
                   f"at {npu.scope or npu.name}: another computation at the same place")


def _activation(cls: str) -> str | None:
    lower = cls.lower().replace("swish", "silu")  # SiLU is Swish with beta 1
    return next((a for a in _ACTIVATIONS if a in lower), None)


def argument_finding(diffs: list[ScalarDiff], rel_err: float) -> Finding | None:
    """A differing argument means different code, whatever the value error.

    Floats within the node's tolerance of each other are left alone: a value computed from
    data (a norm, a loss) differs by noise between any two runs, an eps or a scale does not.
    """
    material = [d for d in diffs if not _close_floats(d.npu_value, d.bench_value, rel_err)]
    if not material:
        return None
    listed = "; ".join(str(d) for d in material)
    return Finding("argument", f"non-tensor argument differs ({listed})")


def same_value(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(a == b) and type(a) is type(b)


def _close_floats(a: object, b: object, rel_err: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return False
    if isinstance(a, int) and isinstance(b, int):
        return False  # integers (dims, sizes, counts) are exact
    scale = max(abs(a), abs(b))
    return math.isfinite(scale) and abs(a - b) <= rel_err * scale
