"""Scoring and banded Needleman-Wunsch alignment of two call sequences, vectorised per DP row."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# (column, score when equal, score when different); -1 on either side (unknown) scores 0.
Terms = tuple[tuple[str, float, float], ...]
API_TERMS: Terms = (
    ("out", 2.0, -1.0),
    ("out_sq", 0.5, -0.5),  # shapes equal up to size-1 dims ([2,8,1] vs [2,8])
    ("inp", 1.0, -0.5),  # input shapes as a multiset: gather(w, ids) vs embedding(ids, w)
    ("parent", 2.0, -2.0),  # mix: the enclosing modules are paired
    ("name", 1.0, 0.0),  # one framework: the same node name (its counter may have shifted)
    ("ident", 0.0, -10.0),  # a pass-through never pairs with a call that computes
)
MODULE_TERMS: Terms = (
    ("cls", 2.0, 0.0),  # renamed classes (Block vs LLamaDecodeLayer) are common: no penalty
    ("params", 2.0, -2.0),  # direct parameter shapes
    ("out", 2.0, -1.0),
    ("out_sq", 0.5, -0.5),
    ("inp", 1.0, -0.5),
    ("depth", 1.0, -1.0),
    ("nums", 1.0, -1.0),  # layer indices in the path (layers.3 vs blocks.3)
    ("name", 1.0, 0.0),
    ("ident", 0.0, -10.0),
)
_OP_EXACT, _OP_BASE, _OP_ALT, _OP_OTHER = 4.0, 3.5, 2.5, -3.0
# Statistics: +2 when equal, -1 when unrelated; a relative delta of 2 % scores halfway, so bf16
# vs fp32 still counts as close while different tensors of the same shape do not.
_STATS_W, _STATS_OFFSET, _STATS_HALF = 3.0, -1.0, 0.02
_FULL_DP_CELLS = 4_000_000  # beyond this, only a band around the diagonal is computed
_NEG = -1e18
_BLOCK = 128  # DP rows whose scores are computed in one numpy block


class Vocab:
    """Interns feature strings as ints so whole DP rows compare with numpy."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._names: list[str] = []

    def __call__(self, key: str) -> int:
        if key not in self._ids:
            self._ids[key] = len(self._names)
            self._names.append(key)
        return self._ids[key]

    def name(self, ident: int) -> str:
        return self._names[ident] if 0 <= ident < len(self._names) else "?"


@dataclass
class Seq:
    """One side's calls as feature columns (int ids, -1 = unknown) and (Norm, Max, Min, Mean)."""

    names: list[str]
    labels: list[str]  # API name ("MintFunctional.linear") or module class, for evidence
    cols: dict[str, np.ndarray]
    stats: np.ndarray  # (n, 4) float, NaN where not recorded
    vocab: Vocab

    def take(self, idx: np.ndarray) -> Seq:
        """The sub-sequence at positions ``idx`` (in order)."""
        return Seq(
            [self.names[k] for k in idx],
            [self.labels[k] for k in idx],
            {k: v[idx] for k, v in self.cols.items()},
            self.stats[idx],
            self.vocab,
        )


