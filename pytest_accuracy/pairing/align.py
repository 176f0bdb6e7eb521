"""Automatic NPU<->bench node pairing without a mapping file: module tree, then sequence DP.

How it works (``auto_pairing``):

1. Forward module/cell calls (L0, mix) are aligned as sequences (execution order is a post-order
   walk of the module tree) scoring class name, direct-parameter shapes, input/output shapes,
   depth in construct.json, layer indices in the path and output statistics. Renamed attributes
   (``attention_norm`` vs ``n1``) and renamed classes (``LLamaDecodeLayer`` vs ``Block``) pair on
   structure. Backward and parameters_grad nodes follow the module instance.
2. Forward API calls are aligned the same way, scoring the op (MS names mapped to PT names with
   the built-in API map, then dunder/in-place aliases, then known alternatives such as
   ``ops.gather`` for ``F.embedding``), shapes, dtypes, statistics and (mix) whether the
   enclosing modules are paired. MindSpore calls PyTorch's msprobe never dumps (risk-level
   filtered reshape/transpose/split/full/triu/float) cost almost nothing to leave out.
3. API backward nodes pair through their forward (``X.n.backward`` <-> the bench backward of
   ``X.n.forward``'s partner); whatever is left is aligned by a second DP.

Each pair carries its evidence and a confidence in [0, 1] (score / best score the available
evidence allows); pairs below ``min_confidence`` are not used (kept in ``rejected``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from pathlib import Path

import numpy as np

from pytest_accuracy.dumps.model import FLOAT_EPS, Call, Dump, TensorRecord
from pytest_accuracy.pairing.anchors import (
    LOOSE_WIDTH,
    anchor,
    by_parameters,
    close,
    fingerprint,
    increasing_chain,
    is_identity,
    leading,
    width,
)
from pytest_accuracy.pairing.backward import incomparable_backward
from pytest_accuracy.pairing.base import Pairing, PairMap
from pytest_accuracy.pairing.dp import (
    API_TERMS,
    MODULE_TERMS,
    Seq,
    Terms,
    Vocab,
    block_scores,
    explain,
    needleman_wunsch,
)
from pytest_accuracy.pairing.features import by_path, call_stats, depths, rec_key, sig
from pytest_accuracy.pairing.mapfiles import ApiMap, load_api_map
from pytest_accuracy.pairing.naming import api_name, canonical_api, fixed_pairing, module_scope

DEFAULT_MIN_CONFIDENCE = 0.5
_CHEAP_GAP = 0.1  # leaving out a call the other framework's dumper never records
_GAP = 1.0


@dataclass
class AlignmentResult:
    """NPU node -> bench node pairs with their confidence and evidence."""

    pairs: dict[str, str] = field(default_factory=dict)
    # region-node pairs: NPU node -> the region of calls the other run makes instead, in words
    regions: dict[str, str] = field(default_factory=dict)
    # of those, where the NPU run makes the region: its calls in order (the pair's call last)
    region_calls: dict[str, list[str]] = field(default_factory=dict)
    # NPU calls left unpaired between two value anchors: the other run computes that stretch
    # with other calls, and the anchors' agreement covers it
    inside: dict[str, str] = field(default_factory=dict)
    confidence: dict[str, float] = field(default_factory=dict)
    evidence: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, tuple[str, float, str]] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)  # NPU nodes with no accepted pair
    # NPU nodes paired by the evidence of values (the same value, the same weights)
    agreed: set[str] = field(default_factory=set)
    step: int = -1  # the step of the two dumps paired
    by_name: bool = False  # names held (same framework, same calls): no alignment ran
    why_aligned: str = ""  # why names could not be taken as identity

    def as_pairing(self) -> Pairing:
        """These pairs as a Pairing; names repeat every step, so it serves every step."""
        return fixed_pairing(self.pairs)

    def write_yaml(self, path: str | Path, source: str = "") -> Path:
        """Our editable mapping file (``mapping_yaml.write_mapping_yaml``); unmatched as null."""
        from pytest_accuracy.pairing.mapping_yaml import write_mapping_yaml

        return write_mapping_yaml(
            self.pairs,
            self.evidence,
            path,
            confidence=self.confidence,
            unmatched=self.unmatched,
            source=source,
        )


def auto_pairing(
    npu: Dump,
    bench: Dump,
    *,
    api_map: ApiMap | None = None,
    min_confidence: float = DEFAULT_MIN_CONFIDENCE,
    other_code: bool = False,
    earlier: AlignmentResult | None = None,
) -> AlignmentResult:
    """Pair the nodes of two dumps of the same model from different frameworks or runs.
    ``other_code``: one framework, two codebases, whose backward calls (gradients of
    other boundaries, a norm applied three times for q, k and v) pair by value only.
    ``earlier``: the pairing of an earlier step of the same runs (its pairs by value)."""
    aligner = _Aligner(npu, bench, api_map or load_api_map(), min_confidence)
    aligner.other_code = other_code
    aligner.earlier = earlier
    aligner.result.step = npu.step
    return aligner.run()


def auto_align(
    *, api_map: ApiMap | None = None, min_confidence: float = DEFAULT_MIN_CONFIDENCE
) -> Pairing:
    """A Pairing that aligns every (step, rank) dump pair on its own (for ``Comparison``)."""
    # Keyed by identity; the dumps are kept in the value so their ids cannot be reused.
    cache: dict[tuple[int, int], tuple[Dump, Dump, dict[str, str]]] = {}

    def pairing(npu: Dump, bench: Dump) -> dict[str, str]:
        key = (id(npu), id(bench))
        if key not in cache:
            result = auto_pairing(npu, bench, api_map=api_map, min_confidence=min_confidence)
            cache[key] = (npu, bench, result.pairs)
        return cache[key][2]

    return pairing


class _Aligner:
    """One alignment run; holds the shared vocabulary and the growing result."""

    def __init__(self, npu: Dump, bench: Dump, amap: ApiMap, min_confidence: float) -> None:
        self.npu, self.bench, self.amap = npu, bench, amap
        self.min_confidence = min_confidence
        self.vocab = Vocab()
        self.result = AlignmentResult()
        self.used: set[str] = set()
        self.other_code = False  # two codebases: paths, depths and names are no evidence
        self.earlier: AlignmentResult | None = None  # an earlier step of the same runs
        self._last_forward: list[Call | None] | None = None  # each run's last forward API

    def run(self) -> AlignmentResult:
        mods_a = _calls(self.npu, "module", "forward")
        mods_b = _calls(self.bench, "module", "forward")
        self._anchor_paths(mods_a, mods_b)
        self._anchored([c for c in mods_a if not self._done(c)],
                       [c for c in mods_b if c.name not in self.used], module=True)
        self._follow_instances()
        apis_a = _calls(self.npu, "api", "forward")
        apis_b = _calls(self.bench, "api", "forward")
        self._anchored(apis_a, apis_b, module=False)
        if self.other_code:
            self._pair_masks(apis_a, apis_b)
        self._follow_forward()
        for kind, module in (("api", False), ("module", True), ("params_grad", True)):
            direction = "params_grad" if kind == "params_grad" else "backward"
            rest_a = [c for c in _calls(self.npu, kind, direction) if not self._done(c)]
            rest_b = [c for c in _calls(self.bench, kind, direction) if c.name not in self.used]
            self._anchored(rest_a, rest_b, module=module,
                           align=not (self.other_code and direction == "backward"))
        return self._finish()

    # ----------------------------------------------------------------- bookkeeping

    def _done(self, call: Call) -> bool:
        res = self.result
        return call.name in res.pairs or call.name in res.rejected or call.name in res.inside

    def _open(self, call: Call) -> bool:
        """Neither paired nor left inside another decomposition (rejected ones are open)."""
        return call.name not in self.result.pairs and call.name not in self.result.inside

    def _add(self, npu: str, bench: str, conf: float, evidence: str) -> None:
        if bench in self.used or npu in self.result.pairs:
            return
        if conf < self.min_confidence:
            self.result.rejected[npu] = (bench, conf, evidence)
            return
        self.result.rejected.pop(npu, None)
        self.result.pairs[npu] = bench
        self.result.confidence[npu] = round(conf, 4)
        self.result.evidence[npu] = evidence
        self.used.add(bench)

    def _finish(self) -> AlignmentResult:
        res = self.result
        order = {c.name: c.order for c in self.npu.calls}
        res.pairs = PairMap(sorted(res.pairs.items(), key=lambda kv: order[kv[0]]))
        res.pairs.regions = dict(res.regions)
        res.pairs.region_calls = {k: v for k, v in res.region_calls.items() if k in res.regions}
        res.inside = {k: v for k, v in res.inside.items() if k not in res.pairs}
        res.pairs.inside = dict(res.inside)
        res.unmatched = [c.name for c in self.npu.calls if c.name not in res.pairs]
        return res

    # ----------------------------------------------------------------- sequence alignment

    def _anchored(self, a: list[Call], b: list[Call], *, module: bool,
                  align: bool = True) -> None:
        """Calls that make the same value pair first (value anchors); the calls between two
        anchors are aligned among themselves, never across an anchor."""
        pins, weights = self._pin(a, b, module=module)
        pins += self._as_before(a, b, pins + weights)
        # modules of the same weights bound the alignment too (after a bug, few values do)
        agreed = set(pins)
        bounds = [(-1, -1), *increasing_chain(sorted(agreed | set(weights))), (len(a), len(b))]
        for (i0, j0), (i1, j1) in pairwise(bounds):
            rows = range(i0 + 1, i1)
            feeding = (_feeding(a, rows, i1) if i0 >= 0 and (i1, j1) in agreed else set())
            if not align:
                continue
            self._align([c for c in a[i0 + 1 : i1] if not self._done(c)],
                        [c for c in b[j0 + 1 : j1] if c.name not in self.used], module=module,
                        keep=frozenset(a[k].name for k in feeding))
            if not module and i0 >= 0 and i1 < len(a) and j1 < len(b):
                self._anchor_region(a, b, range(i0 + 1, i1 + 1), range(j0 + 1, j1 + 1))
            self._note_inside(a, b, [k for k in rows if k in feeding], range(j0 + 1, j1), i1)

    def _pin(self, a: list[Call], b: list[Call], *, module: bool
             ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Pair the calls of the same value (and modules of the same weights): the value
        anchors in an order both runs keep, and the weight pairs."""
        pins, crossing = anchor(a, b)
        weights: list[tuple[int, int]] = []
        if module:
            # The same weights pair modules before their values do: after a bug outputs no
            # longer agree, and one value leaves several nested modules (o_proj's is its
            # attention's), of which the one computing with the same weights is the peer.
            weights = by_parameters(a, b)
            by_w_a, by_w_b = dict(weights), {j: i for i, j in weights}
            pins = [(i, j) for i, j in pins if by_w_a.get(i, j) == j and by_w_b.get(j, i) == i]
            crossing = [(i, j) for i, j in crossing
                        if by_w_a.get(i, j) == j and by_w_b.get(j, i) == i]
            weights = [w for w in weights if w not in set(pins + crossing)]
        if not (pins or crossing or weights):
            return pins, weights
        sa, sb = self._features(a, npu=True), self._features(b, npu=False)
        terms = MODULE_TERMS if module else API_TERMS
        pins, crossing, swapped = _unswap(a, b, pins, crossing)
        found = [(ij, "same parameter values") for ij in weights]
        found += [(ij, "in its place; its value is that of the bench's next call of its kind, "
                   "in the other order (a swap)") for ij in swapped]
        found += [((i, j), f"same value ({_value_words(a[i], b[j])})")
                  for i, j in sorted(pins + crossing)]
        for (i, j), why in found:
            _, how = explain(sa, sb, i, j, terms, op=not module)
            self._add(a[i].name, b[j].name, 1.0, f"{why}; {how}")
            if self.result.pairs.get(a[i].name) == b[j].name:
                self.result.agreed.add(a[i].name)
            if (not module and a[i].name in self.result.pairs and (i, j) not in weights
                    and not _same_op(self.amap, a[i], b[j])):
                # another decomposition reaching the same value: only that value is shared
                # (normalize's gradient against mul's; einsum against matmul's arguments)
                self.result.regions[a[i].name] = f"{api_name(b[j])}, equal in value"
        return pins, weights

    def _as_before(self, a: list[Call], b: list[Call], taken: list[tuple[int, int]]
                   ) -> list[tuple[int, int]]:
        """Forward calls paired by value at an earlier step of these runs pair again, and
        those left inside another decomposition there stay inside: the same code runs every
        step, and a bug since (a learning rate) changes values, not code."""
        before = self.earlier
        if before is None or not a or a[0].direction != "forward":
            return []
        where_b = {c.name: j for j, c in enumerate(b)}
        used_a, used_b = {i for i, _ in taken}, {j for _, j in taken}
        found = []
        for i, c in enumerate(a):
            j = where_b.get(before.pairs.get(c.name, "")) if c.name in before.agreed else None
            if (j is not None and i not in used_a and j not in used_b
                    and not self._done(c) and b[j].name not in self.used):
                found.append((i, j))
        chain = increasing_chain(found)
        for i, j in chain:
            self._add(a[i].name, b[j].name, 1.0, f"as at step {before.step}, where their "
                      f"values agreed ({before.evidence.get(a[i].name, '')})")
        for c in a:
            why = before.inside.get(c.name)
            if why is not None and not self._done(c):
                self.result.inside[c.name] = f"as at step {before.step}: {why}"
        return chain

    def _note_inside(self, a: list[Call], b: list[Call], rows: list[int], cols: range,
                     end: int) -> None:
        """Calls left unpaired whose values reach the next anchor: the other run's
        decomposition of one computation (normalize against pow, mean, add, rsqrt) agrees
        at the anchor, which checks their effect."""
        theirs = [b[k] for k in cols if b[k].name not in self.used]
        what = (f"{len(theirs)} other calls ({api_name(theirs[0])} .. {api_name(theirs[-1])})"
                if len(theirs) > 1 else api_name(theirs[0]) if theirs else "no call")
        for k in rows:
            if not self._done(a[k]):
                self.result.inside[a[k].name] = (
                    f"its value reaches {a[end].name}, which agrees with the bench's, and the "
                    f"bench computes this stretch with {what}: its effect is checked there")

    def _anchor_region(self, a: list[Call], b: list[Call], rows: range, cols: range) -> None:
        """An anchor of two different ops that ends a run of calls left unpaired on one side
        only: a fused call against the chain it replaces, equal at the region's boundary."""
        i, j = rows[-1], cols[-1]
        if self.amap.base_op(api_name(a[i])) == self.amap.base_op(api_name(b[j])):
            return
        mine = [k for k in rows[:-1] if not self._done(a[k])]
        theirs = [k for k in cols[:-1] if b[k].name not in self.used]
        if bool(mine) == bool(theirs) or all(is_identity(c) for c in (
                [a[k] for k in mine] + [b[k] for k in theirs])):
            return
        run, calls = (theirs, b) if theirs else (mine, a)
        if not theirs:
            self.result.region_calls[a[i].name] = [a[k].name for k in (*mine, i)]
        self.result.regions[a[i].name] = (
            f"the {'bench' if theirs else 'NPU'}'s {len(run) + 1} calls, "
            f"{api_name(calls[run[0]])} .. {api_name(calls[j if theirs else i])}")
        self.result.evidence[a[i].name] = (f"region: {self.result.evidence[a[i].name]}; "
                                           f"against {self.result.regions[a[i].name]}")

    def _align(self, a: list[Call], b: list[Call], *, module: bool,
               keep: frozenset[str] = frozenset()) -> None:
        if not a or not b:
            return
        sa, sb = self._features(a, npu=True), self._features(b, npu=False)
        terms = MODULE_TERMS if module else API_TERMS
        if not module:
            # An API whose op has no possible partner on the other side can only pair at a
            # confidence below 0.4: leave it out of the DP (shorter, better-centred band).
            keep_a, keep_b = _op_overlap(sa, sb)
            self._align_kept(a, b, sa.take(keep_a), sb.take(keep_b), keep_a, keep_b, terms)
            # a call whose value reaches an anchor is another decomposition, not a bug
            self._substitute(a, b, sa, sb, keep=keep)
            return
        self._align_kept(a, b, sa, sb, np.arange(len(a)), np.arange(len(b)), terms)
        if a[0].direction == "forward":  # an activation of another class reading one value
            self._substitute(a, b, sa, sb, keep=keep, module=True)

    def _align_kept(self, a: list[Call], b: list[Call], sa: Seq, sb: Seq, keep_a: np.ndarray,
                    keep_b: np.ndarray, terms: Terms) -> None:
        """The DP over the kept calls ``a[keep_a]``, ``b[keep_b]`` (features ``sa``, ``sb``)."""
        a, b = [a[k] for k in keep_a], [b[k] for k in keep_b]
        if not a or not b:
            return
        module = terms is MODULE_TERMS

        def score(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
            return block_scores(sa, sb, rows, cols, terms, op=not module)

        gap_a = np.array([self._gap(c, npu=True) for c in a])
        gap_b = np.array([self._gap(c, npu=False) for c in b])
        for i, j in needleman_wunsch(len(a), len(b), score, gap_a, gap_b):
            conf, evidence = explain(sa, sb, i, j, terms, op=not module)
            self._add(a[i].name, b[j].name, conf, evidence)

    def _substitute(self, a: list[Call], b: list[Call], sa: Seq, sb: Seq, *,
                    keep: frozenset[str] = frozenset(), module: bool = False) -> None:
        """Between two aligned pairs, a call left over on each side with inputs and outputs
        of the same shapes (and enclosing module) is another op in the same place: gelu
        where the bench calls silu. Paired, so the compare names it; its op is the cause."""
        where_b = {c.name: j for j, c in enumerate(b)}
        anchors = [(i, where_b[self.result.pairs[c.name]]) for i, c in enumerate(a)
                   if self.result.pairs.get(c.name) in where_b]
        bounds = [(-1, -1), *anchors, (len(a), len(b))]
        for (i0, j0), (i1, j1) in pairwise(bounds):
            free = [j for j in range(j0 + 1, j1) if b[j].name not in self.used]
            for i in range(i0 + 1, i1):
                if a[i].name in keep:
                    continue
                j = next((j for j in free if _substituted(sa, sb, i, j)
                          and _inputs_agree(a[i], b[j])
                          and not (module and (a[i].parameters or b[j].parameters))
                          and not is_identity(a[i]) and not is_identity(b[j])), None)
                # one the alignment found too unlike its partner to pair may still be this
                if j is None or a[i].name in self.result.pairs or a[i].name in self.result.inside:
                    continue
                free = [k for k in free if k > j]
                conf, evidence = explain(sa, sb, i, j, MODULE_TERMS if module else API_TERMS,
                                         op=not module)
                what = "another module class" if module else "another op"
                self._add(a[i].name, b[j].name, max(conf, self.min_confidence),
                          f"{what} in the same place, reading the same value; {evidence}")
            if not module:
                self._region(a, b, sa, sb, range(i0 + 1, i1), range(j0 + 1, j1))

    def _region(self, a: list[Call], b: list[Call], sa: Seq, sb: Seq, rows: range,
                cols: range) -> None:
        """Between two pairs, one call left on one side and a run of calls on the other, the
        run ending with the one call's output layout: a fused kernel against the calls it
        replaces (npu_fusion_attention against the eager chain). The fused call pairs with
        the run's last call: the region's boundary tensor is what is compared."""
        mine = [i for i in rows if not self._done(a[i])]
        theirs = [j for j in cols if b[j].name not in self.used]
        if not mine or not theirs or (len(mine) > 1 and len(theirs) > 1):
            return
        i, j = mine[-1], theirs[-1]
        out_a, out_b = int(sa.cols["out"][i]), int(sb.cols["out"][j])
        if out_a < 0 or out_a != out_b or len(mine) == len(theirs) == 1:
            return
        run, one = (theirs, a[i].name) if len(mine) == 1 else (mine, b[j].name)
        calls = b if len(mine) == 1 else a
        single = a[i] if len(mine) == 1 else b[j]
        if not (_inputs_agree(single, calls[run[0]]) or self._both_losses(a[i], b[j])):
            return  # a region reads what the call it replaces reads
        what = (f"the {'bench' if calls is b else 'NPU'}'s {len(run)} calls, "
                f"{api_name(calls[run[0]])} .. {api_name(calls[run[-1]])}")
        # the run's value is made by its last computing call: the reshapes after it only
        # pass it on, and a pass-through never pairs with a call that computes
        # (one the alignment rejected for its reshaped operands included)
        if len(mine) > 1:
            chain = [k for k in range(mine[0], i + 1) if self._open(a[k])]
            i = _maker(a, chain)
            made = [a[k].name for k in chain if k <= i]
        else:
            j = _maker(b, theirs)
        self._add(a[i].name, b[j].name, self.min_confidence,
                  f"region: {one} against {what}")
        if a[i].name in self.result.pairs:
            self.result.regions[a[i].name] = what
            if len(mine) > 1:
                self.result.region_calls[a[i].name] = made

    def _both_losses(self, mine: Call, theirs: Call) -> bool:
        """Each run's last forward call, one number of one size up to its sign: the loss,
        however each codebase reaches it (over the real positions only, or over all with an
        ignore index: then the first calls read other values)."""
        if self._last_forward is None:  # asked once per region: found once per run
            self._last_forward = [next((c for c in reversed(d.calls) if c.kind == "api"
                                        and c.direction == "forward"), None)
                                  for d in (self.npu, self.bench)]
        if self._last_forward[0] is not mine or self._last_forward[1] is not theirs:
            return False
        ra, rb = leading(mine), leading(theirs)
        fa = fingerprint(ra) if ra is not None else None
        fb = fingerprint(rb) if rb is not None else None
        return (fa is not None and fb is not None and ra is not None and rb is not None
                and fa[0] == fb[0] == 1
                and abs(fa[1] - fb[1]) <= width(ra.dtype, rb.dtype) * max(fa[1], fb[1]))

    def _gap(self, call: Call, *, npu: bool) -> float:
        """Leaving out a call PyTorch's dumper filters (risk level) is nearly free."""
        this, other = (self.npu, self.bench) if npu else (self.bench, self.npu)
        if call.kind != "api" or this.framework == "pytorch" or other.framework != "pytorch":
            return _GAP
        pt = self.amap.to_pt(api_name(call)) if this.framework == "mindspore" else api_name(call)
        return _CHEAP_GAP if self.amap.is_low_risk(pt) else _GAP

    def _features(self, calls: Sequence[Call], *, npu: bool) -> Seq:
        v = self.vocab
        cols: dict[str, list[int]] = {k: [] for k in _COLUMNS}
        parent_pairs = self.result.pairs
        depth = depths(self.npu if npu else self.bench)
        same_framework = self.npu.framework == self.bench.framework
        for c in calls:
            outs, ins = self._leading(c), c.input_tensors
            cols["out"].append(_known(v, sig(outs, squeeze=False)))
            cols["out_sq"].append(_known(v, sig(outs, squeeze=True)))
            cols["inp"].append(_known(v, sig(sorted(ins, key=rec_key), squeeze=False)))
            # across codebases a module's path, depth and name say nothing of its peer
            path_words = same_framework and not (self.other_code and c.kind != "api")
            cols["name"].append(v("name:" + c.name) if path_words else -1)
            cols["ident"].append(v("ident:" + str(is_identity(c))))
            if c.kind == "api":
                self._api_columns(c, cols, npu=npu)
                if self.other_code:
                    parent = self._paired_ancestor(c, npu=npu)
                else:
                    parent = parent_pairs.get(c.parent or "") if npu else c.parent
                cols["parent"].append(v(parent) if parent else -1)
            else:
                scope = module_scope(c)
                cols["cls"].append(v("cls:" + c.op))
                params = sorted(str(p.shape) for p in c.parameters)
                if c.kind == "params_grad":
                    params = sorted(str(r.shape) for r in outs)
                cols["params"].append(v("p:" + ";".join(params)))
                cols["depth"].append(depth.get(c.name, -1) if path_words else -1)
                nums = [s for s in scope.split(".") if s.isdigit()]
                cols["nums"].append(v("n:" + ".".join(nums)) if path_words else -1)
        width = max(len(x) for x in cols.values())
        arrays = {k: np.array(x if x else [-1] * width, dtype=np.int64) for k, x in cols.items()}
        labels = [api_name(c) if c.kind == "api" else c.op for c in calls]
        stats = np.array([call_stats(c) for c in calls], dtype=np.float64)
        return Seq([c.name for c in calls], labels, arrays, stats, v)

    def _paired_ancestor(self, call: Call, *, npu: bool) -> str | None:
        """The innermost module around ``call`` that has a peer, in bench names: one codebase
        calls its output projection inside the attention, the other inside a Linear of its
        own that the first has no module for."""
        dump, name = (self.npu if npu else self.bench), call.parent
        for _ in range(_ANCESTOR_HOPS):
            if not name:
                return None
            if npu and name in self.result.pairs:
                return self.result.pairs[name]
            if not npu and name in self.used:
                return name
            up = dump.get(name)
            name = up.parent if up is not None else None
        return None

    def _leading(self, call: Call) -> list[TensorRecord]:
        """The outputs alignment compares: a fused kernel's auxiliary outputs left out."""
        outs = call.output_tensors
        if call.kind != "api":
            return outs
        name = api_name(call)
        pt = self.amap.to_pt(name) if self.npu.framework == "mindspore" else name
        return outs[:1] if pt in self.amap.leading_output else outs

    def _api_columns(self, call: Call, cols: dict[str, list[int]], *, npu: bool) -> None:
        v, amap = self.vocab, self.amap
        name = api_name(call)
        full = canonical_api(call, self.npu.framework, self.bench.framework, amap) if npu else name
        cols["full"].append(v(full))
        cols["base"].append(v("base:" + amap.base_op(full)))
        alts = list(amap.alternatives.get(amap.ms_key(name), ())) if npu else []
        cols["alt0"].append(v(alts[0]) if alts else -1)
        cols["alt1"].append(v(alts[1]) if len(alts) > 1 else -1)

    def _anchor_paths(self, a: list[Call], b: list[Call]) -> None:
        """Modules at the same path (wrappers such as ``network_with_loss.`` or ``module.``
        left out) and call pair first, whatever their class: the order of module records
        differs between dumpers (msprobe-MindSpore may write a cell before its children)."""
        mine, theirs = by_path(a), by_path(b)
        for key, call in mine.items():
            other = theirs.get(key)
            if call is None or other is None:
                continue
            if call.op != other.op and not _same_value(call, other):
                continue  # one path, two things (x-transformers' layers.1 is a block's FFN)
            same = "same class" if call.op == other.op else f"class {call.op}~{other.op}"
            self._add(call.name, other.name, 1.0 if call.op == other.op else 0.9,
                      f"same module path {key[0] or '(root)'}; {same}")

    def _pair_masks(self, a: list[Call], b: list[Call]) -> None:
        """Calls left over that make no float value (a causal mask, token ids) have no
        fingerprint to anchor on: the bench's only call of one op and shape pairs with the
        NPU's first (a codebase that builds its mask in every layer against one that builds
        it once), so that a mask built wrong is compared where it is made."""
        def groups(calls: list[Call], free: Callable[[Call], bool]) -> dict[str, list[Call]]:
            out: dict[str, list[Call]] = {}
            for c in calls:
                outs = c.output_tensors
                if free(c) and outs and leading(c) is None:
                    out.setdefault(f"{api_name(c)}:{sig(outs, squeeze=True)}", []).append(c)
            return out

        theirs = groups(b, lambda c: c.name not in self.used)
        for key, mine in groups(a, lambda c: not self._done(c)).items():
            other = theirs.get(key, [])
            if len(other) == 1:
                self._add(mine[0].name, other[0].name, self.min_confidence,
                          f"the bench's only {api_name(other[0])} of this shape and the NPU's "
                          f"first of {len(mine)}, neither making a float value")

    # ----------------------------------------------------------------- derived pairs

    def _follow_instances(self) -> None:
        """Module backward and parameters_grad nodes follow their module instance's forward."""
        inst: dict[str, tuple[str, str]] = {}
        for name, other in self.result.pairs.items():
            inst.setdefault(name.rsplit(".", 2)[0], (other.rsplit(".", 2)[0], name))
        for c in self.npu.calls:
            if c.kind not in ("module", "params_grad") or self._done(c):
                continue
            base = c.name.rsplit(".", 2)[0]
            if base not in inst:
                continue
            target_base, fwd = inst[base]
            target = target_base + c.name[len(base) :]
            if c.direction == "backward" and not self._backward_comparable(c, fwd):
                continue
            if self.bench.get(target) is not None:
                conf = self.result.confidence[fwd]
                self._add(c.name, target, conf, f"same module instance as {fwd}")

    @cached_property
    def _made_again(self) -> frozenset[str]:
        """NPU forward calls whose value another forward call of the run makes too."""
        makers: dict[tuple[object, ...], list[str]] = {}
        for c in self.npu.calls:
            rec = leading(c) if c.direction == "forward" and not is_identity(c) else None
            fp = fingerprint(rec) if rec is not None else None
            if fp is not None:  # a module's parents output its value too: one instance only
                who = c.kind if c.kind == "api" else c.name.rsplit(".", 1)[0]
                makers.setdefault((who, *fp), []).append(c.name)
        return frozenset(n for names in makers.values() if len(names) > 1 for n in names)

    def _backward_comparable(self, call: Call, fwd: str) -> bool:
        """A backward computes gradients of its forward's inputs: comparable only where the
        forward pair takes inputs of the same layout, and of the same values where their
        outputs agree (x-transformers' Residual(x, residual) against a decoder layer's x;
        g * x against x * g). Else it is left out, saying why."""
        npu_fwd, bench_fwd = self.npu.get(fwd), self.bench.get(self.result.pairs[fwd])
        if npu_fwd is None or bench_fwd is None or self.npu.framework != self.bench.framework:
            return True  # across frameworks the API map says which arguments correspond
        if self.other_code and fwd in self._made_again:
            self.result.inside[call.name] = (
                f"its forward {fwd} computes a value its run computes again elsewhere "
                "(TransformerLens normalises once for each of q, k and v): its gradient is a "
                "part of the bench's, compared where the parts meet")
            return False
        ins_a, ins_b = npu_fwd.input_tensors, bench_fwd.input_tensors
        same = sig(ins_a, squeeze=True) == sig(ins_b, squeeze=True)
        if same and _same_value(npu_fwd, bench_fwd):
            same = all(_same_record(x, y) for x, y in zip(ins_a, ins_b, strict=True))
        if not same:
            self.result.inside[call.name] = (
                f"its forward {fwd} pairs with {bench_fwd.name} by their outputs, but they take "
                "other inputs (in layout or value): their gradients are of other tensors, "
                "compared where the inputs are made")
        return same

    def _follow_forward(self) -> None:
        """``X.n.backward`` pairs with the backward of the bench partner of ``X.n.forward``."""
        for c in _calls(self.npu, "api", "backward"):
            fwd = c.name.removesuffix("backward") + "forward"
            partner = self.result.pairs.get(fwd)
            if partner is None or self._done(c) or fwd in self.result.regions:
                continue  # a region's backward is not the fused call's: other gradients
            target = partner.removesuffix("forward") + "backward"
            theirs = self.bench.get(target)
            if theirs is None or not self._backward_comparable(c, fwd):
                continue
            conf = self.result.confidence[fwd]
            notes = [f"backward of the pair {fwd} -> {partner}"]
            if sig(c.input_tensors, squeeze=True) != sig(theirs.input_tensors, squeeze=True):
                conf *= 0.8
                notes.append("incoming grad shapes differ")
            why = incomparable_backward(self.npu, self.bench, c, theirs, self.amap)
            if why:
                notes.append(f"(outputs not comparable: {why})")
            self._add(c.name, target, conf, " ".join(notes))


_API_COLUMNS = ("out", "out_sq", "inp", "full", "base", "alt0", "alt1", "parent", "name",
                "ident")
_COLUMNS = (*_API_COLUMNS, "cls", "params", "depth", "nums")


def _same_value(a: Call, b: Call) -> bool:
    ra, rb = leading(a), leading(b)
    fa = fingerprint(ra) if ra is not None else None
    fb = fingerprint(rb) if rb is not None else None
    return (fa is not None and fb is not None and ra is not None and rb is not None
            and close(fa, fb, width(ra.dtype, rb.dtype)))


_SWAP_REACH = 3  # calls apart: q and k projections, a gate and an up projection


def _unswap(a: list[Call], b: list[Call], pins: list[tuple[int, int]],
            crossing: list[tuple[int, int]]
            ) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]:
    """Two calls of one kind whose values cross (the NPU's first makes the bench's second
    value and the reverse) are a swap, not a reordering: values alone cannot tell, and the
    order can (q and k weights swapped by a conversion, gate and up). Each pairs with the
    call in its place (both read one value, as q and k projections read x); they bound the
    alignment as the crossing anchors would."""
    swapped: list[tuple[int, int]] = []
    chain = list(pins)
    for ic, jc in crossing:
        for ik, jk in chain:
            if (0 < abs(ic - ik) <= _SWAP_REACH and (ic - ik) * (jc - jk) < 0
                    and len({_kind(a[ic]), _kind(a[ik]), _kind(b[jc]), _kind(b[jk])}) == 1
                    and _inputs_agree(a[ic], a[ik]) and _inputs_agree(b[jc], b[jk])):
                trial = sorted([c for c in chain if c != (ik, jk)] + [(ic, jk), (ik, jc)])
                if all(x[1] < y[1] for x, y in pairwise(trial)):  # an order both keep
                    chain = trial
                    swapped += [(ic, jk), (ik, jc)]
                    break
    left = [c for c in crossing if c[0] not in {i for i, _ in swapped}]
    return chain, left, sorted(swapped)


