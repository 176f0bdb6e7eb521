"""msprobe's precheck verdicts next to our standard applied to its numbers, and before vs after.

Our standard on msprobe's numbers (its bench is float64 for float32 outputs and float32 for
float16/bfloat16 ones, never rounded to the output's dtype, so the dtype's own rounding is
in every number):

* cosine more than 0.99 (the DESIGN's precheck criterion), where msprobe computed one;
* mean relative error (over msprobe's "normal" values) up to ``MEAN_REL_ALLOWED[dtype]``:
  float32/float64 the ``dtype`` standard's rtol (2^-14, 2^-40); float16 2^-9, bfloat16 2^-6
  (four units of rounding: the output's own rounding plus the API's internal steps).  A 2e-4
  bias that msprobe passes (max abs error < 0.001) fails here in float32;
* NaN/Inf: a non-finite cosine or max abs error, or a non-zero inf/nan error ratio, fails
  (msprobe only warns); integer/bool outputs: a non-zero binary mismatch rate fails.

Max abs error is not bounded: without the output's magnitude it means nothing (an attention
mask add of -1e9 shows 1.28 at a relative error of 1e-9 in a real float32 run).  The item
fails on the stricter of msprobe and ours; msprobe's ``warning`` alone is no failure (bfloat16
warns on most outputs) unless our standard has no number to settle it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_accuracy.precheck.msprobe_csv import MsprobeRun, OutputRow
from pytest_accuracy.precheck.standards import DEFAULT_MIN_COSINE, DTYPE_RULES

MEAN_REL_ALLOWED = {"float64": DTYPE_RULES["float64"].rtol, "float32": DTYPE_RULES["float32"].rtol,
                    "float16": 2.0**-9, "bfloat16": 2.0**-6}
# msprobe's api_precision_compare floor for a ratio of two errors (minimum_err, per dtype)
GROWTH_FLOOR = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-14,
                "float64": 2.0**-14}
DEFAULT_GROWTH = 2.0
_GROWTH_METRICS = (("mean_rel_err_normal", "mean relative error"),
                   ("max_rel_err_normal", "max relative error"), ("rmse", "RMSE"))
_ORDER = {"error": 3, "warning": 2, "pass": 1, "skip": 0}


@dataclass(frozen=True)
class RowVerdict:
    """One output: msprobe's status, ours (None: nothing to judge) and why."""

    row: OutputRow
    ours: str | None
    problems: tuple[str, ...]

    @property
    def failed(self) -> bool:
        return self.row.status == "error" or self.ours == "fail"


@dataclass(frozen=True)
class CallVerdict:
    """One API call and direction: the item's outcome and its message."""

    api: str
    direction: str
    status: str  # pass | fail | skip
    msprobe: str  # msprobe's verdict: pass | warning | error | skip | none
    ours: str  # pass | fail | n/a
    rows: tuple[RowVerdict, ...]
    lines: tuple[str, ...]  # the failure message (or the skip reason's one line)
    reason: str  # one line for the JSON and the report table


def our_check(row: OutputRow) -> RowVerdict:
    """Our standard on one details row (module docstring)."""
    if row.status == "skip":
        return RowVerdict(row, None, ())
    m, problems = row.metrics, []
    cosine, max_abs = m.get("cosine"), m.get("max_abs_err")
    bad = [f"{label} {value}" for label, value in (("cosine", cosine), ("max abs error", max_abs))
           if value is not None and not math.isfinite(value)]
    if bad:
        problems.append(", ".join(bad) + ": NaN/Inf in the outputs (none allowed)")
    if (m.get("inf_nan_err_ratio") or 0) > 0:
        problems.append(f"inf/nan error ratio {m['inf_nan_err_ratio']:.3g} (up to 0 allowed)")
    if (m.get("binary_mismatch_rate") or 0) > 0:
        problems.append(f"{m['binary_mismatch_rate']:.3%} of integer/bool elements differ "
                        "(up to 0 allowed)")
    if cosine is not None and math.isfinite(cosine) and not cosine > DEFAULT_MIN_COSINE:
        problems.append(f"cosine {cosine:.6f} (more than {DEFAULT_MIN_COSINE} required)")
    mean_rel, allowed = m.get("mean_rel_err_normal"), MEAN_REL_ALLOWED.get(row.device_dtype)
    if mean_rel is not None and allowed is not None and not mean_rel <= allowed:
        problems.append(f"mean relative error {mean_rel:.3g} (up to {allowed:.3g} allowed for "
                        f"{row.device_dtype})")
    judged = any(m.get(k) is not None for k in ("cosine", "max_abs_err", "binary_mismatch_rate",
                                                "inf_nan_err_ratio")) or (
        mean_rel is not None and allowed is not None)
    if not judged and not problems:
        return RowVerdict(row, None, ())
    return RowVerdict(row, "fail" if problems else "pass", tuple(problems))


def growth(after: OutputRow, before: OutputRow, factor: float) -> list[str]:
    """How the output's errors grew from the bench (before) run, past ``factor``."""
    floor = GROWTH_FLOOR.get(after.device_dtype, GROWTH_FLOOR["float32"])
    out = []
    for key, label in _GROWTH_METRICS:
        now, then = after.metrics.get(key), before.metrics.get(key)
        if now is None or then is None or not (math.isfinite(now) and math.isfinite(then)):
            continue
        ratio = now / max(then, floor)
        if ratio > factor:
            out.append(f"{label} grew {ratio:.3g}x: {then:.3g} before, {now:.3g} now "
                       f"(up to {factor:g}x allowed)")
    return out


