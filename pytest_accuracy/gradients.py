"""Parameter gradients: per-parameter (local) norm comparison, and a gradient view across steps."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from pytest_accuracy.compare.criteria import CompareCriteria, judge_tensor, less_precise
from pytest_accuracy.compare.judge import another_layout
from pytest_accuracy.compare.metrics import tensor_metrics
from pytest_accuracy.dumps.model import Dump, DumpSet, TensorRecord
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.pairing.base import Pairing
from pytest_accuracy.pairing.mapfiles import load_yaml
from pytest_accuracy.pairing.naming import module_scope

# ---------------------------------------------------------------- parameter-name conventions


@dataclass(frozen=True)
class NameRules:
    """Rewrites MindFormers / Megatron / HF parameter names onto one canonical name."""

    strip_prefixes: tuple[str, ...] = ()
    rules: tuple[tuple[re.Pattern[str], str], ...] = ()
    fused: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def canonical(self, name: str) -> str:
        changed = True
        while changed:  # "module.module.language_model.encoder." style stacks of wrappers
            changed = False
            for prefix in self.strip_prefixes:
                if name.startswith(prefix) and len(name) > len(prefix):
                    name, changed = name[len(prefix) :], True
        for pattern, replacement in self.rules:
            match = pattern.fullmatch(name)
            if match:
                return match.expand(replacement)
        return name

    def parts_of(self, canonical: str) -> list[str] | None:
        """The canonical names a fused parameter splits into (``attn.qkv`` -> q, k, v)."""
        dotted = f".{canonical}"
        for fused, parts in self.fused.items():
            token = f".{fused}."
            if token in dotted:
                return [dotted.replace(token, f".{p}.", 1)[1:] for p in parts]
        return None


def _rules_from(doc: Any, where: str | Path) -> NameRules:
    if not isinstance(doc, dict):
        raise AccuracyInputError(where, "name rules must be a mapping (strip_prefixes/rules/fused)")
    prefixes = doc.get("strip_prefixes") or []
    rules = doc.get("rules") or []
    fused = doc.get("fused") or {}
    if not isinstance(prefixes, list) or not all(isinstance(p, str) for p in prefixes):
        raise AccuracyInputError(where, "'strip_prefixes' must be a list of strings")
    if not isinstance(rules, list) or not isinstance(fused, dict):
        raise AccuracyInputError(where, "'rules' must be a list and 'fused' a mapping")
    compiled = []
    for i, rule in enumerate(rules):
        pair = [rule.get("pattern"), rule.get("canonical")] if isinstance(rule, dict) else rule
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)
        ):
            raise AccuracyInputError(where, f"rule #{i + 1} must be [pattern, canonical name]")
        try:
            compiled.append((re.compile(pair[0]), pair[1]))
        except re.error as exc:
            raise AccuracyInputError(
                where, f"rule #{i + 1}: bad pattern {pair[0]!r}: {exc}"
            ) from exc
    if not all(isinstance(v, list) for v in fused.values()):
        raise AccuracyInputError(where, "'fused' must map a component to a list of components")
    return NameRules(
        tuple(prefixes), tuple(compiled), {str(k): tuple(map(str, v)) for k, v in fused.items()}
    )


@cache
def _builtin_rules() -> NameRules:
    import yaml

    data = resources.files("pytest_accuracy") / "data" / "param_names.yaml"
    return _rules_from(yaml.safe_load(data.read_text(encoding="utf-8")), str(data))


def load_name_rules(path: str | Path | None = None) -> NameRules:
    """The built-in rules (``data/param_names.yaml``), with a user file's rules tried first."""
    base = _builtin_rules()
    if path is None:
        return base
    extra = _rules_from(load_yaml(path, "parameter-name rules"), path)
    return NameRules(
        tuple(dict.fromkeys(extra.strip_prefixes + base.strip_prefixes)),
        extra.rules + base.rules,
        {**base.fused, **extra.fused},
    )


