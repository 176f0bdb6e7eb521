"""A lighter run protocol for compare items: the same hooks and reports, no per-phase capture."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from pytest_accuracy.suite.readahead import compare_item_type
from pytest_accuracy.switches import env_switch

# Options under which pytest's own protocol does something for the item that this one skips.
_NEEDS_FULL_PROTOCOL = ("setuponly", "setupshow", "setupplan", "usepdb", "trace")


class LightProtocol:
    """Registered plugin: runs compare items with the hooks that make their reports.

    pytest's protocol wraps each of an item's three phases in output and log capture, fixture
    set-up, mark evaluation and thread-exception checks: ~0.4 ms per item on a 2-core box, for
    items that have no fixtures, print nothing and carry no marks. On a 50,000-node dump that
    is most of the run. This one calls what every other plugin sees (logstart,
    ``pytest_runtest_makereport`` and ``pytest_runtest_logreport`` for setup, call and
    teardown, logfinish), so terminal output, ``-x``, ``--lf``, junitxml, xdist and
    ``--durations`` are unchanged. It steps aside (pytest's protocol runs) for an item with
    any mark (a user's skip or xfail), under ``--pdb``/``--trace``/``--setup-*``, and with
    ``PYTEST_ACCURACY_FULL_PROTOCOL=1``.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.reraise = _reraised(config)
        self.enabled = not env_switch("PYTEST_ACCURACY_FULL_PROTOCOL") and not any(
            config.getoption(name, False) for name in _NEEDS_FULL_PROTOCOL
        )

    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        if not self.enabled or type(item) not in light_types():
            return None
        if next(iter(item.iter_markers()), None) is not None:
            return None
        ihook = item.ihook  # a conftest lookup per access: once per item here
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reraise = self.reraise
        setup = pytest.CallInfo.from_call(_nothing, when="setup", reraise=reraise)
        report = _report(ihook, item, setup)
        if report.passed:
            call = pytest.CallInfo.from_call(item.runtest, when="call", reraise=reraise)
            called = _report(ihook, item, call)
            if _interactive(call, called):  # as pytest does: plugins may inspect a failure
                ihook.pytest_exception_interact(node=item, call=call, report=called)
        teardown = pytest.CallInfo.from_call(_nothing, when="teardown", reraise=reraise)
        _report(ihook, item, teardown)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True


def light_types() -> tuple[type, ...]:
    """Compare and region items, once their modules are loaded (else no such item exists)."""
    compare_item = compare_item_type()
    if compare_item is None:
        return ()
    regions = sys.modules.get("pytest_accuracy.suite.region_items")
    return (compare_item,) if regions is None else (compare_item, regions.RegionItem)


def _nothing() -> None:
    """Compare items have no fixtures and nothing to set up or tear down."""


def _report(ihook: Any, item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    report: pytest.TestReport = ihook.pytest_runtest_makereport(item=item, call=call)
    ihook.pytest_runtest_logreport(report=report)
    return report


def _interactive(call: pytest.CallInfo[None], report: pytest.TestReport) -> bool:
    """pytest's rule: a failure, not a skip or an xfail."""
    if call.excinfo is None or hasattr(report, "wasxfail"):
        return False
    return not isinstance(call.excinfo.value, pytest.skip.Exception)


def _reraised(config: pytest.Config) -> tuple[type[BaseException], ...]:
    """What pytest's own protocol lets through instead of reporting (Ctrl-C, pytest.exit)."""
    reraise: tuple[type[BaseException], ...] = (pytest.exit.Exception,)
    if not config.getoption("usepdb", False):
        reraise += (KeyboardInterrupt,)
    return reraise
