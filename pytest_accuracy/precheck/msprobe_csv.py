"""Read msprobe acc_check (run_ut) and api_precision_compare result/details CSVs, hostile-safe."""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit
from pytest_accuracy.precheck.msprobe_layouts import (
    RESULT_COLUMNS,
    STATUS_COLUMNS,
    Layout,
    detect,
    metric_key,
    name_column,
)
from pytest_accuracy.text import printable

__all__ = ["MsprobeRun", "OutputRow", "ResultRow", "load_run"]

_DETAILS_GLOBS = ("accuracy_checking_details_*.csv", "api_precision_compare_details_*.csv",
                  "precheck_accuracy_checking_details.csv")
# An API or output name msprobe writes: "Torch.rsqrt.0", "Functional*linear*0" (run_ut 2023).
_NAME = re.compile(r"[\w*][\w.*\-]*")
_OUTPUT = re.compile(r"(?P<api>.+?)\.(?P<dir>forward|backward)\.output\.(?P<idx>\d+)")
_FORMULA = ("=", "+", "-", "@")
_MAX_NAME = 512
_STATUS = {"pass": "pass", "true": "pass", "warning": "warning", "error": "error",
           "false": "error", "skip": "skip", "": None, "n/a": None, "na": None, "none": None}
_BLANK = {"", "n/a", "na", "none", "-"}


@dataclass(frozen=True)
class OutputRow:
    """One details row: one output (forward) or input gradient (backward) of one API call."""

    name: str  # "Torch.rsqrt.0.forward.output.0"
    api: str  # "Torch.rsqrt.0"
    direction: str  # "forward" | "backward"
    status: str  # pass | warning | error | skip
    bench_dtype: str  # "float64"; "" when msprobe left it blank
    device_dtype: str
    shape: tuple[int, ...]
    metrics: dict[str, float | None]
    message: str
    line: int


@dataclass(frozen=True)
class ResultRow:
    """One result row: an API call's forward and backward verdicts (None: no such pass)."""

    api: str
    forward: str | None
    backward: str | None
    message: str
    line: int


@dataclass(frozen=True)
class MsprobeRun:
    """A details file (required) and its result file (when found next to it)."""

    details_path: Path
    result_path: Path | None
    layout: Layout
    outputs: tuple[OutputRow, ...]
    results: dict[str, ResultRow] = field(default_factory=dict)

    def calls(self) -> dict[tuple[str, str], list[OutputRow]]:
        """(api, direction) -> its rows, for every call the details or the result name."""
        out: dict[tuple[str, str], list[OutputRow]] = {}
        for row in self.outputs:
            out.setdefault((row.api, row.direction), []).append(row)
        for api, res in self.results.items():
            for direction, status in (("forward", res.forward), ("backward", res.backward)):
                if status is not None:
                    out.setdefault((api, direction), [])
        return out


def load_run(path: Path) -> MsprobeRun:
    """The run at ``path``: a details or result CSV, or a folder holding one pair."""
    details, result = _pair(path)
    header, rows = read_table(details)
    layout = detect(header)
    if layout is None or layout.kind not in ("details", "compare_details"):
        raise AccuracyInputError(details, _not_details(header, layout))
    outputs = _outputs(details, header, rows, layout)
    results = _results(result) if result is not None else {}
    return MsprobeRun(details, result, layout, tuple(outputs), results)


def _pair(path: Path) -> tuple[Path, Path | None]:
    if path.is_dir():
        found = sorted({p for g in _DETAILS_GLOBS for p in path.glob(g)})
        if len(found) != 1:
            what = ("no accuracy_checking_details_*.csv (or api_precision_compare_details_*.csv)"
                    if not found else f"{len(found)} details files ("
                    + ", ".join(p.name for p in found[:3]) + "): give one file")
            raise AccuracyInputError(path, f"{what} in this folder")
        path = found[0]
    elif not path.exists():
        raise AccuracyInputError(path, "does not exist")
    name = path.name
    if "details" not in name and "result" in name:
        details = path.with_name(_swap(name, "result", "details"))
        if not details.exists():
            raise AccuracyInputError(path, f"needs its details file {details.name} next to it "
                                     "(msprobe writes both; the numbers are in the details)")
        return details, path
    result = path.with_name(_swap(name, "details", "result")) if "details" in name else None
    return path, result if result is not None and result.exists() else None


