"""msprobe's overflow verdicts: overflow_check's anomaly_analyze files, nan_check's is_nan flags."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.text import brief

_FILE = re.compile(r"^anomaly_analyze_\d+\.json$")
_HEAD = re.compile(rb'^\s*\{\s*"rank_\d+"\s*:')  # a renamed file, known by its first key
_RANK = re.compile(r"^rank_(\d+)$")
_MAX_DEPTH = 32  # nesting of one node's data_info that is walked for its tensors


@dataclass(frozen=True)
class AnomalyNode:
    """One node msprobe's overflow_check names for a rank: the first op that made NaN/Inf."""

    op_name: str
    tensor: str  # the first output holding NaN/Inf, e.g. "output.0"; "" when none shows it
    value: str  # e.g. "Max inf"
    modules: tuple[str, ...]  # construct_info without the op itself, outermost first
    stack: tuple[str, ...]

    def stack_line(self) -> str | None:
        """The innermost frame outside the frameworks' own files, for messages."""
        for frame in self.stack:
            if "site-packages" not in frame and "dist-packages" not in frame:
                return " ".join(frame.split())
        return " ".join(self.stack[0].split()) if self.stack else None


@dataclass(frozen=True)
class AnomalyFile:
    """One anomaly_analyze_<time_ns>.json: the nodes msprobe found, per rank it lists."""

    path: Path
    ranks: dict[int, tuple[AnomalyNode, ...]]


def anomaly_files(path: Path) -> list[Path]:
    """The anomaly_analyze files ``path`` names: itself, or those directly inside the folder."""
    if path.is_dir():
        return sorted(p for p in path.iterdir() if _FILE.match(p.name))
    if _FILE.match(path.name):
        return [path]
    if path.suffix == ".json" and path.name != "dump.json" and path.exists():
        from pytest_accuracy.safe_io import open_regular

        with open_regular(path) as (f, _):
            head = f.read(256)
        return [path] if _HEAD.match(head) else []
    return []


def read_anomaly(path: Path) -> AnomalyFile:
    """Read one overflow_check result (``{"rank_0": [{"op_name", "data_info", ...}]}``)."""
    from pytest_accuracy.dumps.jsonfile import read_json  # NaN/Infinity literals, size limits

    doc = read_json(path)
    if not isinstance(doc, dict):
        raise AccuracyInputError(path, "not an msprobe overflow_check result: expected an object "
                                       "mapping rank_<N> to a list of anomaly nodes")
    ranks: dict[int, tuple[AnomalyNode, ...]] = {}
    for key, nodes in doc.items():
        m = _RANK.match(str(key))
        if m is None or not isinstance(nodes, list):
            raise AccuracyInputError(path, f"key {brief(key)}: expected rank_<N> mapping to a "
                                           "list of anomaly nodes")
        ranks[int(m.group(1))] = tuple(_node(path, f"{key}[{i}]", n) for i, n in enumerate(nodes))
    return AnomalyFile(path, dict(sorted(ranks.items())))


def _node(path: Path, where: str, entry: Any) -> AnomalyNode:
    if not isinstance(entry, dict) or not isinstance(entry.get("op_name"), str):
        raise AccuracyInputError(path, f"{where}: expected an object with a string 'op_name'")
    lists = {}
    for key in ("construct_info", "stack_info"):
        value = entry.get(key, [])
        if value == {}:  # msprobe writes {} when stack.json has no entry for the op
            value = []
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise AccuracyInputError(path, f"{where}: '{key}' must be a list of strings")
        lists[key] = tuple(value)
    data = entry.get("data_info", {})
    if not isinstance(data, dict):
        raise AccuracyInputError(path, f"{where}: 'data_info' must be an object")
    tensor, value = _first_nonfinite(data.get("output", []), "output", 0)
    op = entry["op_name"]
    modules = tuple(m for m in lists["construct_info"] if m != op)
    return AnomalyNode(op, tensor, value, modules, lists["stack_info"])


def _first_nonfinite(value: Any, path: str, depth: int) -> tuple[str, str]:
    """(position, 'Max inf') of the first tensor record under ``value`` holding NaN/Inf."""
    if depth > _MAX_DEPTH:
        return "", ""
    if isinstance(value, dict) and any(k in value for k in ("Max", "Min")):
        for label in ("Max", "Min"):
            v = value.get(label)
            if isinstance(v, float) and not math.isfinite(v):
                return path, f"{label} {v}"
        return "", ""
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, item in items:
        found = _first_nonfinite(item, f"{path}.{key}", depth + 1)
        if found[0]:
            return found
    return "", ""


@dataclass(frozen=True)
class NanCheck:
    """A nan_check dump: per API call, msprobe read the NPU's overflow flag (``is_nan``)."""

    path: Path
    flagged: tuple[str, ...]  # calls with is_nan 1, forward ones first, in execution order
    checked: int  # calls whose flag was read (0 or 1)
    unread: int  # calls whose is_nan is null (msprobe could not read the flag)


def read_nan_check(dump_json: Path) -> NanCheck | None:
    """The is_nan flags of a dump.json written with task nan_check; None for another task."""
    from pytest_accuracy.dumps.jsonfile import read_json

    doc = read_json(dump_json)
    if not isinstance(doc, dict) or doc.get("task") != "nan_check":
        return None
    data = doc.get("data")
    if not isinstance(data, dict):
        raise AccuracyInputError(dump_json, "nan_check dump.json has no 'data' object")
    flagged: list[tuple[bool, str]] = []
    checked = unread = 0
    for name, record in data.items():
        flag = record.get("is_nan") if isinstance(record, dict) else None
        if flag is None:
            unread += 1
        elif isinstance(flag, bool) or not isinstance(flag, int):
            raise AccuracyInputError(dump_json, f"node {brief(name)}: is_nan must be 0, 1 or "
                                                f"null, not {brief(flag)}")
        else:
            checked += 1
            if flag:
                flagged.append((not str(name).endswith(".forward"), str(name)))
    ordered = [name for _, name in sorted(flagged, key=lambda t: t[0])]  # stable: keeps order
    return NanCheck(dump_json, tuple(ordered), checked, unread)
