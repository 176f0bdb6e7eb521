"""The collector's settings while compare items run, restored after; the heap frozen at exit."""

from __future__ import annotations

import pytest

from tests.helpers import dump

NPU, BENCH = dump("pt_bug", "L1_tensor"), dump("pt_fp32", "L1_tensor")

# Reports the collector's full-pass threshold before, during and after the run loop, and, from
# an exit handler registered before the plugin's (so it runs after it), whether the heap is
# frozen when the interpreter's own last pass comes.
HEAP_PROBE = """
import atexit, gc, os
SEEN = {}
ROLE = ["main"]

def _at_exit():
    with open(os.environ["HEAP_PROBE_OUT"], "a") as out:
        out.write(f"{ROLE[0]} frozen={gc.get_freeze_count() > 0}\\n")

atexit.register(_at_exit)

def pytest_configure(config):
    ROLE[0] = "worker" if hasattr(config, "workerinput") else "main"
    SEEN["before"] = gc.get_threshold()

def pytest_runtest_logreport(report):
    SEEN.setdefault("during", gc.get_threshold())

def pytest_terminal_summary(terminalreporter):
    after = gc.get_threshold()
    terminalreporter.write_line(f"THRESHOLDS {SEEN['before']} {SEEN['during']} {after}")
"""


@pytest.fixture
def probe(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest(HEAP_PROBE)
    monkeypatch.setenv("HEAP_PROBE_OUT", str(pytester.path / "exit.txt"))
    return pytester


def exit_lines(pytester: pytest.Pytester) -> list[str]:
    return sorted((pytester.path / "exit.txt").read_text().splitlines())


def test_compare_run_has_fewer_full_passes_restored_after(probe: pytest.Pytester) -> None:
    result = probe.runpytest_subprocess(f"--acc-npu={NPU}", f"--acc-bench={BENCH}",
                                        "-p", "no:cacheprovider")
    assert result.ret == 1  # the bundled bug: the verdict is the same
    result.stdout.fnmatch_lines(["THRESHOLDS (700, 10, 10) (700, 10, 1000) (700, 10, 10)"])
    assert exit_lines(probe) == ["main frozen=True"]


def test_switch_keeps_the_collectors_settings(probe: pytest.Pytester,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_ACCURACY_DEFAULT_GC", "1")
    result = probe.runpytest_subprocess(f"--acc-npu={NPU}", f"--acc-bench={BENCH}",
                                        "-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["THRESHOLDS (700, 10, 10) (700, 10, 10) (700, 10, 10)"])
    assert exit_lines(probe) == ["main frozen=False"]


def test_a_run_without_compare_items_is_untouched(probe: pytest.Pytester) -> None:
    probe.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = probe.runpytest_subprocess("--acc-suite=off", "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["THRESHOLDS (700, 10, 10) (700, 10, 10) (700, 10, 10)"])
    assert exit_lines(probe) == ["main frozen=False"]


def test_xdist_controller_and_workers(probe: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    result = probe.runpytest_subprocess(f"--acc-npu={NPU}", f"--acc-bench={BENCH}",
                                        "-p", "no:cacheprovider", "-n", "2")
    assert result.ret == 1
    # the controller, which holds every worker's reports, too
    result.stdout.fnmatch_lines(["THRESHOLDS (700, 10, 10) (700, 10, 1000) (700, 10, 10)"])
    lines = exit_lines(probe)
    assert "main frozen=True" in lines
    assert all(line.endswith("frozen=True") for line in lines), lines
