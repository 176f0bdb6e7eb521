"""Overflow items (``accuracy::overflow::<step>/<rank>``): ``--acc-npu`` without a bench."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyGroup, AccuracyItem
from pytest_accuracy.text import escape_controls

if TYPE_CHECKING:
    from pytest_accuracy.dumps.anomaly import AnomalyNode
    from pytest_accuracy.dumps.model import Dump

_HINT = "check its dtype, scale and inputs' range"


class OverflowGroup(AccuracyGroup):
    def collect(self) -> Iterator[pytest.Item]:
        from pytest_accuracy.dumps.anomaly import anomaly_files
        from pytest_accuracy.suite.state import STATE_KEY

        state = self.config.stash[STATE_KEY]
        assert state.npu is not None
        files = anomaly_files(state.npu)
        yield from self._anomaly_items(files)
        if files and not _holds_dump(state.npu):
            return
        for dump in state.npu_dumps:  # input errors: collection errors
            yield OverflowItem.from_parent(self, name=f"{dump.step}/{dump.rank}",
                                           key=(dump.step, dump.rank))

    def _anomaly_items(self, files: list[Path]) -> Iterator[pytest.Item]:
        """One item per rank of each msprobe overflow_check result (``<file stem>/<rank>``)."""
        from pytest_accuracy.dumps.anomaly import read_anomaly
        from pytest_accuracy.settings import parse_int_set, setting

        ranks = parse_int_set(setting(self.config, "ranks"), "ranks")
        for path in files:
            report = read_anomaly(path)
            if not report.ranks:
                yield AnomalyItem.from_parent(self, name=path.stem, path_=path, rank=None, nodes=())
            for rank, nodes in report.ranks.items():
                if ranks is None or rank in ranks:
                    yield AnomalyItem.from_parent(self, name=f"{path.stem}/{rank}", path_=path,
                                                  rank=rank, nodes=nodes)


def _holds_dump(root: Path) -> bool:
    """An overflow_check result written into the dump's own folder: both are checked."""
    return root.is_dir() and ((root / "dump.json").exists() or any(root.glob("*/dump.json"))
                              or any(root.glob("step*/*/dump.json")))


