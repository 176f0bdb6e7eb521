"""Config checklist items: ``accuracy::config::<key>``, one per canonical key of the guide."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from typing import Any

import pytest

from pytest_accuracy.settings import path_setting
from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyGroup, AccuracyItem
from pytest_accuracy.text import escape_controls


class ConfigGroup(AccuracyGroup):
    @cached_property
    def findings(self) -> list[Any]:
        from pytest_accuracy.configs import check_configs, read_config

        npu = path_setting(self.config, "npu_config")
        bench = path_setting(self.config, "bench_config")
        if npu is None or bench is None:
            from pytest_accuracy.errors import AccuracyInputError

            raise AccuracyInputError(str(npu or bench), "the config checklist needs both "
                                     "--acc-npu-config and --acc-bench-config")
        return check_configs(read_config(npu), read_config(bench), npu_path=npu, bench_path=bench)

    def collect(self) -> Iterator[pytest.Item]:
        for finding in self.findings:
            yield ConfigItem.from_parent(self, name=finding.key, finding=finding)


class ConfigItem(AccuracyItem):
    """Passes when both configs agree on this key; a key set on one side only fails."""

    def __init__(self, *, finding: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.finding = finding

    def runtest(self) -> None:
        f = self.finding
        self.stash[RECORD_KEY] = {
            "group": "config", "name": f.key, "category": f.category, "status": f.status,
            "npu_value": _jsonable(f.npu_value), "bench_value": _jsonable(f.bench_value),
            "npu_source": f.npu_source, "bench_source": f.bench_source, "summary": f.message,
        }
        if f.status == "skip":
            pytest.skip(escape_controls(f.message or "set on neither side"))
        if f.status in ("fail", "missing"):
            raise AccuracyError([f.message])


def _jsonable(value: object) -> object:
    return value if isinstance(value, (int, float, str, bool, type(None))) else repr(value)
