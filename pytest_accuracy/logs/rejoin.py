"""Step records split over two lines (``torchrun --tee``, interleaved writers), rejoined.

torchrun's tee reads each rank's output line by line while it is being written: a line
not finished when it is read comes out as two, each with the rank prefix.  Within one
rank's stream (``ranks.split_file`` removed the prefixes) the rest of a cut record is
the next line.  A format whose records have a visible end (Megatron ``... |``,
torchtitan ``mfu: ..%``, HF ``{'loss': ...}``, MindFormers ``{ step:[ ... }``) has its
cut records found and joined with that line; a cut record whose next line is a new log
line or record cannot be completed: it is dropped and named, never read as a step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_C = rb"(?:\x1b\[[0-9;]*m)?"
# A Megatron field at a line's start (`` lm loss: 2.5E+00 |``): the rest of a record cut
# just after a ``|``, which looks whole on its own.
_FIELD_LINE = rb" *[a-z][a-z0-9 _()/%.-]*: [^|\n]*\|"
# From a record's marker to where the line shows it is cut (possessive: one pass, no
# backtracking): Megatron past its last ``|`` something is left, or the next line is the
# rest; torchtitan the line does not end ``%`` (``%)``, colour reset after); HF and
# MindFormers no ``}`` on the line.
_CUT = {
    "megatron": re.compile(
        rb"iteration +\d+/(?:[^\n|]*+\|)*+(?=[ \t\r]*+[^\s|]|[ \t\r]*+\n" + _FIELD_LINE + rb")"),
    "torchtitan": re.compile(
        rb"step: *\d+ [^\n\r]*+(?<!%)(?<!%\))(?<!%\x1b\[39m)(?<!%\x1b\[0m)"
        rb"(?<!%\)\x1b\[39m)(?<!%\)\x1b\[0m)(?=\r?\n|\Z)"),
    "hf-log": re.compile(rb"\{'loss': [^\n}]*+(?=\n|\Z)"),
    "mindformers": re.compile(rb"\{ step:\[[^\n}]*+(?=\n|\Z)"),
}
_MARKER = {
    "megatron": re.compile(rb"iteration +\d+/"),
    "torchtitan": re.compile(rb"step: *\d+ +" + _C + rb"loss:"),
    "hf-log": re.compile(rb"\{'"),
    "mindformers": re.compile(rb"Epoch:\[|step:\["),
}
# The start of a new log line (a logger header), which no continuation starts with.
_NEW_LINE = re.compile(
    rb"\s*(?:\[?\d{4}-\d\d-\d\d|\[(?:INFO|WARNING|ERROR|DEBUG)\]|(?:INFO|WARNING|ERROR) |==> )"
)
_MAX_PARTS = 8  # a record cut into more pieces than this is not rejoined


@dataclass(frozen=True)
class Rejoined:
    data: bytes
    joined: int  # records rejoined
    dropped: tuple[str, ...]  # the starts of cut records whose rest was not found


def rejoin(data: bytes, fmt: str) -> Rejoined:
    """``data`` with each cut record joined to its rest (or dropped, see the module doc)."""
    cut = _CUT.get(fmt)
    found = cut.search(data) if cut is not None else None
    if cut is None or found is None:
        return Rejoined(data, 0, ())
    out: list[bytes] = []
    joined, dropped, pos = 0, [], 0
    while found is not None:
        start = data.rfind(b"\n", 0, found.start()) + 1
        out.append(data[pos:start])
        line_end = _past_line(data, found.end())
        text, end = _complete(data, start, line_end, cut, fmt)
        if text is None:
            dropped.append(data[start:line_end][-60:].decode("utf-8", "replace").strip())
        else:
            out.append(text)
            joined += 1
        pos = end
        found = cut.search(data, pos)
    out.append(data[pos:])
    return Rejoined(b"".join(out), joined, tuple(dropped))


def _complete(
    data: bytes, start: int, pos: int, cut: re.Pattern[bytes], fmt: str
) -> tuple[bytes | None, int]:
    """The rejoined record line and where the data goes on after it, or (None, past the cut
    line) when a following line is a new record or log line, or the data ends."""
    text = data[start:pos].rstrip(b" \t\r\n")
    past_cut = pos
    for _ in range(_MAX_PARTS):
        if pos >= len(data):
            break
        nxt_end = _past_line(data, pos)
        nxt = data[pos:nxt_end]
        if _NEW_LINE.match(nxt) or _MARKER[fmt].search(nxt):
            break
        line = text + nxt.rstrip(b" \t\r\n")
        # Whether the joined record still looks cut, with the lines after it as context.
        again = cut.search(line + b"\n" + data[nxt_end : data.find(b"\n", nxt_end) + 1])
        if again is None or again.start() > len(line):
            return line + b"\n", nxt_end
        text, pos = line, nxt_end
    return None, past_cut


def _past_line(data: bytes, pos: int) -> int:
    """The offset just past the line ``pos`` is on (its newline included)."""
    nl = data.find(b"\n", pos)
    return len(data) if nl < 0 else nl + 1
