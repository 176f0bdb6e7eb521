"""CSV / TSV / JSON-lines tables with a step column (column names matched case-insensitively)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.table import LogTable, finish, no_steps

FORMAT = "tabular"

#: Accepted column names (lower case, ``-``/`` ``/``/`` treated as ``_``) per table column.
ALIASES: dict[str, tuple[str, ...]] = {
    "step": ("step", "steps", "global_step", "iteration", "iter", "it", "train_step"),
    "loss": (
        "loss",
        "lm_loss",
        "train_loss",
        "train_lm_loss",
        "loss_metrics_global_avg_loss",
        "training_loss",
    ),
    "grad_norm": ("grad_norm", "global_norm", "gnorm", "train_grad_norm", "gradient_norm"),
    "lr": ("lr", "learning_rate", "train_learning_rate"),
    "loss_scale": ("loss_scale", "scale"),
    "skipped": ("skipped", "overflow", "is_skipped", "nan_iteration", "skipped_iter"),
}


def parse(data: bytes, path: Path) -> LogTable:
    """Read a CSV/TSV (by header) or JSON-lines table; extra numeric ``*loss`` columns are kept."""
    notes: list[str] = []
    frame = _read_frame(data, path, notes)
    rename = _match_columns(list(frame.columns))
    if "step" not in rename.values():
        raise AccuracyInputError(
            path, f"no step column (accepted names: {', '.join(ALIASES['step'])})"
        )
    frame = frame.rename(columns=rename)
    numeric = pd.to_numeric(frame["step"], errors="coerce")
    if (dropped := int(numeric.isna().sum())) > 0:
        notes.append(f"{dropped} row(s) without a numeric step ignored")
    frame = frame[numeric.notna()]
    if frame.empty:
        raise no_steps(path, FORMAT)
    cols: dict[str, np.ndarray] = {}
    for name in ("loss", "grad_norm", "lr", "loss_scale"):
        if name in frame:
            cols[name] = pd.to_numeric(frame[name], errors="coerce").to_numpy(np.float64)
    for name in frame.columns:
        if name not in rename.values() and str(name).lower().endswith("loss"):
            cols[str(name)] = pd.to_numeric(frame[name], errors="coerce").to_numpy(np.float64)
    skipped = _flags(frame["skipped"]) if "skipped" in frame else None
    steps = frame["step"].astype(np.float64).astype(np.int64).to_numpy()
    return finish(path, FORMAT, steps, cols, skipped, notes)


def _read_frame(data: bytes, path: Path, notes: list[str]) -> pd.DataFrame:
    """JSON lines (one object per line) or a delimited table; malformed rows are skipped."""
    text = data.decode("utf-8", "replace").lstrip("\ufeff").lstrip()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if text.startswith("{"):
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # garbage or a line cut by a crash
        if len(records) < len(lines):
            notes.append(f"{len(lines) - len(records)} unreadable line(s) ignored")
        return pd.DataFrame.from_records([r for r in records if isinstance(r, dict)])
    head = lines[0] if lines else ""
    sep = "\t" if "\t" in head else ";" if head.count(";") > head.count(",") else ","
    try:
        frame = pd.read_csv(
            io.StringIO(text), sep=sep, comment="#", skipinitialspace=True, on_bad_lines="skip"
        )
    except (ValueError, pd.errors.ParserError) as exc:
        raise AccuracyInputError(path, f"unreadable table: {exc}") from exc
    if len(frame) < len(lines) - 1:
        notes.append(f"{len(lines) - 1 - len(frame)} malformed row(s) ignored")
    return frame


def _norm(name: object) -> str:
    return str(name).strip().lower().replace("-", "_").replace(" ", "_").replace("/", "_")


def _match_columns(columns: list[object]) -> dict[object, str]:
    """Map the file's column names onto table columns, first alias that exists wins."""
    normed = {_norm(c): c for c in columns}
    out: dict[object, str] = {}
    for target, aliases in ALIASES.items():
        for alias in aliases:
            if alias in normed and normed[alias] not in out:
                out[normed[alias]] = target
                break
    return out


def _flags(column: pd.Series) -> np.ndarray:
    """``True``/``1``/``yes`` → True; anything else False."""
    text = column.astype(str).str.strip().str.lower()
    return text.isin(["true", "1", "1.0", "yes"]).to_numpy()
