"""The guide's cheap input checks: token ids inside the vocabulary, the first batch the same.

The data differs more often than the model: ids past the embedding table (a tokenizer of
another vocabulary), or another first batch (another shuffle, seed or dataset version), make
every node after the embedding differ while every operator is right. Both are read from what
the dumps already hold: the embedding lookup's ids (an integer tensor) and its table (the 2-D
float tensor it reads: ``Functional.embedding``'s weight, MindSpore's ``Gather`` table, an
embedding module's parameter).
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_accuracy.dumps.model import Call, Dump, TensorRecord, is_float_dtype


@dataclass(frozen=True)
class Lookup:
    """One embedding lookup: the call, the ids it reads and the table's rows."""

    call: Call
    ids: TensorRecord
    rows: int
    table: TensorRecord | None = None


@dataclass(frozen=True)
class InputProblem:
    """Ids outside the table, or a first batch that differs from the bench's."""

    kind: str  # out_of_vocabulary | batch_differs
    step: int
    rank: int
    node: str
    detail: str


def lookups(dump: Dump) -> list[Lookup]:
    """The embedding lookups of one dump, in call order (forward calls)."""
    found = []
    for call in dump.calls:
        if call.direction != "forward" or not _is_lookup(call):
            continue
        ids = next((r for r in call.input_tensors
                    if not is_float_dtype(r.dtype) and r.dtype != "bool"), None)
        table = next((r for r in call.input_tensors + call.parameters
                      if is_float_dtype(r.dtype) and len(r.shape) == 2), None)
        if ids is not None and table is not None:
            found.append(Lookup(call, ids, table.shape[0], table))
    return found


def _is_lookup(call: Call) -> bool:
    op = call.op.lower()
    return "embedding" in op or (op.endswith("gather") and call.prefix == "Primitive")


def out_of_vocabulary(dump: Dump, shards: frozenset[str] = frozenset()) -> list[InputProblem]:
    """Lookups whose ids reach past their table (or below 0), from the ids' Max and Min;
    ``shards``: lookups into a vocabulary shard, whose ids index the whole vocabulary."""
    out = []
    for lookup in lookups(dump):
        if lookup.call.name in shards:
            continue
        high, low = lookup.ids.stats.max, lookup.ids.stats.min
        if (high is not None and high >= lookup.rows) or (low is not None and low < 0):
            out.append(InputProblem(
                "out_of_vocabulary", dump.step, dump.rank, lookup.call.name,
                f"{lookup.call.name} reads token ids {_num(low)}..{_num(high)} from a table of "
                f"{lookup.rows} rows (ids must be 0..{lookup.rows - 1}): the tokenizer's "
                "vocabulary and the model's vocab_size disagree, or the ids are not token ids"))
    return out


def split_lookups(dump: Dump, others: list[Dump], bench: Dump | None) -> frozenset[str]:
    """The lookups of ``dump`` into a vocabulary shard, whose ids index the whole vocabulary
    (a vocabulary-parallel embedding module masks the ids that are not its own; a lookup an
    API makes, MindSpore's Gather that reads past its table as zeros, never is): module
    lookups the bench's lookup of that name makes alike (past a table of the same rows), and
    those whose ids ``others`` (the run's other ranks at the step) read too, from tables of
    the same rows but other values (shards, not a replicated table) that together have room
    for them."""
    theirs = {k.call.name: k for k in lookups(bench)} if bench is not None else {}
    peers = [k for other in others for k in lookups(other)]
    found = set()
    for lookup in lookups(dump):
        high = lookup.ids.stats.max
        if high is None or high < lookup.rows or lookup.call.kind != "module":
            continue
        twin = theirs.get(lookup.call.name)
        if twin is not None and twin.rows == lookup.rows and (
                twin.ids.stats.max or 0) >= twin.rows:
            found.add(lookup.call.name)
            continue
        alike = 1 + sum(1 for k in peers if k.call.name == lookup.call.name
                        and k.rows == lookup.rows and _same_ids(k.ids, lookup.ids) is not False
                        and _other_rows(k.table, lookup.table))
        if high < alike * lookup.rows:
            found.add(lookup.call.name)
    return frozenset(found)


def _other_rows(a: TensorRecord | None, b: TensorRecord | None) -> bool:
    """Two tables of other values (two shards of a vocabulary), by their statistics."""
    return a is not None and b is not None and tuple(a.stats) != tuple(b.stats)


def batch_differs(npu: Dump, bench: Dump) -> tuple[InputProblem | None, bool]:
    """The first lookup's ids against the bench's first lookup's: equal statistics (or
    checksums, or data) where both read the same batch; and whether they were compared.
    Lookups into tables of other sizes (a vocabulary-parallel shard) are not compared."""
    mine, theirs = lookups(npu), lookups(bench)
    if mine and bench.get(mine[0].call.name) is not None:
        # the lookup of that name, where the bench has the call (one codebase, or a view of
        # another layout, which leaves out the ids a shard's lookup reads: then none)
        theirs = [k for k in theirs if k.call.name == mine[0].call.name]
    if (not mine or not theirs or mine[0].rows != theirs[0].rows
            or mine[0].call.name in bench.left_out
            or theirs[0].call.name in bench.left_out):  # a shard's lookup: ids of its own
        return None, False
    a, b = mine[0].ids, theirs[0].ids
    same = _same_ids(a, b)
    if same is None or same:
        return None, same is not None
    return InputProblem(
        "batch_differs", npu.step, npu.rank, mine[0].call.name,
        f"the first batch's token ids differ: {mine[0].call.name} reads ids of shape "
        f"{list(a.shape)} with {_stats(a)}, the bench's {theirs[0].call.name} "
        f"{list(b.shape)} with {_stats(b)}: the data differs, not the model (check the "
        "dataset, its order and seed, and the tokenizer before anything else)"), True


def _same_ids(a: TensorRecord, b: TensorRecord) -> bool | None:
    """Whether two id tensors are equal; None where nothing tells."""
    if a.shape != b.shape:
        return False
    if a.has_data and b.has_data:
        import numpy as np

        return bool(np.array_equal(a.load(), b.load()))
    if a.md5 is not None and b.md5 is not None:
        return a.md5 == b.md5
    known = [(k, x, y) for k, (x, y) in enumerate(zip(a.stats, b.stats, strict=True))
             if x is not None and y is not None]
    # integers: their Max and Min are exact; Mean and Norm are sums of the same integers,
    # within a float's rounding where the frameworks sum in another order
    if any(abs(x - y) > 1e-6 * max(1.0, abs(x), abs(y)) for _, x, y in known):
        return False
    # Max and Min alike tell little of a batch (msprobe-PyTorch records no Mean or Norm of
    # an integer tensor): the same batch only where a Mean or a Norm is known on both sides
    return True if any(k >= 2 for k, _, _ in known) else None


def _stats(record: TensorRecord) -> str:
    s = record.stats
    return f"Max {_num(s.max)}, Min {_num(s.min)}, Mean {_num(s.mean)}"


def _num(value: float | None) -> str:
    return "?" if value is None else f"{value:.6g}"
