"""Resolve settings with the documented precedence: marker > command line > ini > defaults."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_accuracy.options import BY_DEST, OPTIONS, Option, OptionValueError, parse_value

if TYPE_CHECKING:  # the compare core pulls numpy in: only when a compare runs
    from pytest_accuracy.compare.criteria import CompareCriteria

# Names the code asks for that differ from the option's (the marker and fixtures say "logs").
_ALIASES = {"bench_logs": "bench_log"}


def _option(name: str) -> Option | None:
    return BY_DEST.get("acc_" + _ALIASES.get(name, name))


def _raw(config: pytest.Config, name: str) -> tuple[Any, str]:
    """The command-line value, else the ini value, with what the user typed to set it."""
    option = _option(name)
    dest = option.dest if option else f"acc_{name}"
    value = config.getoption(dest, default=None)
    if value not in (None, [], ""):
        return value, option.flag if option else dest
    try:
        ini = config.getini(dest)
    except ValueError:
        return None, dest
    return (ini if ini not in (None, [], "") else None), f"{dest} (ini)"


def setting(config: pytest.Config, name: str, marker: Mapping[str, Any] | None = None) -> Any:
    """The value of ``name`` (marker key, ``--acc-<name>`` option, ``acc_<name>`` ini key)."""
    if marker and marker.get(name) is not None:
        return marker[name]
    return _raw(config, name)[0]


def typed_setting(config: pytest.Config, name: str, marker: Mapping[str, Any] | None = None
                  ) -> Any:
    """``setting`` parsed by its option's kind; a bad value is a one-line UsageError."""
    option = _option(name)
    if marker and marker.get(name) is not None:
        value, source = marker[name], f"@accuracy({name}=...)"
    else:
        value, source = _raw(config, name)
    if option is None or value is None:
        return value
    try:
        return parse_value(option, value, source)
    except OptionValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def flag(config: pytest.Config, name: str) -> bool:
    """A store_true option or its ini bool (``--acc-precheck`` / ``acc_precheck = true``)."""
    return bool(typed_setting(config, name))


def validate_options(config: pytest.Config) -> list[str]:
    """Parse every given value once at start-up, so a typo fails before anything is read;
    the options (or ini keys) that have a value, by their dest."""
    return [option.dest for option in OPTIONS
            if typed_setting(config, option.dest[4:]) is not None]


def path_setting(config: pytest.Config, name: str, marker: Mapping[str, Any] | None = None
                 ) -> Path | None:
    value = setting(config, name, marker)
    if value is None:
        return None
    path = Path(str(value))
    # ini paths are relative to the ini file, as pytest does for its own path settings.
    from_ini = _raw(config, name)[1].endswith("(ini)") and not (marker and marker.get(name))
    if not path.is_absolute() and from_ini and config.inipath is not None:
        path = config.inipath.parent / path
    return path


def float_setting(config: pytest.Config, name: str, marker: Mapping[str, Any] | None = None
                  ) -> float | None:
    value = typed_setting(config, name, marker)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"@accuracy({name}=...): expected a number, got {value!r}"
                                ) from None


def log_reading(config: pytest.Config, marker: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """How logs are read: ``read_log``'s keywords from --acc-log-tag / --acc-logging-steps."""
    tag = setting(config, "log_tag", marker)
    return {"tag": str(tag) if tag else None,
            "logging_steps": typed_setting(config, "logging_steps", marker)}


def parse_int_set(text: str | None, what: str) -> set[int] | None:
    """'0,2-4' -> {0, 2, 3, 4}; None stays None (no selection)."""
    if not text:
        return None
    option = BY_DEST["acc_steps_select" if what.startswith("step") else "acc_ranks"]
    try:
        return set(parse_value(option, text, option.flag))
    except OptionValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def compare_criteria(config: pytest.Config, marker: Mapping[str, Any] | None = None
                     ) -> CompareCriteria:
    from pytest_accuracy.compare.criteria import CompareCriteria, load_waivers

    waivers_path = path_setting(config, "waivers", marker)
    if marker and marker.get("dtype_aware") is not None:
        dtype_aware = bool(marker["dtype_aware"])
    else:
        dtype_aware = not typed_setting(config, "no_dtype_aware")
    min_matched = float_setting(config, "min_matched", marker)
    return CompareCriteria(
        rel_err=float_setting(config, "rel_err", marker),
        min_cosine=float_setting(config, "min_cosine", marker),
        dtype_aware=dtype_aware,
        min_matched=min_matched if min_matched is not None else 0.5,
        waivers=load_waivers(waivers_path) if waivers_path else (),
        allowed_precisions=_allowed_precisions(setting(config, "allow_precision", marker)),
    )


def _allowed_precisions(value: Any) -> frozenset[tuple[str, str]]:
    from pytest_accuracy.compare.findings import parse_allowed_precisions

    try:
        return parse_allowed_precisions(str(value) if value else None)
    except ValueError as exc:
        raise pytest.UsageError(f"--acc-allow-precision: {exc}") from None


_LOSS_FLOATS = ("first_loss_abs", "first_loss_rel", "mean_abs", "mean_rel", "gnorm_rel",
                "band_factor")


def loss_criteria(config: pytest.Config, marker: Mapping[str, Any] | None = None) -> Any:
    """The migration-standard thresholds with marker > command line > ini > defaults."""
    from pytest_accuracy.curves import LossCriteria

    values: dict[str, Any] = {}
    for name in _LOSS_FLOATS:
        value = float_setting(config, name, marker)
        if value is not None:
            values[name] = value
    steps = marker.get("steps") if marker else None
    if steps is None:
        steps = typed_setting(config, "loss_steps")
    if steps is not None:
        values["steps"] = (int(steps[0]), int(steps[1]))
    relax = (marker or {}).get("relax_to_bench_noise")
    if relax is None:
        relax = typed_setting(config, "relax_to_bench_noise")
    if relax is not None:
        values["relax_to_bench_noise"] = bool(relax)
    return LossCriteria(**values)
