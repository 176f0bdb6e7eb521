"""Every paired output's recorded statistics compared in one vectorized pass, and the
metadata scan's output pairs and its test of a node's rows (compare/provenance.py)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import cast

import numpy as np

from pytest_accuracy.compare.criteria import (
    STAT_STEPS,
    CompareCriteria,
    Tolerance,
    judge_md5,
    judge_stats,
)
from pytest_accuracy.compare.metrics import MASK_VALUE, StatsMetrics, stats_metrics
from pytest_accuracy.dumps.model import FLOAT_EPS, Call, Dump, TensorRecord
from pytest_accuracy.dumps.stats import StatsColumns


class StatsTable:
    """The statistics metrics of output pairs, computed once for the metadata scan and the
    node compares alike (a 100k-node dump has ~200k pairs: one numpy pass instead of a
    Python function per pair, twice).

    Rows whose eight statistics are all finite (nearly all of them) take numpy's values,
    which are ``stats_metrics``'s to the bit: the same IEEE operations in the same order.
    Every other pair (a NaN, an Inf, a statistic not recorded) and every pair the table
    does not hold goes to ``stats_metrics`` itself.
    """

    def __init__(self, pairs: Sequence[tuple[TensorRecord, TensorRecord]]) -> None:
        self._rows: dict[int, int] = {}  # id(npu) -> row, for records with their own Stats
        # for records kept in columns: id(columns) -> each columns row's table row (-1: none);
        # 1.2 MB where a dict by id took 10 MB at 100k nodes
        self._by_columns: dict[int, array[int]] = {}
        # the bench record each row was made for: a lookup with another one is not this row
        self._bench = [bench for _, bench in pairs]
        values = np.empty((len(pairs), 8), dtype=np.float64)
        mine = [n for n, _ in pairs]
        floats, groups, own = _fill(values[:, :4], mine)
        for k in own:  # the records with their own Stats
            self._rows[id(mine[k])] = k
        for cols, ks, at in groups.values():
            rows = self._by_columns[id(cols)] = array("i", [-1]) * len(cols)
            for k, row in zip(ks, at, strict=True):
                rows[row] = k
        del mine, groups, own  # a list and two ints a record: gone before the bench's fill
        floats &= _fill(values[:, 4:], self._bench)[0]
        # None reads as NaN: such rows are not finite, nor are rows of ints (stats_metrics
        # computes those in exact integer arithmetic; the readers make every statistic a float)
        # a pair whose Mins are both mask fills (stats_metrics' masked_otherwise) is left to
        # stats_metrics: rare, and the table's rows are plain differences
        fills = np.maximum(values[:, 1], values[:, 5]) <= MASK_VALUE
        self._finite: list[bool] = cast(list[bool], (np.isfinite(values).all(axis=1)
                                                     & floats & ~fills).tolist())
        self._metrics = _finite_metrics(values[:, :4], values[:, 4:])
        # what judging a row needs, as Python floats and bools (one element read apiece)
        rel_norm, range_rel = self._metrics[:, 7], self._metrics[:, 8]
        self._worst: list[float] = np.maximum(rel_norm, range_rel).tolist()
        self._exact: list[bool] = ((self._metrics[:, 0] == 0)
                                   & (self._metrics[:, 1] == 0)).tolist()

    def _row(self, npu: TensorRecord, bench: TensorRecord) -> int | None:
        at = npu.stats_row
        if at is None:
            row = self._rows.get(id(npu), -1)
        else:
            rows = self._by_columns.get(id(at[0]))
            row = rows[at[1]] if rows is not None else -1
        if row < 0 or self._bench[row] is not bench or not self._finite[row]:
            return None
        return row

    def metrics(self, npu: TensorRecord, bench: TensorRecord) -> StatsMetrics:
        """``stats_metrics(npu.stats, bench.stats)``."""
        row = self._row(npu, bench)
        if row is None:
            return stats_metrics(npu.stats, bench.stats)
        dmax, dmin, dmean, dnorm, rmax, rmin, rmean, rnorm, rrange = self._metrics[row].tolist()
        return StatsMetrics("ok", 4, dmax, dmin, dmean, dnorm, rmax, rmin, rmean, rnorm, rrange,
                            0, 0)

    def agreeing_metrics(self, npu: TensorRecord, bench: TensorRecord, dtype: str,
                         tol: Tolerance) -> list[float] | None:
        """The pair's diffs and relative errors as floats (``StatsMetrics``' field order, from
        ``max_diff`` to ``range_rel_err``), where the table holds a finite row for it and
        the pair agrees (``agree``); else None."""
        row = self._row(npu, bench)
        if row is None:
            return None
        if tol.spread is None and dtype in FLOAT_EPS:  # _agrees' common case, without a call
            if not self._worst[row] <= tol.rel_err:
                return None
        elif not self._agrees(row, dtype, tol):
            return None
        metrics: list[float] = self._metrics[row].tolist()  # no cast() call: a float row
        return metrics

    def agree(self, npu: TensorRecord, bench: TensorRecord, dtype: str,
              tol: Tolerance) -> bool | None:
        """``judge_stats(self.metrics(npu, bench), dtype, tol).ok`` for a finite row, without
        making the metrics; None where the table has no finite row for the pair."""
        row = self._row(npu, bench)
        return None if row is None else self._agrees(row, dtype, tol)

    def bench_at(self, row: int) -> TensorRecord:
        """The bench record of the pair the table was made with at ``row``."""
        return self._bench[row]

    def agree_at(self, row: int, dtype: str, tol: Tolerance) -> bool | None:
        """``agree`` of the pair the table was made with at ``row``."""
        if not self._finite[row]:
            return None
        if tol.spread is None and dtype in FLOAT_EPS:  # _agrees' common case, without a call
            return self._worst[row] <= tol.rel_err
        return self._agrees(row, dtype, tol)

    def _agrees(self, row: int, dtype: str, tol: Tolerance) -> bool:
        """judge_stats' verdict on a finite row: within ``tol`` (Norm and the Max/Min/Mean
        range), or for an integer or bool dtype, Max and Min equal."""
        if dtype not in FLOAT_EPS:
            return self._exact[row]
        if tol.spread is None:
            return self._worst[row] <= tol.rel_err
        # learned from the bench's noise: Max/Min/Mean get judge_stats' recording steps
        norm, spread = float(self._metrics[row, 7]), float(self._metrics[row, 8])
        return norm <= tol.rel_err and spread <= max(tol.rel_err, STAT_STEPS * FLOAT_EPS[dtype])


_Groups = dict[int, tuple[StatsColumns, list[int], list[int]]]


def _fill(out: np.ndarray, records: Sequence[TensorRecord]
          ) -> tuple[np.ndarray, _Groups, list[int]]:
    """Each record's (Max, Min, Mean, Norm) into its row of ``out``, NaN where not recorded,
    gathered from its dump's columns where it keeps them there; whether the row's statistics
    are all floats (or None), the records kept in columns grouped by them (id(columns) ->
    the columns, the records' indices, their rows there) and the indices of the others."""
    floats = np.ones(len(records), dtype=bool)
    columns: _Groups = {}
    own: list[int] = []
    for k, record in enumerate(records):
        at = record.stats_row
        if at is not None:
            group = columns.get(id(at[0]))
            if group is None:  # not setdefault: its default (a tuple, two lists) made once
                group = columns[id(at[0])] = (at[0], [], [])
            group[1].append(k)
            group[2].append(at[1])
            continue
        own.append(k)
        stats = record.stats
        out[k] = np.array(stats, dtype=np.float64)
        floats[k] = all(type(v) is float or v is None for v in stats)
    for cols, ks, rows in columns.values():
        out[ks] = cols.array()[rows]
    return floats, columns, own


def _finite_metrics(npu: np.ndarray, bench: np.ndarray) -> np.ndarray:
    """Per row (Max, Min, Mean, Norm of each side, finite rows meaningful): the diffs, the
    relative errors of each statistic and the Max/Min/Mean range error, in
    ``StatsMetrics``'s field order, as ``stats_metrics`` computes them for finite values."""
    with np.errstate(all="ignore"):  # rows with NaN/Inf compute garbage: never read
        diff = npu - bench
        size = np.abs(bench)
        rel = _rel(diff, size)
        # the range that scales Max/Min/Mean: the larger end of the bench tensor
        ranged = np.abs(diff[:, :3]).max(axis=1)
        scale = np.maximum(size[:, 0], size[:, 1])
        range_rel = _rel(ranged, scale)
    return np.column_stack([diff, rel, range_rel])


def _rel(diff: np.ndarray, size: np.ndarray) -> np.ndarray:
    """``metrics._rel`` for finite values: 0 for no difference, inf against a zero."""
    return np.where(diff == 0, 0.0, np.where(size != 0, np.abs(diff) / size, np.inf))


def output_pairs(
    pairs: list[tuple[Dump, Call, Call | None]],
) -> tuple[list[tuple[TensorRecord, TensorRecord]], list[int]]:
    """Each NPU output with the bench output of its path, as the node compares (and
    ``diverging_in_metadata``) pair them; how many pairs each node has, in order."""
    out: list[tuple[TensorRecord, TensorRecord]] = []
    counts: list[int] = []
    for _, call, bench in pairs:
        mine = pairs_of(call, bench) if bench is not None else []
        out.extend(mine)
        counts.append(len(mine))
    return out, counts


def pairs_of(call: Call, bench: Call) -> list[tuple[TensorRecord, TensorRecord]]:
    """Each output of ``call`` with ``bench``'s output of its path, in order."""
    outputs = bench.output_tensors
    if len(outputs) == 1:  # most calls: the one output of its path, without a dict
        only, path = outputs[0], outputs[0].path
        return [(record, only) for record in call.output_tensors if record.path == path]
    theirs = {r.path: r for r in outputs}
    return [(record, other) for record in call.output_tensors
            if (other := theirs.get(record.path)) is not None]


def rows_diverge(table: StatsTable, call: Call, bench: Call, start: int, count: int,
                 dtype: str, criteria: CompareCriteria) -> bool:
    """``outputs_diverge_in_metadata`` of a node whose ``count`` output pairs are the table's
    rows from ``start``: the same pairs in the same order (by path, as ``output_pairs``
    made them), each row read by its number (a row is its pair's whatever records other
    rows hold) instead of found by its records. Every output paired (most nodes): the k-th
    output is row start + k's; else the pairs are made again."""
    outputs = call.output_tensors
    if count == len(outputs):
        paired = [(rec, table.bench_at(start + k)) for k, rec in enumerate(outputs)]
    else:
        paired = pairs_of(call, bench)
    for row, (rec, other) in enumerate(paired, start):
        # less_precise(dtype, rec.dtype) of a float record, written out (every output)
        eps = FLOAT_EPS.get(rec.dtype)
        eff = rec.dtype if eps is None or FLOAT_EPS.get(dtype, 0.0) < eps else dtype
        if rec.md5 is not None and other.md5 is not None:
            same = judge_md5(rec.md5, other.md5).ok
        else:
            tol = criteria.tolerance(eff)
            known = table.agree_at(row, eff, tol)
            same = known if known is not None else judge_stats(
                stats_metrics(rec.stats, other.stats), eff, tol).ok
        if not same:
            return True
    return False
