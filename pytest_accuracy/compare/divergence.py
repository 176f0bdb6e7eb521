"""Find where the runs part: the first divergent node and the first node producing NaN/Inf."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pytest_accuracy.compare import Comparison, NodeResult, TensorComparison
from pytest_accuracy.compare.findings import module_class_finding, op_finding
from pytest_accuracy.compare.metrics import StatsMetrics, TensorMetrics
from pytest_accuracy.compare.odd_class import odd_one_inside
from pytest_accuracy.compare.results import Finding
from pytest_accuracy.dumps.model import Call, Dump, TensorRecord, is_collective


@dataclass(frozen=True)
class FirstDivergence:
    """A node that makes an error of its own; the first divergence is the earliest one.

    ``kind`` is ``"parameter"`` when its inputs match and a parameter of its own differs;
    ``"appears"`` when the node's inputs still match and its outputs do not
    (or it changes precision, takes another argument, or computes wrongly from its own
    inputs); ``"between"`` when its inputs already differ and no earlier node diverged:
    the error entered through them from code the dump did not record, after ``previous``.
    """

    index: int
    npu_name: str
    bench_name: str
    step: int
    rank: int
    tensor: str
    kind: str
    reason: str
    previous: str | None = None
    likely_cause: str | None = None
    stack: str | None = None
    finding: str | None = None  # precision | argument | local_error
    twin_step: int | None = None  # an earlier step identical between the runs
    through: str | None = None  # a node only the NPU run records that made the difference
    # a collective whose inputs agree: the error came in from another rank of its group
    received: bool = False
    order: int = 0  # the node's place in its rank's dump (the same code: the same on each)
    # where its rank's pipeline stage runs it, where the runs' stages differ (else 0): stage s
    # of P runs its forward at s and its backward at 2P-1-s (one micro-batch: F0..F(P-1), then
    # B(P-1)..B0)
    phase: int = 0
    # the NPU ranks whose shards were joined to meet a coarser bench's statistics (the error
    # shows on each; which one makes it, their tensors tell)
    joined: tuple[int, ...] = ()
    # those ranks' values were summed instead: a sum over the batch each made a part of
    summed: bool = False
    # the bench ranks it was compared with, where the runs' layouts differ
    bench_ranks: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {**({"phase": self.phase} if self.phase else {}),
            **({"joined": list(self.joined)} if self.joined else {}),
            **({"summed": True} if self.summed else {}),
            **({"bench_ranks": list(self.bench_ranks)} if self.bench_ranks else {}),
            "npu_name": self.npu_name,
            "bench_name": self.bench_name,
            "step": self.step,
            "rank": self.rank,
            "tensor": self.tensor,
            "kind": self.kind,
            "reason": self.reason,
            "previous": self.previous,
            "likely_cause": self.likely_cause,
            "stack": self.stack,
            "finding": self.finding,
            "twin_step": self.twin_step,
            "through": self.through,
            "received": self.received,
            "order": self.order,
        }

    def sentence(self) -> str:
        return divergence_sentence(self.as_dict())


def divergence_sentence(first: dict[str, Any]) -> str:
    """The summary's sentence for a first divergence (also rebuilt from JSON records)."""
    where = f"step {first['step']}, rank {first['rank']}"
    joined = first.get("joined")
    if joined and first.get("summed"):
        where = (f"step {first['step']}, ranks {', '.join(map(str, joined))} summed: the sum "
                 "over the batch their parts make against the bench's; which part differs a "
                 "sum does not tell")
    elif joined:
        where = (f"step {first['step']}, ranks {', '.join(map(str, joined))} joined: their "
                 "shards' statistics together against the bench's whole; which shard "
                 "differs needs their tensors")
    if first.get("bench_ranks"):
        where += f"; {bench_ranks_words(first['bench_ranks'])}"
    if first.get("kind") == "between":
        after = first.get("previous") or f"the start of step {first['step']}"
        through = first.get("through")
        how = (f"through {after}, which only the NPU run records (the bench has no call to "
               "compare it with)" if through and through == after else
               f"through {after}, which only the NPU run records, from {through} inside it"
               if through and after and _within(through, after) else
               "through its inputs from code the dump did not record")
        text = (f"First divergence between {after} and {first['npu_name']} ({where}): the "
                f"error entered {how}; {first['tensor']}: {first['reason']}.")
    else:
        text = f"First divergence: {first['npu_name']} ({where}), {first['tensor']}: " \
               f"{first['reason']}."
    cause = first.get("likely_cause")
    if cause and cause not in str(first.get("reason")):
        text += f" Likely cause: {cause}."
    twin = first.get("twin_step")
    if twin is not None:
        text += (f" Step {twin} was identical between the runs (same weights, data and "
                 f"deterministic kernels), so the difference was made by the update between "
                 f"step {twin} and step {first['step']}: compare the optimizer settings (lr, "
                 "betas, eps, weight decay and the parameters it applies to), gradient "
                 "clipping and loss scaling.")
    if first.get("stack"):
        text += f" At {first['stack']}"
    return text


