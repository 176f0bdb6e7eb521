"""Node tolerances from the bench's own noise: the spread between two bench runs at each node.

Given a second run of the bench (the same training under another kernel, seed or device:
``--acc-bench-noise``), each NPU node is held to what the two bench runs themselves differ by
at its bench counterpart, times ``NOISE_FACTOR``, never below the dtype's floor: a node whose
error is far outside the bench's own spread fails even inside the fixed per-dtype tolerance,
and one inside it passes even beyond it (Adam's step on gradients that are pure rounding
noise moves weights by about ``lr * sign(g)`` in every run alike).

The spread is measured as the NPU is judged: relative L2 error where both bench runs dumped
the tensors, else the worst of the Norm and Max/Min/Mean relative errors of the statistics;
md5 dumps tell equal from different only, so an md5 node keeps the fixed tolerance. A node
the noise run does not hold, or holds with other shapes, keeps the fixed tolerance too.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pytest_accuracy.compare.criteria import Tolerance
from pytest_accuracy.compare.fold import as_float64
from pytest_accuracy.compare.integrity import loaded
from pytest_accuracy.compare.metrics import MASK_VALUE, stats_metrics, tensor_metrics
from pytest_accuracy.dumps.model import FLOAT_EPS, Call, DumpSet, TensorRecord, is_float_dtype
from pytest_accuracy.pairing.anchors import Print, fingerprint, leading

# How far past the bench runs' own spread the NPU may be. Measured on tests/data/real/
# bench_noise (three bf16 GEMM kernels): a benign NPU's error is 1.15x the bench runs' spread
# at a node (median; 1.8x at most) with tensors; a bug 3x inside the fixed bf16 tolerance is
# made where the spread is 0 and fails on the floor.
NOISE_FACTOR = 4.0

# Where the two bench runs compute a node alike (a kernel only one of them changes sits
# later), the NPU's own kernels still round otherwise: one epsilon of a 16- or 8-bit dtype
# (an output rounded once more), and for float32 about 80 epsilons (a reduction summed in
# another order).
_FLOORS = {"float64": 1e-12, "float32": 1e-5}

# Past this the two bench runs do not agree at all at the node: it is judged as the bench
# allows, but no tolerance wider than "anything of the bench's size" is learned.
MAX_LEARNED = 1.0


def noise_floor(dtype: str) -> float:
    """The least tolerance learned for a node of effective dtype ``dtype``."""
    return _FLOORS.get(dtype, FLOAT_EPS.get(dtype, FLOAT_EPS["float32"]))


def learned_tolerance(spread: float, dtype: str, inherited: bool = False) -> Tolerance:
    """``NOISE_FACTOR`` times the spread, the dtype's floor under it. The cosine bound is
    the one the relative error already implies (|e| <= r|b| keeps cos >= sqrt(1 - r^2)): it
    only catches what the relative error reports too."""
    rel = min(MAX_LEARNED, max(noise_floor(dtype), NOISE_FACTOR * spread))
    return Tolerance(rel_err=rel, min_cosine=1.0 - 2.0 * rel * rel, spread=spread,
                     inherited=inherited)


@dataclass(frozen=True, slots=True)
class NodeNoise:
    """What the two bench runs differ by at one node, and the tolerance that sets."""

    spread: float
    noise_name: str  # the node's counterpart in the noise run, or where its spread came from
    tolerance: Tolerance
    inherited: bool = False  # the noise run does not make this call: its inputs' spread


# How many calls back a spread is looked for through calls the noise run does not make.
_INHERIT_DEPTH = 4
# Where a call's inputs were not recorded being made, how many values made before it set its
# spread: attention's q, k and v with their rotary steps are within 12 (tests/data/real/mf).
_NEARBY = 12


class BenchNoise:
    """The second bench run, paired with the first per (step, rank) the way two runs of one
    codebase pair (``pair_runs``: names where they hold, values where a kernel changed the
    calls), and each node's spread measured on demand (thread-safe: compare workers ask).

    A bench call the noise run does not make (eager attention's matmuls and softmax against
    one fused ``scaled_dot_product_attention``) takes the largest spread of the calls that
    made its inputs: the noise enters it through them, and its own kernel adds rounding that
    the floor covers."""

    def __init__(self, bench: DumpSet, noise: DumpSet) -> None:
        self.bench, self.noise = bench, noise
        self._pairs: dict[tuple[int, int], Mapping[str, str]] = {}
        self._makers: dict[tuple[int, int], dict[Print, list[Call]]] = {}
        self._spreads: dict[tuple[int, int, str], tuple[float, str, bool] | None] = {}
        self._owns: dict[tuple[int, int, str], tuple[float, str] | None] = {}
        self._lock = threading.Lock()

    def at(self, step: int, rank: int, bench_call: Call, dtype: str) -> NodeNoise | None:
        """The spread at ``bench_call`` (of the bench's dump at step, rank) and the tolerance
        for effective dtype ``dtype``; None where the noise run cannot say."""
        found = self._spread((step, rank), bench_call, 0)
        if found is None:
            return None
        spread, where, inherited = found
        return NodeNoise(spread, where, learned_tolerance(spread, dtype, inherited), inherited)

    def _spread(self, key: tuple[int, int], call: Call, depth: int
                ) -> tuple[float, str, bool] | None:
        memo = (key[0], key[1], call.name)
        if memo in self._spreads:
            return self._spreads[memo]
        other = self._counterpart(key, call)
        own = self._own(key, call)
        found = ((own[0], own[1], False) if own is not None
                 else self._from_inputs(key, call, depth) if other is None else None)
        self._spreads[memo] = found  # the same value from any thread
        return found

    def _from_inputs(self, key: tuple[int, int], call: Call, depth: int
                     ) -> tuple[float, str, bool] | None:
        """The largest spread among the calls that made ``call``'s float inputs; where the
        dump did not record them (a view msprobe does not hook), among the calls just
        before it that both runs make."""
        if depth >= _INHERIT_DEPTH:
            return None
        makers = self._makers_of(key)
        found: tuple[float, str, bool] | None = None
        traced = False
        for record in call.input_tensors:
            print_ = fingerprint(record)
            maker = next((c for c in reversed(makers.get(print_) or ()) if c.order < call.order),
                         None) if print_ is not None else None
            if maker is None:
                continue
            traced = True
            spread = self._spread(key, maker, depth + 1)
            if spread is not None and (found is None or spread[0] > found[0]):
                found = (spread[0], spread[1], True)
        return found if traced else self._nearby(key, call)

    def _nearby(self, key: tuple[int, int], call: Call) -> tuple[float, str, bool] | None:
        """The largest own spread among the last ``_NEARBY`` values made before ``call`` by
        calls the noise run makes too: the noise of the values around it (a module's output
        is its last call's value again: counted once, so that L1 and mix look as far)."""
        calls = self.bench.dumps[key].calls
        found: tuple[float, str, bool] | None = None
        values: set[Print] = set()
        for earlier in reversed(calls[: max(0, min(call.order, len(calls)))]):
            own = self._own(key, earlier)
            spread = own[0] if own is not None else None
            made = leading(earlier)
            print_ = fingerprint(made) if made is not None else None
            if spread is None or print_ is None or print_ in values:
                continue
            values.add(print_)
            if found is None or spread > found[0]:
                found = (spread, earlier.name, True)
            if len(values) == _NEARBY:
                break
        return found

    def _own(self, key: tuple[int, int], call: Call) -> tuple[float, str] | None:
        """The spread at ``call``'s own counterpart in the noise run (measured once: the
        nearby values of many calls share it)."""
        memo = (key[0], key[1], call.name)
        if memo not in self._owns:
            other = self._counterpart(key, call)
            spread = output_spread(call, other) if other is not None else None
            self._owns[memo] = (spread, other.name) if spread is not None and other else None
        return self._owns[memo]

    def _makers_of(self, key: tuple[int, int]) -> dict[Print, list[Call]]:
        """The bench's calls by the fingerprint of each float output they make, in order."""
        with self._lock:
            known = self._makers.get(key)
            if known is None:
                known = self._makers[key] = {}
                for call in self.bench.dumps[key].calls:
                    for record in call.output_tensors:
                        print_ = fingerprint(record)
                        if print_ is not None:
                            known.setdefault(print_, []).append(call)
        return known

    def _counterpart(self, key: tuple[int, int], bench_call: Call) -> Call | None:
        bench, noise = self.bench.dumps.get(key), self.noise.dumps.get(key)
        if bench is None or noise is None:
            return None
        with self._lock:
            pairs = self._pairs.get(key)
            if pairs is None:
                from pytest_accuracy.pairing.runs import pair_runs

                pairs = self._pairs[key] = pair_runs(bench, noise).pairs
        name = pairs.get(bench_call.name)
        return noise.get(name) if name else None


def output_spread(bench: Call, noise: Call) -> float | None:
    """The largest relative difference between the two bench runs' float outputs (None: no
    output both hold alike, or only checksums to compare)."""
    theirs = {r.path: r for r in noise.output_tensors}
    worst: float | None = None
    for record in bench.output_tensors:
        other = theirs.get(record.path)
        if (other is None or not is_float_dtype(record.dtype) or other.dtype != record.dtype
                or record.shape != other.shape):
            continue
        value = _difference(record, other)
        if value is None:
            continue
        worst = value if worst is None else max(worst, value)
    return worst


def _difference(a: TensorRecord, b: TensorRecord) -> float | None:
    if a.has_data and b.has_data:
        metrics = tensor_metrics(*_unmasked(loaded(a), loaded(b)))
        if metrics.status != "ok":  # empty, or NaN/Inf apart: no size to learn
            return None
        value = metrics.rel_l2_err
    elif a.md5 is not None and b.md5 is not None:
        return None  # equal or not: no size
    else:
        stats = stats_metrics(a.stats, b.stats)
        if stats.status != "ok" or stats.nonfinite_npu != stats.nonfinite_bench:
            return None
        found = [v for v in (stats.norm_relative_err, stats.range_rel_err)
                 if v is not None and not math.isnan(v)]
        if not found:
            return None
        value = max(found)
    return value if value is not None and math.isfinite(value) else MAX_LEARNED


def identical_runs(bench: DumpSet, noise: DumpSet) -> str | None:
    """Why the noise run shows no noise (every output both runs record under one name holds
    the same checksum and statistics), else None: held to a spread of zero, every node would
    be judged against the dtype's floor alone."""
    compared = 0
    for key in sorted(set(bench.dumps) & set(noise.dumps)):
        theirs = noise.dumps[key]
        for call in bench.dumps[key].calls:
            other = theirs.get(call.name)
            if other is None:
                continue
            for a, b in zip(call.output_tensors, other.output_tensors, strict=False):
                if (a.md5, a.stats) != (b.md5, b.stats):
                    return None
                compared += 1
    if not compared:
        return None
    return (f"--acc-bench-noise {noise.root}: all {compared} outputs it shares with the bench "
            f"dump {bench.root} are recorded equal: a rerun that computed the same bits shows "
            "no noise. Make the second bench run under another kernel, seed or device (e.g. "
            "another attention implementation, or the GPU's non-deterministic algorithms on).")


def _unmasked(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two runs' tensors without the positions either masks (fills of -1e4 and below): a
    mask's size would hide the scores' noise, and the NPU's masked scores are compared
    without them too (judge's mask written otherwise)."""
    x, y = as_float64(a.reshape(-1)), as_float64(b.reshape(-1))
    if x.shape != y.shape:
        return a, b
    masked = (x <= MASK_VALUE) | (y <= MASK_VALUE)
    if not masked.any() or masked.all():
        return a, b
    return x[~masked], y[~masked]
