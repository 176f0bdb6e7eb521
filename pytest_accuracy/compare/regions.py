"""Regions of the NPU run for items at scale: a layer's calls, or a run of consecutive calls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_accuracy.dumps.model import Call, Dump

# Up to this many nodes a run gets one item per node (about 0.45 ms of pytest machinery an
# item: under a second); beyond, one item per region (a 100k-node step: seconds, not a minute).
NODE_ITEMS_UP_TO = 2000
# Nodes of one region item at most: a decoder layer's forward at L1 (~40 calls) fits whole.
REGION_SIZE = 64


@dataclass(frozen=True)
class Region:
    """Consecutive NPU nodes of one step and rank, checked by one item."""

    step: int
    rank: int
    name: str  # the layer's module call, or "<first node>..<last node>"
    indices: tuple[int, ...]


def regions(entries: Sequence[tuple[Dump, Call]], chosen: Sequence[int],
            size: int = REGION_SIZE) -> list[Region]:
    """The ``chosen`` nodes (indices into ``entries``, in order) cut into regions: a run of
    nodes inside the same indexed layer ("layers.3", from construct.json and module names)
    and direction is that layer's region, named by the layer's own call when the run holds
    it; nodes outside any recorded layer (L1 dumps record none) form runs named
    "<first>..<last>". A region holds ``size`` nodes at most (a longer one is cut, its pieces
    numbered). Names are stable from run to run of the same model and unique."""
    layers = _LayerIndex()
    runs: list[tuple[tuple[int, int, str | None, str], list[int]]] = []
    for i in chosen:
        dump, call = entries[i]
        direction = "forward" if call.direction == "forward" else "backward"
        key = (dump.step, dump.rank, layers.of(dump, call), direction)
        if runs and runs[-1][0] == key:
            runs[-1][1].append(i)
        else:
            runs.append((key, [i]))
    out: list[Region] = []
    for (step, rank, layer, _), run in runs:
        calls = [entries[i][1] for i in run]
        own = next((c.name for c in calls if c.kind == "module" and c.scope == layer), None)
        for at in range(0, len(run), size):
            piece = run[at:at + size]
            name = own or _ends(entries[piece[0]][1].name, entries[piece[-1]][1].name)
            out.append(Region(step, rank, name, tuple(piece)))
    return _unique(out)


def _ends(first: str, last: str) -> str:
    return first if first == last else f"{first}..{last}"


def _unique(found: list[Region]) -> list[Region]:
    """A layer cut in pieces (longer than the size, or interleaved) numbers them: #2, #3."""
    seen: dict[tuple[int, int, str], int] = {}
    out = []
    for region in found:
        key = (region.step, region.rank, region.name)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            region = Region(region.step, region.rank, f"{region.name}#{seen[key]}",
                            region.indices)
        out.append(region)
    return out


def layer_path(scope: str) -> str | None:
    """The module path up to its first index: "model.layers.3.mlp.up" -> "model.layers.3"."""
    parts = scope.split(".")
    for at, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: at + 1])
    return None


class _LayerIndex:
    """The indexed layer (module path) each node runs in, from its own or its parents' names."""

    def __init__(self) -> None:
        self._memo: dict[tuple[int, int, str], str | None] = {}

    def of(self, dump: Dump, call: Call) -> str | None:
        if call.kind in ("module", "params_grad"):
            return layer_path(call.scope)
        return self._module(dump, call.parent) if call.parent else None

    def _module(self, dump: Dump, name: str) -> str | None:
        """The layer of the nearest module around an API call (its parent is a module)."""
        key = (dump.step, dump.rank, name)
        if key not in self._memo:
            parent = dump.get(name)
            if parent is not None:
                self._memo[key] = self.of(dump, parent) if parent.kind != "api" else None
            else:  # construct.json names a parent dump.json does not record
                from pytest_accuracy.dumps.msprobe import module_scope, parse_node_name

                named = parse_node_name(name)[0] in ("module", "params_grad")
                self._memo[key] = layer_path(module_scope(name)) if named else None
        return self._memo[key]
