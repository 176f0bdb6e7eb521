"""Training-log readers: every supported format becomes one ``LogTable`` (step-indexed pandas)."""

from __future__ import annotations

from pathlib import Path

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs import golden, hf, megatron, mindformers, tabular, tensorboard, torchtitan
from pytest_accuracy.logs.detect import ALIASES, FORMATS, sniff
from pytest_accuracy.logs.golden import write_golden
from pytest_accuracy.logs.table import STANDARD_COLUMNS, LogTable

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
    path: str | Path, fmt: str | None = None, *, logging_steps: int | None = None
) -> LogTable:
    """Read a training log of any supported format into a ``LogTable``.

    ``fmt`` forces a format (see ``FORMATS``; family names such as ``mindspeed``
    or ``hf`` are accepted); by default it is detected from the name and content.
    ``logging_steps`` numbers the steps of printed HF dicts, which carry none.
    Every unreadable input raises ``AccuracyInputError`` naming the file.
    """
    path = Path(path)
    if not path.exists():
        raise AccuracyInputError(path, "file not found")
    name = _format_name(path, fmt)
    if name == "tensorboard" or (name is None and sniff(path, b"") == "tensorboard"):
        return tensorboard.parse(path)
    if path.is_dir():
        raise AccuracyInputError(path, f"is a directory, not a {name} log")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AccuracyInputError(path, f"cannot read: {exc.strerror or exc}") from exc
    if not data or data.isspace():  # isspace stops at the first other byte; strip copies
        raise AccuracyInputError(path, "empty file: no training steps")
    name = name or sniff(path, data)
    if name is None:
        raise AccuracyInputError(
            path, f"unknown log format: no training-step lines (tried: {', '.join(FORMATS)})"
        )
    if name == "hf-log":
        return hf.parse_printed(data, path, logging_steps)
    return _PARSERS[name](data, path)


def _format_name(path: Path, fmt: str | None) -> str | None:
    if fmt is None:
        return None
    name = ALIASES.get(fmt.lower(), fmt.lower())
    if name not in FORMATS:
        raise AccuracyInputError(path, f"unknown log format {fmt!r} (known: {', '.join(FORMATS)})")
    return name
