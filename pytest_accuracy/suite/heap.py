"""Garbage-collector settings for a run of many compare items: fewer heap-wide passes."""

from __future__ import annotations

import atexit
import gc
import os
from collections.abc import Generator

import pytest

from pytest_accuracy.suite.readahead import compare_item_type

# Young-generation passes between two heap-wide ones while compare items run (CPython: 10).
RUN_FULL_EVERY = 1000
_FROZEN_AT_EXIT: list[bool] = []


class HeapSettings:
    """Registered plugin: spares the compare run the collector's passes over its whole heap.

    What a compare run allocates stays alive to its end (items, reports, node results): a
    heap-wide pass finds nearly nothing (250 of ~600,000 objects per pass at 10,000 nodes)
    and scans everything, each time the heap has grown by a quarter: 9 s of a 50,000-node run.
    While compare items run, such a pass comes after ``RUN_FULL_EVERY`` young-generation
    passes instead of 10 (the young ones, which free what a node leaves behind, are kept);
    the setting is restored after the loop. At exit the heap is frozen, so the interpreter's
    last pass does not visit and free, one by one, what the process is about to give back:
    1.8 s of a 10,000-node run. Python makes no promise to finalize objects still alive at
    exit; ``gc.collect()`` called explicitly is unchanged. ``PYTEST_ACCURACY_DEFAULT_GC=1``
    keeps the collector's own settings.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.enabled = os.environ.get("PYTEST_ACCURACY_DEFAULT_GC", "") in ("", "0")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        if not self.enabled or not _runs_compare(session):
            return (yield)
        _freeze_at_exit()
        young, middle, full = gc.get_threshold()
        gc.set_threshold(young, middle, max(full, RUN_FULL_EVERY))
        try:
            return (yield)
        finally:
            gc.set_threshold(young, middle, full)


def _runs_compare(session: pytest.Session) -> bool:
    """Compare items run here, or this is an xdist controller: it collects nothing and keeps
    every worker's reports (an --acc-* option was given, or this plugin is not registered)."""
    if session.config.pluginmanager.has_plugin("dsession"):
        return True
    compare_item = compare_item_type()
    return compare_item is not None and any(type(i) is compare_item for i in session.items)


def _freeze_at_exit() -> None:
    """Once per process: at exit (atexit handlers run before the interpreter's last pass)."""
    if not _FROZEN_AT_EXIT:
        _FROZEN_AT_EXIT.append(True)
        atexit.register(gc.freeze)
