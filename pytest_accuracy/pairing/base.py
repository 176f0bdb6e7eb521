"""Which bench call each NPU call is compared with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pytest_accuracy.dumps.model import Dump

# (npu dump, bench dump) -> {npu node name: bench node name}; absent names are unmatched.
Pairing = Callable[[Dump, Dump], Mapping[str, str]]


def pair_by_name(npu: Dump, bench: Dump) -> dict[str, str]:
    """Same-framework pairing: identical node names."""
    return {c.name: c.name for c in npu.calls if bench.get(c.name) is not None}


class PairMap(dict[str, str]):
    """NPU node -> bench node, with the region-node pairs marked (``regions``) and the NPU
    calls left unpaired between two calls whose values agree (``inside``: why, in words)."""

    regions: dict[str, str]
    region_calls: dict[str, list[str]]  # of a region the NPU run makes: its calls, in order
    inside: dict[str, str]
    other_code: bool  # two codebases (module paths apart): names and dtype placement theirs

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.regions = {}
        self.region_calls = {}
        self.inside = {}
        self.other_code = False
