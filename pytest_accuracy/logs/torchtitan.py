"""torchtitan logs (``step: N  loss: x  grad_norm: y``) and its ``<step> <loss>`` loss files."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from pytest_accuracy.logs.fields import SEP, Columns, Fields
from pytest_accuracy.logs.ranks import PlaceholderLoss
from pytest_accuracy.logs.records import Records, read_records
from pytest_accuracy.logs.table import (
    LogTable,
    column_of,
    count_lines,
    cut_truncated_tail,
    finish,
    no_steps,
    to_float,
    to_int,
    validation_frame,
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
# The compiled scanner reads the metric line as words (``step: 14  loss:  3.24405``: padding
# varies with the value); _STEP stays the definition and reads every line the scanner leaves.
_RECORDS = Records(re.compile(rb"step:([^\n]*)"), b"step:", once=True)
_KEY_COLOUR = re.compile(r"^\x1b\[[0-9;]*m")
# ``Validator.validate`` (components/validate.py): f"{color.yellow}validate step: {step:2}  "
# f"{color.green}loss: {loss:7.4f}  ...": a validation record, never a training step.
_VALIDATE = re.compile(
    rb"^[^\n]*validate step: *(\d+) +" + _C + rb"loss: *([^\s\x1b]+)[^\n]*(?:\n|\Z)", re.M
)
# Non-last pipeline stages have no loss: train.py logs ``torch.tensor([-1.0])`` for them.
PLACEHOLDER = -1.0


def _column(key: str) -> str | None:
    name = _KEY_COLOUR.sub("", key)
    return name if name in ("loss", "grad_norm") else None


_FIELDS = Fields(
    bytes.maketrans(b": \t\r", SEP * 4),
    _column,
    fixed={0: "_step"},
    collapse=True,
    digits=frozenset({"_step"}),
)


def parse(data: bytes, path: Path) -> LogTable:
    """Read torchtitan metric lines (ANSI colours and ``[rank0]:`` prefixes are ignored)."""
    data, tail = cut_truncated_tail(data, _COMPLETE)
    validation = None
    if b"validate step:" in data:
        rows = _VALIDATE.findall(data)
        validation = validation_frame([r[0] for r in rows], [r[1] for r in rows])
        data = _VALIDATE.sub(b"", data)
    parsed = read_records(data, _RECORDS, _FIELDS, rest=_regex_rows)
    if not len(parsed):
        raise no_steps(path, FORMAT)
    notes = [tail] if tail else []
    if validation is not None:
        notes.append(f"{len(validation)} validation record(s) kept apart (table.validation)")
    if parsed.bad:
        notes.append(f"{parsed.bad} unparseable value(s) read as NaN")
    if (ignored := count_lines(data) - len(parsed)) > 0:
        notes.append(f"{ignored} other line(s) ignored")
    cols = {k: column_of(parsed.values, k, len(parsed)) for k in ("_step", "loss", "grad_norm")}
    cols = _drop_placeholders(path, cols, notes)
    steps = cols.pop("_step").astype(np.int64)
    table = finish(path, FORMAT, steps, cols, notes=notes)
    return replace(table, validation=validation) if validation is not None else table


def _drop_placeholders(
    path: Path, cols: dict[str, np.ndarray], notes: list[str]
) -> dict[str, np.ndarray]:
    """Records whose loss is the non-last-stage placeholder -1.0 are no steps of this rank."""
    fake = cols["loss"] == PLACEHOLDER
    if not fake.any():
        return cols
    if fake.all():
        raise PlaceholderLoss(path, "every loss is torchtitan's -1.0 placeholder: this rank is "
                              "not in the last pipeline stage; give the last stage's log")
    notes.append(f"{int(fake.sum())} record(s) with the -1.0 placeholder loss ignored")
    return {k: v[~fake] for k, v in cols.items()}


def _regex_rows(data: bytes, starts: list[int] | None) -> Columns:
    """The metric lines ``_STEP`` finds, as columns (``starts``: where each record is)."""
    if starts is None:
        rows = _STEP.findall(data)
    else:
        found = list(_STEP.finditer(data))
        rows = [m.groups() for m in found]
        starts += [m.start(1) for m in found]
    loss, bad = to_float([r[1] for r in rows])
    grad, bad_g = to_float([r[2] for r in rows])
    steps = to_int([r[0] for r in rows]).astype(np.float64)
    values = {"_step": steps, "loss": loss, "grad_norm": grad}
    return Columns(values, {}, np.zeros(len(rows), dtype=bool), bad + bad_g)


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
