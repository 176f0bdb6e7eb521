"""Multi-rank logs: lines attributed to their rank, the loss read from the rank that computes it.

A launcher tags each line with its rank (torchrun ``--tee``: ``[default0]:`` or, with
``--role rank``, ``[rank0]:``; ``srun --label``: ``0: ``; ``mpirun --tag-output``:
``[1,0]<stdout>:``), ``tail -f worker_*.log`` heads each file's chunk with ``==> name <==``,
and msrun / torchrun ``--log-dir`` / MindFormers write one file per rank.  Each rank's
lines are read as a log of their own; only ranks of the last pipeline stage have the loss
(the others print nothing, a placeholder such as torchtitan's ``loss: -1.00000`` or msrun's
``loss: N/A (non-last PP stage ...)``, which the readers refuse as ``PlaceholderLoss``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.table import LogTable

#: Line prefixes a launcher adds, group 1 the rank (local rank for torchrun).
_PREFIXES = (
    rb"\[[A-Za-z_]*(\d+)\]:",  # torchrun --tee: [{role}{local_rank}]: ([default0]:, [rank0]:)
    rb"\[\d+,(\d+)\]<std(?:out|err)>:",  # mpirun --tag-output
    rb" {0,3}(\d+): ",  # srun --label
)
#: Where a step record starts, per format (the first one's line tells the prefix kind).
MARKERS = {
    "megatron": re.compile(rb"iteration +\d+/"),
    "torchtitan": re.compile(rb"step: *\d+ +(?:\x1b\[[0-9;]*m)?loss:"),
    "mindformers": re.compile(rb"Epoch:\[|\{ step:\["),
    "hf-log": re.compile(rb"\{'loss': "),
}
_TAIL = re.compile(rb"^==> (.+?) <==[ \t\r]*\n", re.M)
_NUMBER = re.compile(r"(\d+)")
_SCAN = 1 << 20  # bytes searched for the first record when choosing the prefix kind


class PlaceholderLoss(AccuracyInputError):
    """Every step record of this rank has a placeholder, not a loss (non-last pipeline stage)."""


@dataclass(frozen=True)
class Stream:
    """The lines of one rank (``rank`` None: lines no launcher tagged) and where they are."""

    rank: int | None
    label: str
    data: bytes


def split_file(data: bytes, fmt: str) -> list[Stream] | None:
    """The ranks' streams of a one-file log, or None when it holds one rank's lines only."""
    if (data.startswith(b"==> ") or b"\n==> " in data) and _TAIL.search(data):
        return _split_tail(data)
    kind = _prefix_kind(data, fmt)
    if kind is None:
        return None
    prefix = re.compile(rb"^(?:" + kind + rb")", re.M)
    first = prefix.search(data)
    assert first is not None  # the kind was learnt from a line that has it
    mine = first.group(0)
    if data.count(b"\n" + mine) + data.startswith(mine) >= data.count(b"\n"):
        return None  # every line has this rank's prefix (counted at memchr speed)
    other = re.compile(rb"^(?!" + re.escape(mine) + rb")(?:" + kind + rb")", re.M)
    if not other.search(data):
        return None  # one rank: the readers ignore the prefix
    lines: dict[bytes, list[bytes]] = defaultdict(list)
    for rank, line in re.findall(rb"^(?:" + kind + rb")?([^\n]*\n|[^\n]+)", data, re.M):
        lines[rank].append(line)
    return [
        Stream(int(rank) if rank else None, _rank_label(rank), b"".join(part))
        for rank, part in lines.items()
    ]


def _rank_label(rank: bytes) -> str:
    return f"rank {int(rank)}" if rank else "untagged lines"


def _prefix_kind(data: bytes, fmt: str) -> bytes | None:
    """The launcher prefix on the first step record's line, as a regex, or None."""
    marker = MARKERS.get(fmt)
    found = marker.search(data, 0, _SCAN) if marker else None
    if found is None:
        return None
    head = data[data.rfind(b"\n", 0, found.start()) + 1 : found.start()]
    return next((kind for kind in _PREFIXES if re.match(kind, head)), None)


