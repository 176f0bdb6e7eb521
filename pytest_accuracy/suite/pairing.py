"""Choose how NPU nodes find their bench counterparts: by name, a mapping file, or alignment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.compare import Pairing
from pytest_accuracy.dumps.model import Dump
from pytest_accuracy.settings import path_setting, setting


class InferredPairing:
    """Names where they hold, alignment elsewhere, per (step, rank) dump pair; the evidence is
    kept for the report and the inferred mapping."""

    def __init__(self, *, always: bool = False) -> None:
        self.always = always  # --acc-align=always: aligned even where names hold
        self.results: dict[tuple[int, int], Any] = {}

    def __call__(self, npu: Dump, bench: Dump) -> dict[str, str]:
        from pytest_accuracy.pairing.align import auto_pairing
        from pytest_accuracy.pairing.runs import pair_runs

        key = (npu.step, npu.rank)
        if key not in self.results:
            # the rank's first step, paired first (Comparison): what agreed there by value
            earlier = [k for k in self.results if k[1] == key[1] and k[0] < key[0]]
            before = self.results[min(earlier)] if earlier else None
            result = (auto_pairing(npu, bench) if self.always
                      else pair_runs(npu, bench, earlier=before))
            if result.by_name:  # nothing reads its evidence (no mapping file): 7 MB at 100k
                result.confidence, result.evidence = {}, {}
            self.results[key] = result
        pairs: dict[str, str] = self.results[key].pairs
        return pairs

    def write_yaml(self, out_dir: Path) -> Path | None:
        """The inferred mapping as an editable yaml that ``--acc-mapping`` accepts."""
        aligned = [key for key, result in self.results.items() if not result.by_name]
        if not aligned:
            return None
        key = min(aligned)  # node names repeat every step: one step's mapping serves all
        result = self.results[key]
        why = f"; aligned because {result.why_aligned}" if result.why_aligned else ""
        path: Path = result.write_yaml(out_dir / "inferred_mapping.yaml",
                                       source=f"step {key[0]}, rank {key[1]}{why}")
        return path


def choose_pairing(config: pytest.Config, marker: dict[str, Any] | None = None) -> Pairing | None:
    """``--acc-mapping`` wins; else ``--acc-align``: auto takes names where they hold (one
    framework, the same calls) and aligns elsewhere; always aligns; name pairs by name."""
    mapping = path_setting(config, "mapping", marker)
    align = str(setting(config, "align", marker) or "auto")
    if align not in ("auto", "always", "name"):
        raise pytest.UsageError(f"--acc-align: expected auto, always or name, got {align!r}")
    if mapping is not None:
        from pytest_accuracy.pairing.naming import pairing_from_file

        return pairing_from_file(mapping)
    if align == "name":
        return None
    return InferredPairing(always=align == "always")
