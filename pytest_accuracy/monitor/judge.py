"""Where two runs' monitored states part: per rank and state kind, the first step and parameter."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from pytest_accuracy.compare.criteria import less_precise
from pytest_accuracy.gradients import NameRules, match_names
from pytest_accuracy.monitor.model import KINDS, METRICS, STATS, MonitorRun, RankRecords, Stat
from pytest_accuracy.monitor.signs import SignTracker

Tolerance = Callable[[str], float]  # dtype -> relative difference allowed
_GRAD_METRICS = ("grad_reduced", "grad_unreduced", "grad_summary")


@dataclass(frozen=True)
class Parting:
    """One parameter (or fused group) whose statistic parts from the bench's at one step."""

    rank: int
    kind: str
    metric: str
    step: int
    micro: int
    npu_name: str
    bench_name: str
    stat: str  # norm, max, min, nan or sign
    npu: float
    bench: float
    rel_diff: float
    allowed: float
    quantum: float
    dtype: str
    severity: float  # difference over what is allowed

    @property
    def order(self) -> tuple[int, int, int]:
        return self.step, METRICS[self.metric][1], self.micro

    def line(self) -> str:
        if self.stat == "nan":
            return (f"{self.npu_name}: {self.metric} has NaN/Inf ({self.npu:g}) where the "
                    f"bench has {self.bench:g}")
        if self.stat == "sign":
            return (f"{self.npu_name}: gradient sign agreement {self.npu:.4f} (previous step "
                    f"{self.bench:.4f}; at least 0.97 at the first step and a drop of at most "
                    "0.03 per step allowed)")
        floor = f", plus {self.quantum:.0e} for rounding" if self.quantum else ""
        return (f"{self.npu_name}: {self.metric} {self.stat} {self.npu:.6g} vs bench "
                f"{self.bench:.6g}: relative difference {self.rel_diff:.3g} (up to "
                f"{self.allowed:g} allowed, {self.dtype}{floor})")


@dataclass
class KindResult:
    """One state kind of one rank: what paired, what was compared, where it parts first."""

    rank: int
    kind: str
    metrics: list[tuple[str, str]]
    steps: list[int] = field(default_factory=list)
    pairs: int = 0
    compared: int = 0
    below_rounding: int = 0
    unmatched_npu: list[str] = field(default_factory=list)
    unmatched_bench: list[str] = field(default_factory=list)
    parted: list[Parting] = field(default_factory=list)  # first (step, phase), worst first
    signs: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    @property
    def first(self) -> Parting | None:
        return self.parted[0] if self.parted else None


@dataclass
class MonitorComparison:
    npu: MonitorRun
    bench: MonitorRun
    results: dict[tuple[int, str], KindResult]
    one_sided: list[str]  # ranks or kinds recorded by one run only, in words

    def firsts(self, rank: int) -> list[Parting]:
        """Each kind's first parting on ``rank``, earliest (step, phase) first."""
        found = [r.first for (k, _), r in self.results.items() if k == rank and r.first]
        return sorted((p for p in found if p is not None), key=lambda p: p.order)


    def carried_by(self, result: KindResult) -> Parting | None:
        """The earlier parting of another state on the same rank that this one carries, else
        None: weights updated from parted gradients, Adam moments that took them in. A state
        parting at a later step carries it (after one step every state of every parameter
        depends on the parted one); at the same step only for the same parameter, in the
        training order (gradients, then moments, then weights)."""
        first = result.first
        if first is None:
            return None
        head = next(iter(self.firsts(result.rank)), None)
        if head is None or head.kind == result.kind or head.order >= first.order:
            return None
        if head.step < first.step or head.npu_name == first.npu_name:
            return head
        return None


def compare_monitors(npu: MonitorRun, bench: MonitorRun, tolerance: Tolerance,
                     rules: NameRules | None = None) -> MonitorComparison:
    """Pair ranks, state kinds and parameter names; judge every step of every pair."""
    results: dict[tuple[int, str], KindResult] = {}
    one_sided = [f"rank {r} only in the {side} run" for side, mine, other in
                 (("NPU", npu, bench), ("bench", bench, npu)) for r in mine.ranks
                 if r not in other.ranks]
    for rank in sorted(set(npu.ranks) & set(bench.ranks)):
        a, b = npu.ranks[rank], bench.ranks[rank]
        for kind in KINDS:
            metrics = _metric_pairs(kind, a, b)
            if metrics:
                results[(rank, kind)] = _compare_kind(rank, kind, metrics, a, b, tolerance,
                                                      rules)
            elif kind in a.kinds() | b.kinds():
                side = "NPU" if kind in a.kinds() else "bench"
                one_sided.append(f"rank {rank}: {kind} recorded by the {side} run only")
    return MonitorComparison(npu, bench, results, one_sided)