def match_names(
    npu: Iterable[str], bench: Iterable[str], rules: NameRules | None = None
) -> tuple[list[tuple[list[str], list[str]]], list[str], list[str]]:
    """Group parameter names of two conventions: ([npu names], [bench names]) per match.

    Equal canonical names match one to one; a fused parameter on one side matches all of its
    parts on the other. Returns the groups and the unmatched names of each side.
    """
    r = rules or load_name_rules()
    can_a: dict[str, list[str]] = defaultdict(list)
    can_b: dict[str, list[str]] = defaultdict(list)
    for name in npu:
        can_a[r.canonical(name)].append(name)
    for name in bench:
        can_b[r.canonical(name)].append(name)
    groups = [(can_a.pop(c), can_b.pop(c)) for c in list(can_a) if c in can_b]
    for mine, theirs, flip in ((can_a, can_b, False), (can_b, can_a, True)):
        for c in list(mine):
            parts = r.parts_of(c)
            if c in mine and parts and all(p in theirs for p in parts):
                joined = [n for p in parts for n in theirs.pop(p)]
                groups.append((joined, mine.pop(c)) if flip else (mine.pop(c), joined))
    unmatched_a = [n for names in can_a.values() for n in names]
    return groups, unmatched_a, [n for names in can_b.values() for n in names]


# ---------------------------------------------------------------- gradients in a dump


@dataclass(frozen=True)
class ParamGrad:
    """One parameter's gradient record from a ``parameters_grad`` node."""

    name: str  # module path + parameter: "layers.0.attention.wqkv.weight"
    node: str
    record: TensorRecord

    def norm(self) -> float | None:
        """The recorded L2 norm, else computed from the tensor data (None if neither)."""
        if self.record.stats.norm is not None:
            return float(self.record.stats.norm)
        if self.record.has_data:
            return float(np.linalg.norm(self.record.load().astype(np.float64)))
        return None


def param_grads(dump: Dump) -> dict[str, ParamGrad]:
    """Every parameter gradient of one dump, by full parameter name, in dump order."""
    out: dict[str, ParamGrad] = {}
    for call in dump.calls:
        if call.kind != "params_grad":
            continue
        scope = module_scope(call)
        for rec in call.output_tensors:
            param = rec.path.split(".", 1)[1]  # "grad.weight" -> "weight"
            name = f"{scope}.{param}" if scope else param
            out[name] = ParamGrad(name, call.name, rec)
    return out


def params_from_pairing(npu: Dump, bench: Dump, pairing: Pairing) -> dict[str, str]:
    """Parameter names paired through a node pairing of their parameters_grad nodes."""
    mine, theirs = _by_node(param_grads(npu)), _by_node(param_grads(bench))
    out: dict[str, str] = {}
    for node, other in pairing(npu, bench).items():
        a, b = mine.get(node, []), theirs.get(other, [])
        attrs_b = {g.name.rsplit(".", 1)[-1]: g for g in b}
        if a and {g.name.rsplit(".", 1)[-1] for g in a} == set(attrs_b):
            out.update({g.name: attrs_b[g.name.rsplit(".", 1)[-1]].name for g in a})
        elif len(a) == len(b):  # renamed parameters: keep their order
            out.update({g.name: h.name for g, h in zip(a, b, strict=True)})
    return out


def _by_node(grads: Mapping[str, ParamGrad]) -> dict[str, list[ParamGrad]]:
    out: dict[str, list[ParamGrad]] = defaultdict(list)
    for g in grads.values():
        out[g.node].append(g)
    return out


def _groups(
    npu: Iterable[str],
    bench: Iterable[str],
    pairs: Mapping[str, str] | None,
    rules: NameRules | None,
) -> tuple[list[tuple[list[str], list[str]]], list[str], list[str]]:
    if pairs is None:
        return match_names(npu, bench, rules)
    a, b = list(npu), set(bench)
    groups = [([n], [pairs[n]]) for n in a if pairs.get(n) in b]
    used = {pairs[n] for n in a if pairs.get(n) in b}
    return groups, [n for n in a if pairs.get(n) not in b], [n for n in b if n not in used]


