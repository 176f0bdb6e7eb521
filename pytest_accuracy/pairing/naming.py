"""Cross-framework node names: the MS->PT API map, msprobe's mapping files and our mapping yaml."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_accuracy.dumps.model import Call, Dump
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.pairing.base import Pairing

MAPPING_FORMAT = "pytest-accuracy-mapping/1"
_MODULE_KINDS = ("module", "params_grad")


@dataclass(frozen=True)
class ArgMap:
    """One entry of a user msprobe ``-am`` yaml: which MS args/outputs match which PT ones."""

    ms_api: str
    pt_api: str
    ms_args: tuple[int, ...] = ()
    pt_args: tuple[int, ...] = ()
    ms_outputs: tuple[int, ...] = ()
    pt_outputs: tuple[int, ...] = ()


@dataclass(frozen=True)
class ApiMap:
    """MindSpore API names ("Mint.rsqrt") -> PyTorch API names ("Torch.rsqrt"), plus API facts."""

    prefix_rules: Mapping[str, str] = field(default_factory=dict)
    apis: Mapping[str, str] = field(default_factory=dict)
    alternatives: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    op_aliases: Mapping[str, str] = field(default_factory=dict)
    pt_low_risk: frozenset[str] = frozenset()
    pt_composite_backward: frozenset[str] = frozenset()
    leading_output: frozenset[str] = frozenset()  # fused ops: outputs past the first are aux
    arg_maps: Mapping[str, ArgMap] = field(default_factory=dict)

    def to_pt(self, api: str) -> str:
        """The PyTorch name of a MindSpore API; unknown names are kept (Tensor.* mostly agree)."""
        api = self.ms_key(api)
        if api in self.apis:
            return self.apis[api]
        prefix, _, rest = api.partition(".")
        return f"{self.prefix_rules[prefix]}.{rest}" if prefix in self.prefix_rules else api

    @staticmethod
    def ms_key(api: str) -> str:
        """The name the map knows an MS API by: ``Primitive.<attribute>.<Class>`` by its class."""
        prefix, _, rest = api.partition(".")
        return f"Primitive.{rest.rpartition('.')[2]}" if prefix == "Primitive" else api

    def base_op(self, api: str) -> str:
        """Prefix-free, alias-normalised op ("Tensor.__add__" -> "add") for fuzzy op equality."""
        op = api.partition(".")[2] or api
        return self.op_aliases.get(op, op)

    def is_low_risk(self, pt_api: str) -> bool:
        """True for APIs PyTorch's msprobe skips at risk_level FOCUS (MindSpore dumps them)."""
        return pt_api.partition(".")[2] in self.pt_low_risk

    def is_composite_backward(self, pt_api: str) -> bool:
        return pt_api in self.pt_composite_backward


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


# --------------------------------------------------------------------------- API map files


