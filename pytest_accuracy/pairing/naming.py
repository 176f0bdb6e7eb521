"""Pairings by names: the API map's names, msprobe's mapping files and ours, call order."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from pytest_accuracy.dumps.model import Call, Dump
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.pairing.base import Pairing
from pytest_accuracy.pairing.mapfiles import (
    ApiMap,
    MappingFile,
    load_api_map,
    node_of_row,
    read_api_mapping,
    read_cell_mapping,
    read_data_mapping,
    read_layer_mapping,
    read_mapping_file,
)

_MODULE_KINDS = ("module", "params_grad")


def api_name(call: Call) -> str:
    """``{Prefix}.{api}`` of an API node (``MintFunctional.linear``)."""
    return f"{call.prefix}.{call.op}"


def module_scope(call: Call) -> str:
    """Module path of a module or parameters_grad node (``layers.0.attn.qkv``).

    Derived from the name because ``Call.scope`` of parameters_grad nodes still ends with
    the class name (``head.Linear``) in the current reader.
    """
    if call.kind in _MODULE_KINDS:
        return ".".join(call.name.split(".")[1:-3])
    return call.scope


def canonical_api(call: Call, npu_framework: str, bench_framework: str, amap: ApiMap) -> str:
    """The API name in the bench's vocabulary: MS names become PT names when the bench is PT."""
    name = api_name(call)
    if npu_framework == "mindspore" and bench_framework != "mindspore":
        return amap.to_pt(name)
    return name


# --------------------------------------------------------------------------- pairing helpers


def _forward_name(call: Call) -> str | None:
    """The forward node an API backward node belongs to (the index is shared)."""
    if call.kind == "api" and call.direction == "backward" and call.name.endswith(".backward"):
        return call.name[: -len("backward")] + "forward"
    return None


def _instance(call: Call) -> str:
    """``Cell.layers.0.attention.LLamaAttention`` of a module/params_grad node."""
    return call.name.rsplit(".", 2)[0]


def complete_backward(npu: Dump, bench: Dump, pairs: Mapping[str, str]) -> dict[str, str]:
    """Add backward and parameters_grad pairs implied by forward pairs (explicit pairs win).

    ``X.n.backward`` pairs with the backward of the bench forward that ``X.n.forward`` paired
    with: msprobe's api mapping renames the *un-renumbered* target key, which pairs the first
    backward fired with the last (Pain point 6); going through the forward avoids that.
    Module backward/parameters_grad nodes follow the module instance pairing.
    """
    out = dict(pairs)
    used = set(out.values())
    instances: dict[str, Counter[str]] = defaultdict(Counter)
    for name, other in pairs.items():
        call, theirs = npu.get(name), bench.get(other)
        if call and theirs and call.kind == "module" and theirs.kind == "module":
            instances[_instance(call)][_instance(theirs)] += 1
    for call in npu.calls:
        if call.name in out:
            continue
        target = None
        fwd = _forward_name(call)
        if fwd is not None and fwd in pairs:
            target = pairs[fwd].removesuffix("forward") + "backward"
        elif call.kind in _MODULE_KINDS and _instance(call) in instances:
            inst = instances[_instance(call)].most_common(1)[0][0]
            target = inst + call.name[len(_instance(call)) :]
        if target is not None and target not in used and bench.get(target) is not None:
            out[call.name] = target
            used.add(target)
    return out


def _ordinal_pairs(
    npu_calls: Iterable[Call], bench_calls: Iterable[Call], npu_key: Callable[[Call], str]
) -> dict[str, str]:
    """The k-th NPU call with key K pairs with the k-th bench call named K (call order)."""
    queues: dict[str, list[str]] = defaultdict(list)
    for call in bench_calls:
        queues[api_name(call)].append(call.name)
    seen: Counter[str] = Counter()
    out = {}
    for call in npu_calls:
        key = npu_key(call)
        k = seen[key]
        seen[key] += 1
        if k < len(queues.get(key, ())):
            out[call.name] = queues[key][k]
    return out


def api_calls(dump: Dump, direction: str) -> list[Call]:
    return [c for c in dump.calls if c.kind == "api" and c.direction == direction]


def api_mapping_pairing(api_map: ApiMap | str | Path | None = None) -> Pairing:
    """msprobe ``-am``: API nodes via the API map, forward by call order; modules untouched.

    Backward pairs go through the forward pair; backward nodes whose forward is not in the
    dump pair the k-th fired backward with the k-th fired backward of the mapped API.
    """
    if isinstance(api_map, ApiMap):
        amap = api_map
    else:
        amap = read_api_mapping(api_map) if api_map is not None else load_api_map()

    def pairing(npu: Dump, bench: Dump) -> dict[str, str]:
        def key(call: Call) -> str:
            return canonical_api(call, npu.framework, bench.framework, amap)

        pairs = _ordinal_pairs(api_calls(npu, "forward"), api_calls(bench, "forward"), key)
        pairs = complete_backward(npu, bench, pairs)
        orphans = [c for c in api_calls(npu, "backward") if c.name not in pairs]
        used = set(pairs.values())
        free = [c for c in api_calls(bench, "backward") if c.name not in used]
        pairs.update(_ordinal_pairs(orphans, free, key))
        return pairs

    return pairing


