"""The size of the next dump, worked out from what the failing dump recorded."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import numpy as np

from pytest_accuracy.dumps.model import canonical_dtype
from pytest_accuracy.dumps.msprobe import parse_node_name
from pytest_accuracy.nextstep.names import is_module, module_path
from pytest_accuracy.nextstep.situation import Estimate, Framework, NodeShape, Side

# What a tensor file costs beyond its data: torch.save's zip container (measured with
# msprobe 26.2.0: 1.8-2.5 KB for a 64-element float32 tensor) and the .npy header.
FILE_OVERHEAD: dict[Framework, int] = {"pytorch": 2048, "mindspore": 128}
# dump.json + stack.json + construct.json per node when the failing dump's own figure is not
# given: measured 0.88 KB on a 156-node msprobe 26.2.0 statistics dump (real models' longer
# names and stacks write more; Side.meta_bytes_per_node carries the real figure)
META_BYTES_PER_NODE = 1024
_ITEMSIZE = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype as msprobe spells it; 4 for one numpy does not know."""
    name = canonical_dtype(dtype)
    if name in _ITEMSIZE:
        return _ITEMSIZE[name]
    try:
        return int(np.dtype(name).itemsize)
    except TypeError:
        return 4  # an unknown dtype: a float32's size rather than none


def tensor_bytes(node: NodeShape) -> int:
    return sum(int(np.prod(t.shape, dtype=np.int64)) * itemsize(t.dtype) for t in node.tensors)


def meta_per_node(side: Side) -> float:
    return side.meta_bytes_per_node if side.meta_bytes_per_node else META_BYTES_PER_NODE


def statistics_dump(side: Side, nodes: int, copies: int = 1,
                    bound: Literal["about", "at most"] = "about") -> Estimate | None:
    """A statistics dump of ``nodes`` nodes a step and rank, ``copies`` step-rank pairs."""
    if nodes <= 0:
        return None
    total = int(nodes * meta_per_node(side) * copies)
    return Estimate(total, nodes * copies, 0, bound)


def tensor_dump(side: Side, shapes: Iterable[NodeShape], *, leaf_apis: bool) -> Estimate | None:
    """A tensor dump of ``shapes``' nodes: their data, one file per tensor, and metadata.

    ``leaf_apis``: the dump adds the APIs inside the modules (level mix) while ``shapes``
    holds modules only (an L0 dump): each leaf module's calls stand for its APIs' (a Linear
    module's input, weight, bias and output are those of its linear call).
    """
    nodes = list(shapes)
    if not nodes:
        return None
    count, files, data = len(nodes), 0, 0
    for node in nodes:
        files += len(node.tensors)
        data += tensor_bytes(node)
    if leaf_apis and not any(not is_module(n.name) for n in nodes):
        for node in _leaf_calls(nodes):
            count, files, data = count + 1, files + len(node.tensors), data + tensor_bytes(node)
    total = data + files * FILE_OVERHEAD[side.framework] + int(count * meta_per_node(side))
    return Estimate(total, count, files)


def module_nodes(shapes: Iterable[NodeShape]) -> int:
    """The nodes an L0 dump of the same step writes: module calls and parameters_grad."""
    return sum(1 for n in shapes if is_module(n.name))


def _leaf_calls(nodes: list[NodeShape]) -> list[NodeShape]:
    """The forward and backward calls of modules with no module inside them."""
    scopes = {module_path(n.name) for n in nodes if is_module(n.name)}
    parents = {p for s in scopes for p in _ancestors(s)}
    if len(scopes) > 1:
        parents.add("")  # the root module (empty path) holds all others
    return [n for n in nodes if parse_node_name(n.name)[0] == "module"
            and module_path(n.name) not in parents]


def _ancestors(scope: str) -> list[str]:
    parts = scope.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]