def _within(inner: str, outer: str) -> bool:
    """Whether module call ``inner`` is recorded inside module call ``outer``, by their
    paths (``Cell.<path>.<Class>.forward.<n>``)."""
    path_in, path_out = inner.split(".")[1:-3], outer.split(".")[1:-3]
    return bool(path_out) and path_in[: len(path_out)] == path_out and path_in != path_out


def find_first_divergence(cmp: Comparison, upto: int | None = None) -> FirstDivergence | None:
    """The earliest node that makes an error, up to ``upto``, in causal order
    (``causal_key``), among the failing nodes of the first step that has one."""
    last = len(cmp) - 1 if upto is None else min(upto, len(cmp) - 1)
    found: FirstDivergence | None = None
    for i in range(last + 1):
        if found is not None and cmp.entries[i][0].step != found.step:
            break
        if cmp.node(i).status != "fail":
            continue
        made = describe(cmp, cmp.with_inputs(i))
        if found is None or causal_key(made.as_dict()) < causal_key(found.as_dict()):
            found = made
    return found


def causal_key(first: dict[str, Any]) -> tuple[int, bool, bool, int, int, bool, int]:
    """The order first divergences are ranked in: step; then a node that made the error
    before a collective that received it from another rank; then a difference one rank's own
    tensors show before one that shards joined over ranks show (the join differs on each of
    them, whichever made it); then when its pipeline stage runs it (an earlier stage's forward
    feeds the later's, a later stage's backward the earlier's); then its place in its rank's
    calls (ranks run the same code side by side: an error on rank 3 before rank 0's
    reaches rank 0 later, through a collective); then, at one call, a rank whose own
    parameter differs before one whose inputs all agree (a module that exchanges inside, a
    vocabulary-parallel embedding, spreads one rank's error over the group); then rank."""
    return (int(first["step"]), bool(first.get("received")), bool(first.get("joined")),
            int(first.get("phase", 0)), int(first.get("order", 0)),
            first.get("kind") != "parameter", int(first["rank"]))



