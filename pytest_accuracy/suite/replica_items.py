"""Replica items (``accuracy::replicas::<ranks>``): the NPU run's data-parallel replicas checked
against each other at every step, with or without a bench."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_accuracy.settings import setting, typed_setting
from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyGroup, AccuracyItem
from pytest_accuracy.text import escape_controls

if TYPE_CHECKING:
    from pytest_accuracy.dumps.model import DumpSet
    from pytest_accuracy.pairing.layouts import Layout


def wanted(config: pytest.Config) -> bool:
    """A data-parallel size was given: --acc-dp-size, --acc-npu-layout, or the NPU config."""
    if not setting(config, "npu"):
        return False
    if setting(config, "dp_size") or "dp" in str(setting(config, "npu_layout") or ""):
        return True
    found = _from_config(config)
    return found is not None and found[1] > 1


_PARALLEL_KEY = pytest.StashKey[tuple[tuple[int, int, int, str] | None]]()


def _from_config(config: pytest.Config) -> tuple[int, int, int, str] | None:
    """The NPU config's (tp, dp, pp, where), read once a run (collection and the header ask)."""
    if _PARALLEL_KEY not in config.stash:
        path = setting(config, "npu_config")
        config.stash[_PARALLEL_KEY] = (_config_parallel(str(path)) if path else None,)
    return config.stash[_PARALLEL_KEY][0]


def _config_parallel(path: str) -> tuple[int, int, int, str] | None:
    # imported only where a config is given: the config readers and yaml are 0.05 s
    from pytest_accuracy.configs.layout import config_parallel
    from pytest_accuracy.errors import AccuracyInputError

    try:
        return config_parallel(path)
    except (AccuracyInputError, OSError, ValueError):
        return None  # the config items say what is wrong with it


def npu_layout(config: pytest.Config, dumps: DumpSet) -> Layout:
    """--acc-npu-layout as given, else tp = (the ranks dumped) / --acc-dp-size, pp = 1, else
    the NPU config's sizes."""
    from pytest_accuracy.pairing.layouts import Layout, parse_layout

    given = setting(config, "npu_layout")
    if given:
        try:
            return parse_layout(str(given))
        except ValueError as exc:
            raise pytest.UsageError(f"--acc-npu-layout: {exc}") from None
    found = _from_config(config) if not setting(config, "dp_size") else None
    if found is not None:
        return Layout(tp=found[0], dp=found[1], pp=found[2])
    dp = int(typed_setting(config, "dp_size"))
    world = max(rank for _, rank in dumps.dumps) + 1
    if dp < 1 or world % dp:
        raise pytest.UsageError(
            f"--acc-dp-size {dp}: the NPU dump holds ranks 0-{world - 1} ({world}), not a "
            "multiple of it; give the whole layout with --acc-npu-layout tp=N,dp=N,pp=N")
    return Layout(tp=world // dp, dp=dp)


class ReplicaGroup(AccuracyGroup):
    def collect(self) -> Iterator[pytest.Item]:
        from pytest_accuracy.compare.replicas import dp_groups
        from pytest_accuracy.suite.state import STATE_KEY

        dumps = self.config.stash[STATE_KEY].npu_dumps
        layout = npu_layout(self.config, dumps)
        for group in dp_groups(layout, sorted({rank for _, rank in dumps.dumps})):
            yield ReplicaItem.from_parent(self, name=",".join(map(str, group)), group=group,
                                          layout=str(layout))


class ReplicaItem(AccuracyItem):
    """Passes when the replicas' parameters and the outputs of the collectives over their
    group are identical at every step all of them dumped."""

    def __init__(self, *, group: tuple[int, ...], layout: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.group, self.layout = group, layout

    def runtest(self) -> None:
        from pytest_accuracy.compare.replicas import check_replicas
        from pytest_accuracy.suite.state import STATE_KEY

        found = check_replicas(self.config.stash[STATE_KEY].npu_dumps, self.group)
        record: dict[str, Any] = {
            "group": "replicas", "name": self.name, "ranks": list(self.group),
            "layout": self.layout, "steps": list(found.steps), "checked": found.values,
            "status": "fail" if found.first else "pass" if found.values else "skip"}
        self.stash[RECORD_KEY] = record
        if found.values == 0:
            pytest.skip(escape_controls(
                f"nothing checked for ranks {self.name}: no step dumps a module's parameters "
                "or a collective over this group on all of them (dump level L0 or mix, or L1 "
                "with the gradient all-reduce inside the dump window)"))
        first = found.first
        if first is None:
            return
        record.update(step=first.step, node=first.node, tensor=first.tensor, odd=list(first.odd),
                      kind=first.kind, summary=first.sentence())
        raise AccuracyError([escape_controls(line) for line in _lines(first, found.steps)])


def _lines(first: Any, steps: tuple[int, ...]) -> list[str]:
    lines = [f"{first.sentence()}.", ""]
    if first.kind == "collective":
        lines.append("A collective's output is the same on every member of its group: this "
                     "rank received another result (a wrong group, or a value changed in place "
                     "after it).")
    elif first.step == steps[0]:
        lines.append(f"At the first step dumped ({first.step}) the replicas already hold "
                     "different parameters: the initial weights were not broadcast (or were "
                     "initialised from another seed) on one of them, or a checkpoint was loaded "
                     "into one only.")
    else:
        lines.append(f"They agreed at step {steps[steps.index(first.step) - 1]}: the update "
                     "between differed on one replica while its gradients were all-reduced "
                     "(look at what runs on one rank only after the all-reduce: a gradient "
                     "scale or average, clipping with a local norm, its optimizer state).")
    if len(first.odd) == len(first.group):
        lines.append("With no majority among the replicas, which one is wrong cannot be told "
                     "from the dump alone; a bench run (--acc-bench) can.")
    return lines
