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
_ULPS = 1024.0
_MAX_WIDTH = 0.03
LOOSE_WIDTH = _MAX_WIDTH
_IDENTITY_WIDTH = 1e-6  # a pass-through changes no value at all (up to a same-dtype copy)

Print = tuple[int, float, float, float, float]  # numel, Norm, Max, Min, Mean


def fingerprint(record: TensorRecord) -> Print | None:
    """A float tensor's layout-free fingerprint; None where statistics are missing or not
    finite (nothing to anchor on)."""
    if record.dtype not in FLOAT_EPS:
        return None
    numel = record.numel
    norm, high, low, mean = record.stats.values()
    if numel <= 0 or not all(math.isfinite(v) for v in (norm, high, low, mean)):
        return None
    return numel, norm, high, low, mean


def width(dtype_a: str, dtype_b: str) -> float:
    """How far two fingerprints of these dtypes may be apart and still be one value."""
    eps = max(FLOAT_EPS.get(dtype_a, 2.0**-7), FLOAT_EPS.get(dtype_b, 2.0**-7))
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
    """A call whose leading output is one of its inputs' values unchanged: a pass-through."""
    out = leading(call)
    mine = fingerprint(out) if out is not None else None
    if out is None or mine is None:
        return False
    for rec in call.input_tensors:
        theirs = fingerprint(rec)
        if theirs is not None and rec.dtype == out.dtype and close(mine, theirs, _IDENTITY_WIDTH):
            return True
    return False


@dataclass(frozen=True)
class Producer:
    """A call that makes a new value: its position in its sequence and that value."""

    position: int
    print: Print
    dtype: str


def producers(calls: Sequence[Call]) -> list[Producer]:
    """The calls that make a value not seen before on their side (pass-throughs and repeats
    of an earlier value left out), in order."""
    out: list[Producer] = []
    seen: dict[int, list[Print]] = {}
    for k, call in enumerate(calls):
        rec = leading(call)
        fp = fingerprint(rec) if rec is not None else None
        if fp is None or rec is None or is_identity(call):
            continue
        if any(close(fp, old, _IDENTITY_WIDTH) for old in seen.get(fp[0], ())):
            continue
        seen.setdefault(fp[0], []).append(fp)
        out.append(Producer(k, fp, rec.dtype))
    return out


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
        rel = width(query.dtype, "float32") if query.dtype == "float32" else _MAX_WIDTH
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
    chain = _increasing(found)
    kept = set(chain)
    return chain, [f for f in found if f not in kept]


def _increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
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
