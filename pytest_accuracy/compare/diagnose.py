"""Who made the error: decide from one node's own evidence whether it makes or carries it.

The rules (DESIGN.md, "Diagnosis model"), in order:
1. a precision change or a differing non-tensor argument is an error of the node's own,
   whatever the value error;
2. a local error clearly above the bench's (output vs a float64 replay of its own inputs)
   is an error of the node's own, even inside the value band;
3. outputs off while the inputs are bit-identical: the error appears here;
4. inputs that differ, computed by code a module runs between its recorded submodules
   (L0 records modules only): that module made the error, the node carries it;
5. otherwise (inputs differ, even inside the band, and no local error says the node is at
   fault; or a module around an earlier divergence; or the same finding at the same node
   as in an earlier step) it only *carries* an earlier error, when there is one; when
   there is none, it is the first divergence: the error entered through its inputs (or
   was amplified from input noise) where the dump did not record it; except in a 16-bit
   step, where an output no more than twice as far off as its inputs (all within the band)
   carries their rounding and passes, saying so.
Every decision needs this node and facts known from metadata alone, so pytest-xdist
workers decide their own share without reading the nodes of others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_accuracy.compare.local import LocalError
from pytest_accuracy.compare.results import Finding, NodeResult, TensorComparison
from pytest_accuracy.dumps.model import FLOAT_EPS


@dataclass(frozen=True)
class Context:
    """What the node's process knows of the rest of the run."""

    earlier_divergence: Callable[[NodeResult], str | None]  # a divergence before this node
    repeat_of: Callable[[int], str | None]  # the same finding at this node in an earlier step
    inside_divergence: Callable[[int], str | None]  # a divergence inside module node i
    add_inputs: Callable[[NodeResult], None]
    local_error: Callable[[NodeResult], LocalError | str]
    made_by: Callable[[int], str | None]  # the module whose own code computed its inputs
    # the same call (name, rank) in an earlier step, where it made an error of its own too
    same_call_before: Callable[[int], str | None] = lambda index: None


def diagnose(result: NodeResult, ctx: Context) -> None:
    """Settle a judged node (status pass/fail) into pass, fail (own) or carried."""
    inside = ctx.inside_divergence(result.index)
    if inside is not None and (result.findings or result.status == "fail"):
        _carry(result, inside, f"{inside} is recorded inside it")
        return
    if result.findings:
        _measure_local(result, ctx)  # evidence beside the finding (whether the kernel is off)
        repeat = ctx.repeat_of(result.index)
        if repeat is not None:
            _repeat(result, repeat, f"it repeats the same finding ({result.findings[0].detail})")
        else:
            result.status = "fail"
        return
    local = _measure_local(result, ctx)
    if local is not None and local.npu_makes_error:
        result.findings.append(Finding(
            "local_error",
            f"its own computation is off: {local.sentence()}, replaying each side's own "
            "inputs in float64",
        ))
        again = ctx.same_call_before(result.index)
        if again is not None:  # each step's call of a mis-configured layer: one cause
            _repeat(result, again, "the same call made an error of its own in an earlier step "
                    "and makes one again")
        else:
            result.status = "fail"
        return
    if result.status != "fail":
        return
    _own_or_carried(result, ctx)


def _measure_local(result: NodeResult, ctx: Context) -> LocalError | None:
    local = ctx.local_error(result)
    if isinstance(local, LocalError):
        result.local = local
        return local
    result.local_note = local
    return None


def _own_or_carried(result: NodeResult, ctx: Context) -> None:
    ctx.add_inputs(result)
    if result.status == "error" or (result.inputs and result.inputs_identical):
        return
    # a module's own code made inputs that differ beyond the band; inputs inside it (the
    # same value read through a slice only one codebase records) leave the error here
    module = ctx.made_by(result.index) if any(not t.ok for t in result.inputs) else None
    own_parameters = [t for t in result.inputs if t.path.startswith("parameters") and not t.ok]
    if module is not None and not own_parameters:
        _carry(result, module, f"its inputs already differ, computed by {module}'s own code "
               "between its recorded submodules")
        return
    earlier = ctx.earlier_divergence(result)
    if earlier is not None:
        _carry(result, earlier, _input_difference(result))
    elif (noise := _rounding_carried(result)) is not None:
        result.status, result.reason = "pass", noise


ROUNDING = "carries its inputs' rounding"  # how such a pass's reason starts (the summary counts)
# A product's relative error is the sum of its factors': an op may double its inputs' error
_NOISE_GAIN = 2.0
_LOW_PRECISION = ("bfloat16", "float16")


def _rounding_carried(result: NodeResult) -> str | None:
    """Why a node of a 16-bit step (its effective dtype), whose inputs are within tolerance,
    only carries their rounding though its output is beyond it (no more than twice its worst
    input's error, and one unit of its dtype): two codebases round in another order, and a
    16-bit backward chain accumulates that to the band's edge. None where not so."""
    inputs = [t for t in result.inputs if not t.path.startswith("parameters")]
    if (not inputs or not result.failing_outputs or not result.inputs_ok
            or result.inputs_identical):
        return None
    worst = max(_rel(t) or 0.0 for t in inputs)
    for t in result.failing_outputs:
        out = _rel(t)  # the precision a run went through (its effective dtype) is its noise
        if t.dtype not in _LOW_PRECISION or out is None:
            return None
        if out > _NOISE_GAIN * worst + FLOAT_EPS[t.dtype]:
            return None
    dtype = result.failing_outputs[0].dtype
    return (f"{ROUNDING}: its output's error is no more than its inputs bring (worst input "
            f"relative error {worst:.3g}, within tolerance), as rounding in {dtype} accumulates")


def _rel(t: TensorComparison) -> float | None:
    value = getattr(t.metrics, "rel_l2_err", None)
    return value if isinstance(value, float) else None


def _carry(result: NodeResult, origin: str, why: str) -> None:
    result.status, result.carried_from = "carried", origin
    local = f"; {result.local.sentence()}" if result.local is not None else ""
    result.reason = f"{why} and it adds no error of its own{local}"


def _repeat(result: NodeResult, origin: str, why: str) -> None:
    """The same cause as an earlier failure: carried from it, though the node's own error
    stays (and is said): one cause, one failed item."""
    result.status, result.carried_from = "carried", origin
    local = f"; {result.local.sentence()}" if result.local is not None else ""
    result.reason = f"{why}: one cause, failed once at {origin}{local}"


def _input_difference(result: NodeResult) -> str:
    """The worst differing input, in words."""
    inputs = result.inputs  # one input (most nodes) is the worst without its key's getattr
    if not inputs:
        return "it has no input of its own to compare"
    worst = inputs[0] if len(inputs) == 1 else max(
        inputs, key=lambda t: getattr(t.metrics, "rel_l2_err", 0.0) or 0.0)
    if not worst.ok:
        return f"its inputs already differ ({worst.path}: {worst.judgement.detail})"
    rel = getattr(worst.metrics, "rel_l2_err", None)
    size = f"relative error {rel:.3g}, " if isinstance(rel, float) else ""
    return f"its inputs already differ from the bench's ({worst.path}: {size}within tolerance)"
