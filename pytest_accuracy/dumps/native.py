"""Reader for MindSpore's native Dump: rank_N/<net>/<graph>/<iteration>/*.npy, statistic.csv."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

import numpy as np

from pytest_accuracy.dumps.model import (
    Call,
    Dump,
    DumpMode,
    DumpSet,
    Stats,
    TensorRecord,
    canonical_dtype,
)
from pytest_accuracy.dumps.npy import load_npy
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit
from pytest_accuracy.safe_io import check_regular, read_input_text

# {op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.{input|output}.{slot}.{format}.{dtype}.npy
_NPY = re.compile(
    r"^(?P<op_type>[^.]+)\.(?P<op_name>.+)\.(?P<task>\d+)\.(?P<stream>\d+)\.(?P<ts>\d+)\."
    r"(?P<io>input|output)\.(?P<slot>\d+)\.(?P<fmt>[^.]+)\.(?P<dtype>[^.]+)\.npy$"
)
_RANK = re.compile(r"^rank_(\d+)$")


@dataclass
class _Op:
    op_type: str
    op_name: str
    first_ts: int
    records: list[TensorRecord] = field(default_factory=list)


def load_native(root: Path) -> DumpSet:
    """Every (iteration, rank) of a native dump; one call per kernel, in timestamp order."""
    rank_dirs = [root] if _RANK.match(root.name) else sorted(
        (p for p in root.iterdir() if p.is_dir() and _RANK.match(p.name)), key=_rank_number)
    dumps: dict[tuple[int, int], Dump] = {}
    for rank_dir in rank_dirs:
        rank = _rank_number(rank_dir)
        for net_dir in sorted(p for p in rank_dir.iterdir() if p.is_dir() and _is_net(p)):
            for graph_dir in sorted(p for p in net_dir.iterdir() if p.is_dir()):
                for it_dir in sorted(p for p in graph_dir.iterdir() if p.name.isdigit()):
                    step = int(it_dir.name)
                    calls = _read_iteration(it_dir)
                    if (step, rank) in dumps:  # several graphs in one iteration: concatenate
                        calls = dumps[(step, rank)].calls + calls
                    for i, call in enumerate(calls):
                        call.order = i
                    dumps[(step, rank)] = Dump(it_dir, "mindspore", "native",
                                               _mode(it_dir), step, rank, calls)
    if not dumps:
        raise AccuracyInputError(root, "no MindSpore native dump iterations under rank_N/<net>/")
    return DumpSet(root=root, dumps=dumps)


def _rank_number(path: Path) -> int:
    m = _RANK.match(path.name)
    return int(m.group(1)) if m else 0


def _is_net(path: Path) -> bool:
    return path.name not in ("execution_order", "graphs", ".dump_metadata")


def _mode(it_dir: Path) -> DumpMode:
    return "statistics" if (it_dir / "statistic.csv").exists() and not any(
        it_dir.glob("*.npy")) else "tensor"


def _read_iteration(it_dir: Path) -> list[Call]:
    ops: dict[tuple[str, str], _Op] = {}
    for file in sorted(it_dir.glob("*.npy")):
        m = _NPY.match(file.name)
        if not m:
            continue
        key = (m["op_type"], m["op_name"])
        op = ops.setdefault(key, _Op(m["op_type"], m["op_name"], int(m["ts"])))
        op.first_ts = min(op.first_ts, int(m["ts"]))
        op.records.append(_npy_record(file, it_dir, m))
    if (it_dir / "statistic.csv").exists():
        _read_statistic_csv(it_dir / "statistic.csv", ops)
    return [_to_call(op) for op in sorted(ops.values(), key=lambda o: o.first_ts)]


def _npy_record(file: Path, it_dir: Path, m: re.Match[str]) -> TensorRecord:
    from pytest_accuracy.dumps.tensors import resolve_data_path

    try:
        checked = resolve_data_path(it_dir, file.name)  # a planted symlink is not followed out
        check_regular(checked)  # a FIFO named like an .npy file would block np.load
        array = load_npy(checked, True, limit("npy_header_bytes"), limit("tensor_bytes"))
    except (OSError, ValueError, EOFError) as exc:
        raise AccuracyInputError(file, f"not a readable .npy file ({exc})") from exc
    stats = Stats()
    if array.size and array.dtype.kind in "fiub":
        values = np.asarray(array, dtype=np.float64)
        stats = Stats(float(values.max()), float(values.min()), float(values.mean()),
                      float(np.linalg.norm(values.ravel())))
    return TensorRecord(
        path=f"{m['io']}.{m['slot']}", role=m["io"],  # type: ignore[arg-type]
        dtype=canonical_dtype(m["dtype"]), raw_dtype=m["dtype"], shape=tuple(array.shape),
        stats=stats, data_root=it_dir, data_name=file.name, dump_json=file,
    )


def _read_statistic_csv(path: Path, ops: dict[tuple[str, str], _Op]) -> None:
    try:
        text = read_input_text(path, limit("json_bytes"), "statistic.csv size")
        rows = list(csv.DictReader(StringIO(text, newline="")))
    except (OSError, csv.Error, UnicodeDecodeError) as exc:
        raise AccuracyInputError(path, f"cannot read statistic.csv ({exc})") from exc
    for row in rows:
        try:
            key = (row["Op Type"], row["Op Name"])
            io, slot = row["IO"].lower(), row["Slot"]
            shape = tuple(int(d) for d in re.findall(r"-?\d+", row.get("Shape") or ""))
            ts = int(row.get("Timestamp") or 0)
        except (KeyError, ValueError) as exc:
            raise AccuracyInputError(path, f"malformed row {row!r}: {exc}") from exc
        op = ops.setdefault(key, _Op(key[0], key[1], ts))
        if any(r.path == f"{io}.{slot}" for r in op.records):
            continue  # the npy file already gives exact values
        op.records.append(TensorRecord(
            path=f"{io}.{slot}", role="input" if io == "input" else "output",
            dtype=canonical_dtype(row.get("Data Type")), raw_dtype=str(row.get("Data Type")),
            shape=shape, stats=Stats(_f(row, "Max Value"), _f(row, "Min Value"),
                                     _f(row, "Avg Value"), _f(row, "L2Norm Value")),
            dump_json=path,
        ))


def _f(row: dict[str, str], key: str) -> float | None:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        return None


def _to_call(op: _Op) -> Call:
    records = sorted(op.records, key=lambda r: (r.role, int(r.path.split(".")[1])))
    return Call(
        name=f"{op.op_type}.{op.op_name}", kind="kernel", direction="forward", order=0,
        inputs=[r for r in records if r.role == "input"],
        outputs=[r for r in records if r.role == "output"],
        prefix=op.op_type, op=op.op_type, scope=op.op_name,
    )
