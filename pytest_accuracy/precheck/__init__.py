"""Per-API precheck: replay dumped API calls against float64 numpy references."""

from __future__ import annotations

from pytest_accuracy.precheck.report import precheck_json, write_precheck_csvs
from pytest_accuracy.precheck.results import OutputCheck, PrecheckCase, PrecheckResult
from pytest_accuracy.precheck.runner import plan, run_case

__all__ = [
    "OutputCheck",
    "PrecheckCase",
    "PrecheckResult",
    "plan",
    "precheck_json",
    "run_case",
    "write_precheck_csvs",
]