def combine_pairings(*pairings: Pairing) -> Pairing:
    """Several pairings as one, e.g. cell + API maps (msprobe applies only one of them).

    The first pairing to pair a node wins and a bench node is used once. An API backward pair
    is taken only from the pairing whose forward pair won, so backward follows forward.
    """

    def pairing(npu: Dump, bench: Dump) -> dict[str, str]:
        results = [dict(p(npu, bench)) for p in pairings]
        backward = {c.name: f for c in npu.calls if (f := _forward_name(c)) is not None}
        out: dict[str, str] = {}
        for pairs in results:
            _take(out, ((n, o) for n, o in pairs.items() if n not in backward))
        out = complete_backward(npu, bench, out)
        for pairs in results:
            # A pairing whose forward pair lost would pair the backward inconsistently.
            agree = (
                (n, o)
                for n, o in pairs.items()
                if n in backward
                and (backward[n] not in pairs or out.get(backward[n]) == pairs[backward[n]])
            )
            _take(out, agree)
        return out

    return pairing


def _take(out: dict[str, str], pairs: Iterable[tuple[str, str]]) -> None:
    used = set(out.values())
    for name, other in pairs:
        if name not in out and other not in used:
            out[name] = other
            used.add(other)


def fixed_pairing(pairs: Mapping[str, str]) -> Pairing:
    """A given name map as a Pairing; names repeat every step, so it serves every step."""
    frozen = dict(pairs)

    def pairing(npu: Dump, bench: Dump) -> dict[str, str]:
        return {k: v for k, v in frozen.items() if npu.get(k) and bench.get(v)}

    return pairing


# -------------------------------------------------------------------- msprobe's mapping files


def cell_mapping_pairing(
    mapping: str | Path | Mapping[str, str] | None = None, *, source: str | Path | None = None
) -> Pairing:
    """msprobe ``-cm``: ``Cell`` -> ``Module`` and ``{ms_path}.{MSClass}: {pt_path}.{PTClass}``.

    The middle part of a cell name is looked up exactly, else every yaml key is replaced once
    (as a substring) in file order, as msprobe does. Module backward and parameters_grad nodes
    keep their own counters, so the renamed node is the counterpart.
    """
    if mapping is None:
        table: dict[str, str] = {}
    elif isinstance(mapping, Mapping):
        table = dict(mapping)
    else:
        table = read_cell_mapping(mapping)
    renamed: dict[str, str] = {}  # names repeat every step and rank: rename each once

    def rename(call: Call) -> str:
        scope = module_scope(call)
        middle = f"{scope}.{call.op}" if scope else call.op
        new = table.get(middle)
        if new is None:
            new = renamed.get(middle)
        if new is None:
            new = renamed[middle] = _replace_in_order(middle, table, source or mapping)
        prefix = "Module" if call.prefix == "Cell" else call.prefix
        return f"{prefix}.{new}{call.name[len(call.prefix) + 1 + len(middle) :]}"

    def pairing(npu: Dump, bench: Dump) -> dict[str, str]:
        pairs = {}
        for call in npu.calls:
            if call.kind in _MODULE_KINDS and bench.get(target := rename(call)) is not None:
                pairs[call.name] = target
        return pairs

    return pairing


def _replace_in_order(name: str, table: Mapping[str, str], source: object) -> str:
    """Each key of ``table`` replaced once, in order, as msprobe does; the name's growth is
    bounded (chained rules whose values hold their keys grow it with every rule)."""
    cap = limit("mapping_name_chars")
    for key, value in table.items():
        name = name.replace(key, value, 1)
        if len(name) > cap:
            where = source if isinstance(source, (str, Path)) else "cell mapping"
            raise AccuracyInputError(where, f"renaming a node by the cell mapping: a name of "
                                            f"{over('mapping_name_chars', len(name))}")
    return name


