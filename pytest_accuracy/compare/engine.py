"""The compare of two runs: pairs NPU and bench calls and judges each node lazily, in threads."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from functools import cached_property

from pytest_accuracy.compare import provenance
from pytest_accuracy.compare.bench_noise import BenchNoise, NodeNoise
from pytest_accuracy.compare.contract import chain_contract
from pytest_accuracy.compare.criteria import CompareCriteria, less_precise
from pytest_accuracy.compare.diagnose import Context, diagnose
from pytest_accuracy.compare.effective import effective_dtypes
from pytest_accuracy.compare.findings import scalar_diffs
from pytest_accuracy.compare.first_flag import VerifiedFlags
from pytest_accuracy.compare.judge import compare_all, compare_tensor, negated_region, settle
from pytest_accuracy.compare.local import LocalError, local_error, lower_precision_inputs
from pytest_accuracy.compare.results import Finding, NodeResult, TensorComparison
from pytest_accuracy.compare.unmatched import unmatched_reason
from pytest_accuracy.compare.workers import default_workers, one_blas_thread
from pytest_accuracy.dumps.model import FLOAT_EPS, Call, Dump, DumpSet, TensorRecord
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.pairing.anchors import is_identity, leading
from pytest_accuracy.pairing.base import Pairing, PairMap, pair_by_name


def _never(index: int) -> bool:
    return False


def _all_data(call: Call) -> bool:
    """Every output has tensor data: the local error's replay needs them (statistics, md5)."""
    outputs = call.output_tensors  # the first asked first: a statistics dump's says at once
    return not outputs or (outputs[0].has_data and all(r.has_data for r in outputs))


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
        noise: BenchNoise | None = None,
    ) -> None:
        """``inputs="failing"`` compares a node's inputs only on demand (``with_inputs``):
        the verdict needs outputs only, the first divergence the inputs of one node;
        ``"all"`` compares every input too (the full msprobe-style table).
        ``workers`` threads read ahead of the node asked for (numpy releases the GIL).
        ``noise``: a second bench run; each node is then held to the two bench runs' spread
        there (compare/bench_noise.py) instead of its dtype's fixed tolerance."""
        self.npu = npu
        self.bench = bench
        self.criteria = criteria or CompareCriteria()
        self.pairing = pairing or pair_by_name
        self.inputs_mode = inputs
        self.entries: list[tuple[Dump, Call]] = [(d, c) for d in npu for c in d.calls]
        self._pairs: dict[tuple[int, int], Mapping[str, str]] = {}
        self._bench_calls: list[Call | None] = [None] * len(self.entries)
        self._looked_up = bytearray(len(self.entries))
        self._futures: dict[int, Future[NodeResult]] = {}
        self._done: dict[int, NodeResult] = {}
        self._workers = workers if workers is not None else default_workers(npu, bench)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.noise = noise
        self._learned: dict[int, tuple[NodeNoise | None, CompareCriteria]] = {}
        # every step and rank paired and none made a region (``_in_region``): region_of is
        # asked ~6 times a node, and is None for all of them
        self._regionless = False

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
        self.provenance  # noqa: B018  (pairs, dtypes and metadata facts first, in this thread)
        one_blas_thread()
        if self._workers <= 1:
            with self._lock:
                result = self._done.get(index)
                if result is None:
                    result = self._done[index] = self._compute(index)
            return result
        if ahead is None:
            ahead = range(index + 1, min(index + self._workers, len(self.entries)))
        with self._lock:
            if index in self._done:
                return self._done[index]
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="acc-compare")
            for i in (index, *ahead[: self._workers - 1]):
                if i not in self._futures and i not in self._done and 0 <= i < len(self.entries):
                    self._futures[i] = self._pool.submit(self._compute, i)
            future = self._futures[index]
        result = future.result()
        with self._lock:  # a finished future holds a lock and a condition: ~1 KB a node
            self._done[index] = result
            self._futures.pop(index, None)
        return result

    def release(self, index: int) -> None:
        """Let go of a passing node's result once its record is made, where it is made again
        from metadata alone if asked (no tensor data: statistics, md5): a 100k-node run held
        ~85 MB of them. A tensor node's result stays (the diagnosis of later nodes reads it
        instead of its tensors)."""
        result = self._done.get(index)
        if result is not None and result.status == "pass" and not any(
                r.has_data for r in result.npu.output_tensors):
            with self._lock:
                self._done.pop(index, None)

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
        if self.region_of(result.index) is not None:  # other ops' inputs: nothing to pair
            result.inputs, result.inputs_checked = [], True
            return
        criteria = self.criteria_at(result.index).with_waiver(result.waiver)
        dtype = self.effective_dtypes[result.index]
        inputs = call.input_tensors + call.parameters
        result.inputs = compare_all(inputs, result.bench, dtype, criteria)
        result.inputs_checked = True

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def discard(self) -> None:
        """Close, and let go of everything held (models, results, the cached helpers): those
        hold bound methods of this object, a cycle that only a full collection would free,
        and a run's models would then pile up rank after rank."""
        self.close()
        prov = vars(self).get("provenance")
        if prov is not None:  # its made_inside holds it and this object's bench_call
            vars(prov).clear()
        vars(self).clear()

    def bench_call(self, index: int) -> Call | None:
        if self._looked_up[index]:  # asked ~8 times a node: pairs are fixed once made
            return self._bench_calls[index]
        dump, call = self.entries[index]
        bench_dump = self.bench.dumps.get((dump.step, dump.rank))
        if bench_dump is None:
            return None
        key = (dump.step, dump.rank)
        if key not in self._pairs:
            self._pair_first_step(dump.rank)
            self._pairs[key] = self.pairing(dump, bench_dump)
        name = self._pairs[key].get(call.name)
        bench = bench_dump.get(name) if name else None
        self._bench_calls[index], self._looked_up[index] = bench, 1
        return bench

    def pairs_of(self, key: tuple[int, int]) -> Mapping[str, str]:
        """The pairs of one (step, rank) both runs hold (made now if not yet)."""
        if key not in self._pairs:
            self._pair_first_step(key[1])
            self._pairs[key] = self.pairing(self.npu.dumps[key], self.bench.dumps[key])
        return self._pairs[key]

    def _pair_first_step(self, rank: int) -> None:
        """Pairs a rank's first step before its others, whichever is asked for first: a
        pairing may learn from an earlier step of the same runs (the same code runs every
        step), and must learn the same thing in every process."""
        first = next(((s, r) for s, r in sorted(self.npu.dumps)
                      if r == rank and (s, r) in self.bench.dumps), None)
        if first is not None and first not in self._pairs:
            self._pairs[first] = self.pairing(self.npu.dumps[first], self.bench.dumps[first])

    def region_of(self, index: int) -> str | None:
        """The region a region-node pair's call is compared with (in words), else None."""
        if self._regionless:
            return None
        dump, call = self.entries[index]
        self.bench_call(index)  # pairs this step and rank
        pairs = self._pairs.get((dump.step, dump.rank))
        return pairs.regions.get(call.name) if isinstance(pairs, PairMap) else None

    def _chain_findings(self, index: int, bench: Call, dtype: str) -> list[Finding]:
        """Where the NPU run makes a region against one bench call, the chain's call breaking
        what that call promises: its scale, its precision (below ``dtype``, the precision the
        step went through, as at any pair)."""
        dump, call = self.entries[index]
        pairs = self._pairs.get((dump.step, dump.rank))
        names = pairs.region_calls.get(call.name) if isinstance(pairs, PairMap) else None
        if not names:
            return []
        chain = [c for name in names if (c := dump.get(name)) is not None]
        found = chain_contract(chain, bench, dtype, dump.calls[: call.order + 1])
        return [found] if found is not None else []

    def inside_of(self, index: int) -> str | None:
        """Why an unpaired call is covered by the value anchors around it, else None."""
        dump, call = self.entries[index]
        self.bench_call(index)
        pairs = self._pairs.get((dump.step, dump.rank))
        return pairs.inside.get(call.name) if isinstance(pairs, PairMap) else None

    def matched_share(self) -> float:
        if not self.entries:
            return 0.0
        # a pass-through left unpaired is covered: its value is its input's, compared where
        # it is made (two codebases reshape and transpose in their own places)
        aligned = self.pairing is not pair_by_name
        matched = sum(self.bench_call(i) is not None
                      or (aligned and self._covered_unpaired(i))
                      for i in range(len(self.entries)))
        return matched / len(self.entries)

    def _covered_unpaired(self, index: int) -> bool:
        """An unpaired call whose value the pairs around it check: a pass-through, or a
        stretch between two value anchors computed with other calls (the bench has its
        step and rank)."""
        dump, call = self.entries[index]
        if (dump.step, dump.rank) not in self.bench.dumps:
            return False
        return self.inside_of(index) is not None or is_identity(call)

    @cached_property
    def effective_dtypes(self) -> list[str]:
        """Per node, the least precise float dtype seen so far in its step and rank, in either
        run (metadata only): a bf16 rank does not loosen another rank, so shards agree. Only
        nodes both runs record count: a cast only the NPU run makes (an fp16 softmax; msprobe-
        PyTorch records no cast) is reported at the first node both record, and must not
        hold every later node to fp16 before that."""
        return effective_dtypes(self.entries, self.bench_call)

    @cached_property
    def _flags(self) -> VerifiedFlags:
        return VerifiedFlags(self.provenance, self._diverged, self.entries)

    def _diverged(self, index: int) -> bool:
        """Node ``index``, diagnosed (here, not in the pool: a pool thread may be asking),
        does not pass: outputs off that carry their inputs' rounding are no divergence."""
        if self.bench_call(index) is None:
            return True  # flagged without a counterpart: its flag is all there is
        # not kept for its own item: diagnosed here, re-entered, it sees no divergence
        # before it yet (under load a kept result named nothing: zoo_ms residual L0)
        result = self._done.get(index) or self._compute(index)
        return result.status not in ("pass", "skip", "unmatched")

    @cached_property
    def provenance(self) -> provenance.Provenance:
        """Run-wide metadata facts (findings, divergence flags, producers, twins)."""
        return provenance.build(
            self.entries, self.bench_call, self._bench_framework, self.effective_dtypes,
            self.criteria, self._in_region(), self.other_code,
        )

    def _in_region(self) -> Callable[[int], bool]:
        """Whether node i is a region-node pair; a constant where no pairing made regions
        (names, mapping files: the 100k-node statistics pair asks 100k times)."""
        for i, (dump, _) in enumerate(self.entries):
            if i == 0 or dump is not self.entries[i - 1][0]:
                self.bench_call(i)  # pairs this step and rank
        if not any(isinstance(p, PairMap) and p.regions for p in self._pairs.values()):
            self._regionless = True
            return _never
        return lambda i: self.region_of(i) is not None

    def other_code(self, index: int) -> bool:
        """Whether node ``index``'s two runs are two codebases (of one framework, or of two
        whose module paths mostly differ)."""
        dump = self.entries[index][0]
        self.bench_call(index)
        pairs = self._pairs.get((dump.step, dump.rank))
        return isinstance(pairs, PairMap) and pairs.other_code

    def _bench_framework(self, dump: Dump) -> str:
        bench = self.bench.dumps.get((dump.step, dump.rank))
        return bench.framework if bench is not None else ""

    def criteria_at(self, index: int) -> CompareCriteria:
        """The criteria node ``index`` is held to (to rounding after an identical step)."""
        twin = self.provenance.twin_step[index]
        if twin is not None:
            return self._rounding_criteria
        return self.criteria if self.noise is None else self._learned_at(index)[1]

    def noise_at(self, index: int) -> NodeNoise | None:
        """What the two bench runs differ by at node ``index``'s bench counterpart (None: no
        second bench run, or it cannot say there)."""
        return None if self.noise is None else self._learned_at(index)[0]

    def _learned_at(self, index: int) -> tuple[NodeNoise | None, CompareCriteria]:
        known = self._learned.get(index)
        if known is None:
            assert self.noise is not None
            dump, _ = self.entries[index]
            bench = self.bench_call(index)
            node = (self.noise.at(dump.step, dump.rank, bench, self.effective_dtypes[index])
                    if bench is not None else None)
            criteria = (self.criteria if node is None
                        else replace(self.criteria, learned=node.tolerance))
            known = self._learned[index] = (node, criteria)  # the same pair from any thread
        return known

    @cached_property
    def _rounding_criteria(self) -> CompareCriteria:
        """The criteria after an identical step (made once: each of its tolerances too)."""
        return self.criteria.held_to_rounding()

    def _compute(self, index: int) -> NodeResult:
        dump, call = self.entries[index]
        bench = self.bench_call(index)
        result = NodeResult(index, dump.step, dump.rank, call, bench, status="pass")
        if bench is None:
            result.status, result.reason = "unmatched", unmatched_reason(
                dump, call, self.bench, by_name=self.pairing is pair_by_name,
                inside=self.inside_of(index))
            return result
        waiver = self.criteria.waiver_for(call.name, call.op)
        result.waiver = waiver
        criteria = self.criteria_at(index).with_waiver(waiver)
        dtype = self.effective_dtypes[index]
        result.tolerance = criteria.tolerance(dtype)
        result.twin_step = self.provenance.twin_step[index]
        try:
            result.outputs = self._outputs(index, call, bench, dtype, criteria)
            if self.inputs_mode == "all":
                self._add_inputs(result)
        except AccuracyInputError as exc:
            result.status, result.reason = "error", str(exc)
            return result
        if call.scalar_inputs:  # else none to differ (the result's own empty list stays)
            same_framework = dump.framework == self._bench_framework(dump)
            result.scalar_diffs = scalar_diffs(call, bench, same_framework)
        settle(result)
        if result.status == "skip" and not result.outputs:
            why = self.bench.dumps[(dump.step, dump.rank)].left_out.get(bench.name)
            result.reason = why or result.reason
            if why:
                self._shard_inputs(result, call, bench, dtype, criteria)
        if result.status not in ("pass", "fail"):
            return result
        region = self.region_of(index)
        # a fused call and the region it replaces differ in arguments and dtypes by design:
        # only what the fused call promises is checked, on the chain, where the region fails
        result.findings = (self._chain_findings(index, bench, dtype) if region
                           else list(self.provenance.findings[index]))
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
        if result.status == "pass" and not result.findings and not _all_data(call):
            # a pass with no finding and no tensor data to replay: diagnosis would only note
            # that it cannot replay, a note that only a failure shows
            return result
        diagnose(result, self._context)
        return result

    def _shard_inputs(self, result: NodeResult, call: Call, bench: Call, dtype: str,
                      criteria: CompareCriteria) -> None:
        """A call whose output is a partial value left out (another layout's) still reads
        its own shards (a vocabulary-parallel lookup's table): one that is not the bench's
        slice fails the node, with that input as its difference."""
        from pytest_accuracy.pairing.shard_records import BatchRecord, ShardRecord

        def shard(record: object) -> bool:
            return isinstance(record, ShardRecord) and not isinstance(record, BatchRecord)

        theirs = {r.path: r for r in bench.input_tensors}
        shards = [r for r in call.input_tensors if shard(r) or shard(theirs.get(r.path))]
        judged = compare_all(shards, bench, dtype, criteria) if shards else []
        if any(not t.ok for t in judged):
            result.outputs, result.status, result.reason = judged, "fail", ""

    def _outputs(self, index: int, call: Call, bench: Call, dtype: str,
                  criteria: CompareCriteria) -> list[TensorComparison]:
        """Every output by position; of a region-node pair (a fused call against a chain,
        another decomposition of the same value) only the leading output, the value both
        runs make: its other outputs are other tensors."""
        if self.region_of(index) is not None:
            mine, theirs = leading(call), leading(bench)
            if mine is not None and theirs is not None:
                eff = less_precise(dtype, mine.dtype)
                judged = compare_tensor(mine, theirs, eff, criteria, self.provenance.stats)
                flipped = None if judged.ok else negated_region(mine, theirs, eff, criteria)
                return [flipped or judged]
        return compare_all(call.output_tensors, bench, dtype, criteria, self.provenance.stats)

    @cached_property
    def _context(self) -> Context:
        return Context(self._earlier_divergence, self._repeat_of, self._inside_divergence,
                       self._safe_inputs, self._local_error, self._made_by,
                       self._same_call_before)

    def _repeat_of(self, index: int) -> str | None:
        return self._located(self.provenance.repeat_of.get(index))

    def _located(self, index: int | None) -> str | None:
        if index is None:
            return None
        dump, call = self.entries[index]
        return f"{call.name} (step {dump.step}, rank {dump.rank})"

    def _safe_inputs(self, result: NodeResult) -> None:
        if result.inputs_checked:
            return
        try:
            self._add_inputs(result)
        except AccuracyInputError as exc:
            result.status, result.reason = "error", str(exc)

    def _earlier_divergence(self, result: NodeResult) -> str | None:
        """An earlier node that produced one of this node's differing inputs and diverged
        itself; else the first node flagged from metadata before it; None when nothing
        diverged before: when each differing input came from a node that agrees with the
        bench (or that only the NPU run records), the error entered between them and this
        node (``result.entered_after``)."""
        index = result.index
        dump = self.entries[index][0]
        differing = [t.npu for t in result.inputs if not t.ok]
        entered: list[int] = []
        for record in differing:
            source = self._source(dump, record, index)
            if source is None:
                continue
            diverged, origin = source
            if diverged:
                return self.entries[origin][1].name
            entered.append(origin)
        first = self._flags.before(index)
        if first is not None and first != index:
            return self.entries[first][1].name
        if differing and len(entered) == len(differing):
            origins = sorted(set(entered))
            result.entered_after = [self.entries[i][1].name for i in origins]
            result.entered_through = [self.entries[i][1].name for i in origins
                                      if self.bench_call(i) is None]
        return None

    def _source(self, dump: Dump, record: TensorRecord, index: int,
                depth: int = 0) -> tuple[bool, int] | None:
        """The recorded node that made an input, and whether it diverged; through nodes only
        the NPU run records (casts, the views msprobe-PyTorch filters) to the paired node
        that fed them, when one diverged."""
        prov = self.provenance
        producer = prov.producer_of(dump, record, index)
        if producer is None or prov.origin(producer) == index:
            return None
        origin = prov.origin(producer)
        if self.bench_call(origin) is not None:  # diverged: a finding, or values off
            return bool(prov.findings[origin]) or not self._outputs_agree(origin), origin
        if depth < 16:
            for upstream in self.entries[origin][1].input_tensors:
                found = self._source(dump, upstream, origin, depth + 1)
                if found is not None and found[0]:
                    return found
            return False, self._maker(dump, origin, depth)
        return False, origin

    def _maker(self, dump: Dump, origin: int, depth: int) -> int:
        """Through an unpaired pass-through (a reshape only one run records) to the unpaired
        call that made its value: the one that computed something (x-transformers' Attend
        before its merge_heads Rearrange)."""
        call = self.entries[origin][1]
        while depth < 16 and is_identity(call) and call.input_tensors:
            producer = self.provenance.producer_of(dump, call.input_tensors[0], origin)
            if producer is None or self.bench_call(producer) is not None:
                break
            origin, call, depth = producer, self.entries[producer][1], depth + 1
        return origin

    def _outputs_agree(self, index: int) -> bool:
        """Node ``index``'s outputs meet the criteria (compared here if not yet: reading a
        node's result from another would wait on a thread of the same pool)."""
        done = self._done.get(index)
        if done is not None and done.outputs:
            return all(t.ok for t in done.outputs)
        _, call = self.entries[index]
        bench = self.bench_call(index)
        assert bench is not None
        criteria = self.criteria_at(index).with_waiver(self.criteria.waiver_for(call.name, call.op))
        try:
            outputs = compare_all(call.output_tensors, bench, self.effective_dtypes[index],
                                  criteria, self.provenance.stats)
        except AccuracyInputError:
            return not self.provenance.flagged[index]
        return all(t.ok for t in outputs)

    def _inside_divergence(self, index: int) -> str | None:
        inner = self.provenance.flagged_inside.get(index)
        if inner is None or self.provenance.origin(inner) == index:
            return None
        return self.entries[self.provenance.origin(inner)][1].name

    def _made_by(self, index: int) -> str | None:
        module = self.provenance.made_inside(index)
        return self.entries[module][1].name if module is not None else None

    def _local_error(self, result: NodeResult) -> LocalError | str:
        if result.outputs_identical:
            # Nothing to find, and a replay could only mislead: from inputs that differ, the
            # NPU's replay called a bench-identical output "off" (a false own error). Also
            # spares the replay of data-movement and exact nodes.
            return "outputs bit-identical to the bench's: no error of its own to measure"
        if self.region_of(result.index) is not None:
            return "a region-node pair: each side's replay would measure another computation"
        lower = lower_precision_inputs(result.npu, result.bench, self.criteria.allowed_precisions)
        if lower is not None:
            # a float64 replay of inputs in fp16 measures fp16 arithmetic, not this node
            return (f"its inputs arrive in lower precision than the bench's ({lower}): the "
                    "local error would measure that precision, not this node")
        band = result.tolerance.rel_err if result.tolerance is not None else 1e-4
        return self._local_at(result.index, band)

    def _local_at(self, index: int, band: float) -> LocalError | str:
        dump, call = self.entries[index]
        bench = self.bench_call(index)
        assert bench is not None
        # An fp32 output inside a bf16 run (a norm, a softmax under autocast) is held to its
        # own dtype's band: the run's bf16 band would hide a kernel error 100x fp32 rounding.
        floats = [r.dtype for r in call.output_tensors if r.dtype in FLOAT_EPS]
        if floats and _all_data(call):  # else local_error answers before it reads a band
            band = min(band, self.criteria.tolerance(floats[0]).rel_err)
        return local_error(call, bench, dump.framework, self._bench_framework(dump), band)

    def _same_call_before(self, index: int) -> str | None:
        """The same call in an earlier step, where it made an error of its own too (replayed
        here if need be: every process decides alike)."""
        earlier = self.provenance.same_call_earlier.get(index)
        if earlier is None or self.bench_call(earlier) is None:
            return None
        call = self.entries[earlier][1]
        criteria = self.criteria_at(earlier).with_waiver(self.criteria.waiver_for(call.name,
                                                                                  call.op))
        local = self._local_at(earlier, criteria.tolerance(self.effective_dtypes[earlier]).rel_err)
        if not isinstance(local, LocalError) or not local.npu_makes_error:
            return None
        return self._located(earlier)

    def _incomparable_backward(self, dump: Dump, call: Call, bench: Call) -> str | None:
        """Why a cross-framework API backward pair is not comparable (pairing/align.py decides)."""
        if call.kind != "api" or call.direction != "backward":
            return None
        bench_dump = self.bench.dumps[(dump.step, dump.rank)]
        if bench_dump.framework == dump.framework:
            return None
        from pytest_accuracy.pairing.backward import incomparable_backward  # loads the API map

        return incomparable_backward(dump, bench_dump, call, bench)