def _maker(calls: list[Call], run: list[int]) -> int:
    """The run's last call, or the computing call whose value the pass-throughs ending the
    run carry (a MatMul and the Reshape of its result)."""
    last = run[-1]
    for k in reversed(run):
        if not is_identity(calls[k]):
            return k if k == last or _same_value(calls[k], calls[last]) else last
    return last


def _feeding(a: list[Call], rows: range, end: int) -> set[int]:
    """The calls of ``rows`` whose output reaches ``a[end]`` within a few computing calls
    (one run's own tensors: a consumer's input records the producer's output statistics
    exactly). A short stretch that agrees again is another decomposition (normalize against
    pow, mean, add, rsqrt); a long one may hide a small error that rounding swallowed."""
    hops = {fp: 0 for r in a[end].input_tensors if (fp := fingerprint(r)) is not None}
    found: set[int] = set()
    for k in reversed(rows):
        outs = [hops[fp] for r in a[k].output_tensors
                if (fp := fingerprint(r)) is not None and fp in hops]
        if not outs:
            continue
        depth = min(outs) + (0 if is_identity(a[k]) else 1)
        if depth > _DECOMPOSITION_HOPS:
            continue
        found.add(k)
        for r in a[k].input_tensors:
            fp = fingerprint(r)
            if fp is not None and hops.get(fp, depth + 1) > depth:
                hops[fp] = depth
    return found


