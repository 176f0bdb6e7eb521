"""The one table every log reader produces, and the helpers the readers share."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.speedups import scanner

#: Columns every ``LogTable.frame`` has, in this order, before any extra loss columns.
STANDARD_COLUMNS = ("loss", "grad_norm", "lr", "loss_scale", "skipped")

_MISSING = {b"", b"none", b"n/a", b"na", b"null", b"unavailable", b"-"}


@dataclass(frozen=True)
class LogTable:
    """One training run's per-step metrics, whatever log format they came from.

    ``frame`` is indexed by the integer ``step`` (sorted, unique) and has the
    columns of ``STANDARD_COLUMNS`` plus extra columns named as the log names
    them (``lm loss``, ``mtp_1 loss``, ``load_balancing_loss``...).
    ``skipped`` is True for overflow / NaN / skipped iterations; a NaN or
    missing loss always counts as skipped.  ``local_norm`` is a long frame
    (``step``, ``param``, ``norm``) when the log has per-parameter norm lines.
    ``notes`` say what the reader had to assume or ignore.
    """

    path: Path
    format: str
    frame: pd.DataFrame
    local_norm: pd.DataFrame | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: ``{"loss"|"grad_norm": {step: value}}``: NaN/Inf values on steps the trainer did not
    #: mark skipped.  The loss column holds NaN there (a dropped row); the curve checks fail
    #: on these unless the bench is non-finite or skipped on the same step.
    nonfinite: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    #: Validation / eval records (torchtitan ``validate step:``, Megatron ``validation loss at
    #: iteration``), indexed by ``step`` with a ``loss`` column: kept apart, never steps.
    validation: pd.DataFrame | None = None

    @property
    def steps(self) -> np.ndarray:
        """The logged step numbers (int64, sorted)."""
        return self.frame.index.to_numpy(dtype=np.int64)

    def __len__(self) -> int:
        return len(self.frame)


def to_float(values: Sequence[bytes | str | float | None]) -> tuple[np.ndarray, int]:
    """Convert raw field texts to float64; returns the array and the count of unparseable ones.

    The fast path is one C-level ``float`` per value; only a column with a
    bracketed numpy repr, ``None`` or junk takes the per-value slow path.
    """
    try:
        return np.fromiter(map(float, values), np.float64, count=len(values)), 0  # type: ignore[arg-type]
    except (ValueError, TypeError):
        pass
    # Absent optional fields are empty groups: cheaper to patch than to go slow.
    try:
        patched = [v if v else b"nan" for v in values]
        return np.fromiter(map(float, patched), np.float64, count=len(values)), 0
    except (ValueError, TypeError):
        pass
    out = np.empty(len(values), dtype=np.float64)
    bad = 0
    for i, raw in enumerate(values):
        out[i], ok = read_value(raw)
        bad += not ok
    return out, bad


def read_value(raw: bytes | str | float | None) -> tuple[float, bool]:
    """Parse one value; missing markers give (nan, True), junk gives (nan, False)."""
    if raw is None:
        return np.nan, True
    if isinstance(raw, float | int):
        return float(raw), True
    text = raw.encode() if isinstance(raw, str) else raw
    text = text.strip().strip(b"[]()").strip()
    if text.lower() in _MISSING or text.lower().startswith(b"n/a"):
        return np.nan, True
    if b"/" in text:  # non-sink ``loss:[current/running mean]``: the first is the step's
        text = text.split(b"/")[0].strip()
    try:
        return float(text), True
    except ValueError:
        pass
    if text.lower() in _MISSING or text.lower().startswith(b"n/a"):
        return np.nan, True
    # A numpy bool repr (``[ True]``) is a legitimate overflow flag, not junk.
    if text in (b"True", b"False"):
        return float(text == b"True"), True
    return np.nan, False


#: Texts of a true flag (``overflow cond: [ True]``, CSV ``yes``, JSON ``true``), lower case.
TRUE_TEXTS = frozenset({"true", "1", "1.0", "yes"})


def is_true(text: bytes | str) -> bool:
    """A flag's text, brackets and spaces aside, means True."""
    raw = text.decode("latin-1") if isinstance(text, bytes) else text
    return raw.strip(" []\r").lower() in TRUE_TEXTS


def as_float(value: object) -> float:
    """A JSON / Python-literal value as float; bool, None and anything non-numeric are NaN."""
    if isinstance(value, bool) or value is None:
        return np.nan
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return np.nan


def column_of(cols: dict[str, np.ndarray], name: str, n: int) -> np.ndarray:
    """``cols[name]``, created all-NaN on first use (``setdefault`` would allocate every call)."""
    if name not in cols:
        cols[name] = np.full(n, np.nan)
    return cols[name]


def to_int(values: Sequence[bytes | str]) -> np.ndarray:
    """Convert integer field texts (step numbers) to int64."""
    if len(values) and len(set(values[:2])) == 1 and len(set(values)) == 1:
        return np.full(len(values), int(values[0]), dtype=np.int64)
    return np.fromiter(map(int, values), np.int64, count=len(values))