def stats_delta(sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """Largest relative difference between statistics rows ``sa`` (r, 4) and ``sb`` (c, 4).

    Returns (r, c), NaN where nothing is comparable. Norm is relative to the larger norm;
    Max/Min/Mean relative to the tensors' magnitude (Mean alone explodes near zero).
    """
    x, y = np.atleast_2d(sa), np.atleast_2d(sb)
    with np.errstate(divide="ignore", invalid="ignore"):
        mag_x = np.fmax(abs(x[:, 1]), abs(x[:, 2]))[:, None]
        mag = np.fmax(mag_x, np.fmax(abs(y[:, 1]), abs(y[:, 2]))[None, :])
        mag[~(mag > 0)] = 1e-30
        top = np.fmax(x[:, 0][:, None], y[:, 0][None, :])
        top[~(top > 0)] = 1e-30
        out = abs(x[:, 0][:, None] - y[:, 0][None, :]) / top
        for k in (1, 2, 3):
            out = np.fmax(out, abs(x[:, k][:, None] - y[:, k][None, :]) / mag)
    return out


def _stats_scores(delta: np.ndarray) -> np.ndarray:
    close = 1.0 / (1.0 + (delta / _STATS_HALF) ** 2)
    return np.where(np.isnan(delta), 0.0, _STATS_W * close + _STATS_OFFSET)


def _op_scores(a: Seq, b: Seq, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    full, base = b.cols["full"][cols][None, :], b.cols["base"][cols][None, :]
    out = np.full((len(rows), len(cols)), _OP_OTHER)
    for alt in ("alt0", "alt1"):
        mine = a.cols[alt][rows][:, None]
        out = np.where((mine >= 0) & (full == mine), _OP_ALT, out)
    out = np.where(base == a.cols["base"][rows][:, None], _OP_BASE, out)
    return np.where(full == a.cols["full"][rows][:, None], _OP_EXACT, out)


def block_scores(
    a: Seq, b: Seq, rows: np.ndarray, cols: np.ndarray, terms: Terms, *, op: bool
) -> np.ndarray:
    """Similarity (len(rows), len(cols)) of NPU calls ``rows`` with bench calls ``cols``."""
    s = np.zeros((len(rows), len(cols)))
    for name, w_eq, w_ne in terms:
        mine, theirs = a.cols[name][rows][:, None], b.cols[name][cols][None, :]
        known = (mine >= 0) & (theirs >= 0)
        s += np.where(known, np.where(mine == theirs, w_eq, w_ne), 0.0)
    if op:
        s += _op_scores(a, b, rows, cols)
    return s + _stats_scores(stats_delta(a.stats[rows], b.stats[cols]))


def explain(a: Seq, b: Seq, i: int, j: int, terms: Terms, *, op: bool) -> tuple[float, str]:
    """Confidence (score / best score the available evidence allows) and the evidence text."""
    score, best, notes = 0.0, 0.0, []
    if op:
        s = _op_score(a, b, i, j)
        score, best = s, _OP_EXACT
        kind = {_OP_EXACT: "", _OP_BASE: " (same op)", _OP_ALT: " (known alternative)"}
        label = kind.get(s, " (ops differ)")
        mine, theirs = a.labels[i], b.labels[j]
        notes.append(f"op {mine}" if mine == theirs else f"op {mine}->{theirs}{label}")
    for name, w_eq, w_ne in terms:
        ai, bj = int(a.cols[name][i]), int(b.cols[name][j])
        if ai < 0 or bj < 0:
            continue
        best += w_eq
        score += w_eq if ai == bj else w_ne
        notes.append(_term_note(name, a, b, ai, bj))
    delta = stats_gap(a.stats[i].tolist(), b.stats[j].tolist())
    if not math.isnan(delta):
        best += _STATS_W + _STATS_OFFSET
        score += _STATS_W / (1.0 + (delta / _STATS_HALF) ** 2) + _STATS_OFFSET
        notes.append(f"stats delta {delta:.1e}")
    conf = min(max(score / best, 0.0), 1.0) if best > 0 else 0.0
    return conf, "; ".join(n for n in notes if n)


def stats_gap(x: Sequence[float], y: Sequence[float]) -> float:
    """``stats_delta`` for one pair of (Norm, Max, Min, Mean), NaN where not recorded, in
    plain Python (explain runs once per pair; compare asks whether two records differ)."""
    mag = max((abs(v) for v in (x[1], x[2], y[1], y[2]) if not math.isnan(v)), default=0.0)
    top = max((v for v in (x[0], y[0]) if not math.isnan(v)), default=0.0)
    deltas = [abs(x[0] - y[0]) / (top if top > 0 else 1e-30)]
    deltas += [abs(x[k] - y[k]) / (mag if mag > 0 else 1e-30) for k in (1, 2, 3)]
    known = [d for d in deltas if not math.isnan(d)]
    return max(known) if known else math.nan


def _op_score(a: Seq, b: Seq, i: int, j: int) -> float:
    full, mine = int(b.cols["full"][j]), a.cols
    if full == mine["full"][i]:
        return _OP_EXACT
    if b.cols["base"][j] == mine["base"][i]:
        return _OP_BASE
    return _OP_ALT if full in (mine["alt0"][i], mine["alt1"][i]) else _OP_OTHER


def _term_note(name: str, a: Seq, b: Seq, ai: int, bj: int) -> str:
    same = ai == bj
    if name == "cls":
        left, right = a.vocab.name(ai)[4:], b.vocab.name(bj)[4:]
        return f"class {left}" if same else f"class {left}~{right}"
    if name == "out":
        return f"out {a.vocab.name(ai)}" if same else "out shapes differ"
    if name == "out_sq":
        return ""
    if name == "name":
        return "same name" if same else "other name"
    if name == "ident":
        return "" if same else "a pass-through against a call that computes"
    label = {"inp": "in", "params": "params", "depth": "depth", "nums": "layer index"}
    return f"{label.get(name, name)} {'same' if same else 'differ'}"


def needleman_wunsch(
    n: int,
    m: int,
    score: Callable[[np.ndarray, np.ndarray], np.ndarray],
    gap_a: np.ndarray,
    gap_b: np.ndarray,
) -> list[tuple[int, int]]:
    """Global alignment maximising total score; returns the aligned (i, j) index pairs.

    ``score(rows, cols)`` gives a block of the similarity matrix; it is asked for blocks of
    rows so numpy, not Python, does the work. Each DP row is vectorised too: the left-move
    recurrence ``H[j] = max(D[j], H[j-1] - gap_b[j-1])`` is a running maximum of ``D + C``
    shifted back by the cumulative gap cost ``C``. Big inputs fill only a band around the
    diagonal wide enough for the length difference.
    """
    cum_b = np.concatenate([[0.0], np.cumsum(gap_b)])
    prev = -cum_b.copy()  # row 0: every bench call left out
    half = m if n * m <= _FULL_DP_CELLS else abs(n - m) + max(64, (n + m) // 20)
    bounds = [_band(i, n, m, half) for i in range(1, n + 1)]
    ptrs: list[tuple[int, np.ndarray]] = []
    for start in range(0, n, _BLOCK):
        rows = np.arange(start, min(n, start + _BLOCK))
        c_lo, c_hi = bounds[rows[0]][0], bounds[rows[-1]][1]
        block = score(rows, np.arange(c_lo - 1, c_hi))
        for r, i in enumerate(rows + 1):
            lo, hi = bounds[i - 1]
            s = block[r, lo - c_lo : hi - c_lo + 1]
            prev = _dp_row(prev, s, lo, hi, float(gap_a[i - 1]), cum_b, ptrs)
    return _traceback(n, m, ptrs)


def _band(i: int, n: int, m: int, half: float) -> tuple[int, int]:
    centre = i * m / n
    return max(1, int(centre - half)), min(m, int(np.ceil(centre + half)))


def _dp_row(
    prev: np.ndarray,
    s: np.ndarray,
    lo: int,
    hi: int,
    gap: float,
    cum_b: np.ndarray,
    ptrs: list[tuple[int, np.ndarray]],
) -> np.ndarray:
    cur = np.full(len(prev), _NEG)
    cur[0] = prev[0] - gap
    diag = prev[lo - 1 : hi] + s
    up = prev[lo : hi + 1] - gap
    best = np.maximum(diag, up)
    shifted = np.concatenate([[cur[lo - 1] + cum_b[lo - 1]], best + cum_b[lo : hi + 1]])
    run = np.maximum.accumulate(shifted)[1:]
    cur[lo : hi + 1] = run - cum_b[lo : hi + 1]
    left = run > shifted[1:]
    ptrs.append((lo, np.where(left, 2, np.where(up > diag, 1, 0)).astype(np.int8)))
    return cur


def _traceback(n: int, m: int, ptrs: list[tuple[int, np.ndarray]]) -> list[tuple[int, int]]:
    pairs = []
    i, j = n, m
    while i > 0 and j > 0:
        lo, ptr = ptrs[i - 1]
        k = j - lo
        move = int(ptr[k]) if 0 <= k < len(ptr) else 1
        if move == 0:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif move == 1:
            i -= 1
        else:
            j -= 1
    pairs.reverse()
    return pairs
