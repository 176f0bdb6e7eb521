"""One pairing for every pair of runs: names where they hold, sequence alignment where not.

msprobe numbers calls per API (``Tensor.__add__.7``), so a call only one run makes (eager
attention's mask, a router's renormalisation, a cast) shifts every later counter of *that* API:
the same name then denotes different calls.  Within one framework, an API called as often in
both runs keeps its names (a shape that differs at the same call is the compare's to report:
tensor parallelism, a bug); the calls of an API called more often in one run are aligned
(``align.auto_pairing``: op, shapes, dtypes, statistics, enclosing module, the name as one
more piece of evidence); modules pair by path, whatever their class.  Across frameworks,
and between two codebases of one framework (``other_code``: other call order, many calls
moved, other module paths), everything is aligned, values first (``anchors``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from pytest_accuracy.dumps.model import Call, Dump
from pytest_accuracy.pairing.align import AlignmentResult, auto_pairing
from pytest_accuracy.pairing.base import PairMap
from pytest_accuracy.pairing.features import by_path
from pytest_accuracy.pairing.naming import module_scope


def shifted_apis(npu: Dump, bench: Dump) -> dict[str, tuple[int, int]]:
    """APIs called a different number of times in the two runs: {api: (npu, bench) counts}."""
    mine, theirs = _api_counts(npu), _api_counts(bench)
    return {api: (mine[api], theirs[api]) for api in sorted(set(mine) | set(theirs))
            if mine[api] != theirs[api]}


def pair_runs(npu: Dump, bench: Dump, *,
              earlier: AlignmentResult | None = None) -> AlignmentResult:
    """Pairs for one (step, rank): across frameworks aligned; within one, by name for the APIs
    called as often in both runs and modules by path, the shifted APIs' calls aligned.
    ``earlier``: an earlier step's pairing of the same two codebases, whose pairs by value
    hold where a bug since has changed the values."""
    if npu.framework != bench.framework:
        # API names differ by framework; module paths still tell a port that mirrors the
        # original (names help) from another codebase (MindFormers' own Llama: they do not)
        other = _other_paths(npu, bench)
        if not other:
            return auto_pairing(npu, bench)
        shifted = {}
    else:
        shifted = shifted_apis(npu, bench)
        other = other_code(npu, bench, shifted)
    if other:
        template = earlier if earlier is not None and earlier.agreed else None
        result = auto_pairing(npu, bench, other_code=True, earlier=template)
        result.why_aligned = other
        if isinstance(result.pairs, PairMap):
            result.pairs.other_code = True
        return result
    result = AlignmentResult(by_name=not shifted)
    if shifted:
        result.why_aligned = "; ".join(
            f"{api} called {a} times in the NPU run and {b} in the bench"
            for api, (a, b) in list(shifted.items())[:3])
        aligned = auto_pairing(_only(npu, shifted), _only(bench, shifted))
    modules = {_module_key(c): c for c in bench.calls if c.kind != "api"}
    for call in npu.calls:
        if call.kind != "api":
            _by_path(result, call, modules.get(_module_key(call)))
        elif shifted and _api(call) in shifted:  # no API shifted (most runs): no name made
            _from(result, aligned, call.name)
        elif bench.get(call.name) is not None:
            _set(result, call.name, call.name, 1.0, "same name; the API is called as often "
                 "in both runs")
    result.unmatched = [c.name for c in npu.calls if c.name not in result.pairs]
    result.pairs = PairMap(result.pairs)
    result.pairs.regions = dict(result.regions)
    result.pairs.region_calls = dict(result.region_calls)
    return result


# One code with a bug or a precision change adds or drops a few calls (a cast, a mask op);
# past this share of the forward calls, the runs are two codebases.
_MOVED_SHARE = 0.25
_MOVED_MIN = 8


def other_code(npu: Dump, bench: Dump, shifted: Mapping[str, object]) -> str:
    """Why the two runs are two codebases (names then say nothing), or "" for one code.

    One code calls the same APIs in the same order, up to the APIs a bug or a precision adds
    or drops (``shifted``), and names its modules alike."""
    calls_a, calls_b = _forward_apis(npu), _forward_apis(bench)
    moved_apis = {tuple(api.split(".", 1)) for api in shifted}  # (prefix, op): no strings made
    mine = [k for c in calls_a if (k := (c.prefix, c.op)) not in moved_apis]
    theirs = [k for c in calls_b if (k := (c.prefix, c.op)) not in moved_apis]
    moved = max(len(calls_a) - len(mine), len(calls_b) - len(theirs))
    if moved > max(_MOVED_SHARE * max(len(calls_a), len(calls_b)), _MOVED_MIN):
        return (f"{moved} of their forward API calls are of APIs called a different number "
                "of times (two codebases)")
    if mine != theirs:
        return "the two runs call their APIs in a different order (two codebases)"
    return _other_paths(npu, bench)


def _other_paths(npu: Dump, bench: Dump) -> str:
    """Why two runs whose module paths mostly differ are two codebases, else ""."""
    paths_a = {path for path, _ in by_path([c for c in npu.calls if c.kind == "module"])}
    paths_b = {path for path, _ in by_path([c for c in bench.calls if c.kind == "module"])}
    if paths_a and paths_b and len(paths_a & paths_b) < 0.5 * min(len(paths_a), len(paths_b)):
        return "the two runs name their modules differently (two codebases)"
    return ""


def _forward_apis(dump: Dump) -> list[Call]:
    return [c for c in dump.calls if c.kind == "api" and c.direction == "forward"]


def _by_path(result: AlignmentResult, call: Call, theirs: Call | None) -> None:
    if theirs is None:
        return
    if theirs.op == call.op:
        _set(result, call.name, theirs.name, 1.0, "same name")
    else:
        _set(result, call.name, theirs.name, 0.9,
             f"same module path {call.scope}; class {call.op}~{theirs.op}")


def _from(result: AlignmentResult, aligned: AlignmentResult, name: str) -> None:
    if name in aligned.pairs:
        _set(result, name, aligned.pairs[name], aligned.confidence[name], aligned.evidence[name])
        if name in aligned.regions:
            result.regions[name] = aligned.regions[name]
            if name in aligned.region_calls:
                result.region_calls[name] = aligned.region_calls[name]
    elif name in aligned.rejected:
        result.rejected[name] = aligned.rejected[name]


def _set(result: AlignmentResult, npu: str, bench: str, conf: float, evidence: str) -> None:
    result.pairs[npu], result.confidence[npu], result.evidence[npu] = bench, conf, evidence


def _only(dump: Dump, apis: Mapping[str, object]) -> Dump:
    """The dump's calls of these APIs (forward and backward), for aligning them alone."""
    calls = [c for c in dump.calls if c.kind == "api" and _api(c) in apis]
    return replace(dump, calls=calls)


def _api(call: Call) -> str:
    return f"{call.prefix}.{call.op}"


def _api_counts(dump: Dump) -> Counter[str]:
    return Counter(_api(c) for c in dump.calls if c.kind == "api" and c.direction == "forward")


def _module_key(call: Call) -> tuple[str, str, str, int]:
    return (call.kind, module_scope(call), call.direction, call.index)
