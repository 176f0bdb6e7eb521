"""Tell the compare which nodes this process runs next, so that its threads read only those."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_accuracy.suite.compare_items import CompareItem

AHEAD_KEY = pytest.StashKey[list[int]]()


class ReadAhead:
    """Registered plugin: before each compare item runs, stash the nodes that follow it here.

    Serially that is the next items of the session in order; in an xdist worker only the
    next item is known (the controller hands out the rest), so only it is read ahead.
    """

    def __init__(self, config: pytest.Config, depth: int = 8) -> None:
        self.depth = depth  # the compare takes as many as it has threads for
        self.worker = hasattr(config, "workerinput")
        self._plan: list[int] | None = None
        self._position: dict[int, int] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        compare_item = compare_item_type()
        if compare_item is None or not isinstance(item, compare_item):
            return None
        index = item.index
        if self.worker:
            ahead = [nextitem.index] if isinstance(nextitem, compare_item) else []
            item.stash[AHEAD_KEY] = ahead
            return None
        if self._plan is None:
            self._plan = [it.index for it in item.session.items if isinstance(it, compare_item)]
            self._position = {i: p for p, i in enumerate(self._plan)}
        at = self._position.get(index, len(self._plan))
        item.stash[AHEAD_KEY] = self._plan[at + 1 : at + self.depth]
        return None


def compare_item_type() -> type[CompareItem] | None:
    """The compare item class if its module is loaded: if not, no compare item exists, and
    importing it here would load numpy and the compare core into every test of a project that
    merely has the plugin installed."""
    module = sys.modules.get("pytest_accuracy.suite.compare_items")
    return None if module is None else module.CompareItem
