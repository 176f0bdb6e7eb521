"""Loss and grad-norm curve checks of the migration standard: first, mean, band, drift.

Steps are paired by step number over the steps both runs logged; steps either
run skipped (overflow / NaN / skipped iteration) are excluded and counted, and
``d_t = npu_t - bench_t`` with ``bench = benches[0]`` (see DESIGN.md).

Statistics chosen here for what the standard leaves open (all need only the
logs; ``k >= 2`` bench runs are repeated runs of the benchmark):

* **band** (needs k >= 2): per step the bench band is ``[min_t, max_t]`` of the
  bench runs, widened on both sides by ``band_factor * s_t`` where ``s_t`` is
  the bench spread ``max_t - min_t`` averaged over ``band_window`` neighbouring
  steps (one step's spread is too noisy).  The NPU passes if at most
  ``band_outside`` of the compared steps lie outside the band.  With the
  defaults (2.0, 10 %) an NPU that behaves like one more bench run lies outside
  on about 3 % of steps (Gaussian noise), while a curve that sits off for a
  tenth of the run fails.  The report also gives ``ratio``: mean |d| over the
  mean |bench_j - bench_0|, 1.0 for an NPU as close as the bench runs are.
* **zero-centred**: the mean of ``d`` over the whole window, its first half and
  its late half must each be within ``max(offset, offset_sigmas * SE, bench
  offset)``: ``SE`` is the standard error of the mean with the effective sample
  size ``n (1 - r) / (1 + r)`` for lag-1 autocorrelation ``r`` (curves are
  smooth, so steps are not independent), and the bench offset is the largest
  ``|mean(bench_j - bench_0)|`` over the same steps.  Symmetric noise passes; a
  curve "stable 0.1 higher late in training" fails on the late half.
* **divergence step**: a step *exceeds* when ``|d_t|`` is above both
  ``mean_abs`` and ``mean_rel * |bench_t|`` and, with k >= 2, the NPU is also
  outside the widened band.  The divergence step is the first exceeding step
  from which at least ``divergence_frac`` of all remaining steps (and at least
  ``divergence_min_steps`` of them) exceed: the curves part for good; isolated
  spikes that come back do not count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.table import LogTable

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class LossCriteria:
    """Thresholds of the migration standard plus the knobs of the band/offset/divergence tests."""

    first_loss_abs: float = 0.005
    first_loss_rel: float = 0.005
    mean_abs: float = 0.01
    mean_rel: float = 0.01
    gnorm_rel: float = 0.10
    steps: tuple[int, int] | None = None  # inclusive window of steps compared
    band_factor: float = 2.0  # band widening, in units of the local bench spread
    band_outside: float = 0.10  # fraction of steps allowed outside the band
    band_window: int = 21  # steps averaged for the local bench spread
    offset: float = 0.005  # systematic offset always tolerated (loss units)
    offset_sigmas: float = 3.0
    divergence_frac: float = 0.9
    divergence_min_steps: int = 5
    relax_to_bench_noise: bool = False  # threshold = max(threshold, bench-vs-bench value)
    loss_column: str = "loss"


DEFAULT = LossCriteria()


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict, what was measured, what was allowed, and a message for people."""

    name: str
    status: Status
    measured: Mapping[str, float | int | None] = field(default_factory=dict)
    allowed: Mapping[str, float] = field(default_factory=dict)
    worst_steps: tuple[int, ...] = ()
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass(frozen=True)
class Paired:
    """Values of two runs on the steps both logged and neither skipped."""

    steps: np.ndarray
    npu: np.ndarray
    bench: np.ndarray
    skipped: int

    @property
    def d(self) -> np.ndarray:
        return self.npu - self.bench


