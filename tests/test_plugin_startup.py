"""A project that has the plugin installed but does not use it pays only for light modules."""

from __future__ import annotations

import pytest

HEAVY = ("numpy", "pandas", "yaml", "ml_dtypes", "matplotlib", "torch")
# What a plain run may load of ours: the options table, the marker's keys, fixtures, settings.
LIGHT = {"pytest_accuracy", "pytest_accuracy.plugin", "pytest_accuracy.fixtures",
         "pytest_accuracy.marker", "pytest_accuracy.options", "pytest_accuracy.settings"}
PROBE = f"""
import sys

def pytest_unconfigure(config):
    heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
    ours = sorted(m for m in sys.modules if m.split(".")[0] == "pytest_accuracy")
    print("HEAVY=" + ",".join(heavy), file=sys.stderr)
    print("OURS=" + ",".join(ours), file=sys.stderr)
"""


def _probe(pytester: pytest.Pytester, *args: str) -> tuple[set[str], set[str]]:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1)
    found = {}
    for line in result.errlines:
        key, sep, value = line.partition("=")
        if sep and key in ("HEAVY", "OURS"):
            found[key] = set(filter(None, value.split(",")))
    return found["HEAVY"], found["OURS"]


@pytest.mark.parametrize("workers", [[], ["-n", "auto"], ["-n", "2"]])
def test_a_plain_run_imports_nothing_heavy(pytester: pytest.Pytester,
                                           workers: list[str]) -> None:
    """Also under pytest-xdist: the -n auto hook and the session header's note on workers
    look at the dumps only where --acc-npu (or acc_npu) names one."""
    if workers:
        pytest.importorskip("xdist")
    pytester.makeconftest(PROBE)
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    heavy, ours = _probe(pytester, *workers)
    heavy_without, ours_without = _probe(pytester, "-p", "no:accuracy", *workers)
    assert ours_without == set()
    assert ours <= LIGHT, sorted(ours - LIGHT)
    # other installed plugins may import what they like; the plugin adds nothing heavy
    assert heavy <= heavy_without, sorted(heavy - heavy_without)


def test_a_plain_run_still_registers_options_ini_keys_and_marker(pytester: pytest.Pytester) -> None:
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    for text in ("--acc-npu=PATH", "--acc-rel-err=VALUE", "acc_bench_log (linelist):",
                 "acc_npu (string):", "model-migration accuracy (pytest-accuracy)"):
        assert text in help_text
    markers = pytester.runpytest_subprocess("--markers").stdout.str()
    assert ("@pytest.mark.accuracy(*, npu=None, bench=None, bench_noise=None, npu_log=None"
            in markers)
