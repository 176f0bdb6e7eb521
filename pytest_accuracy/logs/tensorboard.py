"""TensorBoard event files (MindFormers, Megatron, torchtitan, HF tags) via the optional package.

One run is one set of event files: the files of one directory, in name (time) order, where
each later file resumes the run (its first loss step is past the earlier file's first).  A
directory holding several runs (sub-directories, or files that each start the curve again)
is refused with their names, unless they are per-rank (``rank_N``): then the last rank with
a loss is read, as for text logs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_accuracy.errors import AccuracyInputError, require
from pytest_accuracy.logs.table import LogTable, finish, validation_frame

FORMAT = "tensorboard"
_EVENTS = "events.out.tfevents*"
_MAX_FILES = 4096
_RANK_DIR = re.compile(r"rank_?(\d+)$")

#: Tags read into table columns, first present wins (full precision, per iteration).
TAGS: dict[str, tuple[str, ...]] = {
    "loss": ("lm loss", "loss", "train/loss", "loss/train", "train_loss", "train/lm_loss",
             "training/loss", "Loss/train", "loss_metrics/global_avg_loss", "lm-loss"),
    "grad_norm": ("grad-norm", "grad_norm", "train/grad_norm", "grad_norm/train",
                  "grad_norm/total"),
    "lr": ("learning-rate", "train/learning_rate", "lr", "learning_rate", "lr/train"),
    "loss_scale": ("loss-scale",),
}
_VALIDATION = ("lm loss validation", "eval/loss", "loss/val", "loss/validation", "val/loss",
               "validation/loss", "val_loss")

Scalars = Mapping[str, Sequence[tuple[int, float]]]


def has_events(path: Path) -> bool:
    """``path`` is an event file, or a directory with one in it or a sub-directory."""
    if path.name.startswith("events.out.tfevents"):
        return True
    return path.is_dir() and next(iter(path.rglob(_EVENTS)), None) is not None


def parse(path: Path, tag: str | None = None) -> LogTable:
    """Read one run's scalars (``tensorboard`` extra needed); ``tag`` names the loss tag."""
    if not path.is_dir():
        return from_scalars(path, _read_file(path), tag)
    files = sorted(path.rglob(_EVENTS))[: _MAX_FILES + 1]
    if len(files) > _MAX_FILES:
        raise AccuracyInputError(path, f"more than {_MAX_FILES} event files: give one run")
    sets: dict[Path, list[Path]] = {}
    for f in files:
        sets.setdefault(f.parent, []).append(f)
    if len(sets) == 1:
        return _one_set(path, next(iter(sets.values())), tag)
    ranks = {d: m for d in sets if (m := _RANK_DIR.search(d.name))}
    if len(ranks) == len(sets):
        return _last_rank(path, sets, {d: int(m.group(1)) for d, m in ranks.items()}, tag)
    names = ", ".join(str(d.relative_to(path)) or "." for d in sets)
    raise AccuracyInputError(path, f"holds {len(sets)} TensorBoard runs ({names}): give one "
                             "run's directory or event file as the log")


def _read_file(path: Path) -> dict[str, list[tuple[int, float]]]:
    module: Any = require("tensorboard.backend.event_processing.event_accumulator", "tensorboard")
    acc = module.EventAccumulator(str(path), size_guidance={module.SCALARS: 0})
    try:
        acc.Reload()
    except Exception as exc:  # the package raises many types for corrupt files
        raise AccuracyInputError(path, f"unreadable TensorBoard events: {exc}") from exc
    return {
        tag: [(int(e.step), float(e.value)) for e in acc.Scalars(tag)]
        for tag in acc.Tags().get("scalars", [])
    }


