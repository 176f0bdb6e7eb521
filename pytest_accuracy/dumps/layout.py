"""Find the dumps under a path: a dump root, a step dir, a rank/proc dir or a dump.json."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from pytest_accuracy.dumps.model import Dump, DumpSet
from pytest_accuracy.errors import AccuracyInputError

_STEP = re.compile(r"^step(\d+)$")
_RANK = re.compile(r"^rank(\d*)$")
_PROC = re.compile(r"^proc(\d+)$")
_NATIVE_RANK = re.compile(r"^rank_(\d+)$")


def load_dumps(
    path: str | Path,
    *,
    steps: Iterable[int] | None = None,
    ranks: Iterable[int] | None = None,
) -> DumpSet:
    """Read every dump under ``path`` (metadata only; tensors load on demand).

    Accepts msprobe layouts (``step*/rank*|proc*/dump.json``, one step dir, one
    rank dir, a dump.json file) and MindSpore's native Dump (``rank_N/<net>/...``).
    Steps and ranks are integers: ``proc<PID>`` dirs are numbered by sorted order.
    """
    root = Path(path)
    if not root.exists():
        raise AccuracyInputError(root, "no such file or directory")
    if not root.is_dir():
        from pytest_accuracy.safe_io import check_regular

        check_regular(root)  # a FIFO or device given as the dump is refused by name
        if root.suffix.lower() != ".json":  # a log or a tensor file where the dump belongs
            raise AccuracyInputError(root, "a file where a dump belongs: give msprobe's dump "
                                     "folder (holding step*/rank*/dump.json), one step or "
                                     "rank folder of it, or a dump.json file")
    if _is_native(root):
        from pytest_accuracy.dumps.native import load_native

        return _filter(load_native(root), steps, ranks)
    found = list(_locate(root))
    if not found:
        raise AccuracyInputError(
            root,
            "no dump.json found (expected step*/rank*|proc*/dump.json, a rank dir or a "
            "dump.json file, or MindSpore native rank_N/ dirs)",
        )
    step_set = set(steps) if steps is not None else None
    rank_set = set(ranks) if ranks is not None else None
    from pytest_accuracy.dumps.msprobe import read_dump

    dumps: dict[tuple[int, int], Dump] = {}
    # Data files must stay inside the directory the user named, symlinks resolved.
    confine = (root if root.is_dir() else root.parent).resolve()
    for step, rank, dump_json in found:
        if (step_set is None or step in step_set) and (rank_set is None or rank in rank_set):
            dumps[(step, rank)] = read_dump(dump_json, step=step, rank=rank, confine=confine)
    return DumpSet(root=root, dumps=dumps)


def dump_files(path: str | Path, *, steps: Iterable[int] | None = None,
               ranks: Iterable[int] | None = None) -> list[tuple[int, int, Path]] | None:
    """The (step, rank, dump.json) of an msprobe dump, selection applied, read from the
    folders alone (no file is parsed); None for anything else (MindSpore's native Dump, a
    path that is not there: ``load_dumps`` says what is wrong with it)."""
    root = Path(path)
    try:
        if not root.exists() or _is_native(root):
            return None
        found = _locate(root)
    except OSError:
        return None
    step_set = set(steps) if steps is not None else None
    rank_set = set(ranks) if ranks is not None else None
    return [(s, r, p) for s, r, p in found
            if (step_set is None or s in step_set) and (rank_set is None or r in rank_set)]


def holds_tensor_files(path: str | Path) -> bool | None:
    """Whether the msprobe dumps under ``path`` have tensor files (a ``dump_tensor_data``
    folder with entries beside a dump.json); None where the folders alone do not tell (no
    such path, no dump.json found, MindSpore's native Dump). Reads no file."""
    root = Path(path)
    try:
        if not root.exists() or _is_native(root) or (root.is_file()
                                                     and root.name != "dump.json"):
            return None
        found = _locate(root)
    except OSError:
        return None  # collection says what is wrong with the path
    if not found:
        return None
    return any(_has_entries(dump_json.parent / "dump_tensor_data") for _, _, dump_json in found)


def _has_entries(folder: Path) -> bool:
    try:
        with os.scandir(folder) as entries:
            return next(entries, None) is not None
    except OSError:  # not there, not a folder, not readable
        return False


def _filter(dumps: DumpSet, steps: Iterable[int] | None, ranks: Iterable[int] | None) -> DumpSet:
    step_set = set(steps) if steps is not None else None
    rank_set = set(ranks) if ranks is not None else None
    kept = {
        k: d
        for k, d in dumps.dumps.items()
        if (step_set is None or k[0] in step_set) and (rank_set is None or k[1] in rank_set)
    }
    return DumpSet(root=dumps.root, dumps=kept)


def _is_native(root: Path) -> bool:
    return (
        root.is_dir() and any(_NATIVE_RANK.match(p.name) for p in root.iterdir() if p.is_dir())
    ) or bool(_NATIVE_RANK.match(root.name))


def _locate(root: Path) -> list[tuple[int, int, Path]]:
    """(step, rank, dump.json) triples, sorted."""
    if root.is_file():
        return [(_step_of(root.parent.parent), _rank_of_dir(root.parent), root)]
    if (root / "dump.json").exists():  # not is_file: a planted FIFO is refused, not skipped
        return [(_step_of(root.parent), _rank_of_dir(root), root / "dump.json")]
    step_dirs = sorted(
        (int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP.match(p.name))
    )
    if step_dirs:
        return [t for step, d in step_dirs for t in _ranks_in(d, step)]
    return _ranks_in(root, _step_of(root))


def _ranks_in(step_dir: Path, step: int) -> list[tuple[int, int, Path]]:
    subdirs = [p for p in step_dir.iterdir() if p.is_dir() and (p / "dump.json").exists()]
    ranked = sorted((int(m.group(1) or 0), p) for p in subdirs if (m := _RANK.match(p.name)))
    procs = sorted((int(m.group(1)), p) for p in subdirs if (m := _PROC.match(p.name)))
    out = [(step, rank, p / "dump.json") for rank, p in ranked]
    # proc<PID> dirs carry no rank: number them in PID order after any rank dirs.
    out += [(step, len(ranked) + i, p / "dump.json") for i, (_, p) in enumerate(procs)]
    return out


def _step_of(directory: Path) -> int:
    m = _STEP.match(directory.name)
    return int(m.group(1)) if m else 0


def _rank_of_dir(directory: Path) -> int:
    m = _RANK.match(directory.name)
    return int(m.group(1) or 0) if m else 0