_DECOMPOSITION_HOPS = 3
_ANCESTOR_HOPS = 64  # module nesting is shallow; construct.json's depth is checked on read


def _kind(call: Call) -> str:
    return api_name(call) if call.kind == "api" else call.op


def _same_op(amap: ApiMap, a: Call, b: Call) -> bool:
    mine, theirs = amap.to_pt(api_name(a)), amap.to_pt(api_name(b))
    return amap.base_op(mine) == amap.base_op(theirs) or theirs in amap.alternatives.get(
        amap.ms_key(api_name(a)), ())


def _inputs_agree(a: Call, b: Call) -> bool:
    """Another op in the same place reads the same value: its first float inputs agree (or
    cannot be told apart: no statistics)."""
    ra = next((r for r in a.input_tensors if r.dtype in FLOAT_EPS), None)
    rb = next((r for r in b.input_tensors if r.dtype in FLOAT_EPS), None)
    return ra is None or rb is None or _same_record(ra, rb)


def _same_record(x: TensorRecord, y: TensorRecord) -> bool:
    """Two records of one value up to the widest rounding (an fp32 record of a bf16 run is
    only as close as bf16), or of values that cannot be told apart (no float statistics):
    what tells another tensor (a residual's two inputs against a layer's one) from noise."""
    fx, fy = fingerprint(x), fingerprint(y)
    return fx is None or fy is None or close(fx, fy, LOOSE_WIDTH)


