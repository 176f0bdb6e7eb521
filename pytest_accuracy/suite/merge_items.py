"""``pytest --acc-merge=PART ...``: one item, ``accuracy::merge``, outcome = the merged verdict."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.options import BY_DEST, INPUT_DESTS
from pytest_accuracy.report.document import write_html, write_json
from pytest_accuracy.report.merge import TABLE_HEADER, merge_files, summary_lines
from pytest_accuracy.settings import setting, typed_setting
from pytest_accuracy.suite import AccuracyError, AccuracyGroup, AccuracyItem

_LINES = "accuracy-merge"


class MergePlugin:
    """Registered instead of the per-item results under --acc-merge: nothing else is collected."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.lines: list[str] = []
        given = [BY_DEST[dest].flag for dest in INPUT_DESTS if config.getoption(dest, default=None)]
        if given:
            raise pytest.UsageError(f"--acc-merge combines finished parts; it takes no inputs "
                                    f"to compare ({', '.join(given)} given)")

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool:
        return True  # test files are not part of a merge

    def pytest_collection_modifyitems(self, session: pytest.Session, items: list[pytest.Item]
                                      ) -> None:
        root = MergeRoot.from_parent(session, name="accuracy", nodeid="accuracy")
        items.extend(session.genitems(root))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == _LINES:
                self.lines = json.loads(str(value))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.lines:
            terminalreporter.write_sep("=", "accuracy")
            for line in self.lines:
                terminalreporter.write_line(line)


class MergeRoot(AccuracyGroup):
    """Reads the parts: an unusable part is a collection error naming the file."""

    def collect(self) -> Iterator[pytest.Item]:
        # Under --acc-merge the selection names the shards the parts must cover together.
        doc = merge_files([Path(p) for p in setting(self.config, "merge")],
                          steps=typed_setting(self.config, "steps_select"),
                          ranks=typed_setting(self.config, "ranks"))
        yield MergeItem.from_parent(self, name="merge", doc=doc)


class MergeItem(AccuracyItem):
    """Passes when the merged verdict of the parts passes; writes --acc-json / --acc-report."""

    def __init__(self, *, doc: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.doc = doc

    def runtest(self) -> None:
        doc = self.doc
        lines = summary_lines(doc)
        # user_properties travel from an xdist worker to the controller's terminal summary.
        self.user_properties.append((_LINES, json.dumps(lines)))
        json_path = self.config.getoption("acc_json") or self.config.getini("acc_json")
        if json_path:
            write_json(doc, json_path)
        report_dir = self.config.getoption("acc_report") or self.config.getini("acc_report")
        if report_dir:
            Path(report_dir).mkdir(parents=True, exist_ok=True)
            write_html(doc, Path(report_dir), [])
        if doc["verdict"] != "pass":
            # The per-rank table goes to the terminal summary; the failure keeps the verdict.
            table = lines.index(TABLE_HEADER) if TABLE_HEADER in lines else None
            raise AccuracyError(lines[:table])
