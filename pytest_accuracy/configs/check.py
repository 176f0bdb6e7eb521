"""Compare two training configs key by key against the canonical table; one finding per key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pytest_accuracy.configs.keys import (
    Found,
    KeySpec,
    KeyTable,
    Side,
    config_flavour,
    derive_reads,
    load_key_table,
    megatron_name,
    resolve,
)
from pytest_accuracy.configs.values import canonical, fmt, is_shell_variable, same
from pytest_accuracy.errors import AccuracyInputError

Status = Literal["pass", "fail", "missing", "skip"]
_FRAMEWORK = {"mindformers": "MindFormers", "megatron": "Megatron"}
_NAMES_SHOWN = 4


@dataclass(frozen=True)
class ConfigFinding:
    """The verdict on one canonical key; values are canonical, sources name the original setting."""

    key: str
    category: str
    status: Status
    npu_value: object
    bench_value: object
    npu_source: str | None
    bench_source: str | None
    message: str


@dataclass(frozen=True)
class _Read:
    """One side's reading of a key: what was found, its canonical value, or why it is unreadable."""

    found: Found | None
    value: object = None
    error: str | None = None

    @property
    def source(self) -> str | None:
        return None if self.found is None else self.found.source


def check_configs(
    npu_cfg: Mapping[str, object],
    bench_cfg: Mapping[str, object],
    *,
    npu_path: str | Path | None = None,
    bench_path: str | Path | None = None,
    keys: Iterable[str] | None = None,
    ignore: Iterable[str] = (),
    use_defaults: bool = True,
    table: KeyTable | None = None,
) -> list[ConfigFinding]:
    """Check every canonical key (or only `keys`) of two configs, in the table's order.

    Either side may be a MindFormers config or a Megatron argument set (as read_config returns
    them).  Framework defaults count as set unless `use_defaults` is False.  Keys in `ignore`
    come back as "skip".  Unknown names in `keys`/`ignore` raise ValueError.
    """
    table = table or load_key_table()
    ignored = set(ignore)
    selected = list(table.keys) if keys is None else list(keys)
    unknown = sorted((set(selected) | ignored) - set(table.keys))
    if unknown:
        raise ValueError(f"unknown config keys {unknown}; known: {sorted(table.keys)}")
    npu = _side(npu_cfg, "npu", npu_path, use_defaults)
    bench = _side(bench_cfg, "bench", bench_path, use_defaults)
    moe = _has_moe(table, npu, bench)
    return [
        _check_key(table.keys[key], npu, bench, moe=moe, ignored=key in ignored) for key in selected
    ]


def _side(cfg: Mapping[str, object], label: str, path: str | Path | None, defaults: bool) -> Side:
    flavour = config_flavour(cfg)
    if flavour is None:
        raise AccuracyInputError(
            path or label,
            "neither a MindFormers config nor Megatron arguments (no known key found)",
        )
    return Side(cfg, flavour, label, None if path is None else str(path), defaults)


def _has_moe(table: KeyTable, *sides: Side) -> bool:
    spec = table.keys.get("expert_num")
    if spec is None:
        return False
    reads = [_read(side, spec) for side in sides]
    return any(isinstance(r.value, int) and r.value > 1 for r in reads)


def _read(side: Side, spec: KeySpec) -> _Read:
    found = resolve(side, spec)
    if found is None or is_shell_variable(found.value):
        return _Read(found)
    try:
        return _Read(found, canonical(found.value, spec.type, spec.side(side.flavour).values))
    except ValueError as exc:
        return _Read(found, found.value, f"cannot read it as {spec.type}: {exc}")


def _check_key(spec: KeySpec, npu: Side, bench: Side, *, moe: bool, ignored: bool) -> ConfigFinding:
    head = f"config '{spec.key}'"
    if ignored:
        return _finding(spec, "skip", f"{head} ignored by request")
    if spec.moe and not moe:
        return _finding(spec, "skip", f"{head}: no MoE on either side (expert_num <= 1)")
    blind = [s for s in (npu, bench) if not spec.side(s.flavour).expressible]
    if blind:
        return _not_expressible(spec, npu, bench, blind)
    reads = _read(npu, spec), _read(bench, spec)
    variables = _shell_variables(spec, npu, reads[0]) + _shell_variables(spec, bench, reads[1])
    if variables:
        shown = ", ".join(variables)
        message = (f"{head}: {shown} is a shell variable set outside the script (only the "
                   "script's own assignments are expanded); check by hand")
        return _finding(spec, "skip", message, reads)
    if reads[0].found is None and reads[1].found is None:
        return _finding(spec, "skip", f"{head}: set by neither config", reads)
    if reads[0].found is None or reads[1].found is None:
        return _missing(spec, (npu, bench), reads)
    errors = [
        f"{s.label} {r.source} = {fmt(r.value)}: {r.error}"
        for s, r in zip((npu, bench), reads, strict=True)
        if r.error
    ]
    if errors:
        return _finding(spec, "fail", f"{head}: {'; '.join(errors)}", reads)
    both = f"npu {_show(reads[0])}, bench {_show(reads[1])}"
    if same(reads[0].value, reads[1].value, spec.type, spec.tolerance):
        return _finding(spec, "pass", f"{head} matches: {both}", reads)
    return _finding(spec, "fail", f"{head} differs: {both} ({_guide(spec)})", reads)


