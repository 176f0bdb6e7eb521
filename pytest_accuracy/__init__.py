"""pytest-accuracy: model-migration accuracy criteria as pytest assertions."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "accuracy"]


def __getattr__(name: str) -> Any:
    # Lazy so that the core (readers, metrics, ...) stays importable without pytest.
    if name == "accuracy":
        from pytest_accuracy.marker import accuracy

        return accuracy
    raise AttributeError(f"module 'pytest_accuracy' has no attribute {name!r}")