def _swap(name: str, old: str, new: str) -> str:
    head, _, tail = name.rpartition(old)
    return f"{head}{new}{tail}"


def read_table(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and (line, fields) rows; every way the file can be unusable is named."""
    try:
        from pytest_accuracy.safe_io import read_input_bytes

        data = read_input_bytes(path, limit("csv_bytes"), "CSV size")
    except OSError as exc:
        raise AccuracyInputError(path, f"cannot be read: {exc.strerror or exc}") from None
    if b"\0" in data:
        raise AccuracyInputError(path, "holds NUL bytes: a binary file, not an msprobe CSV")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise AccuracyInputError(path, f"is not UTF-8 text (byte {exc.start}): msprobe writes "
                                 "UTF-8 CSV") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[tuple[int, list[str]]] = []
    try:
        for fields in reader:
            if any(f.strip() for f in fields):
                rows.append((reader.line_num, fields))
    except csv.Error as exc:  # an unclosed quote, a field over csv's 131072 characters
        raise AccuracyInputError(path, f"line {reader.line_num}: malformed CSV ({exc})") from None
    if not rows:
        raise AccuracyInputError(path, "is empty: no header, no rows")
    header, body = rows[0][1], rows[1:]
    if not body and detect(header) is not None:
        raise AccuracyInputError(path, "has a header but no rows: acc_check checked nothing "
                                 "(an interrupted run, or a dump without L1 API data)")
    return header, body


def _not_details(header: list[str], layout: Layout | None) -> str:
    shown = printable(", ".join(header[:6]), 200)
    if layout is not None:
        return (f"is a {layout.kind} file ({layout.release}), not a details file: give the "
                "accuracy_checking_details_*.csv next to it")
    return (f"is not an msprobe acc_check details CSV: its header ({shown}) has no "
            f"'API Name' with 'Bench Dtype' and 'DEVICE Dtype'/'Tested Dtype', nor "
            "api_precision_compare's '比对结果'")


def _outputs(path: Path, header: list[str], rows: list[tuple[int, list[str]]],
             layout: Layout) -> list[OutputRow]:
    name_at = name_column(header)
    stripped = [h.strip() for h in header]
    status_at = next((stripped.index(s) for s in STATUS_COLUMNS if s in stripped), None)
    if status_at is None:
        raise AccuracyInputError(path, "has no 'Status' column (nor '比对结果'): msprobe's "
                                 "verdict per output is missing")
    keys = [metric_key(h, layout.kind) for h in header]
    seen: dict[str, int] = {}
    out = []
    for line, fields in rows:
        if len(fields) != len(header):
            raise AccuracyInputError(path, f"line {line}: {len(fields)} fields, the header has "
                                     f"{len(header)} (a truncated or hand-edited row?)")
        name = check_name(path, line, fields[name_at])
        if name in seen:
            raise AccuracyInputError(path, f"line {line} repeats {name} (first at line "
                                     f"{seen[name]}): two runs appended to one file? Give each "
                                     "run's files on its own")
        seen[name] = line
        out.append(_output_row(path, line, fields, stripped, keys, name, status_at))
    return out


def _output_row(path: Path, line: int, fields: list[str], header: list[str],
                keys: list[str | None], name: str, status_at: int) -> OutputRow:
    match = _OUTPUT.fullmatch(name)
    if match is None:
        raise AccuracyInputError(path, f"line {line}: {printable(name, 120)} is not an output "
                                 "name '<API>.forward|backward.output.<n>'")
    status = parse_status(path, line, fields[status_at])
    if status is None:
        raise AccuracyInputError(path, f"line {line}: {name} has no status")
    cells = dict(zip(header, fields, strict=True))
    metrics = {k: parse_number(path, line, header[i], fields[i])
               for i, k in enumerate(keys) if k is not None}
    return OutputRow(
        name=name, api=match["api"], direction=match["dir"], status=status,
        bench_dtype=_dtype(cells.get("Bench Dtype", "")),
        device_dtype=_dtype(cells.get("DEVICE Dtype") or cells.get("NPU Dtype")
                            or cells.get("Tested Dtype") or ""),
        shape=_shape(cells.get("Shape", "")), metrics=metrics,
        message=cells.get("Message", "").strip(), line=line)


def _results(path: Path) -> dict[str, ResultRow]:
    header, rows = read_table(path)
    layout = detect(header)
    if layout is None or layout.kind != "result":
        raise AccuracyInputError(path, "is not an msprobe result CSV: its header needs "
                                 f"'API name', {RESULT_COLUMNS[0]!r} and {RESULT_COLUMNS[1]!r}")
    stripped = [h.strip() for h in header]
    fwd, bwd = (stripped.index(c) for c in RESULT_COLUMNS)
    name_at = name_column(header)
    message_at = stripped.index("Message") if "Message" in stripped else None
    out: dict[str, ResultRow] = {}
    for line, fields in rows:
        # msprobe writes Message only for SKIP rows (3 fields, not 4) and may append a
        # call-stack column the header lacks
        if not max(fwd, bwd, name_at) < len(fields) <= len(header) + 1:
            raise AccuracyInputError(path, f"line {line}: {len(fields)} fields, the header has "
                                     f"{len(header)}")
        api = check_name(path, line, fields[name_at])
        if api in out:
            raise AccuracyInputError(path, f"line {line} repeats {api} (first at line "
                                     f"{out[api].line}): two runs appended to one file?")
        message = fields[message_at] if message_at is not None and message_at < len(fields) else ""
        out[api] = ResultRow(api, parse_status(path, line, fields[fwd]),
                             parse_status(path, line, fields[bwd]), message.strip(), line)
    return out


def check_name(path: Path, line: int, cell: str) -> str:
    name = cell.strip()
    if name.startswith(_FORMULA):
        raise AccuracyInputError(path, f"line {line}: the name {printable(name, 80)} starts with "
                                 f"{name[0]!r}, a spreadsheet formula, not an msprobe API name")
    if len(name) > _MAX_NAME:
        raise AccuracyInputError(path, f"line {line}: a name of {len(name)} characters, "
                                 f"over {_MAX_NAME}")
    if not _NAME.fullmatch(name):
        raise AccuracyInputError(path, f"line {line}: {printable(name, 80)} is not an msprobe "
                                 "API name (letters, digits, '_', '.', '*', '-')")
    return name


def parse_status(path: Path, line: int, cell: str) -> str | None:
    word = cell.strip().lower()
    if word not in _STATUS:
        raise AccuracyInputError(path, f"line {line}: status {printable(cell, 40)!s} is none of "
                                 "pass, warning, error, SKIP")
    return _STATUS[word]


def parse_number(path: Path, line: int, column: str, cell: str) -> float | None:
    text = cell.strip()
    if text.lower() in _BLANK:
        return None
    try:
        value = float(text)
    except ValueError:
        raise AccuracyInputError(path, f"line {line}, column {printable(column, 40)}: "
                                 f"{printable(text, 40)} is not a number") from None
    if "_" in text:  # float() takes "1_0"; msprobe never writes it
        raise AccuracyInputError(path, f"line {line}: {printable(text, 40)} is not a number")
    return value if not math.isnan(value) else math.nan


def _dtype(cell: str) -> str:
    text = cell.strip()
    return text.removeprefix("torch.").lower() if text else ""


def _shape(cell: str) -> tuple[int, ...]:
    digits = re.findall(r"\d+", cell)
    return tuple(int(d) for d in digits[:32]) if len(cell) < 400 else ()


def describe(run: MsprobeRun) -> str:
    """One line: which files, which release's layout."""
    files = run.details_path.name + (f" + {run.result_path.name}" if run.result_path else "")
    return f"{files} ({run.layout.release})"
