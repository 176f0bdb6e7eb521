"""Precheck items: ``accuracy::precheck::<step>/<rank>/<api node>`` against a float64 reference."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.settings import parse_int_set, path_setting, setting
from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyGroup, AccuracyItem
from pytest_accuracy.text import escape_controls


class PrecheckGroup(AccuracyGroup):
    def collect(self) -> Iterator[pytest.Item]:
        from pytest_accuracy.dumps.layout import load_dumps
        from pytest_accuracy.errors import AccuracyInputError, MissingExtraError
        from pytest_accuracy.precheck.runner import plan

        npu = path_setting(self.config, "npu")
        if npu is None:
            raise AccuracyInputError("--acc-precheck", "needs an L1 or mix dump: --acc-npu")
        dumps = load_dumps(npu, steps=parse_int_set(setting(self.config, "steps_select"), "steps"),
                           ranks=parse_int_set(setting(self.config, "ranks"), "ranks"))
        device = str(setting(self.config, "device") or "dump")
        standard = str(setting(self.config, "standard") or "default")
        try:
            cases = plan(dumps, device=device, standard=standard)
        except (ValueError, MissingExtraError) as exc:  # a device this machine cannot use
            raise pytest.UsageError(f"--acc-precheck: {exc}") from exc
        self.dumps = dumps  # a failing item's next step reads its dump's shapes
        for case in cases:
            yield PrecheckItem.from_parent(self, name=escape_controls(case.id), case=case)


class PrecheckItem(AccuracyItem):
    """Replays one dumped API call; no reference means a skip with the reason, never a pass."""

    def __init__(self, *, case: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def runtest(self) -> None:
        from dataclasses import asdict

        from pytest_accuracy.precheck.report import details_rows, precheck_json, result_rows
        from pytest_accuracy.precheck.runner import run_case

        result = run_case(self.case)  # a bad tensor file raises and fails this item, named
        layout = "mindspore" if result.framework == "mindspore" else "pytorch"
        prefix = f"{self.case.step}/{self.case.rank}/"
        result_row = result_rows([result], layout)[0]
        first_column = next(iter(result_row))
        result_row[first_column] = f"{prefix}{result_row[first_column]}"
        record = precheck_json([result])[0]
        record.update({"group": "precheck", "summary": f"{result.name}: {result.reason}",
                       "layout": layout, "result_row": result_row,
                       "details": details_rows(result, layout, prefix),
                       "outputs": [asdict(o) for o in result.outputs]})
        self.stash[RECORD_KEY] = record
        if result.status == "skip":
            pytest.skip(escape_controls(result.reason))
        if result.status == "fail":
            raise AccuracyError(_failure_lines(result) + self._next_step())

    def _next_step(self) -> list[str]:
        """msprobe's own check of the API on its real inputs (dumped as tensors first when
        the precheck generated them from statistics)."""
        from pytest_accuracy.nextstep.from_dump import ranks_of
        from pytest_accuracy.suite.next_step import dump_next_step

        dumps = getattr(self.parent, "dumps", None)
        if dumps is None or (self.case.step, self.case.rank) not in dumps.dumps:
            return []
        dump = dumps.dumps[(self.case.step, self.case.rank)]
        return dump_next_step(self, "api", dump, self.case.node, str(dumps.root),
                              ranks_of(dumps))


def _failure_lines(result: Any) -> list[str]:
    lines = [f"{result.name} disagrees with the float64 CPU reference "
             f"[{result.standard} standard, {result.device}, {result.inputs}]:", ""]
    for out in result.outputs:
        if out.status != "pass":
            lines.append(f"{out.name} {out.device_dtype} {list(out.shape)}: {out.message}")
    return lines


def write_precheck_tables(records: list[dict[str, Any]], out: Path) -> None:
    """msprobe-layout result and details CSVs (fixed names, no timestamp) from the records."""
    import pandas as pd

    from pytest_accuracy.precheck.report import (
        MS_DETAIL_COLUMNS,
        PT_DETAIL_COLUMNS,
        RESULT_COLUMNS,
    )

    if not records:
        return
    layout = records[0].get("layout") or "pytorch"
    merged: dict[str, dict[str, Any]] = {}
    for record in sorted(records, key=lambda r: str(r.get("name"))):
        row = record.get("result_row") or {}
        key = str(next(iter(row.values()), ""))
        target = merged.setdefault(key, dict(row))
        for column, value in row.items():  # forward and backward of one API share a row
            if value and not target.get(column):
                target[column] = value
            elif column == "Message" and value and value not in str(target[column]):
                target[column] = f"{target[column]}; {value}"
    from pytest_accuracy.report.cells import csv_cell
    from pytest_accuracy.safe_io import atomic_open

    details_columns = MS_DETAIL_COLUMNS if layout == "mindspore" else PT_DETAIL_COLUMNS
    details = [row for r in records for row in r.get("details") or []]
    for name, frame in (
            ("result", pd.DataFrame(list(merged.values()), columns=RESULT_COLUMNS[layout])),
            ("details", pd.DataFrame(details, columns=[h for h, _ in details_columns]))):
        # cells neutralised (formulas, newlines); written through a temporary, renamed
        with atomic_open(out / f"precheck_accuracy_checking_{name}.csv", newline="") as handle:
            frame.map(csv_cell).to_csv(handle, index=False)
