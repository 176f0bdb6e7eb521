"""Value anchors: calls of two runs whose outputs hold the same values, found through an index.

Where two runs agree, a tensor of one has a counterpart of equal value in the other, whatever
the code that made it: the strongest evidence that two calls correspond. A fingerprint that
survives reshape, transpose and a row permutation (element count, Norm, Max, Min) is looked up
in an index of the other run's outputs (element count, then a window of sorted norms), never
all-pairs. Calls that only pass a value through (a reshape, a view, a cast to the same dtype)
are not producers: they anchor nothing and pair with nothing that computes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_accuracy.dumps.model import FLOAT_EPS, Call, TensorRecord

# Relative width of "the same value" per dtype: rounding differences of two codebases (other
# summation orders, other kernels) compound over a model; a few hundred ulps of the least
# precise dtype, capped so that unrelated tensors of one size rarely meet.
_ULPS = 128.0
_MAX_WIDTH = 0.03
LOOSE_WIDTH = _MAX_WIDTH
_IDENTITY_WIDTH = 1e-6
_CAST_ULPS = 4.0  # a pass-through changes no value at all (up to a same-dtype copy)

Print = tuple[int, float, float, float, float]  # numel, Norm, Max, Min, Mean


def fingerprint(record: TensorRecord) -> Print | None:
    """A float tensor's layout-free fingerprint; None where statistics are missing or not
    finite (nothing to anchor on)."""
    if record.dtype not in FLOAT_EPS:
        return None
    numel = record.numel
    norm, high, low, mean = record.stats.values()
    norm = abs(norm)  # msprobe records a one-element tensor's Norm as its signed value
    if numel <= 0 or not all(math.isfinite(v) for v in (norm, high, low, mean)):
        return None
    return numel, norm, high, low, mean


def width(dtype_a: str, dtype_b: str) -> float:
    """How far two fingerprints may be apart and still be one value: the rounding of the
    more precise of the two runs. A run that went through fp16 where the other stayed in
    fp32 does not make the same value by fp16's measure (an fp16 softmax is a finding, not
    an anchor); two runs both in bf16 do, by bf16's."""
    eps = min(FLOAT_EPS.get(dtype_a, 2.0**-7), FLOAT_EPS.get(dtype_b, 2.0**-7))
    return min(_ULPS * eps, _MAX_WIDTH)


def close(a: Print, b: Print, rel: float) -> bool:
    """One value: Norm within ``rel`` of the larger norm; Max and Min each within ``rel`` of
    their own size (a mask's -1e9 must not hide the scores' Max), with a floor of ``rel`` of
    the smaller extreme for a value near zero; Mean within ``rel`` of the root mean square."""
    if a[0] != b[0] or abs(a[1] - b[1]) > rel * max(a[1], b[1]):
        return False
    floor = rel * 1e-2 * min(abs(a[2]), abs(a[3]), abs(b[2]), abs(b[3]))
    for k in (2, 3):
        if abs(a[k] - b[k]) > rel * max(abs(a[k]), abs(b[k])) + floor:
            return False
    return abs(a[4] - b[4]) <= rel * max(a[1], b[1]) / math.sqrt(a[0])


def leading(call: Call) -> TensorRecord | None:
    """The output a call is known by: its first floating output."""
    return next((r for r in call.output_tensors if r.dtype in FLOAT_EPS), None)


def is_identity(call: Call) -> bool:
    """A call whose leading output is one of its inputs' values unchanged, or only cast: a
    pass-through."""
    out = leading(call)
    mine = fingerprint(out) if out is not None else None
    if out is None or mine is None:
        return False
    for rec in call.input_tensors:
        theirs = fingerprint(rec)
        if theirs is None:
            continue
        # a cast rounds to the narrower dtype (and msprobe sums each side's statistics in
        # its own dtype): the same value within that dtype's rounding
        rel = _IDENTITY_WIDTH if rec.dtype == out.dtype else _CAST_ULPS * max(
            FLOAT_EPS.get(rec.dtype, 0.0), FLOAT_EPS.get(out.dtype, 0.0))
        if close(mine, theirs, rel):
            return True
    return False


@dataclass(frozen=True)
class Producer:
    """A call that makes a new value: its position in its sequence and that value."""

    position: int
    print: Print
    dtype: str  # the least precise dtype its run went through up to it: how close is "same"
    own_dtype: str  # its record's: how close another op's value must be
    op: str


