"""Why an NPU node found no bench counterpart, in words a user can act on."""

from __future__ import annotations

from pytest_accuracy.dumps.model import Call, Dump, DumpSet
from pytest_accuracy.pairing.anchors import is_identity


def unmatched_reason(dump: Dump, call: Call, bench: DumpSet, *, by_name: bool,
                     inside: str | None = None) -> str:
    """``by_name``: the pairing in effect is by name only (``--acc-align=name``, a script's
    Comparison without a pairing)."""
    if (dump.step, dump.rank) not in bench.dumps:
        return f"the bench run has no step {dump.step} rank {dump.rank}"
    if inside is not None:
        return f"no counterpart of its own: {inside}"
    if not by_name and is_identity(call):
        return ("a pass-through: its output is its input's value unchanged (a reshape, view, "
                "transpose or same-dtype cast), so it computes nothing to compare; that value "
                "is checked where it is made")
    bench_fw = bench.dumps[(dump.step, dump.rank)].framework
    if bench_fw != dump.framework:
        if by_name:
            return (
                f"no {bench_fw} counterpart for this {dump.framework} node: pairing is by "
                "name only; use --acc-align=auto or pass a mapping (--acc-mapping)"
            )
        return (
            f"no {bench_fw} counterpart for this {dump.framework} node: neither the "
            "alignment nor the mapping in effect pairs it; name its counterpart in a "
            "mapping (--acc-mapping; the report's inferred_mapping.yaml is a start)"
        )
    if by_name:
        return "no node of this name in the bench dump"
    return ("no node of this name in the bench dump, and the alignment in effect found no "
            "counterpart; name one in a mapping (--acc-mapping) if the bench has it")
