"""Pass/fail criteria for dump compare: dtype-aware tolerances, waivers, judgements.

A tensor pair passes when

* ``rel_l2_err = ||npu - bench|| / ||bench|| <= rel_err`` and
* ``cosine >= min_cosine``

with both thresholds taken from the *effective dtype*: the least precise floating
dtype the data has flowed through so far in execution order (either run).  An fp32
tensor computed from bf16 matmul outputs carries bf16-sized error, so it is judged as
bf16.  Cosine alone is not enough: a pure scale error (the fixture's eps bug) keeps
cosine at 0.99997 while the relative L2 error is 1.8 %.  Integer and bool tensors
must be equal.  Statistics dumps judge the recorded Norm (relative) and Max/Min/Mean
(relative to the tensor's magnitude) with the same ``rel_err``; md5 dumps need equal
checksums.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_accuracy.compare.metrics import StatsMetrics, TensorMetrics
from pytest_accuracy.dumps.model import FLOAT_EPS
from pytest_accuracy.errors import AccuracyInputError


@dataclass(frozen=True)
class Tolerance:
    """Thresholds for one dtype."""

    rel_err: float
    min_cosine: float
    # learned from two bench runs (compare/bench_noise.py): what they differ by at the node
    spread: float | None = None
    inherited: bool = False  # the spread at the inputs: the noise run fused this call away


# Chosen from measurements (README, "Criteria"): bf16 autocast vs fp32 reaches rel_l2_err
# 0.8 % on the 2-layer fixture model and 2.1 % (backward, cosine 0.9998) on the 8-layer
# benchmark model, so bf16 gets ~5 eps; the eps bug gives 1.2-1.8 % in fp32.
DEFAULT_TOLERANCES: Mapping[str, Tolerance] = {
    "float64": Tolerance(rel_err=1e-9, min_cosine=0.9999999),
    "float32": Tolerance(rel_err=1e-4, min_cosine=0.99999),
    "float16": Tolerance(rel_err=5e-3, min_cosine=0.9999),
    "bfloat16": Tolerance(rel_err=4e-2, min_cosine=0.999),
    "float8_e4m3fn": Tolerance(rel_err=0.25, min_cosine=0.99),
    "float8_e5m2": Tolerance(rel_err=0.5, min_cosine=0.98),
}


# Twins are held to ROUNDING_EPS units of the dtype's epsilon in relative L2 error.
ROUNDING_EPS = 2.0


@dataclass(frozen=True)
class Waiver:
    """A node-name or API pattern with a relaxed tolerance or a known divergence."""

    pattern: str
    reason: str
    known_divergence: bool = False
    rel_err: float | None = None
    min_cosine: float | None = None

    def matches(self, node_name: str, op: str) -> bool:
        return fnmatch.fnmatchcase(node_name, self.pattern) or fnmatch.fnmatchcase(op, self.pattern)


@dataclass(frozen=True)
class CompareCriteria:
    """Everything that decides pass/fail of compare items (see module docstring)."""

    tolerances: Mapping[str, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    rel_err: float | None = None  # overrides every dtype when set
    min_cosine: float | None = None
    dtype_aware: bool = True  # False: judge every float tensor as float32
    min_matched: float = 0.5  # share of NPU nodes that must find a bench counterpart
    waivers: tuple[Waiver, ...] = ()
    # (npu dtype, bench dtype) pairs the user declared intended, e.g. bf16 vs an fp32 golden
    allowed_precisions: frozenset[tuple[str, str]] = frozenset()
    rounding: bool = False  # twins: held to rounding level (see held_to_rounding)
    # one node's tolerance learned from the bench runs' spread (Comparison.criteria_at)
    learned: Tolerance | None = None

    def tolerance(self, dtype: str) -> Tolerance:
        # asked for every tensor pair compared (millions in a big dump): made once per dtype;
        # kept outside the fields, so that equality, repr and replace() do not see it
        try:  # known: one lookup each, no call (a try costs nothing where nothing is raised)
            return self.__dict__["_tolerance_memo"][dtype]
        except KeyError:
            memo: dict[str, Tolerance] = self.__dict__.setdefault("_tolerance_memo", {})
            known = memo[dtype] = self._tolerance(dtype)
            return known

    def _tolerance(self, dtype: str) -> Tolerance:
        if self.rounding and self.rel_err is None and self.min_cosine is None:
            eps = FLOAT_EPS.get(dtype, FLOAT_EPS["float32"])
            return Tolerance(rel_err=ROUNDING_EPS * eps, min_cosine=1.0 - 2 * ROUNDING_EPS * eps)
        if self.learned is not None and self.rel_err is None and self.min_cosine is None:
            return self.learned  # a waiver's or the user's explicit numbers win
        base = self.tolerances.get(dtype if self.dtype_aware else "float32")
        base = base or self.tolerances["float32"]
        return Tolerance(
            rel_err=self.rel_err if self.rel_err is not None else base.rel_err,
            min_cosine=self.min_cosine if self.min_cosine is not None else base.min_cosine,
        )

    def held_to_rounding(self) -> CompareCriteria:
        """After a step identical between the runs: about one unit in the last place."""
        return replace(self, rounding=True)

    def waiver_for(self, node_name: str, op: str) -> Waiver | None:
        if not self.waivers:  # asked for every node: most runs waive nothing
            return None
        return next((w for w in self.waivers if w.matches(node_name, op)), None)

    def with_waiver(self, waiver: Waiver | None) -> CompareCriteria:
        if waiver is None or waiver.known_divergence:
            return self
        return replace(
            self,
            rel_err=waiver.rel_err if waiver.rel_err is not None else self.rel_err,
            min_cosine=waiver.min_cosine if waiver.min_cosine is not None else self.min_cosine,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "tolerances": {k: {"rel_err": v.rel_err, "min_cosine": v.min_cosine}
                           for k, v in self.tolerances.items()},
            "rel_err_override": self.rel_err,
            "min_cosine_override": self.min_cosine,
            "dtype_aware": self.dtype_aware,
            "min_matched": self.min_matched,
            "waivers": [vars(w) for w in self.waivers],
            "allowed_precisions": [f"{a}:{b}" for a, b in sorted(self.allowed_precisions)],
        }


def less_precise(a: str, b: str) -> str:
    """The less precise of two dtypes (non-float dtypes never lower precision)."""
    ea, eb = FLOAT_EPS.get(a, 0.0), FLOAT_EPS.get(b, 0.0)
    return a if ea >= eb else b


@dataclass(frozen=True)
class Judgement:
    ok: bool
    detail: str  # why it failed, in assert_close style; empty when ok
    # False when nothing was compared (no statistics, no finite value): never evidence of a
    # pass; ``detail`` then says why
    checked: bool = True


def unchecked(why: str) -> Judgement:
    return Judgement(True, why, checked=False)


def judge_tensor(m: TensorMetrics, dtype: str, tol: Tolerance) -> Judgement:
    """Apply the tolerance to one tensor pair's metrics."""
    if m.status == "empty":
        return Judgement(True, "")
    if m.status == "shape_mismatch":
        return Judgement(False, "shapes differ")
    if m.status == "nonfinite_mismatch":
        return Judgement(
            False,
            f"NaN/Inf at different positions (NPU {m.nonfinite_npu}, "
            f"bench {m.nonfinite_bench} non-finite elements)",
        )
    if m.status == "no_finite":
        return unchecked(f"no finite value to compare: all {m.nonfinite_npu} elements are "
                         "NaN/Inf on both sides, at the same positions")
    if dtype not in FLOAT_EPS:
        ok = m.max_abs_err == 0
        return Judgement(ok, "" if ok else f"{dtype} values differ (max abs err {m.max_abs_err:g})")
    problems = []
    if m.rel_l2_err is not None and not m.rel_l2_err <= tol.rel_err:
        problems.append(f"relative error {m.rel_l2_err:.3g}{against_spread(m.rel_l2_err, tol)} "
                        f"(up to {tol.rel_err:g} allowed)")
    if m.cosine is not None and not m.cosine >= tol.min_cosine:
        problems.append(f"cosine {m.cosine:.6f} (at least {tol.min_cosine:g} required)")
    return Judgement(not problems, "; ".join(problems))