def producers(calls: Sequence[Call]) -> list[Producer]:
    """The calls that make a value not seen before on their side, in order. Pass-throughs,
    calls repeating a value they read and calls making it again from the same inputs (one
    norm applied to x for q, k and v) are left out; a value made again from other inputs (a
    near-uniform softmax in every layer of a young model) is no evidence of place: none of
    its makers is a producer."""
    out: list[Producer] = []
    seen: dict[int, list[tuple[Print, Call]]] = {}
    again: list[Print] = []
    lowest = "float64"  # the least precise dtype the run went through so far: its rounding
    for k, call in enumerate(calls):
        for r in call.output_tensors:
            if r.dtype in FLOAT_EPS and FLOAT_EPS[r.dtype] > FLOAT_EPS[lowest]:
                lowest = r.dtype
        rec = leading(call)
        fp = fingerprint(rec) if rec is not None else None
        if fp is None or rec is None or is_identity(call):
            continue
        first = next(((old, maker) for old, maker in seen.get(fp[0], ())
                      if close(fp, old, _IDENTITY_WIDTH)), None)
        if first is not None:
            if not (_reads(call, first[0]) or _same_inputs(call, first[1])):
                again.append(first[0])
            continue
        seen.setdefault(fp[0], []).append((fp, call))
        out.append(Producer(k, fp, lowest, rec.dtype, call.op))
    return [p for p in out if p.print not in again] if again else out


def _reads(call: Call, value: Print) -> bool:
    """Whether one of the call's inputs holds ``value`` (up to a cast's rounding)."""
    for rec in call.input_tensors:
        fp = fingerprint(rec)
        rel = _CAST_ULPS * FLOAT_EPS.get(rec.dtype, 0.0) + _IDENTITY_WIDTH
        if fp is not None and close(fp, value, rel):
            return True
    return False


def _same_inputs(call: Call, other: Call) -> bool:
    """Whether two calls read the same float values (one computation done twice)."""
    mine = [fingerprint(r) for r in call.input_tensors if r.dtype in FLOAT_EPS]
    theirs = [fingerprint(r) for r in other.input_tensors if r.dtype in FLOAT_EPS]
    return len(mine) == len(theirs) and all(
        x is not None and y is not None and close(x, y, _IDENTITY_WIDTH)
        for x, y in zip(mine, theirs, strict=True))


class ValueIndex:
    """One run's producers by element count, sorted by norm: a window lookup per query."""

    def __init__(self, made: list[Producer]) -> None:
        groups: dict[int, list[Producer]] = {}
        for p in made:
            groups.setdefault(p.print[0], []).append(p)
        self._groups = {n: sorted(g, key=lambda p: p.print[1]) for n, g in groups.items()}
        self._norms = {n: [p.print[1] for p in g] for n, g in self._groups.items()}

    def matches(self, query: Producer) -> list[Producer]:
        """Every producer of the same value (within the two dtypes' width), in order."""
        group = self._groups.get(query.print[0])
        if not group:
            return []
        norms = self._norms[query.print[0]]
        rel = width(query.dtype, query.dtype)  # the widest any pair with it gets
        lo = bisect.bisect_left(norms, query.print[1] * (1 - rel) - 1e-300)
        hi = bisect.bisect_right(norms, query.print[1] * (1 + rel) + 1e-300)
        found = [p for p in group[lo:hi]
                 if close(query.print, p.print, width(query.dtype, p.dtype))]
        return sorted(found, key=lambda p: p.position)


def anchor(a: Sequence[Call], b: Sequence[Call]) -> tuple[list[tuple[int, int]],
                                                         list[tuple[int, int]]]:
    """Positions (i in ``a``, j in ``b``) whose calls make the same value, unique on both
    sides: those in an order both runs keep (the longest increasing chain: the bounds the
    rest is aligned between), and those made in another order (pairs all the same)."""
    mine, theirs = producers(a), producers(b)
    index, back = ValueIndex(theirs), ValueIndex(mine)
    found: list[tuple[int, int]] = []
    for p in mine:
        hits = index.matches(p)
        if len(hits) == 1 and len(back.matches(hits[0])) == 1:
            found.append((p.position, hits[0].position))
    chain = increasing_chain(found)
    for _ in range(_REFINE_ROUNDS):
        more = _within_gaps(mine, chain, index, back)
        if not more:
            break
        chain = increasing_chain(sorted(set(chain) | set(more)))
    kept = set(chain)
    return chain, [f for f in found if f not in kept]


_REFINE_ROUNDS = 4
_IN_ORDER_MAX = 4  # makers of one value in a gap, paired in order


