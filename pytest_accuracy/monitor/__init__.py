"""msprobe training-state monitor outputs (TrainerMon, csv2tb, grad_probe): read and compare."""

from __future__ import annotations

from pytest_accuracy.monitor.judge import KindResult, MonitorComparison, Parting, compare_monitors
from pytest_accuracy.monitor.layout import read_monitor
from pytest_accuracy.monitor.model import MonitorRun

__all__ = ["KindResult", "MonitorComparison", "MonitorRun", "Parting", "compare_monitors",
           "read_monitor"]
