"""How many pytest-xdist workers ``-n auto`` starts for a compare."""

from __future__ import annotations

import os

import pytest

from pytest_accuracy.dumps.layout import holds_tensor_files
from pytest_accuracy.settings import path_setting, setting

#: NPU dump.json bytes from which -n auto starts workers for a multi-rank statistics compare
#: (rank items; measured in benchmarks/README.md, "Many ranks")
RANK_WORKERS_FROM_BYTES = 128 << 20

#: pytest-xdist's own override of ``-n auto``: a count the user chose, never second-guessed.
XDIST_AUTO_ENV = "PYTEST_XDIST_AUTO_NUM_WORKERS"


def auto_workers(config: pytest.Config) -> int | None:
    """0 where the NPU dump has no tensor files (statistics, md5), else None (xdist's count).

    Each worker reads both runs' dump.json files and makes the metadata scan itself, and
    for a statistics compare that is most of the run: ``-n 2`` took 1.5x the serial time on
    20k nodes (benchmarks/README.md). With tensor files the compare's reading and arithmetic
    are shared out, and pay.
    """
    from pytest_accuracy.plugin import AUTO_WORKERS_KEY

    if os.environ.get(XDIST_AUTO_ENV) or not _metadata_only(config) or ranks_split(config):
        return None
    config.stash[AUTO_WORKERS_KEY] = (
        "accuracy: -n auto runs in this one process: the NPU dump holds no tensor files "
        "(statistics or md5), and each worker would read both runs' metadata again, most of "
        "such a run; give -n N to start workers anyway")
    return 0


def workers_note(config: pytest.Config) -> str | None:
    """The session header's line where ``-n N`` starts workers for a statistics compare."""
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or workers < 1 or not _metadata_only(config):
        return None
    if ranks_split(config):
        return None  # each worker reads only its ranks: workers pay
    return (f"accuracy: -n {workers} on a dump with no tensor files (statistics or md5): each "
            "worker reads both runs' metadata again, most of such a run, so one process is "
            "faster; -n auto keeps it in one")


def ranks_split(config: pytest.Config) -> bool:
    """A multi-rank statistics compare big enough that workers splitting its ranks pay: rank
    items (each worker reads only the ranks it compares) over at least
    ``RANK_WORKERS_FROM_BYTES`` of NPU dump.json files (benchmarks/README.md, "Many ranks")."""
    from pytest_accuracy.dumps.layout import dump_files
    from pytest_accuracy.settings import parse_int_set, typed_setting

    npu, bench = path_setting(config, "npu"), setting(config, "bench")
    chosen = typed_setting(config, "items") or "auto"
    if npu is None or not bench or chosen not in ("auto", "rank") or setting(config, "scope"):
        return False
    files = dump_files(npu, steps=parse_int_set(setting(config, "steps_select"), "steps"),
                       ranks=parse_int_set(setting(config, "ranks"), "ranks")) or []
    if len({rank for _, rank, _ in files}) < 2:
        return False
    return sum(path.stat().st_size for _, _, path in files) >= RANK_WORKERS_FROM_BYTES


def _metadata_only(config: pytest.Config) -> bool:
    """A compare whose NPU dump is known to hold no tensor files."""
    npu = path_setting(config, "npu")  # an ini file's path: relative to the ini file
    if npu is None or setting(config, "merge"):
        return False
    return holds_tensor_files(npu) is False