class OverflowItem(AccuracyItem):
    """Passes when no node of this step and rank outputs NaN/Inf from finite inputs."""

    def __init__(self, *, key: tuple[int, int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.key = key

    def runtest(self) -> None:
        from pytest_accuracy.compare.overflow import first_overflow
        from pytest_accuracy.suite.state import STATE_KEY

        dump = self.config.stash[STATE_KEY].npu_dumps.dumps[self.key]
        found = first_overflow(dump)
        step, rank = self.key
        name = f"step {step}, rank {rank}"
        record: dict[str, Any] = {"group": "overflow", "name": name, "checked": found.checked,
                                  "status": "pass" if found.node is None else "fail"}
        self.stash[RECORD_KEY] = record
        if found.checked == 0:
            _nan_check(self, dump, name, record)
            return
        if found.node is None:
            return
        stack = found.node.stack_line()
        record.update(node=found.node.name, tensor=found.tensor, value=found.value, stack=stack)
        record["summary"] = (f"First NaN/Inf: {found.node.name} ({name}), {found.tensor}: "
                             f"{found.value}, from finite inputs")
        lines = [f"First NaN/Inf on the NPU: {found.node.name} ({name}), {found.tensor} has "
                 f"{found.value} while every input is finite: an overflow made here ({_HINT}; "
                 f"{found.checked} nodes checked)."]
        if found.huge is not None:
            lines.append(f"Values first grew past what their Norm/Mean can hold (finite, but "
                         f"near the dtype's range) at {found.huge.name}: look there for the "
                         "scale that made them huge.")
        lines += [f"In module: {found.node.parent}"] if found.node.parent else []
        lines += [f"At {stack}"] if stack else []
        lines += _next_step(self, dump, found.node.name)
        raise AccuracyError([escape_controls(line) for line in lines])


def _next_step(item: pytest.Item, dump: Dump, name: str) -> list[str]:
    from pytest_accuracy.nextstep.from_dump import ranks_of
    from pytest_accuracy.suite.next_step import dump_next_step
    from pytest_accuracy.suite.state import STATE_KEY

    state = item.config.stash[STATE_KEY]
    return dump_next_step(item, "overflow", dump, name, str(state.npu),
                          ranks_of(state.npu_dumps))


def _nan_check(item: pytest.Item, dump: Dump, name: str, record: dict[str, Any]) -> None:
    """A dump without statistics: msprobe's nan_check flags (is_nan) or, with none, a skip."""
    from pytest_accuracy.dumps.anomaly import read_nan_check

    flags = read_nan_check(dump.path) if dump.path.is_file() else None
    if flags is None or flags.checked == 0:
        record["status"] = "skip"
        why = (f"msprobe's nan_check read no call's overflow flag ({flags.unread} is_nan null)"
               if flags is not None else "no node of it recorded output statistics")
        pytest.skip(escape_controls(f"nothing checked in {name}: {why}"))
    record.update(checked=flags.checked, source="msprobe nan_check")
    if not flags.flagged:
        return  # every flag read was 0: that many calls checked by the NPU itself
    first = flags.flagged[0]
    call = dump.get(first)
    stack = call.stack_line() if call is not None else None
    record.update(status="fail", node=first, stack=stack,
                  summary=f"First NaN/Inf flag: {first} ({name}), msprobe nan_check is_nan 1")
    lines = [f"First NaN/Inf on the NPU: {first} ({name}) raised the NPU's overflow flag "
             f"(msprobe nan_check is_nan 1; {len(flags.flagged)} of {flags.checked} calls "
             f"flagged): it overflowed while running ({_HINT}). The flag is also raised by an "
             "overflow inside the kernel whose output stays finite; a statistics dump of this "
             "step shows which."]
    lines += [f"At {stack}"] if stack else []
    lines += _next_step(item, dump, first)
    raise AccuracyError([escape_controls(line) for line in lines])


class AnomalyItem(AccuracyItem):
    """msprobe overflow_check's verdict for one rank: fails naming the first node it lists."""

    def __init__(self, *, path_: Path, rank: int | None, nodes: tuple[AnomalyNode, ...],
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.file, self.rank, self.nodes = path_, rank, nodes

    def runtest(self) -> None:
        where = f"rank {self.rank}" if self.rank is not None else "any rank"
        record: dict[str, Any] = {"group": "overflow", "name": f"{self.file.name}, {where}",
                                  "source": "msprobe overflow_check", "file": str(self.file),
                                  "checked": 0, "status": "skip"}
        self.stash[RECORD_KEY] = record
        if not self.nodes:
            pytest.skip(escape_controls(
                f"nothing checked: {self.file.name} lists no anomaly node for {where}, and "
                "msprobe's overflow_check records nothing of what it searched (it writes no "
                "file when it finds none, and stops at the first rank and stage with one): no "
                f"evidence that {where}'s outputs are finite. To gate on 'no overflow', point "
                "--acc-npu at the dump itself, which is checked node by node."))
        node = self.nodes[0]
        record.update(status="fail", node=node.op_name, tensor=node.tensor, value=node.value,
                      stack=node.stack_line(), modules=list(node.modules),
                      summary=f"First NaN/Inf: {node.op_name} ({where}), msprobe overflow_check")
        raise AccuracyError([escape_controls(line) for line in self._lines(node, where)])

    def _lines(self, node: AnomalyNode, where: str) -> list[str]:
        shown = (f"{node.tensor} has {node.value}" if node.tensor
                 else "its recorded outputs show no NaN/Inf")
        lines = [f"First NaN/Inf on the NPU: {node.op_name} ({where}), {shown} while every "
                 f"input's Max/Min is finite: msprobe overflow_check names it as the first op "
                 f"that made one ({_HINT})."]
        lines += [f"In module: {' > '.join(node.modules)}"] if node.modules else []
        lines += [f"At {node.stack_line()}"] if node.stack_line() else []
        more = [n.op_name for n in self.nodes[1:]]
        tail = f"; {len(more)} more listed for {where}: {', '.join(more)}" if more else ""
        lines.append(f"From {self.file.name}{tail}.")
        return lines
