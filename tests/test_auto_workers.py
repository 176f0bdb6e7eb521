"""``-n auto`` starts no pytest-xdist workers for a compare of dumps without tensor files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_accuracy.dumps.layout import holds_tensor_files
from tests.helpers import dump

HEADER = "accuracy: -n auto runs in this one process"


@pytest.mark.parametrize(("config", "expected"), [
    ("L1_tensor", True), ("L0_tensor", True), ("mix_statistics", False), ("L1_md5", False)])
def test_tensor_files_are_told_from_the_folders(config: str, expected: bool) -> None:
    assert holds_tensor_files(dump("pt_bug", config)) is expected
    assert holds_tensor_files(dump("pt_bug", config) / "step0") is expected


def test_an_empty_data_folder_holds_no_tensor_files_and_odd_paths_are_not_told(
        tmp_path: Path) -> None:
    rank = tmp_path / "step0" / "rank0"
    (rank / "dump_tensor_data").mkdir(parents=True)
    (rank / "dump.json").write_text("{}")
    assert holds_tensor_files(tmp_path) is False
    (rank / "dump_tensor_data" / "x.pt").write_bytes(b"")
    assert holds_tensor_files(tmp_path) is True
    assert holds_tensor_files(rank / "dump.json") is True
    assert holds_tensor_files(tmp_path / "missing") is None
    assert holds_tensor_files(tmp_path / "step0" / "rank0" / "dump_tensor_data" / "x.pt") is None
    assert holds_tensor_files(tmp_path / "step0" / "rank0" / "dump_tensor_data") is None


def _run(pytester: pytest.Pytester, config: str, *args: str) -> pytest.RunResult:
    pytest.importorskip("xdist")
    return pytester.runpytest_subprocess(
        f"--acc-npu={dump('pt_bug', config)}", f"--acc-bench={dump('pt_fp32', config)}",
        "-p", "no:cacheprovider", *args)


def test_auto_on_a_statistics_compare_runs_in_one_process(pytester: pytest.Pytester) -> None:
    serial = _run(pytester, "mix_statistics")
    auto = _run(pytester, "mix_statistics", "-n", "auto")
    auto.stdout.fnmatch_lines([f"{HEADER}*give -n N to start workers anyway"])
    assert "created:" not in auto.stdout.str() and "[gw" not in auto.stdout.str()
    assert auto.ret == serial.ret == 1
    assert auto.parseoutcomes() == serial.parseoutcomes()


def test_auto_with_tensor_files_or_a_count_chosen_is_xdists(pytester: pytest.Pytester,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    tensors = _run(pytester, "L1_tensor", "-n", "auto")
    assert "created:" in tensors.stdout.str() and HEADER not in tensors.stdout.str()
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "2")  # the user's own count
    chosen = _run(pytester, "mix_statistics", "-n", "auto")
    chosen.stdout.fnmatch_lines(["accuracy: -n 2 on a dump with no tensor files*",
                                 "created: 2/2 workers"])
    assert HEADER not in chosen.stdout.str()


def test_workers_asked_for_a_statistics_compare_are_started_with_a_note(
        pytester: pytest.Pytester) -> None:
    two = _run(pytester, "mix_statistics", "-n", "2")
    two.stdout.fnmatch_lines(["accuracy: -n 2 on a dump with no tensor files (statistics or "
                              "md5)*-n auto keeps it in one", "created: 2/2 workers"])
    tensors = _run(pytester, "L1_tensor", "-n", "2")
    assert "no tensor files" not in tensors.stdout.str()
    serial = _run(pytester, "mix_statistics")
    assert "no tensor files" not in serial.stdout.str()


def test_auto_reads_the_dump_an_ini_file_names_relative_to_that_file(
        pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    ini_dir = pytester.path / "ci"
    for side, name in (("pt_bug", "npu"), ("pt_fp32", "bench")):
        shutil.copytree(dump(side, "mix_statistics"), ini_dir / name)
    (ini_dir / "pytest.ini").write_text("[pytest]\nacc_npu = npu\nacc_bench = bench\n")
    result = pytester.runpytest_subprocess("-c", str(ini_dir / "pytest.ini"),
                                           "-p", "no:cacheprovider", "-n", "auto")
    result.stdout.fnmatch_lines([f"{HEADER}*"])
    assert "created:" not in result.stdout.str()


REPLICAS = Path(__file__).parent / "data" / "real" / "dp_replicas"


def test_auto_starts_workers_that_split_the_ranks_of_a_big_statistics_compare(
        pytester: pytest.Pytester) -> None:
    """Rank items: each worker reads only its ranks, so workers pay on a multi-rank statistics
    dump past RANK_WORKERS_FROM_BYTES (lowered here: the shipped 4-rank dump is small)."""
    pytest.importorskip("xdist")
    pytester.makeconftest("import pytest_accuracy.suite.auto_workers as auto\n"
                          "auto.RANK_WORKERS_FROM_BYTES = 1\n")
    args = (f"--acc-npu={REPLICAS / 'init_drift' / 'mix'}",
            f"--acc-bench={REPLICAS / 'golden' / 'mix'}", "--acc-items=rank",
            "-p", "no:cacheprovider")
    split = pytester.runpytest_subprocess(*args, "-n", "auto")
    assert "created:" in split.stdout.str() and HEADER not in split.stdout.str()
    two = pytester.runpytest_subprocess(*args, "-n", "2")
    assert "no tensor files" not in two.stdout.str()  # no warning: workers pay here
    serial = pytester.runpytest_subprocess(*args)
    assert split.parseoutcomes() == serial.parseoutcomes() and split.ret == serial.ret == 1
    (pytester.path / "conftest.py").unlink()  # at the real threshold the dump is too small
    small = pytester.runpytest_subprocess(*args, "-n", "auto")
    small.stdout.fnmatch_lines([f"{HEADER}*"])
