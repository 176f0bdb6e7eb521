"""The canonical config key table (data/config_keys.yaml) and how one side's value is looked up."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from pytest_accuracy.configs.values import truthy
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.safe_yaml import safe_load

Flavour = Literal["mindformers", "megatron"]
FLAVOURS: tuple[Flavour, ...] = ("mindformers", "megatron")
CATEGORIES = (
    "network",
    "moe",
    "optimizer",
    "weights",
    "mixed_precision",
    "parallel",
    "training",
    "other",
)
VALUE_TYPES = ("int", "float", "bool", "str", "dtype")
DEFAULT_TOLERANCE = 1e-9
TABLE_PATH = Path(__file__).resolve().parent.parent / "data" / "config_keys.yaml"

# Top-level sections only a MindFormers yaml has; a Megatron argument set is flat.
_MINDFORMERS_SECTIONS = frozenset(
    {
        "model",
        "parallel_config",
        "runner_config",
        "runner_wrapper",
        "lr_schedule",
        "moe_config",
        "trainer",
        "context",
        "recompute_config",
        "optimizer",
        "parallel",
    }
)
_NO_DEFAULT = object()


def megatron_name(name: str) -> str:
    """Normalise a Megatron argument name: '--num-layers' and 'num_layers' give 'num_layers'."""
    return name.strip().lstrip("-").replace("-", "_")


def megatron_flag(name: str) -> str:
    """The command-line spelling users know: 'num_layers' -> '--num-layers'."""
    return "--" + megatron_name(name).replace("_", "-")


def mindformers_source(path: str) -> str:
    """Show list indices as subscripts: 'optimizer.betas.1' -> 'optimizer.betas[1]'."""
    out = ""
    for part in path.split("."):
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


def config_flavour(cfg: Mapping[str, object]) -> Flavour | None:
    """'mindformers' for a nested MindFormers yaml, 'megatron' for flat arguments, else None."""
    if any(isinstance(cfg.get(k), Mapping) for k in _MINDFORMERS_SECTIONS):
        return "mindformers"
    known = _known_megatron_names()
    if any(megatron_name(str(k)) in known for k in cfg):
        return "megatron"
    return None


@dataclass(frozen=True)
class SideSpec:
    """How one framework expresses a canonical key."""

    names: tuple[str, ...] = ()
    fallback: tuple[str, ...] = ()
    derive: str | None = None
    implied: tuple[tuple[str, object], ...] = ()
    default: object = _NO_DEFAULT
    values: Mapping[str, str] = field(default_factory=dict)

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    @property
    def expressible(self) -> bool:
        """False where the framework has no setting for the key at all."""
        return bool(self.names or self.fallback or self.derive or self.implied or self.has_default)


@dataclass(frozen=True)
class KeySpec:
    """One canonical key: what it is, where each side keeps it, and why the guide checks it."""

    key: str
    category: str
    type: str
    why: str
    tolerance: float
    moe: bool
    mindformers: SideSpec
    megatron: SideSpec

    def side(self, flavour: Flavour) -> SideSpec:
        return self.mindformers if flavour == "mindformers" else self.megatron


@dataclass(frozen=True)
class KeyTable:
    """The loaded table plus what unmapped_keys() should look at and leave out."""

    keys: Mapping[str, KeySpec]
    mindformers_sections: tuple[str, ...]
    irrelevant: Mapping[Flavour, tuple[str, ...]]


@dataclass(frozen=True)
class Found:
    """A value found on one side; `raw` is what the file says when it differs from `value`."""

    value: object
    source: str
    raw: object = None


class Side:
    """One config seen through its flavour: name lookup, defaults on or off, labels for messages."""

    def __init__(
        self,
        cfg: Mapping[str, object],
        flavour: Flavour,
        label: str,
        path: str | None = None,
        use_defaults: bool = True,
    ) -> None:
        self.flavour: Flavour = flavour
        self.label = label
        self.path = path
        self.use_defaults = use_defaults
        if flavour == "megatron":
            cfg = {megatron_name(str(k)): v for k, v in cfg.items()}
        self.cfg = cfg

    def get(self, name: str) -> object | None:
        """The value under `name`, or None where it is absent or null."""
        if self.flavour == "megatron":
            return self.cfg.get(megatron_name(name))
        node: object = self.cfg
        for part in name.split("."):
            if isinstance(node, Mapping):
                node = node.get(part)
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    def flag(self, name: str) -> bool | None:
        """A flag's truth (booleans, 'true', per-stage lists), None where it is not set."""
        value = self.get(name)
        return None if value is None else truthy(value)

    def source(self, name: str) -> str:
        return megatron_flag(name) if self.flavour == "megatron" else mindformers_source(name)

    def first(self, names: Iterable[str]) -> Found | None:
        for name in names:
            value = self.get(name)
            if value is not None:
                return Found(value, self.source(name))
        return None

    def default(self, value: object, name: str) -> Found | None:
        """A framework default, or None when the caller turned defaults off."""
        if not self.use_defaults:
            return None
        framework = "Megatron" if self.flavour == "megatron" else "MindFormers"
        return Found(value, f"{self.source(name)} ({framework} default)")

    def model_type(self) -> str:
        """Model class names of a MindFormers config, e.g. 'LlamaConfig/LlamaForCausalLM'."""
        if self.flavour != "mindformers":
            return ""
        parts = (self.get(p) for p in ("model.model_config.type", "model.arch.type"))
        return "/".join(str(p) for p in parts if p is not None)


