"""On/off switches read from the environment: any value but "" or "0" turns one on."""

from __future__ import annotations

import os


def env_switch(name: str) -> bool:
    """Whether the environment variable ``name`` is set to turn something on (not "" or "0")."""
    return os.environ.get(name, "") not in ("", "0")
