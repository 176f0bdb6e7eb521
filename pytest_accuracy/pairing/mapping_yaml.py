"""Our editable mapping yaml (pytest-accuracy-mapping/1) written from an alignment."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from pytest_accuracy.pairing.base import Pairing
from pytest_accuracy.pairing.mapfiles import MAPPING_FORMAT, load_mapping_yaml
from pytest_accuracy.pairing.naming import fixed_pairing


def write_mapping_yaml(
    pairs: Mapping[str, str],
    evidence: Mapping[str, str],
    path: str | Path,
    *,
    confidence: Mapping[str, float] | None = None,
    unmatched: Iterable[str] = (),
    source: str = "",
) -> Path:
    """Write our editable mapping: one ``"npu node": "bench node"`` line per pair.

    Format (``format: pytest-accuracy-mapping/1``): a YAML document with a ``pairs`` mapping from
    NPU node name to bench node name (or ``null`` for an NPU node left unmatched, listed so
    a person can fill it in). Names are JSON-quoted. The confidence and evidence of each pair
    are trailing comments: they document, they are never read back. ``read_mapping_yaml`` of
    the file gives back exactly ``pairs``.
    """
    conf = confidence or {}
    lines = [
        "# pytest-accuracy node mapping: NPU node -> bench node (null = no counterpart found).",
        "# Edit freely: fix a bench name, delete a line, or fill in a null. The comments",
        "# (confidence in [0,1], then the evidence of the automatic alignment) are not read back.",
    ]
    if source:
        lines.append(f"# source: {_comment(source)}")
    lines += [f"format: {MAPPING_FORMAT}", "pairs:"]
    for name, other in pairs.items():
        note = _comment(evidence.get(name, ""))
        score = f"{conf[name]:.3f} " if name in conf else ""
        comment = f"  # {score}{note}".rstrip() if score or note else ""
        lines.append(f"  {json.dumps(name)}: {json.dumps(other)}{comment}")
    for name in unmatched:
        if name not in pairs:
            lines.append(f"  {json.dumps(name)}: null  # unmatched")
    from pytest_accuracy.safe_io import write_atomic

    return write_atomic(path, "\n".join(lines) + "\n")


def _comment(text: str) -> str:
    """``text`` on one line as a YAML comment may hold it: printable ASCII, the rest escaped
    (names hold DEL or lone surrogates, which YAML refuses even inside a comment)."""
    flat = " ".join(text.split())
    return flat.encode("ascii", "backslashreplace").decode("ascii").translate(_NO_CONTROLS)


_NO_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F)}


def read_mapping_yaml(path: str | Path) -> Pairing:
    """Our mapping file as a Pairing (pairs whose nodes exist in both dumps)."""
    return fixed_pairing(load_mapping_yaml(path))
