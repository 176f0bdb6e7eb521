"""The shape a merge part must have before anything is merged: types, ranges, depth, size.

A part comes from another CI job; a step of ``"abc"`` or ``Infinity``, a first divergence
without its keys or a 900-deep array must be a named error naming the file, never a
traceback in the middle of the merge or of writing the merged page.
"""

from __future__ import annotations

import math
from collections.abc import Set
from pathlib import Path
from typing import Any

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.text import brief

__all__ = ["check_part", "check_shard_count"]

#: Steps and ranks are int64 everywhere else (dump indexes, log tables).
MAX_INDEX = (1 << 63) - 1


def check_part(doc: dict[str, Any], file: Path) -> None:
    """Raise AccuracyInputError naming ``file`` where ``doc`` is no well-formed part."""
    _check_depth(doc, file)
    if doc.get("verdict") not in ("pass", "fail"):
        raise AccuracyInputError(file, f"verdict {brief(doc.get('verdict'))}: not pass or fail")
    for key in ("inputs", "criteria"):
        if not isinstance(doc.get(key), (dict, type(None))):
            raise AccuracyInputError(file, f"'{key}' is not an object")
    compare = doc.get("compare")
    if compare is None:
        return
    if not isinstance(compare, dict):
        raise AccuracyInputError(file, "'compare' is not an object")
    nodes = compare.get("nodes") or []
    if not isinstance(nodes, list):
        raise AccuracyInputError(file, "'compare.nodes' is not a list")
    for i, node in enumerate(nodes):
        _check_node(node, file, f"compare node {i}", _NODE_KEYS)
    for key, needed in (("first_divergence", _FIRST_KEYS), ("first_nonfinite", ("step", "rank"))):
        if compare.get(key) is not None:
            _check_node(compare[key], file, f"compare.{key}", needed)
    _check_coverage(compare.get("coverage"), file)


_NODE_KEYS = ("step", "rank", "status")
_FIRST_KEYS = ("step", "rank", "npu_name", "tensor", "reason")  # what its sentence quotes


def _check_node(node: Any, file: Path, where: str, needed: tuple[str, ...]) -> None:
    if not isinstance(node, dict):
        raise AccuracyInputError(file, f"{where} is not an object")
    missing = [k for k in needed if k not in node]
    if missing:
        lead = "a compare node lacks step, rank or status: " if needed == _NODE_KEYS else ""
        raise AccuracyInputError(file, f"{lead}{where} lacks {', '.join(missing)}")
    for key in ("step", "rank"):
        _index(node[key], file, f"{where}: {key}")
    for key in ("status", "npu_name", "bench_name"):
        if key in node and not isinstance(node[key], (str, type(None))):
            raise AccuracyInputError(file, f"{where}: {key} {brief(node[key])} is not a string")


def _index(value: Any, file: Path, where: str) -> int:
    # bool is an int to Python; 1e30, Infinity and "3" are no step numbers.
    if isinstance(value, bool) or not isinstance(value, int):
        raise AccuracyInputError(file, f"{where} {brief(value)} is not an integer")
    if not 0 <= value <= MAX_INDEX:
        raise AccuracyInputError(file, f"{where} {brief(value)} is out of range "
                                       f"(0 to {MAX_INDEX})")
    return value


def _check_coverage(coverage: Any, file: Path) -> None:
    if coverage is None:
        return
    if not isinstance(coverage, dict):
        raise AccuracyInputError(file, "'compare.coverage' is not an object")
    for key in ("matched", "total"):
        _index(coverage.get(key), file, f"compare.coverage.{key}")
    value = coverage.get("min_matched")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value):
        raise AccuracyInputError(file, f"compare.coverage.min_matched {brief(value)} is not a "
                                       "finite number")


def _check_depth(doc: Any, file: Path) -> None:
    """Iteratively, since every later walk (comparing parts, writing JSON) recurses."""
    cap = limit("document_depth")
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > cap:
            raise AccuracyInputError(file, f"nesting depth: {over('document_depth', depth)}")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def check_shard_count(steps: Set[int], ranks: Set[int]) -> None:
    """Refuse a steps x ranks product too big to check for missing shards one by one."""
    count = len(steps) * len(ranks)
    if count > limit("merge_shards"):
        raise AccuracyInputError("--acc-merge", f"{len(steps)} steps x {len(ranks)} ranks to "
                                                f"check: {over('merge_shards', count)}")
