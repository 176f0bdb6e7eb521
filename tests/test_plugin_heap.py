"""The collector's settings in a compare run, restored after; the heap frozen at exit."""

from __future__ import annotations

import gc

import pytest

from tests.helpers import dump

NPU, BENCH = dump("pt_bug", "L1_tensor"), dump("pt_fp32", "L1_tensor")

# From an exit handler registered before the plugin's (so it runs after it), each process
# writes the collector's thresholds before the plugin configured (at this conftest's import),
# while items ran and after unconfigure, and whether the heap is frozen when the interpreter's
# own last pass comes.
HEAP_PROBE = """
import atexit, gc, os
SEEN = {"before": gc.get_threshold()}
ROLE = ["main"]

def _at_exit():
    with open(os.environ["HEAP_PROBE_OUT"], "a") as out:
        out.write(f"{ROLE[0]} {SEEN['before']} {SEEN.get('during')} {gc.get_threshold()} "
                  f"frozen={gc.get_freeze_count() > 0} "
                  f"items_frozen={SEEN.get('items_frozen')}\\n")

atexit.register(_at_exit)

def pytest_configure(config):
    ROLE[0] = "worker" if hasattr(config, "workerinput") else "main"

def pytest_runtest_logreport(report):
    SEEN.setdefault("during", gc.get_threshold())
    SEEN.setdefault("items_frozen", gc.get_freeze_count() > 0)
"""


@pytest.fixture
def probe(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest(HEAP_PROBE)
    monkeypatch.setenv("HEAP_PROBE_OUT", str(pytester.path / "exit.txt"))
    return pytester


def exit_lines(pytester: pytest.Pytester) -> list[str]:
    return sorted((pytester.path / "exit.txt").read_text().splitlines())


# The interpreter's own thresholds (the young ones differ between Python versions), and the
# same with the heap-wide pass after 1000 young-generation passes.
_YOUNG, _MIDDLE, _FULL = gc.get_threshold()
DEFAULT = str((_YOUNG, _MIDDLE, _FULL))
RAISED = str((_YOUNG, _MIDDLE, max(_FULL, 1000)))


def test_compare_run_has_fewer_full_passes_restored_after(probe: pytest.Pytester) -> None:
    result = probe.runpytest_subprocess(f"--acc-npu={NPU}", f"--acc-bench={BENCH}",
                                        "-p", "no:cacheprovider")
    assert result.ret == 1  # the bundled bug: the verdict is the same
    assert exit_lines(probe) == [f"main {DEFAULT} {RAISED} {DEFAULT} frozen=True "
                                 "items_frozen=True"]


def test_switch_keeps_the_collectors_settings(probe: pytest.Pytester,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_ACCURACY_DEFAULT_GC", "1")
    result = probe.runpytest_subprocess(f"--acc-npu={NPU}", f"--acc-bench={BENCH}",
                                        "-p", "no:cacheprovider")
    assert result.ret == 1
    assert exit_lines(probe) == [f"main {DEFAULT} {DEFAULT} {DEFAULT} frozen=False "
                                 "items_frozen=False"]


def test_runs_without_compare_items(probe: pytest.Pytester) -> None:
    probe.makepyfile(test_plain="def test_one():\n    assert True\n")
    # the plugin merely installed: nothing changes
    assert probe.runpytest_subprocess("-p", "no:cacheprovider").ret == 0
    # an --acc-* run without compare items: rarer full passes, restored; the heap not frozen
    assert probe.runpytest_subprocess("--acc-suite=off", "-p", "no:cacheprovider").ret == 0
    assert exit_lines(probe) == [f"main {DEFAULT} {DEFAULT} {DEFAULT} frozen=False "
                                 "items_frozen=False",
                                 f"main {DEFAULT} {RAISED} {DEFAULT} frozen=False "
                                 "items_frozen=False"]


def test_xdist_controller_and_workers(probe: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    result = probe.runpytest_subprocess(f"--acc-npu={NPU}", f"--acc-bench={BENCH}",
                                        "-p", "no:cacheprovider", "-n", "2")
    assert result.ret == 1
    # the controller, which holds every worker's reports, and both workers
    line = f"{DEFAULT} {RAISED} {DEFAULT} frozen=True items_frozen=True"
    assert exit_lines(probe) == [f"main {line}", f"worker {line}", f"worker {line}"]



# Records, at each gc.collect() of the run, whether the heap is frozen: pytest's last one is
# its unraisable-exception check, a cleanup after every unconfigure hook.
COLLECT_PROBE = """
import gc, os

_collect = gc.collect

def _recorded(*args):
    with open(os.environ["HEAP_PROBE_OUT"], "a") as out:
        out.write(f"collect frozen={gc.get_freeze_count() > 0}\\n")
    return _collect(*args)

gc.collect = _recorded
"""


def test_pytests_last_collect_passes_over_a_frozen_heap(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Thawed before it, that collect walked the whole run again (0.4 s at 20,000 nodes)."""
    pytester.makeconftest(COLLECT_PROBE)
    monkeypatch.setenv("HEAP_PROBE_OUT", str(pytester.path / "exit.txt"))
    result = pytester.runpytest_subprocess(f"--acc-npu={NPU}", f"--acc-bench={BENCH}",
                                           "-p", "no:cacheprovider")
    assert result.ret == 1
    collects = (pytester.path / "exit.txt").read_text().splitlines()
    assert len(collects) >= 2 and set(collects) == {"collect frozen=True"}


def test_a_run_inside_a_test_leaves_nothing_frozen(pytester: pytest.Pytester) -> None:
    """pytester's in-process runs: the rest of the process must not keep the run's heap,
    and the stale weak-cache entries it holds, frozen."""
    assert gc.get_freeze_count() == 0
    result = pytester.runpytest(f"--acc-npu={NPU}", f"--acc-bench={BENCH}",
                                "-p", "no:cacheprovider")
    assert result.ret == 1
    assert gc.get_freeze_count() == 0
