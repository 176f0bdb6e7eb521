"""Tell the compare which nodes this process runs next, so that its threads read only those."""

from __future__ import annotations

from typing import Any

import pytest

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
        from pytest_accuracy.suite.compare_items import CompareItem

        if not isinstance(item, CompareItem):
            return None
        index = item.index
        if self.worker:
            ahead = [nextitem.index] if isinstance(nextitem, CompareItem) else []
            item.stash[AHEAD_KEY] = ahead
            return None
        if self._plan is None:
            self._plan = [it.index for it in item.session.items if isinstance(it, CompareItem)]
            self._position = {i: p for p, i in enumerate(self._plan)}
        at = self._position.get(index, len(self._plan))
        item.stash[AHEAD_KEY] = self._plan[at + 1 : at + self.depth]
        return None
