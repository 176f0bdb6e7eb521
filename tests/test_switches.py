"""Every on/off environment switch reads "0" as off, like an unset variable."""

from __future__ import annotations

import pytest

from pytest_accuracy.compare import fold
from pytest_accuracy.logs import speedups
from pytest_accuracy.switches import env_switch

NAME = "PYTEST_ACCURACY_TEST_SWITCH"


@pytest.mark.parametrize(("value", "on"), [(None, False), ("", False), ("0", False),
                                           ("1", True), ("yes", True), (" ", True)])
def test_env_switch(monkeypatch: pytest.MonkeyPatch, value: str | None, on: bool) -> None:
    if value is None:
        monkeypatch.delenv(NAME, raising=False)
    else:
        monkeypatch.setenv(NAME, value)
    assert env_switch(NAME) is on


def test_pure_switches_read_zero_as_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """PYTEST_ACCURACY_PURE_METRICS=0 / PURE_LOGS=0 used to turn the pure paths *on*."""
    for module, compiled in ((fold, fold.kernel), (speedups, speedups.scanner)):
        monkeypatch.setenv(module.PURE_ENV, "1")
        assert compiled() is None
        monkeypatch.setenv(module.PURE_ENV, "0")
        assert compiled() is module._compiled
