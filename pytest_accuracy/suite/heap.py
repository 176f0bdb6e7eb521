"""Garbage-collector settings for a run of many compare items: fewer heap-wide passes."""

from __future__ import annotations

import atexit
import gc
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from pytest_accuracy.switches import env_switch

# Young-generation passes between two heap-wide ones in a compare run (CPython's default: 10).
RUN_FULL_EVERY = 1000
_FROZEN_AT_EXIT: list[bool] = []
_RESTORE_AT_EXIT: list[bool] = []
# The HeapSettings of the run now configured, while it has its settings on (empty otherwise).
_ACTIVE: list[HeapSettings] = []


class HeapSettings:
    """Registered plugin: spares a compare run the collector's passes over its whole heap.

    What a compare run allocates stays alive to its end (dump models, items, reports, node
    results): a heap-wide pass finds nearly nothing (250 of ~600,000 objects per pass at
    10,000 nodes) and scans everything, each time the heap has grown by a quarter: 6.6 s of
    a 50,000-node run. From configure to unconfigure such a pass comes after ``RUN_FULL_EVERY``
    young-generation passes instead of 10 (the young ones, which free what a node leaves
    behind, are kept); unconfigure restores the setting. When compare items ran, the heap is
    frozen at exit, so the interpreter's last pass does not visit and free, one by one, what
    the process is about to give back: 1.8 s of a 10,000-node run. Python makes no promise to
    finalize objects still alive at exit. The heap is also frozen as the dump models are built
    (``long_lived``), when the compare items start and when they end (results and reports),
    so pytest's own ``gc.collect()`` calls at the end of the session pass over what came
    after; it is thawed in a cleanup after the last of them (a run inside a longer process,
    pytester's, leaves nothing frozen). A reference cycle that became garbage before a freeze
    is then found by that longer process's next heap-wide pass, not at this run's end.
    ``PYTEST_ACCURACY_DEFAULT_GC=1`` keeps the collector's own settings.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.enabled = not env_switch("PYTEST_ACCURACY_DEFAULT_GC")
        self.saved = gc.get_threshold()
        self.compare_run = False
        self.froze = False
        if self.enabled:
            young, middle, full = self.saved
            gc.set_threshold(young, middle, max(full, RUN_FULL_EVERY))
            _ACTIVE.append(self)
            _restore_at_exit()
        # pytest's last gc.collect() is a cleanup of its unraisable-exception check, run
        # after every unconfigure hook: thawed before it, it walked the whole run's heap
        # again (0.4 s at 20,000 nodes). Cleanups run last in, first out, and this one is
        # added first (this plugin configures before pytest's own).
        config.add_cleanup(self._thaw)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        self.compare_run = self.enabled and _runs_compare(session)
        if self.compare_run:
            self.froze = True
            gc.freeze()  # the dump models and items: alive to the end, never garbage
            _freeze_at_exit()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        if self.compare_run:
            # the node results and reports, alive to the end too: pytest's own gc.collect()
            # at unconfigure then passes over what the outputs leave, not the whole run
            # (0.8 s of a 20,000-node run)
            gc.freeze()

    def _thaw(self) -> None:
        """A run inside a longer process (pytester's in-process runs) must not leave its
        heap, and the stale weak-cache entries it holds, frozen for the rest of it."""
        if self.froze:
            gc.unfreeze()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        if self.enabled:
            gc.set_threshold(*self.saved)


def _runs_compare(session: pytest.Session) -> bool:
    """Compare items run here, or this is an xdist controller of an --acc-* run (this plugin
    is registered for no other): it collects nothing and keeps every worker's reports."""
    if session.config.pluginmanager.has_plugin("dsession"):
        return True
    from pytest_accuracy.suite.protocol import light_types

    types = light_types()
    return bool(types) and any(type(i) in types for i in session.items)


def _restore_at_exit() -> None:
    """Once per process: the collector's settings restored at exit where no unconfigure did
    (an xdist worker that its controller shut down while it was still unconfiguring)."""
    if not _RESTORE_AT_EXIT:
        _RESTORE_AT_EXIT.append(True)
        atexit.register(_restore_unconfigured)


def _restore_unconfigured() -> None:
    if _ACTIVE:
        gc.set_threshold(*_ACTIVE[0].saved)


def _freeze_at_exit() -> None:
    """Once per process: at exit (atexit handlers run before the interpreter's last pass)."""
    if not _FROZEN_AT_EXIT:
        _FROZEN_AT_EXIT.append(True)
        atexit.register(gc.freeze)


@contextmanager
def long_lived() -> Iterator[None]:
    """Build what lives as long as the session (the dump models) with the cyclic GC paused,
    so the collector does not walk its millions of new objects again and again while they
    are made (tens of seconds at 50,000 nodes); then, in a run with these settings, freeze
    them: the first young-generation pass after the pause would otherwise walk every one of
    them once more (0.15 s at 20,000 nodes). Thawed in the run's last cleanup."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _ACTIVE:
            _ACTIVE[-1].froze = True
            gc.freeze()
        if enabled:
            gc.enable()