# ---------------------------------------------------------------- local norms


@dataclass(frozen=True)
class NormDiff:
    """One parameter (or fused group) with its gradient norm on both sides."""

    npu_params: tuple[str, ...]
    bench_params: tuple[str, ...]
    npu_norm: float
    bench_norm: float

    @property
    def name(self) -> str:
        return "+".join(self.npu_params)

    @property
    def rel_diff(self) -> float:
        diff = abs(self.npu_norm - self.bench_norm)
        if self.bench_norm == 0:
            return 0.0 if diff == 0 else math.inf
        return diff / abs(self.bench_norm)


@dataclass
class NormComparison:
    """Per-parameter gradient norms side by side, worst relative difference first."""

    diffs: list[NormDiff]
    unmatched_npu: list[str] = field(default_factory=list)
    unmatched_bench: list[str] = field(default_factory=list)

    @property
    def worst(self) -> NormDiff | None:
        return self.diffs[0] if self.diffs else None


def compare_norms(
    npu: Mapping[str, float],
    bench: Mapping[str, float],
    *,
    rules: NameRules | None = None,
    pairs: Mapping[str, str] | None = None,
) -> NormComparison:
    """Compare per-parameter norms (from dumps or logs) matched by ``pairs`` or by name rules.

    A fused parameter's norm is compared with ``sqrt(sum of squares)`` of its parts' norms.
    """
    groups, lost_a, lost_b = _groups(npu, bench, pairs, rules)
    diffs = []
    for a, b in groups:
        na = math.sqrt(sum(npu[n] ** 2 for n in a))
        nb = math.sqrt(sum(bench[n] ** 2 for n in b))
        diffs.append(NormDiff(tuple(a), tuple(b), na, nb))
    diffs.sort(key=lambda d: -d.rel_diff if not math.isnan(d.rel_diff) else math.inf)
    return NormComparison(diffs, lost_a, lost_b)


def local_norm_diffs(
    npu: Dump | DumpSet,
    bench: Dump | DumpSet,
    *,
    step: int = 0,
    rank: int = 0,
    pairing: Pairing | None = None,
    rules: NameRules | None = None,
) -> NormComparison:
    """Per-parameter gradient norms of one step, worst relative difference first.

    Parameters correspond through ``pairing`` (a node pairing such as ``auto_align()`` or a
    cell mapping: their parameters_grad nodes pair) or, without one, through name rules.
    """
    a, b = _one(npu, step, rank), _one(bench, step, rank)
    norms_a = {n: v for n, g in param_grads(a).items() if (v := g.norm()) is not None}
    norms_b = {n: v for n, g in param_grads(b).items() if (v := g.norm()) is not None}
    pairs = params_from_pairing(a, b, pairing) if pairing is not None else None
    return compare_norms(norms_a, norms_b, rules=rules, pairs=pairs)


def _one(dumps: Dump | DumpSet, step: int, rank: int) -> Dump:
    if isinstance(dumps, Dump):
        return dumps
    if (step, rank) not in dumps.dumps:
        raise AccuracyInputError(dumps.root, f"no dump for step {step} rank {rank}")
    return dumps.dumps[(step, rank)]


# ---------------------------------------------------------------- gradient view across steps


@dataclass(frozen=True)
class StepGrad:
    """How one parameter's gradients compare at one step."""

    step: int
    norm_ratio: float | None  # npu norm / bench norm
    cosine: float | None  # when both sides have tensor data and one tensor each
    rel_err: float | None  # ||npu - bench|| / ||bench|| (data), else relative norm difference
    parted: bool
    detail: str = ""


