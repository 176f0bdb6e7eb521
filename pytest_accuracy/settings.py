"""Resolve settings with the documented precedence: marker > command line > ini > defaults."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.compare.criteria import CompareCriteria, load_waivers


def setting(config: pytest.Config, name: str, marker: Mapping[str, Any] | None = None) -> Any:
    """The value of ``name`` (marker key, ``--acc-<name>`` option, ``acc_<name>`` ini key)."""
    if marker and marker.get(name) is not None:
        return marker[name]
    value = config.getoption(f"acc_{name}", default=None)
    if value not in (None, [], ""):
        return value
    try:
        ini = config.getini(f"acc_{name}")
    except ValueError:
        return None
    return ini if ini not in (None, [], "") else None


def path_setting(config: pytest.Config, name: str, marker: Mapping[str, Any] | None = None
                 ) -> Path | None:
    value = setting(config, name, marker)
    if value is None:
        return None
    path = Path(str(value))
    # ini paths are relative to the ini file, as pytest does for its own path settings.
    from_ini = config.getoption(f"acc_{name}", default=None) in (None, "") and not (
        marker and marker.get(name))
    if not path.is_absolute() and from_ini and config.inipath is not None:
        path = config.inipath.parent / path
    return path


def float_setting(config: pytest.Config, name: str, marker: Mapping[str, Any] | None = None
                  ) -> float | None:
    value = setting(config, name, marker)
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"acc {name}: expected a number, got {value!r}") from exc


def parse_int_set(text: str | None, what: str) -> set[int] | None:
    """'0,2-4' -> {0, 2, 3, 4}; None stays None (no selection)."""
    if not text:
        return None
    out: set[int] = set()
    try:
        for part in str(text).split(","):
            lo, _, hi = part.strip().partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError as exc:
        raise pytest.UsageError(f"--acc-{what}: expected e.g. '0,2-4', got {text!r}") from exc
    return out


def compare_criteria(config: pytest.Config, marker: Mapping[str, Any] | None = None
                     ) -> CompareCriteria:
    waivers_path = path_setting(config, "waivers", marker)
    dtype_aware = setting(config, "dtype_aware", marker)
    min_matched = float_setting(config, "min_matched", marker)
    return CompareCriteria(
        rel_err=float_setting(config, "rel_err", marker),
        min_cosine=float_setting(config, "min_cosine", marker),
        dtype_aware=_as_bool(dtype_aware) if dtype_aware is not None else True,
        min_matched=min_matched if min_matched is not None else 0.5,
        waivers=load_waivers(waivers_path) if waivers_path else (),
    )


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


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
    if steps is None and setting(config, "loss_steps"):
        steps = _parse_window(str(setting(config, "loss_steps")))
    if steps is not None:
        values["steps"] = (int(steps[0]), int(steps[1]))
    relax = setting(config, "relax_to_bench_noise", marker)
    if relax is not None:
        values["relax_to_bench_noise"] = _as_bool(relax)
    return LossCriteria(**values)


def _parse_window(text: str) -> tuple[int, int]:
    try:
        start, _, end = text.partition(":")
        return int(start), int(end)
    except ValueError as exc:
        raise pytest.UsageError(f"--acc-loss-steps: expected 'start:end', got {text!r}") from exc
