"""The built-in suite: a collector rooted at the session that yields ``accuracy::<group>::<id>``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.text import escape_controls, escape_line

RECORD_KEY = pytest.StashKey[dict[str, Any]]()
# True: the item's record is what json.loads(json.dumps(record)) gives back, by construction
# or checked (report.records.json_native), so it need not be checked again
NATIVE_KEY = pytest.StashKey[bool]()


class AccuracyError(Exception):
    """An accuracy criterion was missed; ``lines`` is the whole failure message."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(lines))


class AccuracyItem(pytest.Item):
    """Base for generated items: short failure messages, no Python traceback."""

    @classmethod
    def from_parent(cls, parent: Any, **kw: Any) -> Any:
        # -v, -rA, --collect-only and the short summary print the item id: a name from an
        # input (a node name, a config key, a file name) stays one line, nothing invisible
        if "name" in kw:
            kw["name"] = escape_line(kw["name"])
        return super().from_parent(parent, **kw)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        # Input-derived text (node names, keys, paths) never reaches the terminal raw.
        if isinstance(excinfo.value, AccuracyError):
            return escape_controls("\n".join(excinfo.value.lines))
        if isinstance(excinfo.value, AccuracyInputError):
            return escape_controls(f"unreadable input: {excinfo.value}")
        if isinstance(excinfo.value, pytest.xfail.Exception):
            # a carried node: its reason is the whole story; pytest would format a traceback
            # (re-parsing our source files each time: 0.15 s per item, a minute on 368 items)
            return escape_controls(excinfo.value.msg)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        # a line number, not None: pytest asserts one when a user's skip mark skips the item
        return self.path, 0, self.nodeid


class AccuracyGroup(pytest.Collector):
    """Base for the groups (compare, loss, precheck, config): input errors are collection errors."""

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> Any:
        if isinstance(excinfo.value, (AccuracyInputError, ImportError)):
            return escape_controls(f"unreadable input: {excinfo.value}")
        if isinstance(excinfo.value, pytest.UsageError):  # a selection or levels that can't work
            return escape_controls(excinfo.value)
        return super().repr_failure(excinfo)


class AccuracySuite(pytest.Collector):
    """Root of the generated items; its children are the groups with inputs given."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        from pytest_accuracy.suite.compare_items import CompareGroup
        from pytest_accuracy.suite.state import STATE_KEY

        state = self.config.stash[STATE_KEY]
        if state.has_dumps:
            yield CompareGroup.from_parent(self, name="compare")
        for name, group in state.extra_groups():
            yield group.from_parent(self, name=name)

