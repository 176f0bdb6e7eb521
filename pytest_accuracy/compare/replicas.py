"""Data-parallel replicas checked against each other, no bench needed: their parameters, and the
outputs of the collectives over their group, must be identical at every step."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_accuracy.dumps.model import Call, Dump, DumpSet, ScalarArg, TensorRecord, is_collective
from pytest_accuracy.pairing.layouts import Layout

# collectives whose output is the same on every member of their group (reduce_scatter, scatter
# and all_to_all hand each member its own part: not these)
_SAME_EVERYWHERE = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast",
                    "_all_gather_base")


@dataclass(frozen=True)
class ReplicaDiff:
    """The first value the replicas of one group disagree on."""

    step: int
    group: tuple[int, ...]
    odd: tuple[int, ...]  # the ranks outside the majority (every rank where none holds)
    node: str
    tensor: str  # "parameters.weight", "output.0"
    kind: str  # "parameter" | "collective"
    detail: str  # the values, rank by rank

    def sentence(self) -> str:
        what = ("parameter" if self.kind == "parameter" else
                "output of a collective over the group")
        if len(self.odd) == len(self.group):
            where = f"the replicas disagree ({self.detail})"
        else:
            who = (f"rank {self.odd[0]}" if len(self.odd) == 1 else
                   f"ranks {', '.join(map(str, self.odd))}")
            where = f"{who} differs from the others ({self.detail})"
        return (f"Data-parallel replicas {_ranks(self.group)} differ at step {self.step}: "
                f"{self.node} {self.tensor} ({what}): {where}")


@dataclass(frozen=True)
class ReplicaCheck:
    group: tuple[int, ...]
    steps: tuple[int, ...]  # the steps every replica dumped
    values: int  # parameter and collective values compared, all steps
    first: ReplicaDiff | None


def dp_groups(layout: Layout, ranks: Sequence[int]) -> list[tuple[int, ...]]:
    """The data-parallel groups (ranks holding the same TP shard and pipeline stage) among
    ``ranks``, each of at least two ranks present."""
    groups: dict[tuple[int, int], list[int]] = {}
    for rank in sorted(ranks):
        tp_rank, _, pp_rank = layout.coords(rank)
        groups.setdefault((tp_rank, pp_rank), []).append(rank)
    return [tuple(g) for g in groups.values() if len(g) > 1]


def check_replicas(dumps: DumpSet, group: tuple[int, ...]) -> ReplicaCheck:
    """Step by step, the first parameter or collective output the replicas disagree on."""
    steps = sorted({s for s, _ in dumps.dumps if all((s, r) in dumps.dumps for r in group)})
    values = 0
    for step in steps:
        members = [dumps.dumps[(step, r)] for r in group]
        for node, path, kind, records in _shared_values(members, group):
            values += 1
            diff = _disagreement(records, group)
            if diff is not None:
                odd, detail = diff
                return ReplicaCheck(group, tuple(steps), values,
                                    ReplicaDiff(step, group, odd, node, path, kind, detail))
    return ReplicaCheck(group, tuple(steps), values, None)


def _shared_values(members: list[Dump], group: tuple[int, ...]
                   ) -> Iterator[tuple[str, str, str, list[TensorRecord]]]:
    """In the first replica's call order: each module parameter, and each output of a
    collective over exactly this group, that every replica recorded."""
    calls = [{c.name: c for c in m.calls} for m in members]
    for call in members[0].calls:
        same = [c.get(call.name) for c in calls]
        if any(c is None for c in same):
            continue
        for path, kind, records in _values(call, [c for c in same if c is not None], group):
            yield call.name, path, kind, records


def _values(call: Call, same: list[Call], group: tuple[int, ...]
            ) -> Iterator[tuple[str, str, list[TensorRecord]]]:
    if call.parameters:
        by_path = [{p.path: p for p in c.parameters} for c in same]
        for record in call.parameters:
            records = [b.get(record.path) for b in by_path]
            if all(r is not None for r in records):
                yield record.path, "parameter", [r for r in records if r is not None]
    if is_collective(call) and call.op in _SAME_EVERYWHERE and _group_of(call) == set(group):
        for i, out in enumerate(call.outputs):
            if isinstance(out, TensorRecord):
                outs = [c.outputs[i] if i < len(c.outputs) else None for c in same]
                tensors = [r for r in outs if isinstance(r, TensorRecord)]
                if len(tensors) == len(same):
                    yield out.path, "collective", tensors


def _group_of(call: Call) -> set[int] | None:
    """The ranks of the process group msprobe recorded among a collective's arguments."""
    for arg in call.inputs:
        if isinstance(arg, ScalarArg) and isinstance(arg.value, dict):
            ranks = arg.value.get("group_ranks")
            if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
                return set(ranks)
    return None


def _disagreement(records: list[TensorRecord], group: tuple[int, ...]
                  ) -> tuple[tuple[int, ...], str] | None:
    """(odd ranks, the values said) where the records differ; None where they agree."""
    keys = [_identity(r) for r in records]
    if len(set(keys)) == 1:
        return None
    count = Counter(keys)
    common, times = count.most_common(1)[0]
    majority = times * 2 > len(keys)
    odd = tuple(r for r, k in zip(group, keys, strict=True) if not majority or k != common)
    shown = "; ".join(f"rank {r}: {_said(rec)}" for r, rec in zip(group, records, strict=True))
    return odd, shown + _max_abs(records)


def _identity(record: TensorRecord) -> Any:
    """What two replicas must share: the bytes where the tensor was dumped, else the checksum,
    else every statistic (bit for bit)."""
    if record.has_data:
        data = record.load()
        return (data.dtype.str, data.shape, data.tobytes())
    if record.md5:
        return record.md5
    stats = record.stats
    return (record.dtype, record.shape, stats.max, stats.min, stats.mean, stats.norm)


def _said(record: TensorRecord) -> str:
    s = record.stats
    return f"Max {s.max:.9g}, Min {s.min:.9g}, Norm {s.norm:.9g}" if s.norm is not None else (
        f"md5 {record.md5}" if record.md5 else "no statistics")


def _max_abs(records: list[TensorRecord]) -> str:
    """With tensors: the largest difference from the first replica's."""
    if not all(r.has_data for r in records):
        return ""
    first = records[0].load().astype(np.float64)
    worst = max((float(np.max(np.abs(r.load().astype(np.float64) - first)))
                 for r in records[1:] if r.load().shape == first.shape), default=None)
    return f"; largest difference {worst:.6g}" if worst is not None else ""


def _ranks(group: tuple[int, ...]) -> str:
    return "{" + ", ".join(map(str, group)) + "}"
