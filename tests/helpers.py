"""Paths to the bundled real msprobe dumps (copied from the project's fixtures)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DUMPS = ROOT / "example_data" / "dumps"


def dump(variant: str, config: str) -> Path:
    return DUMPS / variant / config