def msprobe_status(run: MsprobeRun, api: str, direction: str, rows: list[OutputRow]) -> str:
    """The result file's verdict for the call, else the worst of its details rows."""
    result = run.results.get(api)
    status = None
    if result is not None:  # two fields, named here: no attribute looked up by a string
        status = result.forward if direction == "forward" else result.backward
    if status is not None:
        return str(status)
    if not rows:
        return "none"
    return max((r.status for r in rows), key=lambda s: _ORDER[s])


def judge_call(run: MsprobeRun, api: str, direction: str, rows: list[OutputRow],
               before: MsprobeRun | None = None, factor: float = DEFAULT_GROWTH) -> CallVerdict:
    """The item's verdict: msprobe's and ours, the stricter wins; then the bench comparison."""
    verdicts = tuple(our_check(r) for r in rows)
    theirs = msprobe_status(run, api, direction, rows)
    judged = [v.ours for v in verdicts if v.ours is not None]
    ours = "fail" if "fail" in judged else ("pass" if judged else "n/a")
    compared = [v for v in verdicts if v.row.status != "skip"]
    name = f"{api}.{direction}"
    if not compared and theirs != "error":
        return _skipped(run, api, direction, theirs, verdicts)
    lines = [_headline(name, theirs, ours)]
    lines += [_row_line(v) for v in verdicts if v.failed or v.problems]
    failed = theirs == "error" or ours == "fail" or (theirs == "warning" and ours == "n/a")
    if before is not None:
        failed |= _compare_before(run, before, api, direction, rows, factor, failed, lines)
    if failed:
        lines += ["", _HINT]
    reason = lines[0] if failed else _pass_reason(theirs, ours)
    return CallVerdict(api, direction, "fail" if failed else "pass", theirs, ours, verdicts,
                       tuple(lines), reason)


_HINT = ("Re-run msprobe acc_check on this API with -save_error_data to get its tensors, or "
         "replay the dump with --acc-precheck (a float64 reference on this machine).")


def _headline(name: str, theirs: str, ours: str) -> str:
    verdict = {"pass": "pass", "fail": "fail", "n/a": "nothing (no number it reads)"}[ours]
    agree = " (they disagree)" if ours != "n/a" and (theirs == "error") != (ours == "fail") else ""
    return f"{name}: msprobe says {theirs}, our standard says {verdict}{agree}"


def _row_line(v: RowVerdict) -> str:
    r = v.row
    where = f"{r.name.removeprefix(f'{r.api}.{r.direction}.')} {r.device_dtype or '?'} {r.shape}"
    ours = "; ".join(v.problems) if v.problems else "our standard: pass"
    said = r.message.splitlines()[0].strip() if r.message.strip() else ""
    theirs = f"msprobe: {r.status}" + (f" ({said})" if said and r.status != "pass" else "")
    return f"  {where}: {ours}; {theirs}"


def _pass_reason(theirs: str, ours: str) -> str:
    if ours == "n/a":
        return f"msprobe says {theirs}; our standard has no number to read (msprobe's verdict)"
    return f"msprobe says {theirs}, our standard says pass"


def _skipped(run: MsprobeRun, api: str, direction: str, theirs: str,
             verdicts: tuple[RowVerdict, ...]) -> CallVerdict:
    said = next((v.row.message for v in verdicts if v.row.message), "")
    result = run.results.get(api)
    said = said or (result.message if result is not None else "")
    why = "msprobe skipped every output" if verdicts else "the details file has no row for it"
    if theirs in ("pass", "warning"):
        why += f", yet its result says {theirs} (an all-SKIP API counts as pass there)"
    text = f"{api}.{direction}: nothing compared: {why}" + (f": {said}" if said else "")
    return CallVerdict(api, direction, "skip", theirs, "n/a", verdicts, (text,), text)


def _compare_before(run: MsprobeRun, before: MsprobeRun, api: str, direction: str,
                    rows: list[OutputRow], factor: float, failed: bool, lines: list[str]) -> bool:
    """Adds the bench (before) comparison to ``lines``; True when it fails the item."""
    then = before.calls().get((api, direction))
    if then is None:
        lines.append(f"  (not in the bench results {before.details_path.name})")
        return False
    was = judge_call(before, api, direction, then)
    by_name = {r.name: r for r in then}
    grew = [(r, g) for r in rows if r.name in by_name for g in growth(r, by_name[r.name], factor)]
    for row, text in grew:
        lines.append(f"  {row.name.removeprefix(f'{api}.{direction}.')}: {text}")
    if failed and was.status == "pass":
        lines.insert(1, f"Regression: it passed in the bench results ({was.reason}).")
    elif failed and was.status == "fail":
        lines.insert(1, "It failed in the bench results too.")
    if grew and not failed:
        lines[0] = (f"{api}.{direction}: its error grew since the bench results ("
                    f"{lines[0].partition(': ')[2]})")
    return bool(grew)
