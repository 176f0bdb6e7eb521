"""CSV / TSV / JSON-lines tables with a step column (column names matched case-insensitively)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.fields import SEP, Fields
from pytest_accuracy.logs.records import Records, read_records
from pytest_accuracy.logs.table import (
    TRUE_TEXTS,
    LogTable,
    as_float,
    column_of,
    count_lines,
    finish,
    is_true,
    no_steps,
)

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


_KNOWN = {alias for aliases in ALIASES.values() for alias in aliases}
_JSON_ROW = Records(re.compile(rb"\{([^\n]*)\}"), b"{", close="last")


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
    if frame.columns.duplicated().any():  # e.g. a column named like another's alias
        dup = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
        notes.append(f"columns named alike ({', '.join(dup)}): kept the first of each")
        frame = frame.loc[:, ~frame.columns.duplicated()]
    numeric = pd.to_numeric(frame["step"], errors="coerce")
    if (dropped := int(numeric.isna().sum())) > 0:
        notes.append(f"{dropped} row(s) without a numeric step ignored")
    frame = frame[numeric.notna()]
    if frame.empty:
        raise no_steps(path, FORMAT)
    kept = [n for n in ("loss", "grad_norm", "lr", "loss_scale") if n in frame]
    renamed = set(rename.values())
    kept += [n for n in frame.columns if n not in renamed and str(n).lower().endswith("loss")]
    cols: dict[str, np.ndarray] = {}
    bad = 0
    for name in kept:
        values = pd.to_numeric(frame[name], errors="coerce")
        bad += int((values.isna() & frame[name].notna()).sum())  # text that is no number
        cols[str(name)] = values.to_numpy(np.float64)
    if bad:
        notes.append(f"{bad} unparseable value(s) read as NaN")
    skipped = _flags(frame["skipped"]) if "skipped" in frame else None
    steps = frame["step"].astype(np.float64).astype(np.int64).to_numpy()
    return finish(path, FORMAT, steps, cols, skipped, notes)


def _read_frame(data: bytes, path: Path, notes: list[str]) -> pd.DataFrame:
    """JSON lines (one object per line) or a delimited table; malformed rows are skipped."""
    if _first_record(data).startswith(b"{"):
        return _json_lines(data, notes)
    text = data.decode("utf-8", "replace").lstrip("\ufeff").lstrip()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
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


def _first_record(data: bytes) -> bytes:
    """The first line that is neither blank nor a ``#`` comment (BOM and indent removed)."""
    for line in data[: 1 << 16].lstrip(b"\xef\xbb\xbf").splitlines():
        if line.strip() and not line.lstrip().startswith(b"#"):
            return line.lstrip()
    return b""


def _json_lines(data: bytes, notes: list[str]) -> pd.DataFrame:
    """JSON lines read column-wise (``records.read_records``); other shapes through ``json``."""
    parsed = read_records(data, _JSON_ROW, _JSON_FIELDS)
    n = len(parsed)
    columns: dict[str, np.ndarray] = dict(parsed.values)
    flags = parsed.flags.get("skipped")
    keep = np.ones(n, dtype=bool)
    for i, row in parsed.odd_rows.items():
        try:
            record = json.loads(b"{" + row + b"}")
        except ValueError:
            keep[i] = False  # garbage or a line cut by a crash
            continue
        for key, value in record.items():
            name = _json_key(str(key).strip())  # as the column-wise read strips keys
            if name == "skipped":
                flags = np.zeros(n, dtype=bool) if flags is None else flags
                flags[i] = is_true(str(value))
            elif name is not None:
                column_of(columns, name, n)[i] = as_float(value)
    # Lines that are neither blank nor ``#`` comments (a line of spaces counts as unreadable).
    n_lines = count_lines(data) - data.count(b"\n\n") - data.startswith(b"\n")
    n_lines -= data.count(b"\n#") + data.startswith(b"#")
    if parsed.bad:
        notes.append(f"{parsed.bad} unparseable value(s) read as NaN")
    if (unreadable := n_lines - int(keep.sum())) > 0:
        notes.append(f"{unreadable} unreadable line(s) ignored")
    frame = pd.DataFrame({k: v[keep] for k, v in columns.items()})
    if flags is not None:
        frame["skipped"] = flags[keep]
    return frame


def _json_key(key: str) -> str | None:
    """The frame column a JSON key feeds: flags become ``skipped``, other known or
    ``*loss`` keys keep their name (``_match_columns`` then picks by alias order)."""
    norm = _norm(key)
    if norm in ALIASES["skipped"]:
        return "skipped"
    return key if norm in _KNOWN or norm.endswith("loss") else None


_JSON_FIELDS = Fields(
    bytes.maketrans(b',:{}"[]\r', SEP * 2 + b" " * 6),
    _json_key,
    fixed={},
    flags=frozenset({"skipped"}),
)


def _norm(name: object) -> str:
    return str(name).strip().lower().replace("-", "_").replace(" ", "_").replace("/", "_")


def _match_columns(columns: list[object]) -> dict[object, str]:
    """Map the file's column names onto table columns, first alias that exists wins.

    Of two names that normalise alike (``LR`` and ``lr``) the one spelled as the
    alias is taken, so a renamed column never lands on a name the file has."""
    normed: dict[str, object] = {}
    for c in columns:
        if _norm(c) not in normed or str(c) == _norm(c):
            normed[_norm(c)] = c
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
    return text.isin(TRUE_TEXTS).to_numpy()
