"""torchtitan logs (``step: N  loss: x  grad_norm: y``) and its ``<step> <loss>`` loss files."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_accuracy.logs.table import (
    LogTable,
    count_lines,
    cut_truncated_tail,
    finish,
    no_steps,
    to_float,
    to_int,
)

FORMAT = "torchtitan"
FORMAT_LOSSES = "torchtitan-losses"

# torchtitan colours every key (``\x1b[32mloss:``): the colour codes are matched in place,
# which costs nothing, where removing them from the whole file cost 2x the parse.
_C = rb"(?:\x1b\[[0-9;]*m)?"
_STEP = re.compile(
    rb"step: *(\d+) +" + _C + rb"loss: *([^\s\x1b]+)(?: +" + _C + rb"grad_norm: *([^\s\x1b]+))?"
)
_LOSS_FILE = re.compile(rb"^ *(\d+)[ \t,]+([^\s,]+) *\r?$", re.M)
_COMPLETE = re.compile(rb"%" + _C + rb"\s*$")


def parse(data: bytes, path: Path) -> LogTable:
    """Read torchtitan metric lines (ANSI colours and ``[rank0]:`` prefixes are ignored)."""
    data, tail = cut_truncated_tail(data, _COMPLETE)
    rows = _STEP.findall(data)
    if not rows:
        raise no_steps(path, FORMAT)
    notes = [tail] if tail else []
    loss, bad = to_float([r[1] for r in rows])
    grad, bad_g = to_float([r[2] for r in rows])
    if bad + bad_g:
        notes.append(f"{bad + bad_g} unparseable value(s) read as NaN")
    if (ignored := count_lines(data) - len(rows)) > 0:
        notes.append(f"{ignored} other line(s) ignored")
    steps = to_int([r[0] for r in rows])
    return finish(path, FORMAT, steps, {"loss": loss, "grad_norm": grad}, notes=notes)


def parse_losses(data: bytes, path: Path) -> LogTable:
    """Read a ``<step> <repr(float)>`` loss file (``tests/assets/losses/*.txt``)."""
    rows = _LOSS_FILE.findall(data)
    if not rows:
        raise no_steps(path, FORMAT_LOSSES)
    loss, bad = to_float([r[1] for r in rows])
    notes = [f"{bad} unparseable value(s) read as NaN"] if bad else []
    if (ignored := count_lines(data) - len(rows)) > 0:
        notes.append(f"{ignored} other line(s) ignored")
    return finish(path, FORMAT_LOSSES, to_int([r[0] for r in rows]), {"loss": loss}, notes=notes)