def describe(cmp: Comparison, result: NodeResult) -> FirstDivergence:
    """How a node that makes an error of its own makes it."""
    worst = result.failing_outputs[0] if result.failing_outputs else (
        result.outputs[0] if result.outputs else None)
    finding = result.findings[0] if result.findings else None
    # a parameter (weight, bias) is part of the node: one that differs makes its error here
    own_params = [t for t in result.inputs if not t.ok and t.path.startswith("parameters")]
    # a region-node pair has no inputs to pair: its output is where the difference shows
    appears = finding is not None or cmp.region_of(result.index) is not None or (
        bool(result.inputs) and all(t.ok or t.path.startswith("parameters")
                                    for t in result.inputs))
    reason = worst.judgement.detail if worst is not None and not worst.ok else ""
    if finding is not None:
        reason = f"{finding.detail}; {reason}" if reason and finding.kind != "argument" \
            else (reason or finding.detail)
    if not appears:
        reason = f"{reason} (differing inputs: {_differing_inputs(result)})"
    odd = _odd_inside(cmp, result)
    previous = None if appears else _entered_after(cmp, result)
    evidence = [t.path for t in own_params] or (
        [t.path for t in result.failing_outputs] if appears
        else [t.path for t in result.inputs if not t.ok])
    carrier = cmp.provenance.carrier_of(result.index)
    if carrier is not None:
        reason += (f"; made by its own code between its recorded submodules "
                   f"({cmp.entries[carrier][1].name} only carries it)")
    return FirstDivergence(
        index=result.index,
        npu_name=result.npu.name,
        bench_name=result.bench.name if result.bench else "",
        step=result.step,
        rank=result.rank,
        tensor=worst.path if worst is not None else "",
        kind=("parameter" if own_params and not finding else "appears") if appears
        else "between",
        reason=reason,
        previous=previous,
        likely_cause=(odd[1] if odd else None) or _likely_cause(cmp, result)
        or _parameter_cause(own_params),
        stack=result.npu.stack_line(),
        finding=finding.kind if finding is not None else None,
        twin_step=result.twin_step,
        through=odd[0].name if odd else _through(result, finding),
        # a parameter of its own that differs is this rank's: made here, whatever it exchanges
        received=not own_params and _received(cmp, result, appears and finding is None,
                                              start=not appears and previous is None),
        order=result.npu.order,
        phase=_phase(cmp, result),
        bench_ranks=_bench_of(cmp, result),
        joined=_joined_ranks(cmp, result, evidence),
        summed=_summed(cmp, result, evidence),
    )


def bench_ranks_words(ranks: list[int] | tuple[int, ...]) -> str:
    return f"bench rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _bench_dump(cmp: Comparison, result: NodeResult) -> Dump | None:
    """The bench dump the node's rank was compared with (a view, where layouts differ)."""
    dump = cmp.entries[result.index][0]
    return cmp.bench.dumps.get((dump.step, dump.rank))


def _bench_of(cmp: Comparison, result: NodeResult) -> tuple[int, ...]:
    bench = _bench_dump(cmp, result)
    if bench is None:
        return ()
    return bench.call_ranks.get(result.npu.name, bench.bench_ranks)


def _joined_ranks(cmp: Comparison, result: NodeResult, evidence: list[str]
                  ) -> tuple[int, ...]:
    """The NPU ranks whose shards were joined to meet a coarser bench, where every tensor
    that shows the error here is such a join (``pairing/shards.py``), else ()."""
    bench = _bench_dump(cmp, result)
    found = bench.joined.get(result.npu.name) if bench is not None else None
    return found[0] if found and evidence and all(p in found[1] for p in evidence) else ()


def _summed(cmp: Comparison, result: NodeResult, evidence: list[str]) -> bool:
    """Whether the joined records that show the error are sums over the batch."""
    from pytest_accuracy.pairing.shard_records import SumRecord

    bench = _bench_dump(cmp, result)
    found = bench.joined.get(result.npu.name) if bench is not None else None
    return bool(found and evidence and all(isinstance(found[1].get(p), SumRecord)
                                           for p in evidence))


def _received(cmp: Comparison, result: NodeResult, appears: bool, start: bool) -> bool:
    """Whether the error came in from another rank: the node is a collective whose inputs
    agree, or it entered through one only the NPU run records (the bench at another TP size
    makes no such exchange), or, in a later pipeline stage, it was there from the start of
    the step (with the previous stage's activations), or it is a collective that completes
    partial values the bench at another TP size does not make (the ranks that made them
    made the error: their inputs, not compared, are where it entered)."""
    dump, bench = cmp.entries[result.index][0], _bench_dump(cmp, result)
    exchanges = bench.exchanges if bench is not None else set()
    if appears:
        return is_collective(result.npu) or result.npu.name in exchanges
    theirs = bench.get(result.npu.name) if bench is not None else None
    if is_collective(result.npu) and theirs is not None and len(theirs.input_tensors) < len(
            result.npu.input_tensors):  # the view left its partial inputs out
        return True
    if start and _stage(cmp, result)[0] > 0:  # differing from its stage's first call on
        return True
    return any(is_collective(c) or name in exchanges for name in result.entered_through
               if (c := dump.get(name)) is not None)


