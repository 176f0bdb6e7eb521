"""Find a run's monitor output under the path given: which layout, which ranks, which files."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.monitor.csvfiles import read_grad_summary, read_trainermon_csv
from pytest_accuracy.monitor.model import METRICS, MonitorRun, RankRecords

_CSV = re.compile(r"([a-z_]+)_(\d+)-(\d+)\.csv")  # TrainerMon: <metric>_<start>-<end>.csv
_SUMMARY = re.compile(r"grad_summary_(\d+)\.csv")  # grad_probe
_RUN_DIR = re.compile(r".*-rank(\d{1,5})-[^/]*")  # <MonthDay_HH-MM-SS>-rank<r>-<uid>
_RANK_DIR = re.compile(r"rank_?(\d{1,5})")
_STEP_DIR = re.compile(r"step(\d+)")
_MAX_ENTRIES = 100_000
EXPECTED = ("msprobe monitor output: TrainerMon CSVs (<metric>_<start>-<end>.csv in "
            "<MonthDay_HH-MM-SS>-rank<r>-<uid>/ folders), csv2tb TensorBoard events "
            "(rank<r>/<metric>/events.out.tfevents.*) or grad_probe summaries "
            "(rank<r>/grad_summary_<step>.csv)")


def read_monitor(path: Path) -> MonitorRun:
    """The monitor output under ``path``: a run's output folder, one rank's folder in it."""
    if not path.exists():
        raise AccuracyInputError(path, "no such file or directory")
    if not path.is_dir():
        raise AccuracyInputError(path, f"not a directory: give the folder that holds the "
                                 f"{EXPECTED}")
    for layout, reader in (("TrainerMon CSV", _trainermon), ("grad_probe", _grad_probe),
                           ("TensorBoard (csv2tb)", _events)):
        ranks = reader(path)
        if ranks:
            return MonitorRun(path, layout, ranks)
    raise AccuracyInputError(path, f"no {EXPECTED}")


def _entries(folder: Path) -> list[Path]:
    out = []
    for i, entry in enumerate(sorted(folder.iterdir())):
        if i >= _MAX_ENTRIES:
            raise AccuracyInputError(folder, f"over {_MAX_ENTRIES} entries: not a monitor "
                                     "output folder")
        out.append(entry)
    return out


def _csv_files(folder: Path) -> Iterator[tuple[Path, str]]:
    for entry in _entries(folder):
        found = _CSV.fullmatch(entry.name)
        if found and found.group(1) in METRICS and entry.is_file():
            yield entry, found.group(1)


def _one_rank(paths: dict[int, list[Path]], kind: str) -> dict[int, Path]:
    """One folder per rank; two runs' folders for one rank are named, not guessed between."""
    for rank, folders in paths.items():
        if len(folders) > 1:
            names = ", ".join(f.name for f in folders)
            raise AccuracyInputError(folders[0].parent, f"holds {len(folders)} {kind} folders "
                                     f"for rank {rank} ({names}): give one run's folder")
    return {rank: folders[0] for rank, folders in paths.items()}


def _rank_folders(path: Path, pattern: re.Pattern[str], has: Callable[[Path], bool]
                  ) -> dict[int, Path]:
    """``path`` itself when it holds the files (its rank from its name, else 0), else its
    sub-folders named like ``pattern``."""
    if has(path):
        found = pattern.fullmatch(path.name)
        return {int(found.group(1)) if found else 0: path}
    paths: dict[int, list[Path]] = {}
    for entry in _entries(path):
        found = pattern.fullmatch(entry.name)
        if found and entry.is_dir() and has(entry):
            paths.setdefault(int(found.group(1)), []).append(entry)
    return _one_rank(paths, "monitor")


def _trainermon(path: Path) -> dict[int, RankRecords]:
    folders = _rank_folders(path, _RUN_DIR, lambda p: next(_csv_files(p), None) is not None)
    ranks = {}
    for rank, folder in sorted(folders.items()):
        records = RankRecords(rank, folder)
        for file, metric in _csv_files(folder):
            read_trainermon_csv(file, metric, records)
        ranks[rank] = records
    return ranks


def _summaries(folder: Path) -> list[tuple[Path, int]]:
    return [(e, int(m.group(1))) for e in _entries(folder)
            if (m := _SUMMARY.fullmatch(e.name)) and e.is_file()]


def _grad_probe(path: Path) -> dict[int, RankRecords]:
    folders = _rank_folders(path, _RANK_DIR, lambda p: bool(_summaries(p)))
    ranks = {}
    for rank, folder in sorted(folders.items()):
        records = RankRecords(rank, folder)
        for file, step in _summaries(folder):
            read_grad_summary(file, step, records)
        for entry in _entries(folder):
            found = _STEP_DIR.fullmatch(entry.name)
            if found and entry.is_dir():
                for sign in _entries(entry):
                    if sign.suffix in (".npy", ".pt") and sign.is_file():
                        records.signs[(int(found.group(1)), sign.stem)] = sign
        ranks[rank] = records
    return ranks


def _has_events(folder: Path) -> bool:
    return any(e.is_dir() and e.name in METRICS and next(e.glob("events.out.tfevents*"), None)
               for e in _entries(folder))


def _events(path: Path) -> dict[int, RankRecords]:
    from pytest_accuracy.monitor.events import read_events

    folders = _rank_folders(path, _RANK_DIR, _has_events)
    ranks = {}
    for rank, folder in sorted(folders.items()):
        records = RankRecords(rank, folder)
        for entry in _entries(folder):
            if entry.is_dir() and entry.name in METRICS:
                read_events(entry, entry.name, records)
        ranks[rank] = records
    return ranks
