"""A Side made from a loaded Dump: the failing nodes' tensor shapes and the dump's bytes a node."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from pytest_accuracy.dumps.model import Call, Dump, DumpSet
from pytest_accuracy.nextstep.names import api_entry, is_module, module_path
from pytest_accuracy.nextstep.situation import Framework, NodeShape, Side, TensorShape

_META_FILES = ("dump.json", "stack.json", "construct.json")
_MAX_PARENTS = 256  # a construct.json parent chain walked this far at most


def framework_of(dump: Dump) -> Framework:
    """msprobe's framework field as a config's framework (MindTorch runs msprobe.mindspore)."""
    if dump.framework == "pytorch":
        return "pytorch"
    if dump.framework in ("mindspore", "mindtorch"):
        return "mindspore"
    raise ValueError(f"no msprobe config for a {dump.framework!r} dump")


def side_from_dump(dump: Dump, names: Sequence[str] = (), *, given: str = "",
                   whole_step: bool = False) -> Side:
    """The run behind ``dump`` as a next step needs it.

    ``names``: the failing nodes; their shapes are those of the nodes inside them (a module's
    submodules, and its APIs where the dump has their parents). ``whole_step``: every node
    (a loss item's L0 estimate). ``given``: the dump as the user named it, for commands.
    """
    chosen = dump.calls if whole_step or not names else nodes_inside(dump, names)
    dump_json = str(dump.path) if dump.path.suffix == ".json" else ""
    return Side(framework_of(dump), tuple(names), tuple(node_shape(c) for c in chosen),
                given, dump_json, meta_bytes_per_node(dump))


def ranks_of(dumps: DumpSet) -> int:
    """How many ranks a run's dumps hold (a Situation's ``ranks_in_run``)."""
    return max(1, len({rank for _, rank in dumps.dumps}))


def node_shape(call: Call) -> NodeShape:
    records = [*call.input_tensors, *call.output_tensors, *call.parameters]
    return NodeShape(call.name, tuple(TensorShape(r.shape, r.dtype) for r in records))


def meta_bytes_per_node(dump: Dump) -> float | None:
    """The dump's JSON files' bytes per node; None for a native dump or one not on disk."""
    folder = dump.path.parent if dump.path.suffix == ".json" else dump.path
    total = sum(_size(folder / name) for name in _META_FILES)
    return total / len(dump.calls) if total and dump.calls else None


def nodes_inside(dump: Dump, names: Iterable[str]) -> list[Call]:
    """The calls of ``dump`` inside the named modules, or of the named API calls."""
    scopes = [module_path(n) for n in names if is_module(n)]
    apis = {api_entry(n) for n in names if not is_module(n)}
    # a name's api_entry is the name itself or "P.op.I." with the name starting "P.op.":
    # tested first, it spares parsing every name of a big dump (0.1 s at 20k nodes a side)
    heads = tuple({entry.rsplit(".", 2)[0] + "." for entry in apis})
    chosen = {c.name for c in dump.calls if (c.kind in ("module", "params_grad") and any(
        _within(module_path(c.name), s) for s in scopes)) or (c.kind == "api" and (
            c.name in apis or c.name.startswith(heads)) and api_entry(c.name) in apis)}
    if scopes:  # APIs of a mix dump: their construct.json parent is inside a chosen module
        chosen |= {c.name for c in dump.calls if c.kind == "api" and _under(dump, c, chosen)}
    return [c for c in dump.calls if c.name in chosen]


def _within(scope: str, outer: str) -> bool:
    return not outer or scope == outer or scope.startswith(outer + ".")


def _under(dump: Dump, call: Call, chosen: set[str]) -> bool:
    parent, hops = call.parent, 0
    while parent is not None and hops < _MAX_PARENTS:
        if parent in chosen:
            return True
        up = dump.get(parent)
        parent, hops = (up.parent if up is not None else None), hops + 1
    return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0
