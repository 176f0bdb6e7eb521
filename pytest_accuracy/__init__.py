"""pytest-accuracy: model-migration accuracy criteria as pytest assertions."""

from __future__ import annotations

__version__ = "0.1.0"
