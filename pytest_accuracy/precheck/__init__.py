"""Per-API precheck: replay dumped API calls against float64 numpy references."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Loaded on first use: the compare's replays import precheck.args and the references, and
# every compare process would otherwise pay for the runner and the report (~35 ms).
_EXPORTS = {
    "OutputCheck": "results",
    "PrecheckCase": "results",
    "PrecheckResult": "results",
    "plan": "runner",
    "run_case": "runner",
    "precheck_json": "report",
    "write_precheck_csvs": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
