"""Groups beyond compare (loss, precheck, config): their collectors, sections and reports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def extra_groups(config: pytest.Config) -> Iterator[tuple[str, type[pytest.Collector]]]:
    return iter(())


def group_section(group: str, records: list[dict[str, Any]]) -> Any:
    return records


def group_criteria(groups: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {}


def write_group_reports(config: pytest.Config, groups: dict[str, list[dict[str, Any]]],
                        out: Path) -> list[Path]:
    return []