def pair(
    npu: LogTable, bench: LogTable, column: str = "loss", criteria: LossCriteria = DEFAULT
) -> Paired:
    """Pair ``column`` by step; raises AccuracyInputError naming both files without common steps."""
    common = npu.frame.index.intersection(bench.frame.index)
    if criteria.steps is not None:
        lo, hi = criteria.steps
        common = common[(common >= lo) & (common <= hi)]
    if not len(common):
        window = f" in steps {criteria.steps[0]}..{criteria.steps[1]}" if criteria.steps else ""
        raise AccuracyInputError(
            npu.path,
            f"no steps in common with {bench.path}{window} "
            f"(NPU logged {_span(npu)}, bench logged {_span(bench)})",
        )
    a, b = npu.frame.loc[common], bench.frame.loc[common]
    x, y = _col(a, column), _col(b, column)
    bad = (
        a["skipped"].to_numpy(bool)
        | b["skipped"].to_numpy(bool)
        | ~np.isfinite(x)
        | ~np.isfinite(y)
    )
    keep = ~bad
    return Paired(common.to_numpy(np.int64)[keep], x[keep], y[keep], int(bad.sum()))


def _col(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame:
        return np.full(len(frame), np.nan)
    return frame[column].to_numpy(dtype=np.float64)


def _span(table: LogTable) -> str:
    steps = table.steps
    return f"steps {steps[0]}..{steps[-1]}" if len(steps) else "no steps"


def _skip(name: str, why: str) -> CheckResult:
    return CheckResult(name, "skip", message=why)


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def check_first_loss(
    npu: LogTable, bench: LogTable, criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """First compared step passes if ``|d| < first_loss_abs`` or ``|d|/|b| < first_loss_rel``."""
    p = pair(npu, bench, criteria.loss_column, criteria)
    if not len(p.steps):
        return _skip("first_loss", f"all {p.skipped} common steps are skipped in one run")
    step, a, b = int(p.steps[0]), float(p.npu[0]), float(p.bench[0])
    d_abs = abs(a - b)
    d_rel = d_abs / abs(b) if b else math.inf
    ok = d_abs < criteria.first_loss_abs or d_rel < criteria.first_loss_rel
    head = "First loss matches" if ok else "First loss mismatch"
    message = (
        f"{head} at step {step}: npu {_fmt(a)}, bench {_fmt(b)}.\n"
        f"Absolute difference: {_fmt(d_abs)} (up to {criteria.first_loss_abs:g} allowed)\n"
        f"Relative difference: {d_rel:.4%} (up to {criteria.first_loss_rel:.2%} allowed)\n"
        "Either limit passing is enough."
    )
    return CheckResult(
        "first_loss",
        "pass" if ok else "fail",
        {"first_loss_abs": d_abs, "first_loss_rel": d_rel, "step": step},
        {"first_loss_abs": criteria.first_loss_abs, "first_loss_rel": criteria.first_loss_rel},
        (step,),
        message,
    )


def check_mean_loss(
    npu: LogTable, bench: LogTable, criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """Passes if ``mean|d| < mean_abs`` or ``mean(|d|/|bench|) < mean_rel``."""
    p = pair(npu, bench, criteria.loss_column, criteria)
    if not len(p.steps):
        return _skip("mean_loss", f"all {p.skipped} common steps are skipped in one run")
    ad = np.abs(p.d)
    m_abs = float(ad.mean())
    m_rel = float(np.mean(ad / np.abs(p.bench)))
    ok = m_abs < criteria.mean_abs or m_rel < criteria.mean_rel
    worst = np.argsort(-ad, kind="stable")[:5]
    w = int(worst[0])
    message = (
        f"Mean loss {'matches' if ok else 'mismatch'} over {len(p.steps)} paired steps "
        f"({p.skipped} skipped).\n"
        f"Mean absolute difference: {_fmt(m_abs)} (up to {criteria.mean_abs:g} allowed)\n"
        f"Mean relative difference: {m_rel:.4%} (up to {criteria.mean_rel:.2%} allowed)\n"
        f"Greatest difference: {_fmt(float(ad[w]))} at step {int(p.steps[w])} "
        f"(npu {_fmt(float(p.npu[w]))}, bench {_fmt(float(p.bench[w]))})"
    )
    return CheckResult(
        "mean_loss",
        "pass" if ok else "fail",
        {"mean_abs": m_abs, "mean_rel": m_rel, "steps": len(p.steps), "skipped": p.skipped},
        {"mean_abs": criteria.mean_abs, "mean_rel": criteria.mean_rel},
        tuple(int(p.steps[i]) for i in worst),
        message,
    )


def check_grad_norm(
    npu: LogTable, bench: LogTable, criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """Passes if ``mean(|g_npu - g_bench| / |g_bench|) <= gnorm_rel``."""
    for t in (npu, bench):
        if not np.isfinite(t.frame["grad_norm"].to_numpy(np.float64)).any():
            return _skip("grad_norm", f"no grad norm in {t.path}")
    p = pair(npu, bench, "grad_norm", criteria)
    nz = p.bench != 0
    if not nz.any():
        return _skip("grad_norm", "no step with a finite, non-zero bench grad norm")
    rel = np.abs(p.d[nz]) / np.abs(p.bench[nz])
    steps = p.steps[nz]
    value = float(rel.mean())
    ok = value <= criteria.gnorm_rel
    worst = np.argsort(-rel, kind="stable")[:5]
    w = int(worst[0])
    message = (
        f"Grad norm {'matches' if ok else 'mismatch'} over {len(steps)} paired steps "
        f"({p.skipped + int((~nz).sum())} skipped).\n"
        f"Mean relative difference: {value:.4%} (up to {criteria.gnorm_rel:.2%} allowed)\n"
        f"Greatest relative difference: {rel[w]:.4%} at step {int(steps[w])} "
        f"(npu {_fmt(float(p.npu[nz][w]))}, bench {_fmt(float(p.bench[nz][w]))})"
    )
    return CheckResult(
        "grad_norm",
        "pass" if ok else "fail",
        {"gnorm_mean_rel": value, "steps": len(steps)},
        {"gnorm_rel": criteria.gnorm_rel},
        tuple(int(steps[i]) for i in worst),
        message,
    )


@dataclass(frozen=True)
class Band:
    """NPU and bench runs on the steps all of them logged and none skipped."""

    steps: np.ndarray
    npu: np.ndarray
    runs: np.ndarray  # shape (k, T); runs[0] is the reference bench
    lower: np.ndarray
    upper: np.ndarray


def bench_band(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> Band:
    """The widened bench band (see the module docstring) on the steps every run has."""
    pairs = [pair(npu, b, criteria.loss_column, criteria) for b in benches]
    steps = pairs[0].steps
    for p in pairs[1:]:
        steps = np.intersect1d(steps, p.steps)
    runs = np.stack([p.bench[np.isin(p.steps, steps)] for p in pairs])
    values = pairs[0].npu[np.isin(pairs[0].steps, steps)]
    lo, hi = runs.min(axis=0), runs.max(axis=0)
    spread = pd.Series(hi - lo).rolling(criteria.band_window, center=True, min_periods=1).mean()
    s = spread.to_numpy() * criteria.band_factor
    return Band(steps, values, runs, lo - s, hi + s)


def check_band(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """At most ``band_outside`` of the steps may lie outside the widened bench band."""
    if len(benches) < 2:
        return _skip("band", "needs two or more bench runs (repeated, non-deterministic)")
    band = bench_band(npu, benches, criteria)
    if not len(band.steps):
        return _skip("band", "no step that every run logged and none skipped")
    if np.all(band.upper == band.lower):
        return _skip("band", "the bench runs are identical: no spread to compare with")
    outside = (band.npu < band.lower) | (band.npu > band.upper)
    frac = float(outside.mean())
    bench_gap = float(np.mean(np.abs(band.runs[1:] - band.runs[0])))
    ratio = float(np.mean(np.abs(band.npu - band.runs[0]))) / bench_gap if bench_gap else math.inf
    excess = np.maximum(band.lower - band.npu, band.npu - band.upper)
    worst = [int(i) for i in np.argsort(-excess, kind="stable")[:5] if outside[i]]
    ok = frac <= criteria.band_outside
    where = f"; furthest out at step {int(band.steps[worst[0]])}" if worst else ""
    message = (
        f"NPU loss {'within' if ok else 'outside'} the band of {len(benches)} bench runs: "
        f"{int(outside.sum())} of {len(band.steps)} steps outside ({frac:.1%}, up to "
        f"{criteria.band_outside:.0%} allowed){where}.\n"
        f"Mean |npu - bench| is {ratio:.2f} x the bench runs' own mean difference."
    )
    return CheckResult(
        "band",
        "pass" if ok else "fail",
        {"outside_frac": frac, "ratio": ratio, "steps": len(band.steps)},
        {"outside_frac": criteria.band_outside, "band_factor": criteria.band_factor},
        tuple(int(band.steps[i]) for i in worst),
        message,
    )


def _mean_se(d: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error with an AR(1) effective sample size."""
    n = len(d)
    if n < 3:
        return float(d.mean()), math.inf
    c = d - d.mean()
    denom = float(np.dot(c, c))
    r = float(np.dot(c[:-1], c[1:]) / denom) if denom else 0.0
    r = min(max(r, 0.0), 0.95)
    n_eff = max(n * (1 - r) / (1 + r), 2.0)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(n_eff))


def check_zero_centred(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """No systematic offset of ``d`` over the window, its first half or its late half."""
    p = pair(npu, benches[0], criteria.loss_column, criteria)
    if len(p.steps) < 4:
        return _skip("zero_centred", f"only {len(p.steps)} paired steps")
    half = len(p.steps) // 2
    worst: tuple[float, str, float, float, slice] | None = None
    for label, part in (
        ("whole run", slice(None)),
        ("first half", slice(0, half)),
        ("late half", slice(half, None)),
    ):
        mean, se = _mean_se(p.d[part])
        allowed = max(
            criteria.offset,
            criteria.offset_sigmas * se,
            _bench_offset(p.steps[part], benches, criteria),
        )
        score = abs(mean) / allowed
        if worst is None or score > worst[0]:
            worst = (score, label, mean, allowed, part)
    assert worst is not None
    score, label, mean, allowed, part = worst
    ok = score <= 1.0
    steps = p.steps[part]
    sign = "higher" if mean > 0 else "lower"
    message = (
        f"Loss difference {'is' if ok else 'is not'} centred on zero: over the {label} "
        f"(steps {int(steps[0])}..{int(steps[-1])}) the NPU is on average {_fmt(abs(mean))} {sign} "
        f"than the bench (up to {_fmt(allowed)} allowed: max of offset {criteria.offset:g}, "
        f"{criteria.offset_sigmas:g} standard errors, bench-vs-bench offset)."
    )
    return CheckResult(
        "zero_centred",
        "pass" if ok else "fail",
        {"offset": mean, "segment_start": int(steps[0]), "segment_end": int(steps[-1])},
        {"offset": allowed},
        (int(steps[0]), int(steps[-1])),
        message,
    )


def _bench_offset(steps: np.ndarray, benches: Sequence[LogTable], criteria: LossCriteria) -> float:
    """Largest ``|mean(bench_j - bench_0)|`` over ``steps``: how far apart bench runs sit."""
    out = 0.0
    window = replace(criteria, steps=(int(steps[0]), int(steps[-1])))
    for other in benches[1:]:
        try:
            q = pair(other, benches[0], criteria.loss_column, window)
        except AccuracyInputError:
            continue
        d = q.d[np.isin(q.steps, steps)]
        if len(d):
            out = max(out, abs(float(d.mean())))
    return out


def _exceeding(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria
) -> tuple[np.ndarray, np.ndarray]:
    """Steps and a flag per step: beyond the per-step tolerance (and the band, with k >= 2)."""
    if len(benches) >= 2:
        band = bench_band(npu, benches, criteria)
        steps, a, b = band.steps, band.npu, band.runs[0]
        outside = (a < band.lower) | (a > band.upper)
    else:
        p = pair(npu, benches[0], criteria.loss_column, criteria)
        steps, a, b = p.steps, p.npu, p.bench
        outside = np.ones(len(steps), dtype=bool)
    tol = np.maximum(criteria.mean_abs, criteria.mean_rel * np.abs(b))
    return steps, (np.abs(a - b) > tol) & outside


def find_divergence_step(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> int | None:
    """The step from which the curves part for good (module docstring), or None."""
    steps, exceed = _exceeding(npu, benches, criteria)
    if not exceed.any():
        return None
    remaining = np.arange(len(exceed), 0, -1)
    frac = np.cumsum(exceed[::-1])[::-1] / remaining
    ok = exceed & (frac >= criteria.divergence_frac) & (remaining >= criteria.divergence_min_steps)
    hits = np.flatnonzero(ok)
    return int(steps[hits[0]]) if len(hits) else None


def check_divergence(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> CheckResult:
    """Fails when ``find_divergence_step`` finds a step where the curves part for good."""
    if not len(pair(npu, benches[0], criteria.loss_column, criteria).steps):
        return _skip("divergence", "no paired step that neither run skipped")
    step = find_divergence_step(npu, benches, criteria)
    measured: dict[str, float | int | None] = {"divergence_step": step}
    if step is None:
        return CheckResult(
            "divergence", "pass", measured, message="The curves never part for good."
        )
    p = pair(npu, benches[0], criteria.loss_column, criteria)
    i = int(np.searchsorted(p.steps, step))
    after = np.abs(p.d[i:])
    measured["mean_abs_after"] = float(after.mean())
    message = (
        f"Loss curves diverge from step {step}: npu {_fmt(float(p.npu[i]))}, bench "
        f"{_fmt(float(p.bench[i]))}; from there on mean |d| is {_fmt(float(after.mean()))} "
        f"over {len(after)} steps, at least {criteria.divergence_frac:.0%} of them beyond "
        f"max({criteria.mean_abs:g}, {criteria.mean_rel:.0%} of the bench loss)"
        + (" and outside the bench band." if len(benches) >= 2 else ".")
    )
    return CheckResult("divergence", "fail", measured, {}, (step,), message)


def effective_criteria(
    benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> LossCriteria:
    """With ``relax_to_bench_noise`` and k >= 2: each threshold = max(it, bench-vs-bench value)."""
    if not criteria.relax_to_bench_noise or len(benches) < 2:
        return criteria
    relaxed = criteria
    for other in benches[1:]:
        checks = [
            f(other, benches[0], criteria)
            for f in (check_first_loss, check_mean_loss, check_grad_norm)
        ]
        m = {k: v for c in checks if c.status != "skip" for k, v in c.measured.items()}
        relaxed = replace(
            relaxed,
            first_loss_abs=max(relaxed.first_loss_abs, float(m.get("first_loss_abs") or 0)),
            first_loss_rel=max(relaxed.first_loss_rel, float(m.get("first_loss_rel") or 0)),
            mean_abs=max(relaxed.mean_abs, float(m.get("mean_abs") or 0)),
            mean_rel=max(relaxed.mean_rel, float(m.get("mean_rel") or 0)),
            gnorm_rel=max(relaxed.gnorm_rel, float(m.get("gnorm_mean_rel") or 0)),
        )
    return relaxed


@dataclass(frozen=True)
class LossReport:
    """Every applicable curve check and the JSON-able headline numbers."""

    checks: tuple[CheckResult, ...]
    criteria: LossCriteria
    first_loss_abs: float | None
    first_loss_rel: float | None
    mean_abs: float | None
    mean_rel: float | None
    gnorm_mean_rel: float | None
    steps_compared: int
    steps_skipped: int
    divergence_step: int | None
    offset: float | None
    status: Status

    def check(self, name: str) -> CheckResult:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON types only (NaN/inf become None)."""
        out = {k: _json(v) for k, v in asdict(self).items() if k not in ("checks", "criteria")}
        out["criteria"] = asdict(self.criteria)
        out["checks"] = [
            {**asdict(c), "measured": {k: _json(v) for k, v in c.measured.items()}}
            for c in self.checks
        ]
        return out


def _json(v: object) -> object:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def evaluate(
    npu: LogTable, benches: Sequence[LogTable], criteria: LossCriteria = DEFAULT
) -> LossReport:
    """Run every applicable check of NPU vs ``benches[0]`` (band and offsets use all benches)."""
    if not benches:
        raise ValueError("evaluate needs at least one bench run")
    crit = effective_criteria(benches, criteria)
    bench = benches[0]
    checks = (
        check_first_loss(npu, bench, crit),
        check_mean_loss(npu, bench, crit),
        check_grad_norm(npu, bench, crit),
        check_band(npu, benches, crit),
        check_zero_centred(npu, benches, crit),
        check_divergence(npu, benches, crit),
    )
    p = pair(npu, bench, crit.loss_column, crit)
    m = {k: v for c in checks for k, v in c.measured.items()}
    ran = [c.status for c in checks if c.status != "skip"]
    status: Status = "fail" if "fail" in ran else "pass" if ran else "skip"

    def num(key: str) -> float | None:
        v = m.get(key)
        return None if v is None else float(v)

    div = m.get("divergence_step")
    return LossReport(
        checks,
        crit,
        num("first_loss_abs"),
        num("first_loss_rel"),
        num("mean_abs"),
        num("mean_rel"),
        num("gnorm_mean_rel"),
        len(p.steps),
        p.skipped,
        None if div is None else int(div),
        num("offset"),
        status,
    )


def compare_local_norms(
    npu: pd.DataFrame | LogTable,
    bench: pd.DataFrame | LogTable,
    step: int,
    name_map: Mapping[str, str] | Callable[[str], str] | None = None,
    top: int = 10,
) -> pd.DataFrame:
    """Per-parameter local norms at ``step``, worst relative difference first.

    ``npu``/``bench`` are long frames (``step``, ``param``, ``norm``) or tables
    with ``local_norm``.  ``name_map`` maps NPU parameter names to bench names
    (dict or callable; unmapped names are kept).  Columns: ``param``,
    ``bench_param``, ``npu``, ``bench``, ``abs_diff``, ``rel_diff``; parameters
    found on one side only are listed in ``attrs["npu_only"]`` / ``attrs["bench_only"]``.
    """
    a, b = (_local_at(x, step) for x in (npu, bench))
    if isinstance(name_map, Mapping):
        mapping = dict(name_map)
        rename: Callable[[str], str] = lambda name: mapping.get(name, name)  # noqa: E731
    else:
        rename = name_map or (lambda name: name)
    a = a.assign(bench_param=[rename(str(n)) for n in a["param"]])
    merged = a.merge(b, left_on="bench_param", right_on="param", suffixes=("", "_b"))
    out = pd.DataFrame(
        {
            "param": merged["param"],
            "bench_param": merged["bench_param"],
            "npu": merged["norm"],
            "bench": merged["norm_b"],
        }
    )
    out["abs_diff"] = (out["npu"] - out["bench"]).abs()
    out["rel_diff"] = out["abs_diff"] / out["bench"].abs().replace(0.0, np.nan)
    out = out.sort_values("rel_diff", ascending=False, na_position="first", kind="stable")
    out = out.head(top).reset_index(drop=True)
    out.attrs["npu_only"] = sorted(set(a["param"]) - set(merged["param"]))
    out.attrs["bench_only"] = sorted(set(b["param"]) - set(merged["bench_param"]))
    return out


def _local_at(source: pd.DataFrame | LogTable, step: int) -> pd.DataFrame:
    if isinstance(source, LogTable):
        if source.local_norm is None:
            raise AccuracyInputError(source.path, "no per-parameter local norm lines in this log")
        frame = source.local_norm
    else:
        frame = source
    rows = frame[frame["step"] == step]
    # A parameter logged twice at one step (re-run) keeps its last value.
    return rows.drop_duplicates("param", keep="last")[["param", "norm"]]