def data_mapping_pairing(mapping: str | Path | Mapping[str, str]) -> Pairing:
    """msprobe ``-dm`` reduced to nodes: rows vote for their node's counterpart.

    Unlisted nodes keep their name (as in msprobe); backward nodes of a remapped forward follow
    it. Argument order inside a node (``gather(weight, ids)`` vs ``embedding(ids, weight)``) is a
    row-level fact this node pairing cannot carry: see ``read_data_mapping`` for the rows.
    """
    rows = dict(mapping) if isinstance(mapping, Mapping) else read_data_mapping(mapping)
    votes: dict[str, Counter[str]] = defaultdict(Counter)
    for npu_row, bench_row in rows.items():
        votes[node_of_row(npu_row)][node_of_row(bench_row)] += 1
    explicit = {k: v.most_common(1)[0][0] for k, v in votes.items()}

    def pairing(npu: Dump, bench: Dump) -> dict[str, str]:
        pairs = {k: v for k, v in explicit.items() if npu.get(k) and bench.get(v)}
        pairs = complete_backward(npu, bench, pairs)
        return _fill_identity(npu, bench, pairs)

    return pairing


def _fill_identity(npu: Dump, bench: Dump, pairs: dict[str, str]) -> dict[str, str]:
    used = set(pairs.values())
    for call in npu.calls:
        if call.name not in pairs and call.name not in used and bench.get(call.name) is not None:
            pairs[call.name] = call.name
    return pairs


def _map_scope(
    scope: str, classes: Mapping[str, str], table: Mapping[str, Mapping[str, str]]
) -> str:
    segs = scope.split(".") if scope else []
    out = []
    for i, seg in enumerate(segs):
        if i == 0:
            entry = table.get("TopLayer") or table.get("Cell") or {}
        else:
            parent = ".".join(segs[:i])
            # An undumped container (CellList "layers") is looked up under its attribute name.
            entry = table.get(classes.get(parent, segs[i - 1]), {})
        out.append(entry.get(seg, seg))
    return ".".join(out)


def layer_mapping_pairing(
    mapping: str | Path | Mapping[str, Mapping[str, str]], api_map: ApiMap | None = None
) -> Pairing:
    """msprobe ``-lm``: cells by attribute renames under their parent class; APIs by parent.

    Unlike msprobe (which degrades to exact names without construct.json), APIs with no parent
    (L1 dumps) fall back to the API map, and parameters_grad nodes are paired too.
    """
    table = read_layer_mapping(mapping) if not isinstance(mapping, Mapping) else mapping
    amap = api_map or load_api_map()

    def pairing(npu: Dump, bench: Dump) -> dict[str, str]:
        classes = {module_scope(c): c.op for c in npu.calls if c.kind == "module"}
        theirs = {
            (module_scope(c), c.direction, c.index): c.name
            for c in bench.calls
            if c.kind in _MODULE_KINDS
        }
        pairs: dict[str, str] = {}
        for call in npu.calls:
            if call.kind in _MODULE_KINDS:
                key = (_map_scope(module_scope(call), classes, table), call.direction, call.index)
                if key in theirs:
                    pairs[call.name] = theirs[key]
        pairs.update(_apis_by_parent(npu, bench, pairs, amap))
        pairs = complete_backward(npu, bench, pairs)
        # APIs outside any module (all of them at L1) fall back to the API map.
        rest = api_mapping_pairing(amap)(npu, bench)
        used = set(pairs.values())
        for call in npu.calls:
            other = rest.get(call.name)
            if other and call.name not in pairs and other not in used and call.parent is None:
                pairs[call.name] = other
        return pairs

    return pairing


def _apis_by_parent(
    npu: Dump, bench: Dump, module_pairs: Mapping[str, str], amap: ApiMap
) -> dict[str, str]:
    """Forward APIs inside paired modules: k-th API of a kind in P <-> k-th in P's counterpart."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for call in api_calls(bench, "forward"):
        if call.parent:
            groups[(call.parent, api_name(call))].append(call.name)
    seen: Counter[tuple[str, str]] = Counter()
    out = {}
    for call in api_calls(npu, "forward"):
        if not call.parent or call.parent not in module_pairs:
            continue
        key = (module_pairs[call.parent], canonical_api(call, npu.framework, bench.framework, amap))
        k = seen[key]
        seen[key] += 1
        if k < len(groups.get(key, ())):
            out[call.name] = groups[key][k]
    return out


def pairing_from_file(path: str | Path) -> Pairing:
    """Any supported mapping file as a Pairing (``mapfiles.read_mapping_file`` tells which).

    The API map is always combined in, so a cell or data mapping also pairs the API nodes
    of mix.
    """
    return pairing_of(read_mapping_file(path))


def pairing_of(file: MappingFile) -> Pairing:
    """The Pairing one mapping file asks for."""
    if file.kind == "ours":
        return fixed_pairing(file.names)
    if file.kind == "api":
        return api_mapping_pairing(file.api_map)
    if file.kind == "layer":
        return layer_mapping_pairing(file.layers)
    if file.kind == "data":
        return combine_pairings(data_mapping_pairing(file.names), api_mapping_pairing())
    cells = cell_mapping_pairing(file.names, source=file.path)
    return combine_pairings(cells, api_mapping_pairing())
