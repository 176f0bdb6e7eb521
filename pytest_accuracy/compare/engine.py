"""The compare of two runs: pairs NPU and bench calls and judges each node lazily, in threads."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property

from pytest_accuracy.compare.criteria import CompareCriteria, less_precise
from pytest_accuracy.compare.judge import compare_all, records_of, scalar_diffs, settle
from pytest_accuracy.compare.pairing import Pairing, pair_by_name
from pytest_accuracy.compare.results import NodeResult
from pytest_accuracy.dumps.model import Call, Dump, DumpSet
from pytest_accuracy.errors import AccuracyInputError


class Comparison:
    """The compare of two runs; ``node(i)`` computes one node's result on demand."""

    def __init__(
        self,
        npu: DumpSet,
        bench: DumpSet,
        criteria: CompareCriteria | None = None,
        pairing: Pairing | None = None,
        *,
        inputs: str = "failing",
        workers: int | None = None,
    ) -> None:
        """``inputs="failing"`` compares a node's inputs only on demand (``with_inputs``):
        the verdict needs outputs only, the first divergence the inputs of one node;
        ``"all"`` compares every input too (the full msprobe-style table).
        ``workers`` threads read ahead of the node asked for (numpy releases the GIL)."""
        self.npu = npu
        self.bench = bench
        self.criteria = criteria or CompareCriteria()
        self.pairing = pairing or pair_by_name
        self.inputs_mode = inputs
        self.entries: list[tuple[Dump, Call]] = [(d, c) for d in npu for c in d.calls]
        self._pairs: dict[tuple[int, int], Mapping[str, str]] = {}
        self._futures: dict[int, Future[NodeResult]] = {}
        self._done: dict[int, NodeResult] = {}
        self._workers = workers if workers is not None else min(4, os.cpu_count() or 1)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.entries)

    def node(self, index: int, ahead: Sequence[int] | None = None) -> NodeResult:
        """The result of node ``index``, computing ``ahead`` meanwhile in threads.

        ``ahead`` names the nodes this process will ask for next (under xdist a worker
        runs only its share: reading ahead in index order would load other workers'
        tensors); ``None`` reads ahead in index order, ``()`` not at all.
        """
        known = self._done.get(index)
        if known is not None:  # the first-divergence scans ask for earlier nodes many times
            return known
        self.effective_dtypes  # noqa: B018  (pairs and dtypes first, in this thread)
        if self._workers <= 1:
            with self._lock:
                if index not in self._futures:
                    done: Future[NodeResult] = Future()
                    done.set_result(self._compute(index))
                    self._futures[index] = done
            result = self._futures[index].result()
            self._done[index] = result
            return result
        if ahead is None:
            ahead = range(index + 1, min(index + self._workers, len(self.entries)))
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="acc-compare")
            for i in (index, *ahead[: self._workers - 1]):
                if i not in self._futures and 0 <= i < len(self.entries):
                    self._futures[i] = self._pool.submit(self._compute, i)
        result = self._futures[index].result()
        self._done[index] = result
        return result

    def results(self) -> list[NodeResult]:
        return [self.node(i) for i in range(len(self.entries))]

    def with_inputs(self, index: int) -> NodeResult:
        """Node ``index`` with its inputs compared too (to tell error appearing from carried)."""
        result = self.node(index)
        if not result.inputs_checked and result.bench is not None and result.status != "error":
            try:
                self._add_inputs(result)
            except AccuracyInputError as exc:
                result.status, result.reason = "error", str(exc)
        return result

    def _add_inputs(self, result: NodeResult) -> None:
        assert result.bench is not None
        _, call = self.entries[result.index]
        criteria = self.criteria.with_waiver(result.waiver)
        dtype = self.effective_dtypes[result.index]
        inputs = call.input_tensors + call.parameters
        result.inputs = compare_all(inputs, result.bench, dtype, criteria)
        result.inputs_checked = True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def bench_call(self, index: int) -> Call | None:
        dump, call = self.entries[index]
        bench_dump = self.bench.dumps.get((dump.step, dump.rank))
        if bench_dump is None:
            return None
        key = (dump.step, dump.rank)
        if key not in self._pairs:
            self._pairs[key] = self.pairing(dump, bench_dump)
        name = self._pairs[key].get(call.name)
        return bench_dump.get(name) if name else None

    def matched_share(self) -> float:
        if not self.entries:
            return 0.0
        matched = sum(self.bench_call(i) is not None for i in range(len(self.entries)))
        return matched / len(self.entries)

    @cached_property
    def effective_dtypes(self) -> list[str]:
        """Per node, the least precise float dtype seen so far in either run (metadata only)."""
        running = "float64"
        out = []
        for i, (_, call) in enumerate(self.entries):
            bench = self.bench_call(i)
            for rec in records_of(call) + (records_of(bench) if bench else []):
                running = less_precise(running, rec.dtype)
            out.append(running)
        return out

    def _compute(self, index: int) -> NodeResult:
        dump, call = self.entries[index]
        bench = self.bench_call(index)
        result = NodeResult(index, dump.step, dump.rank, call, bench, status="pass")
        if bench is None:
            result.status, result.reason = "unmatched", self._unmatched_reason(dump, call)
            return result
        waiver = self.criteria.waiver_for(call.name, call.op)
        result.waiver = waiver
        criteria = self.criteria.with_waiver(waiver)
        dtype = self.effective_dtypes[index]
        try:
            result.outputs = compare_all(call.output_tensors, bench, dtype, criteria)
            if self.inputs_mode == "all":
                self._add_inputs(result)
        except AccuracyInputError as exc:
            result.status, result.reason = "error", str(exc)
            return result
        result.scalar_diffs = scalar_diffs(call, bench)
        settle(result)
        why = self._incomparable_backward(dump, call, bench) if result.status == "fail" else None
        if why is not None:
            result.status = "skip"
            result.reason = (
                f"{bench.name} is a PyTorch API backward: msprobe records the gradient of the "
                "API's last internal op, not the gradients w.r.t. its inputs that "
                f"{dump.framework} records; compare gradients at module level (L0/mix) "
                f"instead ({why})"
            )
        return result

    def _incomparable_backward(self, dump: Dump, call: Call, bench: Call) -> str | None:
        """Why a cross-framework API backward pair is not comparable (align.py decides)."""
        bench_dump = self.bench.dumps[(dump.step, dump.rank)]
        if call.kind != "api" or call.direction != "backward":
            return None
        if bench_dump.framework == dump.framework:
            return None
        from pytest_accuracy.align import incomparable_backward  # loads the API map

        return incomparable_backward(dump, bench_dump, call, bench)

    def _unmatched_reason(self, dump: Dump, call: Call) -> str:
        if (dump.step, dump.rank) not in self.bench.dumps:
            return f"the bench run has no step {dump.step} rank {dump.rank}"
        bench_fw = self.bench.dumps[(dump.step, dump.rank)].framework
        if bench_fw != dump.framework:
            return (
                f"no {bench_fw} counterpart for this {dump.framework} node; pass a mapping "
                "(--acc-mapping) or use --acc-align=auto"
            )
        return "no node of this name in the bench dump"