def cut_truncated_tail(data: bytes, complete: re.Pattern[bytes] | None) -> tuple[bytes, str | None]:
    """Drop a last line that has no newline unless it visibly ends a record.

    A log being written (or cut by a crash) can end mid-number; ``loss: 8.8``
    cut from ``8.867`` would parse as a wrong value, so such a line is ignored.
    """
    if not data or data.endswith(b"\n"):
        return data, None
    cut = data.rfind(b"\n") + 1
    last = data[cut:].rstrip()
    if complete is not None and complete.search(last):
        return data, None
    if not last:
        return data, None
    return data[:cut], "ignored a truncated last line (no newline at end of file)"


def count_lines(data: bytes) -> int:
    """Number of lines (one C-level count; blank lines included)."""
    scan = scanner()
    if scan is not None:
        return int(scan.count_lines(data))
    return data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))


def finish(
    path: Path,
    fmt: str,
    steps: np.ndarray,
    columns: Mapping[str, np.ndarray],
    skipped: np.ndarray | None = None,
    notes: Sequence[str] = (),
    local_norm: pd.DataFrame | None = None,
) -> LogTable:
    """Assemble a ``LogTable``: standard columns, NaN/inf → skipped, last duplicate wins."""
    notes = list(notes)
    n = len(steps)
    frame = pd.DataFrame({k: np.asarray(v, dtype=np.float64) for k, v in columns.items()})
    for col in STANDARD_COLUMNS[:-1]:
        if col not in frame:
            frame[col] = np.full(n, np.nan)
    _refuse_mostly_unparseable(path, fmt, n, notes)
    loss = frame["loss"].to_numpy()
    bad = ~np.isfinite(loss)
    raw_loss = loss.copy()
    if np.isinf(loss).any():
        frame.loc[np.isinf(loss), "loss"] = np.nan
    flags = np.zeros(n, dtype=bool) if skipped is None else np.asarray(skipped, dtype=bool)
    frame["skipped"] = flags | bad
    frame.index = pd.Index(np.asarray(steps, dtype=np.int64), name="step")
    dup = frame.index.duplicated(keep="last")
    if dup.any():
        notes.append(
            f"{int(dup.sum())} repeated step record(s) (restart or resume); kept the last of each"
        )
    nonfinite = _nonfinite(frame.index, ~dup, flags, raw_loss, frame["grad_norm"].to_numpy())
    frame = frame[~dup]
    if not frame.index.is_monotonic_increasing:
        frame = frame.sort_index()
    extra = [c for c in frame.columns if c not in STANDARD_COLUMNS]
    frame = frame[[*STANDARD_COLUMNS, *extra]]
    if n_skip := int(frame["skipped"].sum()):
        notes.append(f"{n_skip} step(s) skipped (overflow, NaN or skipped iteration)")
    interval = _interval_note(frame.index.to_numpy())
    if interval:
        notes.append(interval)
    return LogTable(Path(path), fmt, frame, local_norm, tuple(notes), nonfinite)


def _nonfinite(
    steps: pd.Index, kept: np.ndarray, flags: np.ndarray, loss: np.ndarray, grad: np.ndarray
) -> dict[str, dict[int, float]]:
    """Non-finite loss / grad-norm values on steps the trainer did not mark skipped.

    A grad norm that is NaN everywhere was never logged (absent key), so grad norms count
    only in a column with at least one finite value.
    """
    out: dict[str, dict[int, float]] = {}
    for name, values in (("loss", loss), ("grad_norm", grad)):
        if name == "grad_norm" and not np.isfinite(values).any():
            continue
        hit = kept & ~flags & ~np.isfinite(values)
        if hit.any():
            out[name] = {int(k): float(v) for k, v in zip(steps[hit], values[hit], strict=True)}
    return out


_UNPARSEABLE = re.compile(r"(\d+) unparseable value")


def _refuse_mostly_unparseable(path: Path, fmt: str, n: int, notes: Sequence[str]) -> None:
    """More unparseable values than steps is a log we cannot read, not a short curve."""
    bad = sum(int(m.group(1)) for note in notes if (m := _UNPARSEABLE.match(note)))
    if n and bad * 2 > n:
        raise AccuracyInputError(
            path, f"{bad} unparseable values in {n} {fmt} step records: the log cannot be read "
            "reliably (are the numbers cut off or in another locale?)")


def _interval_note(steps: np.ndarray) -> str | None:
    """Say so when the log does not have every step (log interval, sink size)."""
    if len(steps) < 2:
        return None
    gaps = np.diff(steps)
    common = int(np.bincount(gaps).argmax()) if gaps.max() < 1_000_000 else int(gaps[0])
    if common > 1:
        return (
            f"steps logged every {common} steps: Megatron averages loss over the interval, "
            "MindFormers sink mode prints only the last step of each sink"
        )
    return None


def validation_frame(steps: Sequence[bytes], losses: Sequence[bytes]) -> pd.DataFrame | None:
    """The validation series from raw step and loss texts (None when there is none)."""
    if not steps:
        return None
    loss, _ = to_float(list(losses))
    frame = pd.DataFrame({"loss": loss}, index=pd.Index(to_int(list(steps)), name="step"))
    return frame[~frame.index.duplicated(keep="last")].sort_index()


def no_steps(path: Path, fmt: str) -> AccuracyInputError:
    """The error for a file of a known format that holds no training step."""
    return AccuracyInputError(path, f"no training steps found in this {fmt} log")
