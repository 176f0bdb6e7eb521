"""Shared test helpers: paths to the bundled real msprobe dumps (copied from the fixtures)."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest

from pytest_accuracy.logs import speedups
from tests.helpers import dump

# Loaded before any in-process pytester run: a run that imports matplotlib first has it taken
# out of sys.modules again when pytester restores its snapshot, and the copy the plot tests
# import next no longer matches the half the first left behind ("Single argument to subplot
# must be a three-digit integer, not GridSpec"). Without matplotlib the plot tests skip.
with contextlib.suppress(ImportError):
    import matplotlib.pyplot  # noqa: F401


@pytest.fixture(params=["compiled", "pure"])
def log_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a log test with the compiled scanner and again with the pure-Python path."""
    if request.param == "pure":
        monkeypatch.setenv(speedups.PURE_ENV, "1")
    elif speedups.scanner() is None:
        pytest.skip("the compiled log scanner is not built in this install")
    return str(request.param)


@pytest.fixture
def copy_dump(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Copy a bundled dump into tmp_path so a test can damage it."""

    def _copy(variant: str, config: str) -> Path:
        target = tmp_path / variant / config
        shutil.copytree(dump(variant, config), target)
        for path in target.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        return target

    return _copy
