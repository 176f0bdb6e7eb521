"""msprobe acc_check results as precheck items: ``accuracy::precheck::msprobe/<api>.<dir>``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest

from pytest_accuracy.settings import float_setting, path_setting
from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyGroup, AccuracyItem
from pytest_accuracy.text import escape_controls

PREFIX = "msprobe/"


class MsprobePrecheckGroup(AccuracyGroup):
    """Reads both result sets once per process; a bad file is a collection error, named."""

    def collect(self) -> Iterator[pytest.Item]:
        from pytest_accuracy.errors import AccuracyInputError
        from pytest_accuracy.precheck.msprobe_csv import load_run
        from pytest_accuracy.precheck.msprobe_judge import DEFAULT_GROWTH

        npu = path_setting(self.config, "npu_precheck_results")
        bench = path_setting(self.config, "bench_precheck_results")
        if npu is None:
            raise AccuracyInputError(str(bench), "--acc-bench-precheck-results is the run before "
                                     "the change: give the run under test too, "
                                     "--acc-npu-precheck-results=PATH")
        run = load_run(npu)
        if all(r.status == "skip" for r in run.outputs):  # a run that checked nothing fails
            raise AccuracyInputError(run.details_path, "msprobe compared nothing: every output "
                                     "is SKIP (its result may still say pass)")
        before = load_run(bench) if bench is not None else None
        factor = float_setting(self.config, "precheck_growth") or DEFAULT_GROWTH
        for (api, direction), rows in sorted(run.calls().items()):
            yield MsprobePrecheckItem.from_parent(
                self, name=escape_controls(f"{PREFIX}{api}.{direction}"), run=run,
                before=before, call=(api, direction, rows), factor=factor)


class MsprobePrecheckItem(AccuracyItem):
    """msprobe's verdict and our standard on its numbers; the stricter decides."""

    def __init__(self, *, run: Any, before: Any, call: tuple[str, str, list[Any]],
                 factor: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run, self.before, self.call, self.factor = run, before, call, factor

    def runtest(self) -> None:
        from pytest_accuracy.precheck.msprobe_judge import judge_call

        api, direction, rows = self.call
        verdict = judge_call(self.run, api, direction, rows, self.before, self.factor)
        self.stash[RECORD_KEY] = _record(self.run, self.before, verdict)
        if verdict.status == "skip":
            pytest.skip(escape_controls(verdict.reason))
        if verdict.status == "fail":
            raise AccuracyError(list(verdict.lines))


def _record(run: Any, before: Any, verdict: Any) -> dict[str, Any]:
    """The JSON record, with result/details rows in our precheck CSV layout."""
    from pytest_accuracy.precheck.msprobe_csv import describe
    from pytest_accuracy.precheck.report import details_rows, precheck_json, result_rows

    result = _as_result(run, verdict)
    layout = "mindspore" if run.layout.framework == "mindspore" else "pytorch"
    result_row = result_rows([result], layout)[0]
    first = next(iter(result_row))
    result_row[first] = f"{PREFIX}{result_row[first]}"
    record = precheck_json([result])[0]
    record.update({"group": "precheck", "summary": "\n".join(verdict.lines[:2]), "layout": layout,
                   "result_row": result_row, "details": details_rows(result, layout, PREFIX),
                   "outputs": [asdict(o) for o in result.outputs], "msprobe": verdict.msprobe,
                   "ours": verdict.ours, "source": describe(run)})
    if before is not None:
        record["bench_source"] = describe(before)
    return record


def _as_result(run: Any, verdict: Any) -> Any:
    """The verdict as our PrecheckResult, so the JSON section and CSV tables are shared."""
    import math

    from pytest_accuracy.precheck.results import OutputCheck, PrecheckResult

    outputs = tuple(
        OutputCheck(v.row.name, "skip" if v.row.status == "skip" else
                    ("fail" if v.failed else "pass"), v.row.bench_dtype, v.row.device_dtype,
                    v.row.shape, v.row.metrics,
                    "; ".join(v.problems) or v.row.message.replace("\n", " ").strip())
        for v in verdict.rows)
    compared = [v.row.metrics for v in verdict.rows if v.row.status != "skip"]
    cosines = [c for m in compared if (c := m.get("cosine")) is not None]
    abs_errs = [a for m in compared if (a := m.get("max_abs_err")) is not None]
    return PrecheckResult(
        case_id=f"{PREFIX}{verdict.api}.{verdict.direction}",
        name=f"{verdict.api}.{verdict.direction}", api=verdict.api,
        direction=verdict.direction, framework=run.layout.framework,
        status=verdict.status,
        cosine=min(cosines, key=lambda c: c if not math.isnan(c) else -math.inf)
        if cosines else None,
        max_abs=max(abs_errs, key=lambda a: a if not math.isnan(a) else math.inf)
        if abs_errs else None,
        reason=verdict.reason, inputs=f"msprobe {run.layout.kind}: {run.details_path.name}",
        device="msprobe acc_check", standard="msprobe + ours", outputs=outputs)