def load_yaml(path: str | Path, what: str) -> Any:
    import yaml

    from pytest_accuracy.safe_io import read_input_text
    from pytest_accuracy.safe_yaml import safe_load

    file = Path(path)
    try:
        return safe_load(read_input_text(file), file)
    except (OSError, UnicodeDecodeError) as exc:
        raise AccuracyInputError(file, f"cannot read {what}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise AccuracyInputError(file, f"{what} is not valid YAML: {exc}") from exc


def str_map(value: Any, where: str | Path, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise AccuracyInputError(where, f"{what} must map names to names (name: other_name)")
    if len(value) > limit("mapping_rules"):  # every rule is tried on every node name
        raise AccuracyInputError(where, f"{what}: {over('mapping_rules', len(value))}")
    return dict(value)


def _api_map_from_sections(doc: dict[str, Any], where: str | Path) -> ApiMap:
    def names(key: str) -> frozenset[str]:
        value = doc.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise AccuracyInputError(where, f"'{key}' must be a list of API names")
        return frozenset(value)

    alts = doc.get("alternatives") or {}
    if not isinstance(alts, dict) or not all(isinstance(v, list) for v in alts.values()):
        raise AccuracyInputError(where, "'alternatives' must map an API to a list of APIs")
    return ApiMap(
        prefix_rules=str_map(doc.get("prefix_rules") or {}, where, "'prefix_rules'"),
        apis=str_map(doc.get("apis") or {}, where, "'apis'"),
        alternatives={str(k): tuple(str(x) for x in v) for k, v in alts.items()},
        op_aliases=str_map(doc.get("op_aliases") or {}, where, "'op_aliases'"),
        pt_low_risk=names("pt_low_risk"),
        pt_composite_backward=names("pt_composite_backward"),
        leading_output=names("leading_output"),
    )


@cache
def load_api_map() -> ApiMap:
    """The built-in MS->PT API map (``pytest_accuracy/data/ms_to_pt_api.yaml``)."""
    data = resources.files("pytest_accuracy") / "data" / "ms_to_pt_api.yaml"
    import yaml

    # Plain safe_load: the C loader breaks when pytest's pytester restores sys.modules
    # between in-process runs ("could not determine a constructor for the tag None").
    doc = yaml.safe_load(data.read_text(encoding="utf-8"))
    return _api_map_from_sections(doc, str(data))


def _index_list(
    entry: dict[str, Any], keys: tuple[str, ...], where: Path, i: int
) -> tuple[int, ...]:
    for key in keys:
        if key in entry:
            value = entry[key]
            if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
                raise AccuracyInputError(where, f"entry #{i + 1}: '{key}' must be a list of ints")
            return tuple(value)
    return ()


def _arg_maps(doc: list[Any], where: Path) -> dict[str, ArgMap]:
    out = {}
    for i, entry in enumerate(doc):
        if not isinstance(entry, dict) or not isinstance(entry.get("ms_api"), str):
            raise AccuracyInputError(where, f"entry #{i + 1} needs 'ms_api' and 'pt_api' names")
        if not isinstance(entry.get("pt_api"), str):
            raise AccuracyInputError(where, f"entry #{i + 1} needs 'ms_api' and 'pt_api' names")
        am = ArgMap(
            entry["ms_api"],
            entry["pt_api"],
            _index_list(entry, ("ms_args",), where, i),
            _index_list(entry, ("pt_args",), where, i),
            _index_list(entry, ("ms_outputs", "ms_output"), where, i),
            _index_list(entry, ("pt_outputs", "pt_output"), where, i),
        )
        if len(am.ms_args) != len(am.pt_args) or len(am.ms_outputs) != len(am.pt_outputs):
            raise AccuracyInputError(
                where, f"entry #{i + 1} ({am.ms_api}): ms_/pt_ index lists differ in length"
            )
        out[am.ms_api] = am
    return out


def read_api_mapping(path: str | Path) -> ApiMap:
    """A user API map merged over the built-in one.

    Accepts msprobe's ``-am`` list (``- {ms_api, pt_api, ms_args, pt_args, ms_outputs,
    pt_outputs}``), msprobe's internal ``{ms_api: pt_api}`` dict, or our sectioned format.
    """
    where = Path(path)
    doc = load_yaml(where, "API mapping")
    base = load_api_map()
    if isinstance(doc, list):
        arg_maps = _arg_maps(doc, where)
        apis = {**base.apis, **{k: v.pt_api for k, v in arg_maps.items()}}
        return replace(base, apis=apis, arg_maps={**base.arg_maps, **arg_maps})
    if isinstance(doc, dict) and ("apis" in doc or "prefix_rules" in doc):
        extra = _api_map_from_sections(doc, where)
        return replace(
            base,
            prefix_rules={**base.prefix_rules, **extra.prefix_rules},
            apis={**base.apis, **extra.apis},
            alternatives={**base.alternatives, **extra.alternatives},
            op_aliases={**base.op_aliases, **extra.op_aliases},
            pt_low_risk=base.pt_low_risk | extra.pt_low_risk,
            pt_composite_backward=base.pt_composite_backward | extra.pt_composite_backward,
        )
    if isinstance(doc, dict):
        return replace(base, apis={**base.apis, **str_map(doc, where, "an API mapping")})
    raise AccuracyInputError(where, "an API mapping must be a list of {ms_api, pt_api} or a dict")


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
