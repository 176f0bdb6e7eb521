"""Deterministic twins: a step identical between the runs holds later steps to rounding level.

The guide's stage 1: same weights, data, seeds and deterministic kernels make a step
bit-identical; after one, any difference was made between the steps, by the update.
"Identical" is judged from metadata every dump has (dtype, shape, the four statistics
msprobe records, the checksum where dumped, non-tensor arguments), so each process can
decide it without reading tensor files.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_accuracy.dumps.model import Call, Dump, TensorRecord


def identical_steps(
    pairs: Iterable[tuple[Dump, Call, Call | None]],
) -> set[tuple[int, int]]:
    """(step, rank) of every dump whose nodes all match the bench's exactly; only dumps that
    a later step of their rank follows are judged (no later step can be held to one)."""
    pairs = list(pairs)
    last: dict[int, int] = {}
    for dump, _, _ in pairs:
        last[dump.rank] = max(last.get(dump.rank, dump.step), dump.step)
    verdict: dict[tuple[int, int], bool] = {}
    for dump, npu, bench in pairs:
        key = (dump.step, dump.rank)
        if dump.step < last[dump.rank] and verdict.get(key, True):
            verdict[key] = bench is not None and _same_call(npu, bench)
    return {key for key, same in verdict.items() if same}


def twin_step_before(identical: set[tuple[int, int]], step: int, rank: int) -> int | None:
    """The latest identical step before ``step`` on this rank, if any."""
    if not identical:
        return None
    earlier = [s for s, r in identical if r == rank and s < step]
    return max(earlier) if earlier else None


def _same_call(npu: Call, bench: Call) -> bool:
    ours, theirs = _tensors(npu), _tensors(bench)
    if not ours or ours.keys() != theirs.keys():
        return False
    if any(not same_record(ours[p], theirs[p]) for p in ours):
        return False
    return _scalars(npu) == _scalars(bench)


def _scalars(call: Call) -> dict[str, object]:
    return {a.path: (type(a.value), a.value) for a in call.scalar_inputs}


def _tensors(call: Call) -> dict[str, TensorRecord]:
    return {r.path: r for r in call.input_tensors + call.parameters + call.output_tensors}


def same_record(a: TensorRecord, b: TensorRecord) -> bool:
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape) or a.md5 != b.md5:
        return False
    stats_a = (a.stats.max, a.stats.min, a.stats.mean, a.stats.norm)
    stats_b = (b.stats.max, b.stats.min, b.stats.mean, b.stats.norm)
    return stats_a == stats_b and (a.md5 is not None or any(v is not None for v in stats_a))