def judge_stats(m: StatsMetrics, dtype: str, tol: Tolerance) -> Judgement:
    """Apply the tolerance to one tensor pair's recorded statistics."""
    if m.nonfinite_npu != m.nonfinite_bench:
        if m.masked_otherwise:
            return unchecked("a mask of -inf on one side against a large negative number on "
                             "the other: statistics cannot compare the rest (dump tensors)")
        return Judgement(False, "NaN/Inf in the statistics of one side only")
    if m.status != "ok":
        return unchecked("no statistic recorded on both sides (Max, Min, Mean, Norm)")
    if m.finite_pairs == 0:
        return unchecked("no finite statistic on both sides: every recorded value is NaN/Inf")
    if dtype not in FLOAT_EPS:
        ok = (m.max_diff or 0) == 0 and (m.min_diff or 0) == 0
        return Judgement(ok, "" if ok else f"{dtype} max/min differ")
    # Norm, then Max/Min/Mean (the range), each within its allowed error or not recorded
    allowed = tol.rel_err
    norm, ranged = m.norm_relative_err, m.range_rel_err
    norm_off = norm is not None and not math.isnan(norm) and not norm <= allowed
    if tol.spread is not None:
        # msprobe records a 16-bit tensor's Max, Min and Mean in its own dtype: two runs
        # a step apart by rounding alone differ by up to two of its epsilons there, which
        # the two bench runs' spread (often exactly 0) cannot show
        ranged_allowed = max(allowed, STAT_STEPS * FLOAT_EPS.get(dtype, 0.0))
    else:
        ranged_allowed = allowed
    ranged_off = (ranged is not None and not math.isnan(ranged)
                  and not ranged <= ranged_allowed)
    if not norm_off and not ranged_off:
        return AGREE
    learned = tol.spread is not None  # else against_spread says nothing: not asked
    problems = []
    if norm_off:
        assert norm is not None
        problems.append(f"Norm relative error {norm:.3g}"
                        f"{against_spread(norm, tol) if learned else ''} "
                        f"(up to {allowed:g} allowed)")
    if ranged_off:
        assert ranged is not None
        problems.append(f"Max/Min/Mean relative error {ranged:.3g}"
                        f"{against_spread(ranged, tol) if learned else ''}"
                        f" (up to {ranged_allowed:g} allowed)")
    return Judgement(False, "; ".join(problems))


