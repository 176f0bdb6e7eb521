"""Plain passes: statistics nodes whose pass is certain from metadata, judged without a result.

Most nodes of a big statistics dump are plain: paired, no finding, no argument, every output
recorded finite on both sides and within its tolerance. For them the node compare could only
build a ``NodeResult`` that passes, and its record; this builds the record's facts straight
from the statistics table (``records.plain_record``), at a fifth of the cost. Every other
node, and every question about one (diagnosis, inputs, a script's ``results()``), takes the
full compare, which decides these nodes alike (tests/test_plain_pass.py checks each record).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_accuracy.compare.criteria import Tolerance, less_precise
from pytest_accuracy.compare.integrity import dtype_kind
from pytest_accuracy.compare.stats_table import pairs_of
from pytest_accuracy.dumps.model import FLOAT_EPS, Call, TensorRecord

if TYPE_CHECKING:
    from pytest_accuracy.compare.engine import Comparison


@dataclass(slots=True)
class PlainOutput:
    """One compared output: the pair, its effective dtype and its table metrics."""

    npu: TensorRecord
    bench: TensorRecord
    dtype: str
    metrics: list[float]  # StatsMetrics' diffs and relative errors, in its field order


@dataclass(slots=True)
class PlainPass:
    """What a plain pass's record needs; read like a passing ``NodeResult``."""

    index: int
    step: int
    rank: int
    npu: Call
    bench: Call
    tolerance: Tolerance
    twin_step: int | None
    outputs: list[PlainOutput]
    status: str = "pass"
    reason: str = ""
    carried_from: str | None = None


def plain_pass(cmp: Comparison, index: int) -> PlainPass | None:
    """Node ``index`` as a plain pass, or None where the full compare must judge it."""
    if cmp.inputs_mode == "all" or cmp.criteria.waivers:
        return None
    prov = cmp.provenance
    if prov.flagged[index] and cmp.noise is None:
        # an output beyond its tolerance by the metadata scan's table, held to the same
        # criteria as here (no bench noise run learned others): no output would agree below
        return None
    dump, call = cmp.entries[index]
    bench = cmp.bench_call(index)
    if bench is None or call.scalar_inputs:
        return None
    mine = call.output_tensors
    for record in mine:
        if record.has_data:
            return None
    table = prov.stats
    if table is None or prov.findings[index] or cmp.region_of(index) is not None:
        return None
    criteria, dtype = cmp.criteria_at(index), cmp.effective_dtypes[index]
    # each output with the bench's of its path (as the statistics table paired them); an
    # output without one there goes to the full compare (which looks among the bench's
    # inputs too)
    paired = pairs_of(call, bench)
    if len(paired) != len(mine):
        return None
    outputs = []
    for record, other in paired:
        if (other.has_data
                or (record.md5 is not None and other.md5 is not None)
                or (record.dtype != other.dtype
                    and dtype_kind(record.dtype) != dtype_kind(other.dtype))
                or record.shape != other.shape):
            return None  # judged by data, checksum, dtype kind or shape: the full compare
        eff = less_precise(dtype, record.dtype) if record.dtype in FLOAT_EPS else record.dtype
        metrics = table.agreeing_metrics(record, other, eff, criteria.tolerance(eff))
        if metrics is None:
            return None
        outputs.append(PlainOutput(record, other, eff, metrics))
    if not outputs:
        return None
    return PlainPass(index, dump.step, dump.rank, call, bench, criteria.tolerance(dtype),
                     prov.twin_step[index], outputs)
