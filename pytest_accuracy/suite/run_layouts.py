"""The runs' layouts for the suite's state: from their configs, the ranks loaded, the hints."""

from __future__ import annotations

from pathlib import Path

from pytest_accuracy.dumps.model import DumpSet


def config_layout(config: object, dump: Path) -> tuple[tuple[int, int, int], str] | None:
    """(tp, dp, pp) and where, from a run's config, where its world is the dump's rank count
    at its first step (a config of another run, or a part dumped, says nothing here)."""
    if not config:
        return None
    from pytest_accuracy.configs.layout import config_parallel
    from pytest_accuracy.dumps.layout import dump_files
    from pytest_accuracy.errors import AccuracyInputError

    try:
        found = config_parallel(str(config))
    except (AccuracyInputError, OSError, ValueError):
        return None  # the config items say what is wrong with it
    files = dump_files(dump)
    if found is None or not files:
        return None
    tp, dp, pp, where = found
    step = min(s for s, _, _ in files)
    if len({r for s, r, _ in files if s == step}) != tp * dp * pp:
        return None
    return (tp, dp, pp), f"{where} (tp={tp}, dp={dp}, pp={pp})"


def only(dumps: DumpSet, rank: int | None, peers: set[int]) -> DumpSet:
    """``dumps`` without the ranks loaded as ``peers`` of ``rank``'s."""
    if not peers:
        return dumps
    return DumpSet(dumps.root, {k: v for k, v in dumps.dumps.items() if k[1] == rank},
                   {k: v for k, v in dumps.unmade.items() if k[1] == rank})


def every_rank(dumps: DumpSet, path: Path) -> bool:
    """Whether ``dumps`` holds every rank the run at ``path`` has at its first step loaded
    (its folders read; a dump that is no msprobe folder tree: taken as whole; nothing
    loaded: nothing to infer from, whole)."""
    from pytest_accuracy.dumps.layout import dump_files

    keys = dumps.keys()
    files = dump_files(path) if keys else None
    if not files:
        return True
    step = keys[0][0]
    return {r for s, r in keys if s == step} >= {r for s, r, _ in files if s == step}


def layouts_hint(npu: Path, bench: Path, part: bool = True) -> str | None:
    """Where the runs' rank counts differ (their folders alone read): the layouts may differ,
    and a part of the ranks does not tell (inference reads every rank), or (not ``part``)
    every rank did not."""
    from pytest_accuracy.dumps.layout import dump_files

    mine, theirs = dump_files(npu), dump_files(bench)
    if not mine or not theirs:
        return None
    step = min(s for s, _, _ in mine)
    counts = [len({r for s, r, _ in files if s == step}) for files in (mine, theirs)]
    if counts[0] == counts[1] or not counts[1]:
        return None
    why = ("where their parallel layouts differ, they are read from the dumps only when every "
           "rank is loaded (not with --acc-ranks or rank items)" if part else
           "their parallel layouts could not be read from the dumps (the ranks' first batches "
           "are not one split of the same data, or the layouts are ones the compare cannot "
           "meet)")
    return (f"The NPU run has {counts[0]} rank{'s' if counts[0] > 1 else ''} at step {step} "
            f"and the bench {counts[1]}: {why}, so ranks meet by number here; give "
            "--acc-npu-layout and --acc-bench-layout (e.g. tp=2,pp=2 and tp=1) to compare "
            "shard by slice.")