STAT_STEPS = 2.0


def against_spread(error: float, tol: Tolerance) -> str:
    """How an error stands against the bench runs' own spread, where the tolerance is learned."""
    if tol.spread is None:
        return ""
    if tol.spread == 0:
        return ", where the two bench runs agree exactly"
    where = "at its inputs" if tol.inherited else "here"
    return f", {error / tol.spread:.1f}x the bench runs' own spread ({tol.spread:.3g}) {where}"


# The judgement of every agreeing pair (immutable, so shared: a big dump has ~200k).
AGREE = Judgement(True, "")


def judge_md5(npu_md5: str | None, bench_md5: str | None) -> Judgement:
    if npu_md5 == bench_md5:
        return Judgement(True, "")
    return Judgement(
        False,
        f"checksum {npu_md5} differs from bench {bench_md5} (md5 dumps require bit-identical data)",
    )


def load_waivers(path: str | Path) -> tuple[Waiver, ...]:
    """Read a waivers yaml: a list of {pattern, reason, known_divergence?, rel_err?, ...}."""
    import yaml

    from pytest_accuracy.safe_io import read_input_text
    from pytest_accuracy.safe_yaml import safe_load

    file = Path(path)
    try:
        doc = safe_load(read_input_text(file), file)  # a FIFO is refused, not waited on
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise AccuracyInputError(file, f"cannot read waivers: {exc}") from exc
    entries = doc.get("waivers", doc) if isinstance(doc, dict) else doc
    if not isinstance(entries, list):
        raise AccuracyInputError(file, "waivers must be a list of {pattern, reason, ...} entries")
    waivers = []
    allowed = {"pattern", "reason", "known_divergence", "rel_err", "min_cosine"}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry.get("pattern") or not entry.get("reason"):
            raise AccuracyInputError(file, f"waiver #{i + 1} needs a 'pattern' and a 'reason'")
        unknown = set(entry) - allowed
        if unknown:
            raise AccuracyInputError(
                file, f"waiver #{i + 1}: unknown keys {sorted(unknown)} (valid: {sorted(allowed)})"
            )
        waivers.append(
            Waiver(
                pattern=str(entry["pattern"]),
                reason=str(entry["reason"]),
                known_divergence=bool(entry.get("known_divergence", False)),
                rel_err=_opt_float(entry.get("rel_err")),
                min_cosine=_opt_float(entry.get("min_cosine")),
            )
        )
    return tuple(waivers)


def _opt_float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