def _split_tail(data: bytes) -> list[Stream]:
    """``tail -f a b``: each ``==> name <==`` header starts a chunk of that file."""
    parts: dict[str, list[bytes]] = defaultdict(list)
    found = list(_TAIL.finditer(data))
    parts[""].append(data[: found[0].start()])
    for m, nxt in zip(found, [*found[1:], None], strict=True):
        name = m.group(1).decode("utf-8", "replace")
        parts[name].append(data[m.end() : nxt.start() if nxt else len(data)])
    return [Stream(_rank_of(name), name or "untagged lines", b"".join(chunks))
            for name, chunks in parts.items() if any(c.strip() for c in chunks)]


def _rank_of(name: str) -> int | None:
    """The rank a file name says (its last number: ``worker_3.log``, ``rank_3/info.log``)."""
    numbers = _NUMBER.findall(name.replace("\\", "/").rsplit(".", 1)[0])
    return int(numbers[-1]) if numbers else None


#: Text-log names in a directory of per-rank logs.
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
_MAX_FILES = 4096


def rank_files(directory: Path) -> dict[str, list[Path]]:
    """Text logs under ``directory`` grouped by rank label (``worker_3.log`` -> ``rank 3``)."""
    files = sorted(
        p for p in directory.rglob("*")
        if p.suffix.lower() in LOG_SUFFIXES and p.is_file() and not p.is_symlink()
    )
    if len(files) > _MAX_FILES:
        raise AccuracyInputError(directory, f"{len(files)} text files: more than {_MAX_FILES} "
                                 "per-rank logs (give the last pipeline stage's log)")
    groups: dict[str, list[Path]] = defaultdict(list)
    for path in files:
        rank = _rank_of(str(path.relative_to(directory)))
        groups[f"rank {rank}" if rank is not None else path.name].append(path)
    return groups


Reader = Callable[[bytes, str], LogTable]


def pick(streams: list[Stream], read: Reader, where: Path) -> LogTable:
    """The table of the last rank whose records carry a loss (the last pipeline stage).

    ``read`` reads one stream (``AccuracyInputError`` when it has no step record, its
    ``PlaceholderLoss`` subclass when it has placeholders only).  Other ranks with a loss
    (data-parallel replicas) are named in a note; none with a loss is a refusal.
    """
    tables: list[tuple[Stream, LogTable]] = []
    placeholders: list[str] = []
    for stream in streams:
        try:
            tables.append((stream, read(stream.data, stream.label)))
        except PlaceholderLoss:
            placeholders.append(stream.label)
        except AccuracyInputError:
            continue  # no step record on this rank (Megatron prints on the last rank only)
    if not tables:
        if placeholders:
            raise AccuracyInputError(where, _no_loss(placeholders))
        raise AccuracyInputError(where, f"no training steps in any of {len(streams)} "
                                 f"rank stream(s) ({_names([s.label for s in streams])})")
    untagged = [s for s, _ in tables if s.rank is None]
    if len(tables) > 1 and len(untagged) > 1:
        raise AccuracyInputError(where, "several logs with a loss and no rank in their names "
                                 f"({_names([s.label for s in untagged])}): give one of them")
    stream, table = max(tables, key=lambda st: -1 if st[0].rank is None else st[0].rank)
    others = [s.label for s, _ in tables if s is not stream]
    note = f"multi-rank log ({len(streams)} streams): loss read from {stream.label}"
    if placeholders:
        note += f"; placeholders only (non-last pipeline stage): {_names(placeholders)}"
    if others:
        note += f"; other ranks with a loss, not read: {_names(others)}"
    return replace(table, path=where, notes=(note, *table.notes))


def _no_loss(placeholders: list[str]) -> str:
    return (f"no rank in this input has the loss: {_names(placeholders)} print only "
            "placeholders (non-last pipeline stage); give the last stage's log too")


def _names(labels: list[str]) -> str:
    shown = ", ".join(labels[:8])
    return shown + (f" and {len(labels) - 8} more" if len(labels) > 8 else "")