def _finding(
    spec: KeySpec, status: Status, message: str, reads: tuple[_Read, _Read] | None = None
) -> ConfigFinding:
    npu, bench = reads or (_Read(None), _Read(None))
    return ConfigFinding(
        spec.key, spec.category, status, npu.value, bench.value, npu.source, bench.source, message
    )


def _show(read: _Read) -> str:
    """`source = raw`, plus `(-> canonical)` where the file spells it differently."""
    assert read.found is not None
    raw = read.found.value if read.found.raw is None else read.found.raw
    shown = f"{read.found.source} = {fmt(raw)}"
    return shown if fmt(raw) == fmt(read.value) else f"{shown} (-> {fmt(read.value)})"


def _guide(spec: KeySpec) -> str:
    return f"the guide: {spec.why.rstrip('.')}"


def _missing(spec: KeySpec, sides: tuple[Side, Side], reads: tuple[_Read, _Read]) -> ConfigFinding:
    has, lacks = (0, 1) if reads[1].found is None else (1, 0)
    where = f" ({sides[lacks].path})" if sides[lacks].path else ""
    names = _names(spec, sides[lacks])
    message = (
        f"config '{spec.key}' is missing on the {sides[lacks].label} side: "
        f"{sides[has].label} {_show(reads[has])}, but the {sides[lacks].label} config{where} "
        f"sets none of {names} ({_guide(spec)})"
    )
    return _finding(spec, "missing", message, reads)


def _names(spec: KeySpec, side: Side) -> str:
    how = spec.side(side.flavour)
    names = [*how.names, *how.fallback, *(derive_reads(how.derive) if how.derive else ())]
    shown = [side.source(n) for n in dict.fromkeys(names)]
    extra = f" (+{len(shown) - _NAMES_SHOWN} more)" if len(shown) > _NAMES_SHOWN else ""
    return ", ".join(shown[:_NAMES_SHOWN]) + extra


def _shell_variables(spec: KeySpec, side: Side, read: _Read) -> list[str]:
    """Settings of this key left as `$VAR` by the command-line reader."""
    if read.found is not None and is_shell_variable(read.found.value):
        return [f"{side.label} {read.found.source} = {read.found.value}"]
    if read.found is not None:
        return []
    how = spec.side(side.flavour)
    names = [*how.names, *how.fallback, *(derive_reads(how.derive) if how.derive else ())]
    return [
        f"{side.label} {side.source(n)} = {side.get(n)}"
        for n in names
        if is_shell_variable(side.get(n))
    ]


def _not_expressible(spec: KeySpec, npu: Side, bench: Side, blind: list[Side]) -> ConfigFinding:
    head = f"config '{spec.key}'"
    if len(blind) == 2:
        frameworks = " and ".join(dict.fromkeys(_FRAMEWORK[s.flavour] for s in blind))
        return _finding(spec, "skip", f"{head}: {frameworks} has no such setting")
    other = bench if blind[0] is npu else npu
    read = _read(other, spec)
    seen = (
        f"{other.label} {_show(read)}"
        if read.found is not None
        else f"{other.label} does not set it"
    )
    reads = (read, _Read(None)) if other is npu else (_Read(None), read)
    message = (
        f"{head}: {_FRAMEWORK[blind[0].flavour]} has no setting for it ({seen}); "
        f"compare by hand ({_guide(spec)})"
    )
    return _finding(spec, "skip", message, reads)


def unmapped_keys(cfg: Mapping[str, object], table: KeyTable | None = None) -> list[str]:
    """Settings in `cfg` that no canonical key reads (for a report; never a failure).

    MindFormers: leaves of the accuracy-relevant sections as dotted paths; Megatron: argument
    names.  Names the table marks irrelevant (paths, logging, ...) are left out.
    """
    table = table or load_key_table()
    flavour = config_flavour(cfg)
    if flavour is None:
        return sorted(str(k) for k in cfg)
    mapped: set[str] = set()
    for spec in table.keys.values():
        how = spec.side(flavour)
        mapped.update(how.names, how.fallback, derive_reads(how.derive) if how.derive else ())
    irrelevant = table.irrelevant[flavour]
    if flavour == "megatron":
        mapped = {megatron_name(n) for n in mapped}
        names = [megatron_name(str(k)) for k in cfg]
    else:
        side = Side(cfg, flavour, "")
        names = [leaf for sec in table.mindformers_sections for leaf in _leaves(side.get(sec), sec)]
    return sorted(n for n in set(names) if not _covered(n, mapped) and not _matches(n, irrelevant))


def _leaves(node: object, prefix: str) -> list[str]:
    if not isinstance(node, Mapping):
        return [] if node is None else [prefix]
    return [leaf for k, v in node.items() for leaf in _leaves(v, f"{prefix}.{k}")]


def _covered(name: str, mapped: set[str]) -> bool:
    # Mapped `optimizer.betas.0` covers the list `optimizer.betas`; mapped `a.b` covers `a.b.c`.
    return any(m == name or name.startswith(m + ".") or m.startswith(name + ".") for m in mapped)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)
