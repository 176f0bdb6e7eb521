"""Compare items under the light run protocol behave as under pytest's own, for every plugin."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import dump

NPU, BENCH = dump("pt_bug", "L1_tensor"), dump("pt_fp32", "L1_tensor")

# Counts, per phase, the items that went through pytest's per-phase hooks.
PHASE_COUNTER = """
import pytest
CALLS = {"setup": 0, "call": 0, "teardown": 0}

def pytest_runtest_setup(item):
    CALLS["setup"] += 1

def pytest_runtest_teardown(item):
    CALLS["teardown"] += 1

def pytest_exception_interact(node, call, report):
    CALLS["interact"] = CALLS.get("interact", 0) + 1

def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"PHASE-HOOKS setup={CALLS['setup']}")
    terminalreporter.write_line(f"INTERACT {CALLS.get('interact', 0)}")
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(f"--acc-npu={NPU}", f"--acc-bench={BENCH}", "-p",
                              "no:cacheprovider", *args)


def both(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str
         ) -> tuple[pytest.RunResult, pytest.RunResult]:
    light = run(pytester, *args)
    monkeypatch.setenv("PYTEST_ACCURACY_FULL_PROTOCOL", "1")
    full = run(pytester, *args)
    monkeypatch.delenv("PYTEST_ACCURACY_FULL_PROTOCOL")
    return light, full


def failure_blocks(result: pytest.RunResult) -> str:
    """The FAILURES section without timings."""
    text = result.stdout.str()
    body = text.split("= FAILURES =")[1].split("short test summary info")[0]
    return re.sub(r"\d+\.\d+s|PHASE-HOOKS.*|INTERACT.*", "T", body)


def test_same_outcomes_messages_and_document(pytester: pytest.Pytester,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(PHASE_COUNTER)
    light, full = both(pytester, monkeypatch, "-rA")
    assert light.ret == full.ret == 1
    assert light.parseoutcomes() == full.parseoutcomes()
    assert (light.parseoutcomes()["failed"], light.parseoutcomes()["xfailed"]) == (1, 197)
    assert failure_blocks(light) == failure_blocks(full)
    assert "Tensor.__add__.5.forward" in failure_blocks(light)
    # the light protocol really ran: only the items outside the compare nodes (coverage,
    # inputs) went through the per-phase hooks, against every item under pytest's protocol
    light.stdout.fnmatch_lines(["PHASE-HOOKS setup=2"])
    # the one failure (not the 197 xfails) is offered to pytest_exception_interact, as pytest does
    light.stdout.fnmatch_lines(["INTERACT 1"])
    full.stdout.fnmatch_lines(["INTERACT 1"])
    full.stdout.fnmatch_lines(["PHASE-HOOKS setup=246"])
    light_short = [ln for ln in light.outlines if ln.startswith(("XFAIL", "FAILED", "PASSED"))]
    full_short = [ln for ln in full.outlines if ln.startswith(("XFAIL", "FAILED", "PASSED"))]
    assert light_short == full_short and len(light_short) == 246


def test_same_junit_xml(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, "--junitxml=light.xml")
    monkeypatch.setenv("PYTEST_ACCURACY_FULL_PROTOCOL", "1")
    run(pytester, "--junitxml=full.xml")
    light, full = ((pytester.path / f"{n}.xml").read_text() for n in ("light", "full"))
    assert re.sub(r'time="[^"]*"|timestamp="[^"]*"', "", light) == re.sub(
        r'time="[^"]*"|timestamp="[^"]*"', "", full)
    assert light.count("<testcase ") == 246
    assert light.count("<failure ") == 1 and light.count('<skipped type="pytest.xfail"') == 197
    assert "Outputs of Tensor.__add__.5.forward (step 0, rank 0) are not close" in light


def test_exitfirst_stops_at_the_first_failure(pytester: pytest.Pytester) -> None:
    result = run(pytester, "-x")
    outcomes = result.parseoutcomes()
    assert result.ret == 1 and outcomes["failed"] == 1
    assert sum(outcomes.values()) < 100  # the items after the failure never ran


def test_durations_are_timed(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--durations=3", "--durations-min=0")
    result.stdout.fnmatch_lines(["*slowest 3 durations*", "*s call * accuracy::compare::*"])


def test_a_users_mark_gets_pytests_protocol(pytester: pytest.Pytester) -> None:
    """A skip or xfail a conftest puts on a compare item is evaluated as pytest would."""
    pytester.makeconftest("""
import pytest

def pytest_collection_modifyitems(items):
    for item in items:
        if item.nodeid.endswith("Tensor.__add__.5.forward"):
            item.add_marker(pytest.mark.skip(reason="known eps bug, tracked elsewhere"))
""")
    result = run(pytester, "-rs")
    outcomes = result.parseoutcomes()
    # both steps' calls: step 1's repeat of the cause now has no earlier failure to repeat,
    # and is skipped too; nothing crashes (pytest asks for a line number)
    assert outcomes["skipped"] == 2
    # the divergence the other nodes carry still fails the run, as one failed report (the
    # verdict) that JUnit and the terminal count too, and the summary says why
    assert outcomes["failed"] == 1 and result.ret == 1
    result.stdout.fnmatch_lines(["*_ accuracy::compare::verdict _*"])
    result.stdout.fnmatch_lines([
        "Compare failed: 196 nodes carry a divergence whose cause was not among the items run "
        "(the first is carried from Tensor.__add__.5.forward*"])
    assert "No divergence" not in result.stdout.str()
    result.stdout.fnmatch_lines(["SKIPPED * known eps bug, tracked elsewhere"])


def test_document_is_the_same(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(pytester, "--acc-json=light.json")
    monkeypatch.setenv("PYTEST_ACCURACY_FULL_PROTOCOL", "1")
    run(pytester, "--acc-json=full.json")
    light, full = (json.loads((pytester.path / f"{n}.json").read_text()) for n in ("light", "full"))
    assert light == full and len(light["compare"]["nodes"]) == 244