@dataclass
class GradientView:
    """Per parameter and step, gradient similarity; where the two runs' gradients part."""

    steps: list[int]
    params: dict[str, list[StepGrad]]  # NPU parameter name (fused groups joined by "+")
    bench_params: dict[str, tuple[str, ...]]

    @property
    def first_parting_step(self) -> int | None:
        parted = [s.step for rows in self.params.values() for s in rows if s.parted]
        return min(parted) if parted else None

    def parted_at(self) -> dict[str, int | None]:
        """Per parameter, the first step whose gradients part (None: never)."""
        return {
            n: next((s.step for s in rows if s.parted), None) for n, rows in self.params.items()
        }

    def parted_params(self, step: int) -> list[str]:
        """Parameters parted at ``step``, worst relative error first."""
        rows = [(n, s) for n, ss in self.params.items() for s in ss if s.step == step and s.parted]
        return [n for n, _ in sorted(rows, key=lambda r: -(r[1].rel_err or 0.0))]


def gradient_view(
    npu: DumpSet,
    bench: DumpSet,
    *,
    rank: int = 0,
    pairing: Pairing | None = None,
    rules: NameRules | None = None,
    criteria: CompareCriteria | None = None,
    use_data: bool = True,
) -> GradientView:
    """Compare parameter gradients step by step over the steps both runs dumped.

    A parameter's gradients *part* at a step when they miss the compare criteria of their
    dtype (``CompareCriteria.tolerance``): relative L2 error and cosine on tensor data, or the
    relative norm difference when only statistics were dumped.
    """
    crit = criteria or CompareCriteria()
    steps = sorted(
        {s for s, r in npu.dumps if r == rank} & {s for s, r in bench.dumps if r == rank}
    )
    params: dict[str, list[StepGrad]] = {}
    bench_names: dict[str, tuple[str, ...]] = {}
    for step in steps:
        a, b = npu.dumps[(step, rank)], bench.dumps[(step, rank)]
        grads_a, grads_b = param_grads(a), param_grads(b)
        pairs = params_from_pairing(a, b, pairing) if pairing is not None else None
        groups, _, _ = _groups(grads_a, grads_b, pairs, rules)
        for names_a, names_b in groups:
            key = "+".join(names_a)
            bench_names[key] = tuple(names_b)
            ga, gb = [grads_a[n] for n in names_a], [grads_b[n] for n in names_b]
            params.setdefault(key, []).append(_step_grad(step, ga, gb, crit, use_data))
    return GradientView(steps, params, bench_names)


def _step_grad(
    step: int, ga: list[ParamGrad], gb: list[ParamGrad], crit: CompareCriteria, use_data: bool
) -> StepGrad:
    dtype = "float64"
    for g in ga + gb:
        dtype = less_precise(dtype, g.record.dtype)
    tol = crit.tolerance(dtype)
    na, nb = _joint_norm(ga), _joint_norm(gb)
    ratio = na / nb if na is not None and nb else None
    one_each = len(ga) == len(gb) == 1
    if use_data and one_each and ga[0].record.has_data and gb[0].record.has_data:
        a, b = ga[0].record.load(), gb[0].record.load()
        m = tensor_metrics(a, b)
        judged = judge_tensor(m, dtype, tol)
        if not judged.ok:  # rows a weight conversion permuted (rotary q/k): one gradient
            judged, m = another_layout(a, b, dtype, tol) or (judged, m)
        return StepGrad(step, ratio, m.cosine, m.rel_l2_err, not judged.ok, judged.detail)
    if ratio is None:
        return StepGrad(step, None, None, None, False, "no norm recorded on one side")
    rel = abs(ratio - 1.0)
    parted = not rel <= tol.rel_err
    detail = f"norm differs by {rel:.3g} (up to {tol.rel_err:g} allowed)" if parted else ""
    return StepGrad(step, ratio, None, rel, parted, detail)


def _joint_norm(grads: list[ParamGrad]) -> float | None:
    norms = [g.norm() for g in grads]
    if any(n is None for n in norms):
        return None
    return math.sqrt(sum(n * n for n in norms if n is not None))
