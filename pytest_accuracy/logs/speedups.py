"""The optional compiled log scanner (``_scan``), or None where it was not built or is off."""

from __future__ import annotations

import os
from types import ModuleType

#: Set (non-empty) to read every log with the pure-Python path (to compare, or to debug).
PURE_ENV = "PYTEST_ACCURACY_PURE_LOGS"

_compiled: ModuleType | None
try:  # built at install time where a C compiler was found
    from pytest_accuracy.logs import _scan as _compiled
except ImportError:  # pragma: no cover - depends on the install
    _compiled = None


def scanner() -> ModuleType | None:
    """The compiled module unless ``PYTEST_ACCURACY_PURE_LOGS`` is set (checked on each call)."""
    return None if os.environ.get(PURE_ENV) else _compiled
