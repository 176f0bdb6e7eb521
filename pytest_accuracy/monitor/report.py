"""Failure messages and JSON records of the monitor items: what parts, where, what to do."""

from __future__ import annotations

from typing import Any

from pytest_accuracy.monitor.judge import KindResult, MonitorComparison, Parting
from pytest_accuracy.monitor.model import KIND_WORDS

_TOP = 5


def _where(p: Parting) -> str:
    micro = f", micro-step {p.micro}" if p.micro else ""
    return f"step {p.step}{micro}, rank {p.rank}"


def advice(p: Parting) -> str:
    """What to do when ``p`` is the first state of its rank to part."""
    module = p.npu_name.split("+")[0].rsplit(".", 1)[0]
    if p.kind == "param" and p.metric == "param_origin":
        return ("The weights differ before any update: check the checkpoint loaded and the "
                "initialisation (seed, init method) of both runs.")
    if p.kind == "param":
        return (f"The update of {p.npu_name} differs while its gradients agree: check the "
                "optimizer settings of its parameter group (lr and its schedule, weight decay, "
                "betas, eps) and gradient clipping on both runs.")
    if p.kind in ("exp_avg", "exp_avg_sq"):
        return ("Adam's moments differ while the gradients agree: check betas and eps, and "
                "whether the optimizer state was resumed or reset the same way on both runs.")
    if p.stat == "nan":
        return (f"NaN/Inf appears in {p.npu_name}'s {p.metric}: dump step {p.step} with msprobe "
                f"(task statistics, scope {module}.*) and look for the first NaN node "
                "(--acc-npu alone collects accuracy::overflow items).")
    return (f"Dump step {p.step} of both runs with msprobe (level mix, scope {module}.*) and "
            "compare them (--acc-npu/--acc-bench): the first divergent node of that module's "
            "backward is the cause (or a gradient hook, scale or clip applied to it).")


def failure_lines(result: KindResult, cmp: MonitorComparison) -> list[str]:
    first = result.first
    assert first is not None
    words = KIND_WORDS[result.kind]
    lines = [f"{words.capitalize()} part at {_where(first)}: {first.npu_name} first "
             f"({len(result.parted)} of {result.pairs} paired parameters differ at that step, "
             "worst first):"]
    lines += [f"  {p.line()}" for p in result.parted[:_TOP]]
    if len(result.parted) > _TOP:
        lines.append(f"  and {len(result.parted) - _TOP} more.")
    earlier = [s for s in result.steps if s < first.step]
    if earlier:
        lines.append(f"Steps {_span(earlier)} agree.")
    lines.append(first_state_line(cmp, result.rank))
    firsts = cmp.firsts(result.rank)
    lines.append(advice(firsts[0] if firsts else first))
    return lines


def first_state_line(cmp: MonitorComparison, rank: int) -> str:
    firsts = cmp.firsts(rank)
    if not firsts:
        return f"No state parts on rank {rank}."
    head, rest = firsts[0], firsts[1:]
    text = (f"First state to part on rank {rank}: {KIND_WORDS[head.kind]} ({head.metric}) at "
            f"step {head.step}, {head.npu_name}")
    if rest:
        text += "; then " + ", ".join(f"{KIND_WORDS[p.kind]} at step {p.step}" for p in rest)
    return text + "."


def _span(steps: list[int]) -> str:
    return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])


def record(result: KindResult, cmp: MonitorComparison) -> dict[str, Any]:
    """The JSON record of one item."""
    first = result.first
    out: dict[str, Any] = {
        "group": "monitor", "name": f"{result.rank}/{result.kind}", "rank": result.rank,
        "kind": result.kind, "metrics": [f"{a}:{b}" if a != b else a for a, b in result.metrics],
        "steps": result.steps, "paired": result.pairs, "compared": result.compared,
        "below_rounding": result.below_rounding, "unmatched_npu": result.unmatched_npu[:20],
        "unmatched_bench": result.unmatched_bench[:20],
        "status": "fail" if first else ("pass" if result.compared else "skip"),
    }
    if first is not None:
        out.update(step=first.step, param=first.npu_name, bench_param=first.bench_name,
                   metric=first.metric, stat=first.stat, npu_value=first.npu,
                   bench_value=first.bench, rel_diff=first.rel_diff, allowed=first.allowed,
                   summary=f"{KIND_WORDS[result.kind]} part at {_where(first)}: {first.line()}")
    firsts = cmp.firsts(result.rank)
    if firsts:
        out["first_state"] = {"kind": firsts[0].kind, "metric": firsts[0].metric,
                              "step": firsts[0].step, "param": firsts[0].npu_name}
    if result.signs:
        out["sign_agreement"] = {n: dict(v) for n, v in list(result.signs.items())[:50]}
    return out