def _stage(cmp: Comparison, result: NodeResult) -> tuple[int, int]:
    """The node's pipeline stage and the stage count, where the bench was seen from the
    NPU's stages (else 0 of 1)."""
    bench = _bench_dump(cmp, result)
    return (bench.stage, bench.stages) if bench is not None else (0, 1)


def _phase(cmp: Comparison, result: NodeResult) -> int:
    stage, stages = _stage(cmp, result)
    if stages < 2:
        return 0
    return stage if result.npu.direction == "forward" else 2 * stages - 1 - stage


def _odd_inside(cmp: Comparison, result: NodeResult) -> tuple[Call, str] | None:
    """Inside the module only the NPU run records through which the error entered, the one
    module running another class than the same place in the run's other layers."""
    if len(result.entered_through) != 1 or result.findings:
        return None
    dump = cmp.entries[result.index][0]
    module = dump.get(result.entered_through[0])
    odd = odd_one_inside(dump, module) if module is not None else None
    if odd is None:
        return None
    call, usual = odd
    return call, (f"{call.scope} is {call.op} in this layer where the run's other layers hold "
                  f"{usual}, and {module.name if module else ''} around it only the NPU run "
                  "records: look at that code first")


def _likely_cause(cmp: Comparison, result: NodeResult) -> str | None:
    for finding in result.findings:
        if finding.kind in ("argument", "precision"):
            return finding.detail
    local = result.local
    if local is not None and local.detail and any(
            f.kind == "local_error" for f in result.findings):
        return f"a different norm eps:{local.detail.removeprefix(';')}"
    region = cmp.region_of(result.index)
    if region is not None:
        if region.startswith("the NPU's"):
            return (f"compared where a region ends ({region}) against one call of the bench: "
                    "the error is made within that region")
        return (f"compared as one call against a region ({region}): the error "
                f"is in {result.npu.name} or that region")
    if result.bench is not None:
        # another module class or op where the bench has its own (an aligned pair): said as
        # the cause, never a failure by itself (a renamed class, an equivalent kernel)
        dump = cmp.entries[result.index][0]
        # two codebases name their classes apart, as two frameworks do
        same = (dump.framework == cmp.bench.dumps[(dump.step, dump.rank)].framework
                and not cmp.other_code(result.index))
        for other in (module_class_finding(result.npu, result.bench, same),
                      op_finding(result.npu, result.bench, same)):
            if other is not None:
                return other.detail
    if result.entered_through:
        return (f"{', '.join(result.entered_through)} made the differing input, and only the "
                "NPU run records it: look at it first")
    if result.entered_after:
        module = _common_module(cmp, result)
        inside = f" in the code of {module}" if module else ""
        return (f"code the dump does not record ran between {result.entered_after[-1]} and "
                f"this node{inside} (an operation left out or added, such as a residual add)")
    return None


def _common_module(cmp: Comparison, result: NodeResult) -> str | None:
    """The innermost module (construct.json) around both the producer and this node."""
    dump = cmp.entries[result.index][0]
    producer = dump.get(result.entered_after[-1])
    if producer is None:
        return None
    ours = _ancestors(dump, result.npu)
    return next((m for m in _ancestors(dump, producer) if m in ours), None)


def _ancestors(dump: Dump, call: Call) -> list[str]:
    out: list[str] = []
    parent = call.parent
    while parent is not None and parent not in out and len(out) < 256:
        out.append(parent)
        module = dump.get(parent)
        parent = module.parent if module is not None else None
    return out


def _parameter_cause(differing: list[TensorComparison]) -> str | None:
    if not differing:
        return None
    worst = differing[0]
    return (f"its parameter {worst.path.removeprefix('parameters.')} differs from the bench's "
            f"({worst.judgement.detail}): loaded, initialised, laid out or updated differently")


def _through(result: NodeResult, finding: Finding | None) -> str | None:
    if finding is not None:
        return finding.via
    return result.entered_through[-1] if result.entered_through else None


