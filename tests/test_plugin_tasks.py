"""Dumps made with different msprobe tasks (tensor, statistics, md5): what is compared, said."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.tasks import task_mismatch
from tests.helpers import dump

STATS = ("Max", "Min", "Mean", "Norm")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def _rewritten(src: Path, dst: Path, drop: tuple[str, ...]) -> Path:
    """A copy of the dump ``src`` whose tensor records lack the keys ``drop``."""
    shutil.copytree(src, dst)

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in drop}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    for path in dst.rglob("dump.json"):
        doc = json.loads(path.read_text())
        doc["data"] = strip(doc["data"])
        path.write_text(json.dumps(doc))
    return dst


@pytest.fixture
def statistics_dump(tmp_path: Path) -> Path:
    """pt_fp32 at L1 as task statistics: the md5 dump without its checksums."""
    return _rewritten(dump("pt_fp32", "L1_md5"), tmp_path / "stats", ("md5",))


@pytest.fixture
def md5_only_dump(tmp_path: Path) -> Path:
    """pt_fp32 at L1 as an md5 dump that recorded checksums and no statistics."""
    return _rewritten(dump("pt_fp32", "L1_md5"), tmp_path / "md5_only", STATS)


def _dump_json(root: Path) -> Path:
    """The step-0 dump.json of a one-rank dump (its proc directory is the dumping process)."""
    (found,) = (root / "step0").glob("*/dump.json")
    return found


def _summary(result: pytest.RunResult) -> list[str]:
    return result.stdout.str().split("= accuracy =")[1].splitlines()[1:]


def test_tensor_against_statistics_is_compared_on_statistics_and_says_so(
        pytester: pytest.Pytester, statistics_dump: Path) -> None:
    out = pytester.path / "acc.json"
    result = run(pytester, f"--acc-npu={dump('pt_bug', 'L1_tensor')}",
                 f"--acc-bench={statistics_dump}", f"--acc-json={out}")
    assert result.ret == 1  # the eps bug shows in the statistics too
    summary = _summary(result)
    assert summary[1] == ("Compared on statistics (max, min, mean, norm): the NPU dump has task "
                          "tensor, the bench dump task statistics.")
    compared_on = json.loads(out.read_text())["compare"]["compared_on"]
    assert {k: v for k, v in compared_on.items() if k not in ("npu_dump", "bench_dump")} == {
        "method": "statistics", "npu_task": "tensor", "bench_task": "statistics",
        "note": summary[1]}
    assert compared_on["npu_dump"] == str(_dump_json(dump("pt_bug", "L1_tensor")))
    assert compared_on["bench_dump"] == str(_dump_json(statistics_dump))


def test_tensor_against_md5_with_statistics_is_compared_on_statistics(
        pytester: pytest.Pytester) -> None:
    result = run(pytester, f"--acc-npu={dump('pt_fp32', 'L1_tensor')}",
                 f"--acc-bench={dump('pt_fp32', 'L1_md5')}")
    assert result.ret == 0
    assert _summary(result)[1] == (
        "Compared on statistics (max, min, mean, norm): the NPU dump has task tensor, the bench "
        "dump task statistics with summary_mode md5 (md5 checksums are compared only between "
        "two md5 dumps).")


def test_md5_without_statistics_against_another_task_is_one_line_naming_both_files(
        pytester: pytest.Pytester, md5_only_dump: Path) -> None:
    npu = dump("pt_fp32", "L1_tensor")
    result = run(pytester, f"--acc-npu={npu}", f"--acc-bench={md5_only_dump}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    message = (f"the NPU dump {_dump_json(npu)} has task tensor and the bench dump "
               f"{_dump_json(md5_only_dump)} task statistics with summary_mode "
               "md5, and the md5 dump recorded no statistics: checksums compare only with "
               "another md5 dump. Dump both with the same task.")
    assert message in result.stdout.lines
    assert "Traceback" not in result.stdout.str()


def test_the_marker_names_the_tasks_too(pytester: pytest.Pytester, md5_only_dump: Path,
                                        statistics_dump: Path) -> None:
    pytester.makepyfile(f"""
        from pytest_accuracy import accuracy

        @accuracy(npu=r"{dump('pt_bug', 'L1_tensor')}", bench=r"{statistics_dump}")
        def test_statistics():
            pass

        @accuracy(npu=r"{md5_only_dump}", bench=r"{dump('pt_fp32', 'L1_tensor')}")
        def test_md5_only():
            pass
    """)
    result = run(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "Compare of */pt_bug/L1_tensor with */stats: Compared on statistics (max, min, mean, "
        "norm): the NPU dump has task tensor, the bench dump task statistics.",
        "Compare of */md5_only with */pt_fp32/L1_tensor:",
        "the NPU dump */md5_only/step0/proc*/dump.json has task statistics with summary_mode "
        "md5 and the bench dump */L1_tensor/step0/proc*/dump.json task tensor, and the md5 "
        "dump recorded no statistics: *"])


@pytest.mark.parametrize(("npu", "bench", "expected"), [
    ("L1_tensor", "L1_tensor", None),
    ("L1_md5", "L1_md5", None),
    ("L1_tensor", "L1_md5", ("tensor", "md5", True)),
    ("L1_md5", "L1_tensor", ("md5", "tensor", True)),
])
def test_task_mismatch_of_the_bundled_dumps(npu: str, bench: str,
                                            expected: tuple[str, str, bool] | None) -> None:
    found = task_mismatch(load_dumps(dump("pt_bug", npu)), load_dumps(dump("pt_fp32", bench)))
    described = None if found is None else (found.npu_mode, found.bench_mode, found.comparable)
    assert described == expected
