"""Guess a log's format from its name and the first bytes, without parsing it."""

from __future__ import annotations

import json
import re
from pathlib import Path

#: Format names ``read_log(fmt=...)`` accepts, in the order detection tries them.
FORMATS = (
    "mindformers",
    "megatron",
    "hf-trainer-state",
    "hf-log",
    "torchtitan",
    "torchtitan-losses",
    "golden",
    "tabular",
    "tensorboard",
)
#: Family names accepted as aliases.
ALIASES = {
    "mindspeed": "megatron",
    "mindspeed-llm": "megatron",
    "megatron-lm": "megatron",
    "mindspore": "mindformers",
    "hf": "hf-log",
    "csv": "tabular",
    "jsonl": "tabular",
    "tb": "tensorboard",
}

_HEAD = 1 << 16
_MEGATRON = re.compile(rb"iteration +\d+/ *\d+ *\|")
_TITAN = re.compile(rb"step: *\d+ +loss: *\S")
_ANSI = re.compile(rb"\x1b\[[0-9;]*m")
# Linear time: the blank-line branch may not match "\n" itself (an `\s*\n` inside `(...)*`
# backtracks exponentially over a few dozen blank lines).
_LOSS_FILE = re.compile(rb"\A(?:#[^\n]*\n|[ \t\r\f\v]*\n)*\d+[ \t,]+[-+0-9.eEnaifN]+[ \t\r]*\n")


def sniff(path: Path, data: bytes) -> str | None:
    """The format name for ``data`` read from ``path``, or None when nothing fits."""
    if path.is_dir() or path.name.startswith("events.out.tfevents"):
        return "tensorboard"
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv", ".jsonl"):
        return "tabular"
    head = data[:_HEAD]
    stripped = head.lstrip()
    if suffix == ".json" or stripped.startswith((b'{"', b"{\n", b"#")):
        kind = _json_kind(data, stripped)
        if kind:
            return kind
    return _text_kind(data, head)


def _json_kind(data: bytes, stripped: bytes) -> str | None:
    if stripped.startswith(b"#") and b"\n{" not in stripped:
        return None
    if b'"log_history"' in stripped:
        return "hf-trainer-state"
    if b'"generated_tokens"' in stripped or b'"generated_text"' in stripped:
        return "golden"  # Megatron inference goldens: the golden reader refuses them by name
    # MindSpeed-LLM baselines are indented JSON: the list opens on the line before its first value.
    if b'"values"' in stripped or re.search(rb'"[^"]+": *\[\s*[-0-9.]', stripped):
        return "golden"
    if stripped.startswith(b'{"') and b"\n" in stripped.strip():
        try:
            json.loads(stripped.split(b"\n", 1)[0])
            return "tabular"
        except ValueError:
            return None
    return None


def _text_kind(data: bytes, head: bytes) -> str | None:
    """Step-line markers: the head first, then the whole file (logs start with config dumps)."""
    for is_head, chunk in ((True, head), (False, data)):
        if b"\x1b[" in chunk:  # coloured console output (torchtitan colours every key)
            chunk = _ANSI.sub(b"", chunk)
        if b"Epoch:[" in chunk and (b"], loss" in chunk or b"local_norm/" in chunk):
            return "mindformers"
        if b"{ step:[" in chunk:
            return "mindformers"
        if _MEGATRON.search(chunk):
            return "megatron"
        if b"{'loss':" in chunk:
            return "hf-log"
        if _TITAN.search(chunk):
            return "torchtitan"
        if is_head and _LOSS_FILE.match(head):
            return "torchtitan-losses"
        if is_head and _looks_tabular(head):
            return "tabular"
        if len(data) <= len(head):
            break
    return None


def _looks_tabular(head: bytes) -> bool:
    first = head.lstrip().split(b"\n", 1)[0].lower()
    return bool(re.match(rb"[\w \"/-]*(step|iteration|iter)[\w \"/-]*[,\t;]", first))
