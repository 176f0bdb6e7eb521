"""Groups beyond compare (loss, precheck, config): their collectors, sections and reports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.settings import flag, setting


def extra_groups(config: pytest.Config) -> Iterator[tuple[str, type[pytest.Collector]]]:
    if setting(config, "npu_log") or setting(config, "bench_logs"):
        from pytest_accuracy.suite.loss_items import LossGroup

        yield "loss", LossGroup
    if flag(config, "precheck"):
        from pytest_accuracy.suite.precheck_items import PrecheckGroup

        yield "precheck", PrecheckGroup
    elif setting(config, "npu") and not setting(config, "bench"):
        from pytest_accuracy.suite.overflow_items import OverflowGroup

        yield "overflow", OverflowGroup
    from pytest_accuracy.suite.replica_items import wanted

    if wanted(config):
        from pytest_accuracy.suite.replica_items import ReplicaGroup

        yield "replicas", ReplicaGroup
    if setting(config, "npu_precheck_results") or setting(config, "bench_precheck_results"):
        from pytest_accuracy.suite.msprobe_precheck_items import MsprobePrecheckGroup

        yield "precheck", MsprobePrecheckGroup
    if setting(config, "npu_config") or setting(config, "bench_config"):
        from pytest_accuracy.suite.config_items import ConfigGroup

        yield "config", ConfigGroup
    if setting(config, "npu_monitor") or setting(config, "bench_monitor"):
        from pytest_accuracy.suite.monitor_items import MonitorGroup

        yield "monitor", MonitorGroup


def group_section(group: str, records: list[dict[str, Any]]) -> Any:
    if group == "loss":
        from pytest_accuracy.suite.loss_items import loss_section

        return loss_section(records)
    if group == "precheck":
        return {"apis": [{k: r.get(k) for k in ("name", "status", "cosine", "max_abs", "reason")}
                         for r in records]}
    rest = [{k: v for k, v in r.items() if k != "group"} for r in records]
    if group == "monitor":
        return {"states": rest}
    return {"tests": rest} if group == "suites" else {"keys": rest}


def group_criteria(groups: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for group, records in groups.items():
        for record in records:
            if record.get("criteria"):
                out[group] = record["criteria"]
                break
    return out


def write_group_reports(config: pytest.Config, groups: dict[str, list[dict[str, Any]]],
                        out: Path) -> list[Path]:
    images: list[Path] = []
    if "loss" in groups:
        from pytest_accuracy.suite.loss_items import write_loss_plots

        images += write_loss_plots(config, out)
    if "precheck" in groups:
        from pytest_accuracy.suite.precheck_items import write_precheck_tables

        write_precheck_tables(groups["precheck"], out)
    return images