def _one_set(where: Path, files: list[Path], tag: str | None) -> LogTable:
    """The event files of one directory: one run, each later file resuming it; or refused."""
    merged: dict[str, list[tuple[int, float]]] = {}
    first_step: int | None = None
    for f in files:
        scalars = _read_file(f)
        loss_tag = tag if tag in scalars else next((t for t in TAGS["loss"] if scalars.get(t)),
                                                    None)
        start = min(s for s, _ in scalars[loss_tag]) if loss_tag and scalars[loss_tag] else None
        if start is not None and first_step is not None and start <= first_step:
            names = ", ".join(p.name for p in files)
            raise AccuracyInputError(
                where, f"{len(files)} event files of more than one run ({names}): each starts "
                "the loss curve again; give one event file as the log")
        first_step = first_step if start is None or first_step is not None else start
        for name, values in scalars.items():
            merged.setdefault(name, []).extend(values)  # a resumed step keeps the later value
    table = from_scalars(where, merged, tag)
    if len(files) > 1:
        note = f"{len(files)} event files of one resumed run merged"
        return replace(table, notes=(note, *table.notes))
    return table


def _last_rank(where: Path, sets: dict[Path, list[Path]], rank: dict[Path, int],
               tag: str | None) -> LogTable:
    """Per-rank event directories (MindFormers ``rank_N``): the last rank with a loss."""
    missing: list[str] = []
    for directory in sorted(sets, key=lambda d: -rank[d]):
        try:
            table = _one_set(where, sets[directory], tag)
        except AccuracyInputError as exc:
            if "no loss scalar" not in exc.problem:
                raise
            missing.append(directory.name)
            continue
        note = f"per-rank event files: loss read from {directory.name} (the last with a loss)"
        return replace(table, notes=(note, *table.notes))
    raise AccuracyInputError(where, f"no rank directory has a loss scalar ({', '.join(missing)})")


def from_scalars(path: Path, scalars: Scalars, tag: str | None = None) -> LogTable:
    """Build the table from ``{tag: [(step, value), ...]}`` (kept separate to test without TB)."""
    chosen = _choose(path, scalars, tag)
    validation_tags = {t for t in _VALIDATION if scalars.get(t)}
    extra = [
        t
        for t in scalars
        if t.endswith("loss") and t not in chosen.values() and "validation" not in t
        and t not in validation_tags and not t.startswith("eval")
    ]
    steps = np.array(sorted({s for t in [*chosen.values(), *extra] for s, _ in scalars[t]}))
    cols: dict[str, np.ndarray] = {}
    for name, t in [*chosen.items(), *((t, t) for t in extra)]:
        by_step = dict(scalars[t])  # a rewritten step keeps its last value
        cols[name] = np.array([by_step.get(int(s), np.nan) for s in steps], dtype=np.float64)
    notes = [f"columns from tags: {', '.join(f'{c}={t}' for c, t in chosen.items())}"]
    table = finish(path, FORMAT, steps.astype(np.int64), cols, notes=notes)
    if not validation_tags:
        return table
    values = scalars[min(validation_tags, key=_VALIDATION.index)]
    frame = validation_frame([str(s).encode() for s, _ in values],
                             [repr(v).encode() for _, v in values])
    return replace(table, validation=frame)


def _choose(path: Path, scalars: Scalars, tag: str | None) -> dict[str, str]:
    """The tag of each column; a loss tag asked for and absent, or none found, is refused."""
    chosen: dict[str, str] = {}
    for column, tags in TAGS.items():
        found = next((t for t in tags if scalars.get(t)), None)
        if found:
            chosen[column] = found
    found_tags = ", ".join(sorted(scalars)) or "none"
    if tag is not None:
        if not scalars.get(tag):
            raise AccuracyInputError(path, f"no scalar tagged {tag!r} (--acc-log-tag) in the "
                                     f"event files (found: {found_tags})")
        chosen["loss"] = tag
    if "loss" not in chosen:
        raise AccuracyInputError(
            path,
            f"no loss scalar in the event files (looked for: {', '.join(TAGS['loss'])}; "
            f"found: {found_tags}); name it with --acc-log-tag",
        )
    return chosen