def _within_gaps(mine: list[Producer], chain: list[tuple[int, int]], index: ValueIndex,
                 back: ValueIndex) -> list[tuple[int, int]]:
    """Matches unique within the gap between two anchors, though not in the whole run (the
    residual stream of a bf16 run changes less per layer than bf16 rounding)."""
    bounds = [(-1, -1), *chain, (1 << 62, 1 << 62)]
    taken = {i for i, _ in chain}
    out = []
    gap = 0
    for p in mine:
        if p.position in taken:
            continue
        while bounds[gap + 1][0] < p.position:
            gap += 1
        (i0, j0), (i1, j1) = bounds[gap], bounds[gap + 1]
        # another op whose value is near by the run's rounding is no evidence inside a gap
        # (sqrt and rsqrt of a value near 1 in a bf16 run): by its own dtype's only
        hits = [q for q in index.matches(p) if j0 < q.position < j1
                and (q.op == p.op or close(p.print, q.print, width(p.own_dtype, q.own_dtype)))]
        if not hits or len(hits) > _IN_ORDER_MAX:
            continue
        rivals = [r for r in back.matches(hits[0]) if i0 < r.position < i1]
        # as many makers of one value on each side of the gap: paired in order (x * rsqrt
        # and its product with a norm weight near one, in a bf16 run)
        if len(rivals) == len(hits) and p in rivals and all(
                [r.position for r in back.matches(h) if i0 < r.position < i1]
                == [r.position for r in rivals] for h in hits[1:]):
            out.append((p.position, hits[rivals.index(p)].position))
    return out


def increasing_chain(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest chain of pairs increasing in both positions (pairs come sorted by i)."""
    tails: list[int] = []  # smallest j ending a chain of each length
    ends: list[int] = []  # index into pairs of that chain's end
    before = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        pos = bisect.bisect_left(tails, j)
        if pos == len(tails):
            tails.append(j)
            ends.append(k)
        else:
            tails[pos], ends[pos] = j, k
        before[k] = ends[pos - 1] if pos else -1
    chain, k = [], ends[-1] if ends else -1
    while k >= 0:
        chain.append(pairs[k])
        k = before[k]
    return chain[::-1]


def _param_prints(calls: Sequence[Call]) -> list[tuple[Print, ...] | None]:
    """Each module call's parameters with those of the module calls inside it, once per
    module path: what it computes with, wherever the codebase keeps it (transformers'
    attention holds none of its own, its q/k/v/o projections do; another codebase's holds
    them all). All-zero tensors (biases one side leaves out) add nothing."""
    where = {c.name: k for k, c in enumerate(calls)}
    held: list[dict[str, Print | None]] = [{} for _ in calls]
    for k, c in enumerate(calls):
        own = {f"{c.scope}.{p.path}": fingerprint(p) for p in c.parameters}
        up: int | None = k
        while up is not None:
            held[up].update(own)
            parent = calls[up].parent
            up = where.get(parent) if parent else None
    out: list[tuple[Print, ...] | None] = []
    for prints in held:
        kept = [p for p in prints.values() if p is None or p[1] != 0.0]
        out.append(None if not kept or any(p is None for p in kept)
                   else tuple(sorted(p for p in kept if p is not None)))
    return out


def by_parameters(a: Sequence[Call], b: Sequence[Call]) -> list[tuple[int, int]]:
    """Module calls computing with the same parameter values (a weight converted from the
    other codebase's, permuted or transposed: its statistics stay), unique on both sides:
    a module is its weights, whatever its path or its output after a bug upstream."""
    def index(calls: Sequence[Call]) -> dict[tuple[int, ...], list[tuple[int, tuple[Print, ...]]]]:
        out: dict[tuple[int, ...], list[tuple[int, tuple[Print, ...]]]] = {}
        for k, key in enumerate(_param_prints(calls)):
            if key is not None:
                out.setdefault(tuple(p[0] for p in key), []).append((k, key))
        return out

    def same(x: tuple[Print, ...], y: tuple[Print, ...]) -> bool:
        return all(close(p, q, _MAX_WIDTH) for p, q in zip(x, y, strict=True))

    mine, theirs = index(a), index(b)
    found = []
    for sizes, group in mine.items():
        for i, key in group:
            hits = [j for j, other in theirs.get(sizes, ()) if same(key, other)]
            back = [k for k, other in group if same(other, key)]
            if len(hits) == 1 and back == [i]:
                found.append((i, hits[0]))
    return sorted(found)
