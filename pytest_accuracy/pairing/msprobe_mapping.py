"""msprobe's mapping files (-cm cell, -dm data, -lm layer) as Pairings; mapping-file sniffing."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path

from pytest_accuracy.dumps.model import Call, Dump
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.pairing.naming import (
    ApiMap,
    Pairing,
    api_calls,
    api_mapping_pairing,
    api_name,
    canonical_api,
    combine_pairings,
    complete_backward,
    load_api_map,
    load_yaml,
    module_scope,
    read_api_mapping,
    str_map,
)

_MODULE_KINDS = ("module", "params_grad")


def cell_mapping_pairing(mapping: str | Path | Mapping[str, str] | None = None) -> Pairing:
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
        table = str_map(load_yaml(mapping, "cell mapping"), mapping, "a cell mapping")
    renamed: dict[str, str] = {}  # names repeat every step and rank: rename each once

    def rename(call: Call) -> str:
        scope = module_scope(call)
        middle = f"{scope}.{call.op}" if scope else call.op
        new = table.get(middle)
        if new is None:
            new = renamed.get(middle)
        if new is None:
            new = renamed[middle] = _replace_in_order(middle, table, mapping)
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


def node_of_row(row: str) -> str:
    """The node of a compare row / data name (``X.0.forward.input.0`` -> ``X.0.forward``)."""
    parts = row.split(".")
    for i in range(len(parts) - 1, 0, -1):
        tok = parts[i]
        nxt = parts[i + 1] if i + 1 < len(parts) else ""
        if tok in ("forward", "backward", "parameters_grad") and nxt.isdigit():
            return ".".join(parts[: i + 2])  # module / cell / parameters_grad: index follows
        if tok in ("forward", "backward") and parts[i - 1].isdigit():
            return ".".join(parts[: i + 1])  # API: index precedes
    return row


def read_data_mapping(path: str | Path) -> dict[str, str]:
    """msprobe ``-dm``: ``{NPU row name: bench row name}`` exactly as written."""
    doc = load_yaml(path, "data mapping")
    return str_map(doc if doc is not None else {}, path, "a data mapping")


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


def read_layer_mapping(path: str | Path) -> dict[str, dict[str, str]]:
    """msprobe ``-lm``: ``{MSParentClass: {ms_child_attr: pt_child_attr}}``, root ``TopLayer``."""
    doc = load_yaml(path, "layer mapping")
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise AccuracyInputError(path, "a layer mapping maps class names to {ms_attr: pt_attr}")
    return {str(k): str_map(v, path, f"layer mapping entry {k!r}") for k, v in doc.items()}


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
    """Any supported mapping file, recognised by its content.

    Ours (``format:`` key), msprobe ``-am`` (a list), ``-lm`` (class -> {attr: attr}),
    ``-dm`` (row names with forward/backward), else ``-cm`` (``path.Class: path.Class``). The
    API map is always combined in, so a cell or layer mapping also pairs the API nodes of mix.
    """
    doc = load_yaml(path, "mapping")
    if isinstance(doc, dict) and "pairs" in doc:
        from pytest_accuracy.pairing.mapping_yaml import read_mapping_yaml

        return read_mapping_yaml(path)
    if isinstance(doc, list):
        return api_mapping_pairing(read_api_mapping(path))
    if not isinstance(doc, dict) or not doc:
        raise AccuracyInputError(path, "empty or unrecognised mapping file")
    if all(isinstance(v, dict) for v in doc.values()):
        return layer_mapping_pairing(read_layer_mapping(path))
    keys = [str(k) for k in doc]
    if any(node_of_row(k) != k or k.endswith((".forward", ".backward")) for k in keys):
        return combine_pairings(data_mapping_pairing(path), api_mapping_pairing())
    return combine_pairings(cell_mapping_pairing(path), api_mapping_pairing())
