"""Where the Markdown summary goes: ``--acc-markdown=PATH`` (written atomically) and, on GitHub
Actions, appended to ``$GITHUB_STEP_SUMMARY`` (the job's summary page)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_accuracy.settings import setting
from pytest_accuracy.text import headline

STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def markdown_wanted(config: pytest.Config) -> bool:
    return bool(setting(config, "markdown") or os.environ.get(STEP_SUMMARY_ENV))


def write_markdown(config: pytest.Config, doc: dict[str, Any]) -> None:
    from pytest_accuracy.report.markdown import markdown_summary
    from pytest_accuracy.safe_io import append_regular, write_atomic
    from pytest_accuracy.settings import path_setting

    stats = _stats(config)
    outcomes = {key: len(stats.get(key, [])) for key in _OUTCOMES}
    text = markdown_summary(doc, _failures(stats), outcomes)
    path = path_setting(config, "markdown")
    if path is not None:
        write_atomic(path, text)
    step_summary = os.environ.get(STEP_SUMMARY_ENV)
    if step_summary:
        # GitHub gives the job one file and concatenates what each step appends to it
        append_regular(step_summary, text)


_OUTCOMES = ("failed", "error", "passed", "xfailed", "xpassed", "skipped", "deselected")


def _stats(config: pytest.Config) -> dict[str, list[Any]]:
    """The terminal's own counts (a carried node is xfailed there, skipped in its report)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    stats: dict[str, list[Any]] = getattr(reporter, "stats", {}) if reporter else {}
    return stats


def _failures(stats: dict[str, list[Any]]) -> list[tuple[str, str]]:
    """(node id, first line of its message) of the failed and errored reports, in run order."""
    out = []
    for key in ("failed", "error"):
        for report in stats.get(key, []):
            text = str(getattr(report, "longreprtext", "") or "").strip()
            # the line naming the criterion and the amount; under xdist a report's text
            # starts with its worker's line, never that
            first = headline(text)
            out.append((str(getattr(report, "nodeid", "")) or "(collection)", first))
    return out
