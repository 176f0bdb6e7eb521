"""Every mapping file read into one form: the API map, msprobe's -am/-cm/-dm/-lm, and ours."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over

MAPPING_FORMAT = "pytest-accuracy-mapping/1"
MappingKind = Literal["ours", "api", "layer", "data", "cell"]


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
    replay_positional: frozenset[str] = frozenset()  # primitive classes replayed as their PT API
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

    def replayed_as(self, ms_api: str) -> str | None:
        """The PyTorch API a float64 replay runs for a MindSpore primitive, where it may."""
        prefix, _, cls = self.ms_key(ms_api).partition(".")
        replayable = prefix == "Primitive" and cls in self.replay_positional
        return self.to_pt(ms_api) if replayable else None


@dataclass(frozen=True)
class MappingFile:
    """One mapping file, recognised and checked: which kind, and its table in plain names.

    ``names``: ours (NPU node -> bench node), ``-dm`` (NPU row -> bench row), ``-cm``
    (``path.MSClass`` -> ``path.PTClass``); ``layers``: ``-lm`` (class -> {ms attr: pt attr});
    ``api_map``: ``-am`` merged over the built-in map.
    """

    kind: MappingKind
    path: Path
    names: Mapping[str, str] = field(default_factory=dict)
    layers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    api_map: ApiMap | None = None


def read_mapping_file(path: str | Path) -> MappingFile:
    """Any supported mapping file, recognised by its content (the file is read once).

    Ours (a ``pairs`` key), msprobe ``-am`` (a list), ``-lm`` (class -> {attr: attr}), ``-dm``
    (row names with forward/backward), else ``-cm`` (``path.Class: path.Class``).
    """
    where = Path(path)
    doc = load_yaml(where, "mapping")
    if isinstance(doc, dict) and "pairs" in doc:
        return MappingFile("ours", where, names=_our_pairs(doc, where))
    if isinstance(doc, list):
        return MappingFile("api", where, api_map=_api_map_of(doc, where))
    if not isinstance(doc, dict) or not doc:
        raise AccuracyInputError(where, "empty or unrecognised mapping file")
    if all(isinstance(v, dict) for v in doc.values()):
        return MappingFile("layer", where, layers=_layers_of(doc, where))
    keys = [str(k) for k in doc]
    if any(node_of_row(k) != k or k.endswith((".forward", ".backward")) for k in keys):
        return MappingFile("data", where, names=str_map(doc, where, "a data mapping"))
    return MappingFile("cell", where, names=str_map(doc, where, "a cell mapping"))


# --------------------------------------------------------------------------- YAML and names


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


# --------------------------------------------------------------------------- one reader a kind


def read_cell_mapping(path: str | Path) -> dict[str, str]:
    """msprobe ``-cm``: ``{ms_path.MSClass: pt_path.PTClass}``, in file order."""
    return str_map(load_yaml(path, "cell mapping"), path, "a cell mapping")


def read_data_mapping(path: str | Path) -> dict[str, str]:
    """msprobe ``-dm``: ``{NPU row name: bench row name}`` exactly as written."""
    doc = load_yaml(path, "data mapping")
    return str_map(doc if doc is not None else {}, path, "a data mapping")


def read_layer_mapping(path: str | Path) -> dict[str, dict[str, str]]:
    """msprobe ``-lm``: ``{MSParentClass: {ms_child_attr: pt_child_attr}}``, root ``TopLayer``."""
    return _layers_of(load_yaml(path, "layer mapping"), path)


def _layers_of(doc: Any, where: str | Path) -> dict[str, dict[str, str]]:
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise AccuracyInputError(where, "a layer mapping maps class names to {ms_attr: pt_attr}")
    return {str(k): str_map(v, where, f"layer mapping entry {k!r}") for k, v in doc.items()}


def load_mapping_yaml(path: str | Path) -> dict[str, str]:
    """The pairs of one of our mapping files (``null`` entries dropped)."""
    doc = load_yaml(path, "mapping")
    if not isinstance(doc, dict) or not isinstance(doc.get("pairs"), dict):
        raise AccuracyInputError(path, f"not a {MAPPING_FORMAT} file: no 'pairs' mapping")
    return _our_pairs(doc, path)


def _our_pairs(doc: dict[str, Any], path: str | Path) -> dict[str, str]:
    if not isinstance(doc.get("pairs"), dict):
        raise AccuracyInputError(path, f"not a {MAPPING_FORMAT} file: no 'pairs' mapping")
    if doc.get("format", MAPPING_FORMAT) != MAPPING_FORMAT:
        raise AccuracyInputError(path, f"unsupported format {doc.get('format')!r}")
    pairs: dict[str, str] = {}
    for name, other in doc["pairs"].items():
        if not isinstance(name, str) or not (other is None or isinstance(other, str)):
            raise AccuracyInputError(path, f"pair {name!r}: {other!r} is not node name: node name")
        if other is not None:
            pairs[name] = other
    duplicated = [v for v, n in Counter(pairs.values()).items() if n > 1]
    if duplicated:
        raise AccuracyInputError(path, f"bench node(s) used twice: {', '.join(duplicated[:3])}")
    return pairs


# --------------------------------------------------------------------------- the API map


@cache
def load_api_map() -> ApiMap:
    """The built-in MS->PT API map (``pytest_accuracy/data/ms_to_pt_api.yaml``)."""
    data = resources.files("pytest_accuracy") / "data" / "ms_to_pt_api.yaml"
    import yaml

    # Plain safe_load: the C loader breaks when pytest's pytester restores sys.modules
    # between in-process runs ("could not determine a constructor for the tag None").
    doc = yaml.safe_load(data.read_text(encoding="utf-8"))
    return _api_map_from_sections(doc, str(data))


def read_api_mapping(path: str | Path) -> ApiMap:
    """A user API map merged over the built-in one.

    Accepts msprobe's ``-am`` list (``- {ms_api, pt_api, ms_args, pt_args, ms_outputs,
    pt_outputs}``), msprobe's internal ``{ms_api: pt_api}`` dict, or our sectioned format.
    """
    where = Path(path)
    return _api_map_of(load_yaml(where, "API mapping"), where)


def _api_map_of(doc: Any, where: Path) -> ApiMap:
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
        replay_positional=names("replay_positional"),
    )


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