def _value_words(a: Call, b: Call) -> str:
    ra, rb = leading(a), leading(b)
    if ra is None or rb is None:
        return "outputs"
    return f"{ra.numel} elements, Norm {ra.stats.values()[0]:.6g} vs {rb.stats.values()[0]:.6g}"


def _op_overlap(sa: Seq, sb: Seq) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the calls whose op (exact, base or alternative) occurs on the other side."""
    theirs = np.concatenate([sb.cols["full"], sb.cols["base"]])
    mine = np.concatenate([sa.cols[k] for k in ("full", "base", "alt0", "alt1")])
    keep_a = np.flatnonzero(
        np.isin(sa.cols["full"], theirs)
        | np.isin(sa.cols["base"], theirs)
        | np.isin(sa.cols["alt0"], sb.cols["full"])
        | np.isin(sa.cols["alt1"], sb.cols["full"])
    )
    keep_b = np.flatnonzero(np.isin(sb.cols["full"], mine) | np.isin(sb.cols["base"], mine))
    return keep_a, keep_b


def _substituted(sa: Seq, sb: Seq, i: int, j: int) -> bool:
    """Aligned calls of different ops with the same input and output layouts and the same
    enclosing module (where known)."""
    def same(col: str, unknown_ok: bool = False) -> bool:
        x, y = int(sa.cols[col][i]), int(sb.cols[col][j])
        return unknown_ok if x < 0 or y < 0 else x == y

    return same("out") and same("inp") and same("parent", unknown_ok=True)


def _known(vocab: Vocab, key: str) -> int:
    """A feature id; a record with no tensors (a cell msprobe-MindSpore left empty) is unknown."""
    return vocab(key) if key else -1


def _calls(dump: Dump, kind: str, direction: str) -> list[Call]:
    return [c for c in dump.calls if c.kind == kind and c.direction == direction]