def _metric_pairs(kind: str, a: RankRecords, b: RankRecords) -> list[tuple[str, str]]:
    if kind == "grad":
        both = [m for m in _GRAD_METRICS if a.stats.get(m) and b.stats.get(m)]
        if both:
            return [(both[0], both[0])]
        mine = [m for m in _GRAD_METRICS if a.stats.get(m)]
        theirs = [m for m in _GRAD_METRICS if b.stats.get(m)]
        return [(mine[0], theirs[0])] if mine and theirs else []
    return [(m, m) for m, (k, _) in METRICS.items()
            if k == kind and a.stats.get(m) and b.stats.get(m)]


def _compare_kind(rank: int, kind: str, metrics: list[tuple[str, str]], a: RankRecords,
                  b: RankRecords, tolerance: Tolerance, rules: NameRules | None) -> KindResult:
    result = KindResult(rank, kind, metrics)
    names_a = {k[2] for ma, _ in metrics for k in a.stats[ma]}
    names_b = {k[2] for _, mb in metrics for k in b.stats[mb]}
    groups, result.unmatched_npu, result.unmatched_bench = match_names(
        sorted(names_a), sorted(names_b), rules)
    result.pairs = len(groups)
    keys = sorted({(s, m) for ma, _ in metrics for s, m, _ in a.stats[ma]}
                  & {(s, m) for _, mb in metrics for s, m, _ in b.stats[mb]})
    result.steps = sorted({s for s, _ in keys})
    signs = SignTracker(a, b) if kind == "grad" and a.signs and b.signs else None
    for step, micro in keys:
        for ma, mb in sorted(metrics, key=lambda m: METRICS[m[0]][1]):
            found = []
            for names_npu, names_bench in groups:
                sa = [a.stats[ma].get((step, micro, n)) for n in names_npu]
                sb = [b.stats[mb].get((step, micro, n)) for n in names_bench]
                if all(sa) and all(sb):
                    parting = _judge(rank, kind, [s for s in sa if s], [s for s in sb if s],
                                     tolerance, result)
                    found += [parting] if parting else []
            if signs is not None and micro == 0:
                found += signs.step(rank, step, groups, result)
            if found and not result.parted:
                result.parted = sorted(found, key=lambda p: -p.severity)
    return result


def _combined(stats: list[Stat]) -> dict[str, float]:
    values: dict[str, float] = {}
    if all("norm" in s.values for s in stats):
        values["norm"] = math.sqrt(sum(s.values["norm"] ** 2 for s in stats))
    for op, pick in (("max", max), ("min", min)):
        if all(op in s.values for s in stats):
            values[op] = pick(s.values[op] for s in stats)
    if all("nans" in s.values for s in stats):
        values["nans"] = sum(s.values["nans"] for s in stats)
    return values


def _dtype(stats: list[Stat]) -> str:
    dtype = "float64"
    for s in stats:
        dtype = less_precise(dtype, s.dtype.lower().rsplit(".", 1)[-1])
    return dtype


def _judge(rank: int, kind: str, sa: list[Stat], sb: list[Stat], tolerance: Tolerance,
           result: KindResult) -> Parting | None:
    """The worst statistic of one paired group at one step that parts, else None."""
    va, vb = _combined(sa), _combined(sb)
    quantum = max(s.quantum for s in sa + sb)
    dtype = _dtype(sa + sb)
    rel = tolerance(dtype)
    name_a, name_b = "+".join(s.name for s in sa), "+".join(s.name for s in sb)

    def parting(stat: str, x: float, y: float, rel_diff: float, severity: float) -> Parting:
        return Parting(rank, kind, sa[0].metric, sa[0].step, sa[0].micro, name_a, name_b,
                       stat, x, y, rel_diff, rel, quantum, dtype, severity)

    for op in STATS:
        x, y = va.get(op), vb.get(op)
        if x is not None and y is not None and not math.isfinite(x) and math.isfinite(y):
            return parting("nan", x, y, math.inf, math.inf)
    if va.get("nans", 0) > vb.get("nans", 0):
        return parting("nan", va["nans"], vb.get("nans", 0.0), math.inf, math.inf)
    absmax = max(abs(vb.get("max", 0.0)), abs(vb.get("min", 0.0)))
    worst: Parting | None = None
    informative = False
    for op in STATS:
        x, y = va.get(op), vb.get(op)
        if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
            continue
        scale = abs(y) if op == "norm" else absmax
        if max(abs(x), abs(y), scale) <= quantum:
            continue  # both round to nothing: the file cannot tell them apart
        informative = True
        limit = quantum + rel * scale
        diff = abs(x - y)
        if diff > limit and (worst is None or diff / limit > worst.severity):
            worst = parting(op, x, y, diff / scale if scale else math.inf, diff / limit)
            if op == "norm":
                break  # the norm says it best; max and min only when the norm agrees
    result.compared += informative
    result.below_rounding += not informative
    return worst