def _entered_after(cmp: Comparison, result: NodeResult) -> str | None:
    if result.entered_after:
        return result.entered_after[-1]
    return _previous_name(cmp, result.index)


def _differing_inputs(result: NodeResult) -> str:
    bad = [t for t in result.inputs if not t.ok]
    return ", ".join(f"{t.path} {t.judgement.detail}" for t in bad[:3]) or "none compared"


def _previous_name(cmp: Comparison, index: int) -> str | None:
    if index == 0:
        return None
    dump, _ = cmp.entries[index]
    prev_dump, prev = cmp.entries[index - 1]
    return prev.name if (prev_dump.step, prev_dump.rank) == (dump.step, dump.rank) else None


def evidence_lines(result: NodeResult) -> list[str]:
    """Inputs vs outputs error table for a failure message."""
    lines = []
    if not result.inputs_checked:
        lines.append("  inputs not compared (only the first divergent node needs them; "
                     "--acc-inputs=all compares every input)")
    for label, group in (("inputs", result.inputs), ("outputs", result.outputs)):
        for t in group:
            lines.append(f"  {label[:-1]:<6} {t.path:<22} {_summary(t)}")
    return lines


def _summary(t: TensorComparison) -> str:
    verdict = "ok" if t.ok else "MISMATCH"
    m = t.metrics
    if t.method == "md5":
        return f"md5 {t.npu.md5} vs {t.bench.md5 if t.bench else None}  {verdict}"
    if m is None:
        return verdict
    if isinstance(m, TensorMetrics) and m.status == "ok":
        return (
            f"rel err {m.rel_l2_err:.3g}  cosine {m.cosine:.6f}  "
            f"max abs {m.max_abs_err:.3g}  [{t.dtype}]  {verdict}"
        )
    if isinstance(m, StatsMetrics):
        return (
            f"norm rel err {_fmt(m.norm_relative_err)}  "
            f"range rel err {_fmt(m.range_rel_err)}  [{t.dtype}]  {verdict}"
        )
    return f"{m.status}  {verdict}"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


@dataclass(frozen=True)
class FirstNonFinite:
    npu_name: str
    step: int
    rank: int
    tensor: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "npu_name": self.npu_name,
            "step": self.step,
            "rank": self.rank,
            "tensor": self.tensor,
        }


def find_first_nonfinite(cmp: Comparison) -> FirstNonFinite | None:
    """First NPU node whose outputs hold NaN/Inf from finite inputs (from metadata) where the
    bench's same output is finite: a mask filled with -inf on both sides is by design."""
    unsure: dict[int, bytes] = {}  # id(columns) -> its unsure_rows(): most records skip _finite
    for index, (dump, call) in enumerate(cmp.entries):
        bad = [r for r in call.output_tensors if not _surely_finite(r, unsure) and not _finite(r)]
        if not bad or not all(_finite(r) for r in call.input_tensors + call.parameters):
            continue
        bench = cmp.bench_call(index)
        theirs = {r.path: r for r in bench.output_tensors} if bench is not None else {}
        only_npu = [r for r in bad if r.path not in theirs or _finite(theirs[r.path])]
        if only_npu:
            return FirstNonFinite(call.name, dump.step, dump.rank, only_npu[0].path)
    return None


def _surely_finite(rec: TensorRecord, unsure: dict[int, bytes]) -> bool:
    at = rec.stats_row
    if at is None:
        return False
    rows = unsure.get(id(at[0]))
    if rows is None:
        rows = unsure[id(at[0])] = at[0].unsure_rows()
    return not rows[at[1]]


def _finite(rec: TensorRecord) -> bool:
    """Whether a tensor holds no NaN/Inf, by its Max and Min (a NaN or Inf reaches both or
    one) and a NaN Mean. A Norm or Mean overflowing alone is no Inf in the tensor:
    msprobe-MindSpore sums a float16 tensor's Norm in float16 (149666 > 65504 -> inf)."""
    high, low, mean = rec.stats.max, rec.stats.min, rec.stats.mean
    return ((high is None or math.isfinite(high)) and (low is None or math.isfinite(low))
            and not (mean is not None and math.isnan(mean)))
