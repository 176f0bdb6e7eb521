"""Which evidence two dumps share: tensors, statistics or md5 checksums (msprobe's ``task``).

msprobe writes ``"task": "tensor"`` (statistics in dump.json plus the tensors) or
``"task": "statistics"`` (statistics only; with ``summary_mode`` md5 every record also carries a
checksum) at the top of each dump.json. Two dumps of different tasks still share what the
poorer one recorded: a tensor dump against a statistics dump is compared on the statistics,
and so is an md5 dump that recorded statistics beside its checksums. An md5 dump without
statistics shares nothing with a dump of another task: that is a usage error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_accuracy.dumps.model import Dump, DumpSet

__all__ = ["TaskMismatch", "task_label", "task_mismatch"]

# What the user configured in msprobe, as a message names it.
_LABELS = {"tensor": "task tensor", "statistics": "task statistics",
           "md5": "task statistics with summary_mode md5"}


def task_label(mode: str) -> str:
    return _LABELS.get(mode, f"task {mode}")


@dataclass(frozen=True)
class TaskMismatch:
    """The first (step, rank) whose two dumps were made with different tasks."""

    npu_mode: str
    bench_mode: str
    npu_file: Path
    bench_file: Path
    comparable: bool  # False: an md5 dump without statistics against another task

    def note(self) -> str:
        """The summary sentence: what the compare used, and why."""
        unused = (" (md5 checksums are compared only between two md5 dumps)"
                  if "md5" in (self.npu_mode, self.bench_mode) else "")
        return (f"Compared on statistics (max, min, mean, norm): the NPU dump has "
                f"{task_label(self.npu_mode)}, the bench dump {task_label(self.bench_mode)}"
                f"{unused}.")

    def problem(self) -> str:
        """The one-line usage error when nothing can be compared."""
        return (f"the NPU dump {self.npu_file} has {task_label(self.npu_mode)} and the bench "
                f"dump {self.bench_file} {task_label(self.bench_mode)}, and the md5 dump "
                f"recorded no statistics: checksums compare only with another md5 dump. Dump "
                f"both with the same task.")

    def as_dict(self) -> dict[str, str]:
        return {"method": "statistics", "npu_task": self.npu_mode, "bench_task": self.bench_mode,
                "npu_dump": str(self.npu_file), "bench_dump": str(self.bench_file)}


def task_mismatch(npu: DumpSet, bench: DumpSet) -> TaskMismatch | None:
    """The first pair of dumps (same step and rank; else the first of each) whose tasks differ.

    An incomparable pair anywhere wins over a comparable one: it is the one to report.
    """
    pairs = [(npu.dumps[k], bench.dumps[k]) for k in sorted(npu.dumps) if k in bench.dumps]
    if not pairs and npu.dumps and bench.dumps:
        pairs = [(next(iter(npu)), next(iter(bench)))]
    found = [_mismatch(a, b) for a, b in pairs if a.mode != b.mode]
    return next((m for m in found if not m.comparable), found[0] if found else None)


def _mismatch(npu: Dump, bench: Dump) -> TaskMismatch:
    md5_only = any(d.mode == "md5" and not _has_statistics(d) for d in (npu, bench))
    return TaskMismatch(npu.mode, bench.mode, npu.path, bench.path, comparable=not md5_only)


def _has_statistics(dump: Dump) -> bool:
    """Does any tensor of the dump carry a recorded statistic?"""
    for call in dump.calls:
        for rec in (*call.input_tensors, *call.parameters, *call.output_tensors):
            s = rec.stats
            if s.max is not None or s.min is not None or s.mean is not None or s.norm is not None:
                return True
    return False
