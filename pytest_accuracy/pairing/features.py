"""What alignment compares of a call: tensor signatures, statistics, module paths, depth."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pytest_accuracy.dumps.model import Call, Dump, TensorRecord, is_float_dtype
from pytest_accuracy.pairing.naming import module_scope

# Leading path components that wrap a model (training cells, DDP/Float16Module, HF heads).
WRAPPERS = frozenset({"network_with_loss", "network", "_network", "module", "model",
                       "_backbone", "backbone"})


def by_path(calls: list[Call]) -> dict[tuple[str, int], Call | None]:
    """Module calls by (path without leading wrappers, call index); None where not unique."""
    out: dict[tuple[str, int], Call | None] = {}
    for c in calls:
        parts = module_scope(c).split(".")
        while len(parts) > 1 and parts[0] in WRAPPERS:
            parts = parts[1:]
        key = (".".join(parts), c.index)
        out[key] = None if key in out else c
    return out


def depths(dump: Dump) -> dict[str, int]:
    """Depth of each node in the construct.json parent tree (0 = top level)."""
    parents = {c.name: c.parent for c in dump.calls}
    out: dict[str, int] = {}
    for name in parents:
        depth, cur, seen = 0, parents.get(name), {name}
        while cur is not None and cur not in seen:
            seen.add(cur)
            depth += 1
            cur = parents.get(cur)
        out[name] = depth
    return out


def dclass(dtype: str) -> str:
    if is_float_dtype(dtype):
        return "f"
    if dtype == "bool":
        return "b"
    return "c" if dtype.startswith("complex") else "i"


def rec_key(rec: TensorRecord) -> str:
    return f"{rec.shape}{dclass(rec.dtype)}"


def sig(records: Sequence[TensorRecord], *, squeeze: bool) -> str:
    parts = []
    for r in records:
        shape = tuple(d for d in r.shape if d != 1) if squeeze else r.shape
        parts.append(f"{shape}{dclass(r.dtype)}")
    return "|".join(parts)


def call_stats(call: Call) -> list[float]:
    """(Norm, Max, Min, Mean) of the first floating output (any output if none is float)."""
    recs = call.output_tensors
    rec = next((r for r in recs if is_float_dtype(r.dtype)), recs[0] if recs else None)
    if rec is None:
        return [np.nan] * 4
    return list(rec.stats.values())
