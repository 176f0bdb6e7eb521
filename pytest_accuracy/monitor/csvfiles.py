"""msprobe monitor CSV files: TrainerMon ``<metric>_<start>-<end>.csv`` and grad_probe summaries."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.monitor.model import STATS, RankRecords, Stat
from pytest_accuracy.safe_io import read_input_text

MAX_CSV_BYTES = 256 << 20  # one metric file of one step range; msprobe writes a few MB at most
_NUMBER = re.compile(r"[-+]?(\d*)\.?(\d*)(?:[eE]([-+]?\d+))?")
_OPS = (*STATS, "mean", "zeros", "nans")


def decimals(text: str) -> int:
    """Decimal places a number was written with: '0.259564' -> 6, '1.2e-05' -> 6, '3' -> 0."""
    found = _NUMBER.fullmatch(text.strip())
    if not found:
        return 0
    places = len(found.group(2)) - int(found.group(3) or 0)
    return max(0, min(places, 40))


def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    try:
        text = read_input_text(path, MAX_CSV_BYTES, "monitor CSV size")
    except UnicodeDecodeError as exc:
        raise AccuracyInputError(path, f"not UTF-8 text: {exc.reason}") from None
    except OSError as exc:
        raise AccuracyInputError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        rows = list(csv.reader(text.lstrip("\ufeff").splitlines()))  # grad_probe writes a BOM
    except csv.Error as exc:
        raise AccuracyInputError(path, f"malformed CSV: {exc}") from None
    if not rows or not any(rows[0]):
        raise AccuracyInputError(path, "empty file: no header row")
    return [h.strip() for h in rows[0]], [r for r in rows[1:] if any(c.strip() for c in r)]


def _number(path: Path, line: int, column: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise AccuracyInputError(path, f"line {line}, column {column!r}: not a number: "
                                 f"{text[:40]!r}") from None


def _columns(path: Path, header: list[str], required: tuple[str, ...]) -> dict[str, int]:
    index = {name: i for i, name in enumerate(header)}
    missing = [c for c in required if c not in index]
    if missing:
        raise AccuracyInputError(path, f"missing column(s) {', '.join(missing)}; the header "
                                 f"is {','.join(header)[:200]}")
    if not any(op in index for op in STATS):
        raise AccuracyInputError(path, "no norm, max or min column: nothing to compare (add "
                                 "'norm' to the monitor config's ops)")
    return index


def read_trainermon_csv(path: Path, metric: str, into: RankRecords) -> None:
    """``vpp_stage,name,step[,micro_step],<ops...>[,shape,dtype]`` rows into ``into``."""
    header, rows = _rows(path)
    index = _columns(path, header, ("name", "step"))
    ops = [op for op in _OPS if op in index]
    places = max((decimals(r[index[op]]) for r in rows for op in ops if len(r) > index[op]),
                 default=0)
    quantum = 10.0 ** -places
    for line, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise AccuracyInputError(path, f"line {line}: {len(row)} fields, the header has "
                                     f"{len(header)}")
        step = _integer(path, line, "step", row[index["step"]])
        micro = _integer(path, line, "micro_step", row[index["micro_step"]]) \
            if "micro_step" in index else 0
        values = {op: _number(path, line, op, row[index[op]]) for op in ops}
        dtype = row[index["dtype"]] if "dtype" in index else "float32"
        into.add(Stat(metric, step, micro, row[index["name"]], values, quantum, dtype,
                      str(path)))


def _integer(path: Path, line: int, column: str, text: str) -> int:
    value = _number(path, line, column, text)
    if not math.isfinite(value) or value != int(value) or value < 0:
        raise AccuracyInputError(path, f"line {line}, column {column!r}: not a step number: "
                                 f"{text[:40]!r}")
    return int(value)


def read_grad_summary(path: Path, step: int, into: RankRecords) -> None:
    """grad_probe ``param_name[,MD5][,<intervals>,=0],max,min,norm,shape`` rows (L0/L1/L2)."""
    header, rows = _rows(path)
    index = _columns(path, header, ("param_name",))
    ops = [op for op in STATS if op in index]
    for line, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise AccuracyInputError(path, f"line {line}: {len(row)} fields, the header has "
                                     f"{len(header)}")
        values = {op: _number(path, line, op, row[index[op]]) for op in ops}
        # full precision (repr of a float32 value): no rounding of the file's own
        into.add(Stat("grad_summary", step, 0, row[index["param_name"]], values, 0.0,
                      "float32", str(path)))
