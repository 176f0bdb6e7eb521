"""Training-log readers: every supported format becomes one ``LogTable`` (step-indexed pandas)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.logs import (
    golden,
    hf,
    megatron,
    mindformers,
    ranks,
    tabular,
    tensorboard,
    torchtitan,
)
from pytest_accuracy.logs.detect import ALIASES, FORMATS, sniff
from pytest_accuracy.logs.golden import write_golden
from pytest_accuracy.logs.rejoin import rejoin
from pytest_accuracy.logs.table import STANDARD_COLUMNS, LogTable
from pytest_accuracy.safe_io import check_regular, read_input_bytes

__all__ = ["FORMATS", "STANDARD_COLUMNS", "LogTable", "read_log", "write_golden"]

_PARSERS = {
    "mindformers": mindformers.parse,
    "megatron": megatron.parse,
    "hf-trainer-state": hf.parse_state,
    "torchtitan": torchtitan.parse,
    "torchtitan-losses": torchtitan.parse_losses,
    "golden": golden.parse,
    "tabular": tabular.parse,
}


def read_log(
    path: str | Path,
    fmt: str | None = None,
    *,
    logging_steps: int | None = None,
    tag: str | None = None,
) -> LogTable:
    """Read a training log of any supported format into a ``LogTable``.

    ``fmt`` forces a format (see ``FORMATS``; family names such as ``mindspeed``
    or ``hf`` are accepted); by default it is detected from the name and content.
    ``logging_steps`` numbers the steps of printed HF dicts, which carry none.
    ``tag`` is the TensorBoard scalar tag of the loss (default: the common names).
    A file with several ranks' lines, or a directory of per-rank text logs, is read
    from the rank that has the loss (see ``logs.ranks``).
    Every unreadable input raises ``AccuracyInputError`` naming the file.
    """
    path = Path(path)
    if not path.exists():
        raise AccuracyInputError(path, "file not found")
    if not path.is_dir():
        check_regular(path)  # a FIFO or /dev/zero given as the log: refused, never read
    name = _format_name(path, fmt)
    if name == "tensorboard" or (name is None and tensorboard.has_events(path)):
        return tensorboard.parse(path, tag)
    if path.is_dir():
        return _read_directory(path, name, logging_steps)
    data = _read_bytes(path)
    name = name or sniff(path, data)
    if name is None:
        raise AccuracyInputError(
            path, f"unknown log format: no training-step lines (tried: {', '.join(FORMATS)})"
        )
    check_line_lengths(data, path)
    streams = ranks.split_file(data, name)
    if streams is not None:
        return ranks.pick(streams, lambda d, _: _read_text(d, path, name, logging_steps), path)
    return _read_text(data, path, name, logging_steps)


def _read_bytes(path: Path) -> bytes:
    try:
        data = read_input_bytes(path)
    except OSError as exc:
        raise AccuracyInputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if not data or data.isspace():  # isspace stops at the first other byte; strip copies
        raise AccuracyInputError(path, "empty file: no training steps")
    return data


def _read_text(data: bytes, path: Path, name: str, logging_steps: int | None) -> LogTable:
    """One rank's text: cut records rejoined, then the format's reader."""
    fixed = rejoin(data, name)
    try:
        if name == "hf-log":
            table = hf.parse_printed(fixed.data, path, logging_steps)
        else:
            table = _PARSERS[name](fixed.data, path)
    except RecursionError:
        raise AccuracyInputError(path, "JSON nests too deep to read") from None
    except OverflowError as exc:  # a step of 10**30 does not fit the int64 step index
        raise AccuracyInputError(path, f"a step or value out of range ({exc})") from None
    notes = []
    if fixed.joined:
        notes.append(f"{fixed.joined} step record(s) split over lines (torchrun --tee, "
                     "interleaved writers) rejoined")
    if fixed.dropped:
        notes.append(f"{len(fixed.dropped)} cut step record(s) whose rest is not in the log "
                     f"dropped, e.g. {fixed.dropped[0]!r}")
    return replace(table, notes=(*notes, *table.notes)) if notes else table


def _read_directory(path: Path, fmt: str | None, logging_steps: int | None) -> LogTable:
    """A directory of per-rank text logs (msrun ``worker_N.log``, ``rank_N/info.log``,
    torchrun ``--log-dir``): each rank read on its own, the loss from the rank that has it."""
    streams, formats, first = [], set(), {}
    for label, files in ranks.rank_files(path).items():
        data = b"".join(read_input_bytes(f) for f in files)
        name = fmt or (sniff(files[0], data) if data.strip() else None)
        if name is None or name == "tensorboard":
            continue  # a launcher's or error log without step records
        check_line_lengths(data, files[0])
        formats.add(name)
        first[label] = files[0]
        rank = int(label[5:]) if label.startswith("rank ") else None
        streams.append(ranks.Stream(rank, label, data))
    if not streams:
        raise AccuracyInputError(path, "a directory with neither TensorBoard event files nor "
                                 f"training logs ({', '.join(ranks.LOG_SUFFIXES)}) in it")
    if len(formats) > 1:
        raise AccuracyInputError(path, f"per-rank logs of several formats "
                                 f"({', '.join(sorted(formats))}): give one rank's log")
    name = formats.pop()
    return ranks.pick(
        streams, lambda d, label: _read_text(d, first[label], name, logging_steps), path
    )


def check_line_lengths(data: bytes, path: Path) -> None:
    """AccuracyInputError when a line is longer than the ``log_line_bytes`` limit.

    Parsing a line costs several times its length (a 100 MB line took 590 MB); newlines are
    found in 16 MiB blocks, so the check itself stays small and linear.
    """
    cap = limit("log_line_bytes")
    if len(data) <= cap:
        return
    view = np.frombuffer(data, dtype=np.uint8)
    start, line = 0, 1  # start: offset of the current line; line: its number
    for block in range(0, len(view), _BLOCK):
        ends = np.flatnonzero(view[block : block + _BLOCK] == 10) + block
        if ends.size:
            gaps = np.diff(ends, prepend=start - 1) - 1  # each line's length without "\n"
            worst = int(np.argmax(gaps))
            if gaps[worst] > cap:
                _too_long(path, line + worst, int(gaps[worst]))
            start, line = int(ends[-1]) + 1, line + int(ends.size)
        elif block + _BLOCK - start > cap:
            break
    if len(view) - start > cap:
        _too_long(path, line, len(view) - start)


def _too_long(path: Path, line: int, length: int) -> None:
    raise AccuracyInputError(path, f"line {line}: {over('log_line_bytes', length)}; "
                                   "not a training log line")


_BLOCK = 1 << 24


def _format_name(path: Path, fmt: str | None) -> str | None:
    if fmt is None:
        return None
    name = ALIASES.get(fmt.lower(), fmt.lower())
    if name not in FORMATS:
        raise AccuracyInputError(path, f"unknown log format {fmt!r} (known: {', '.join(FORMATS)})")
    return name
