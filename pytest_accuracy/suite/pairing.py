"""Choose how NPU nodes find their bench counterparts: by name, a mapping file, or alignment."""

from __future__ import annotations

import pytest

from pytest_accuracy.compare import Pairing
from pytest_accuracy.settings import path_setting, setting


def choose_pairing(config: pytest.Config, npu_fw: str, bench_fw: str) -> Pairing | None:
    """``--acc-mapping`` wins; else ``--acc-align`` (auto: align across frameworks only)."""
    mapping = path_setting(config, "mapping")
    align = str(setting(config, "align") or "auto")
    if mapping is not None:
        try:
            from pytest_accuracy.naming import mapping_pairing
        except ImportError:  # pragma: no cover - the naming module ships with the package
            return None
        return mapping_pairing(mapping)
    if (align == "auto" and npu_fw != bench_fw) or align == "always":
        try:
            from pytest_accuracy.align import auto_pairing
        except ImportError:  # pragma: no cover
            return None
        return lambda npu, bench: auto_pairing(npu, bench).pairs
    return None