def resolve(side: Side, spec: KeySpec) -> Found | None:
    """Find the key's raw value on one side: names, derivation, fallback, model class, default."""
    how = spec.side(side.flavour)
    if how.derive is not None:
        return derive_function(how.derive)(side)
    found = side.first(how.names)
    if found is not None:
        return found
    for name in how.fallback:
        value = side.get(name)
        if value is not None:
            unset = side.source(how.names[0]) if how.names else spec.key
            return Found(value, f"{side.source(name)} ({unset} unset)")
    model = side.model_type()
    for pattern, value in how.implied:
        if side.use_defaults and pattern in model.lower():
            return Found(value, f"{model} (implied by the model class)")
    if how.has_default:
        return side.default(how.default, how.names[0] if how.names else spec.key)
    return None


DeriveFn = Callable[[Side], "Found | None"]
_DERIVE: dict[str, tuple[DeriveFn, tuple[str, ...]]] = {}


def register_derive(name: str, reads: tuple[str, ...]) -> Callable[[DeriveFn], DeriveFn]:
    """Register a derivation by the name the table uses; `reads` feeds unmapped_keys()."""

    def wrap(fn: DeriveFn) -> DeriveFn:
        _DERIVE[name] = (fn, reads)
        return fn

    return wrap


def derive_function(name: str) -> DeriveFn:
    _register()
    return _DERIVE[name][0]


def derive_reads(name: str) -> tuple[str, ...]:
    derive_function(name)
    return _DERIVE[name][1]


def load_key_table(path: str | Path | None = None) -> KeyTable:
    """Load and validate a key table (the packaged one by default, cached)."""
    if path is None:
        return _packaged_table()
    return _load_table(Path(path))


@functools.lru_cache(maxsize=1)
def _packaged_table() -> KeyTable:
    return _load_table(TABLE_PATH)


@functools.lru_cache(maxsize=1)
def _known_megatron_names() -> frozenset[str]:
    table = _packaged_table()
    names: set[str] = set()
    for spec in table.keys.values():
        names.update(megatron_name(n) for n in (*spec.megatron.names, *spec.megatron.fallback))
        if spec.megatron.derive:
            names.update(megatron_name(n) for n in derive_reads(spec.megatron.derive))
    names.update(n for n in table.irrelevant["megatron"] if not n.endswith("*"))
    return frozenset(names)


def _load_table(path: Path) -> KeyTable:
    try:
        data = safe_load(path.read_text(encoding="utf-8"), path)
    except (OSError, yaml.YAMLError) as exc:
        raise AccuracyInputError(path, f"cannot load the config key table: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("keys"), dict):
        raise AccuracyInputError(path, "a key table needs a 'keys' mapping")
    keys = {str(k): _key_spec(path, str(k), v) for k, v in data["keys"].items()}
    irrelevant = {f: tuple(str(n) for n in data.get(f"{f}_irrelevant") or ()) for f in FLAVOURS}
    sections = tuple(str(s) for s in data.get("mindformers_sections") or ())
    return KeyTable(keys, sections, irrelevant)


def _key_spec(path: Path, key: str, entry: object) -> KeySpec:
    if not isinstance(entry, dict):
        raise AccuracyInputError(path, f"key '{key}' must be a mapping")
    category, kind = entry.get("category"), entry.get("type")
    if category not in CATEGORIES:
        raise AccuracyInputError(path, f"key '{key}': category must be one of {CATEGORIES}")
    if kind not in VALUE_TYPES:
        raise AccuracyInputError(path, f"key '{key}': type must be one of {VALUE_TYPES}")
    if not entry.get("why"):
        raise AccuracyInputError(path, f"key '{key}' needs a 'why' from the guide")
    return KeySpec(
        key=key,
        category=str(category),
        type=str(kind),
        why=" ".join(str(entry["why"]).split()),
        tolerance=float(entry.get("tolerance", DEFAULT_TOLERANCE)),
        moe=bool(entry.get("moe", False)),
        mindformers=_side_spec(path, key, entry, "mindformers"),
        megatron=_side_spec(path, key, entry, "megatron"),
    )


def _side_spec(path: Path, key: str, entry: dict[str, object], flavour: str) -> SideSpec:
    def names(field_name: str) -> tuple[str, ...]:
        raw = entry.get(f"{flavour}{field_name}")
        if raw is None:
            return ()
        if not isinstance(raw, list):
            raise AccuracyInputError(path, f"key '{key}': {flavour}{field_name} must be a list")
        return tuple(str(n) for n in raw)

    derive = entry.get(f"{flavour}_derive")
    if derive is not None and str(derive) not in _derive_names():
        raise AccuracyInputError(path, f"key '{key}': unknown derivation '{derive}'")
    implied = entry.get(f"{flavour}_implied") or {}
    values = entry.get(f"{flavour}_values") or {}
    if not isinstance(implied, dict) or not isinstance(values, dict):
        raise AccuracyInputError(path, f"key '{key}': {flavour}_implied/_values must be mappings")
    return SideSpec(
        names=names(""),
        fallback=names("_fallback"),
        derive=None if derive is None else str(derive),
        implied=tuple((str(k).lower(), v) for k, v in implied.items()),
        default=entry.get(f"{flavour}_default", _NO_DEFAULT),
        values={str(k).lower(): str(v).lower() for k, v in values.items()},
    )


def _derive_names() -> frozenset[str]:
    _register()
    return frozenset(_DERIVE)


def _register() -> None:
    # The derivation modules register themselves on import; imported late to avoid a cycle.
    from pytest_accuracy.configs import derive, derive_train  # noqa: F401
