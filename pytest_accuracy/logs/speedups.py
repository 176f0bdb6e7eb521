"""The optional compiled log scanner (``_scan``), or None where it was not built or is off."""

from __future__ import annotations

import os
from types import ModuleType

from pytest_accuracy.switches import env_switch

#: Set (not "0") to read every log with the pure-Python path (to compare, or to debug).
PURE_ENV = "PYTEST_ACCURACY_PURE_LOGS"

#: A path to another build of ``_scan`` (CI loads an AddressSanitizer build through it).
BUILD_ENV = "PYTEST_ACCURACY_SCAN_BUILD"


def _load_build(path: str) -> ModuleType:
    import importlib.machinery
    import importlib.util

    name = "pytest_accuracy.logs._scan"
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


_compiled: ModuleType | None
if os.environ.get(BUILD_ENV):
    _compiled = _load_build(os.environ[BUILD_ENV])
else:
    try:  # built at install time where a C compiler was found
        from pytest_accuracy.logs import _scan as _compiled
    except ImportError:  # pragma: no cover - depends on the install
        _compiled = None


def scanner() -> ModuleType | None:
    """The compiled module unless ``PYTEST_ACCURACY_PURE_LOGS`` is set (checked on each call)."""
    return None if env_switch(PURE_ENV) else _compiled
