"""Migration-standard items on training logs: ``accuracy::loss::<check>``."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from pytest_accuracy.settings import log_reading, loss_criteria, path_setting, setting
from pytest_accuracy.suite import RECORD_KEY, AccuracyError, AccuracyGroup, AccuracyItem
from pytest_accuracy.text import escape_controls

CHECKS = ("first_loss", "mean_loss", "grad_norm", "band", "zero_centred", "divergence", "lr")


def read_logs(config: pytest.Config) -> tuple[Any, list[Any]]:
    """The NPU log and the bench logs (first = the bench, the rest form the band)."""
    from pytest_accuracy.errors import AccuracyInputError
    from pytest_accuracy.logs import read_log

    npu = path_setting(config, "npu_log")
    bench_paths = [Path(str(p)) for p in (setting(config, "bench_logs") or [])]
    if npu is None or not bench_paths:
        missing = "--acc-bench-log" if npu else "--acc-npu-log"
        raise AccuracyInputError(str(npu or bench_paths[0]),
                                 f"the migration standard needs both logs: {missing} is missing")
    how = log_reading(config)
    return read_log(npu, **how), [read_log(p, **how) for p in bench_paths]


class LossGroup(AccuracyGroup):
    @cached_property
    def logs(self) -> tuple[Any, list[Any]]:
        """Parsed once per process: a log of a million lines takes seconds to read."""
        return read_logs(self.config)

    @cached_property
    def report(self) -> Any:
        from pytest_accuracy.curves import evaluate

        npu, benches = self.logs
        return evaluate(npu, benches, loss_criteria(self.config))

    def collect(self) -> Iterator[pytest.Item]:
        report = self.report  # unreadable logs become a collection error naming the file
        names = [c.name for c in report.checks]
        for name in CHECKS:
            if name in names:
                yield LossItem.from_parent(self, name=name, check=name)
        npu, benches = self.logs
        if npu.local_norm is not None and benches[0].local_norm is not None:
            yield LocalNormLogItem.from_parent(self, name="local_norm")


class LossItem(AccuracyItem):
    """One check of the migration standard; the failure prints numbers, limits, worst steps."""

    def __init__(self, *, check: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check

    def runtest(self) -> None:
        group = self.parent
        assert isinstance(group, LossGroup)
        report = group.report
        result = report.check(self.check)
        self.stash[RECORD_KEY] = {
            "group": "loss", "name": self.check, "status": result.status,
            "measured": dict(result.measured), "allowed": dict(result.allowed),
            "worst_steps": list(result.worst_steps), "summary": result.message,
            "report": report.to_dict(), "criteria": _criteria_dict(report.criteria),
        }
        if self.check == "first_loss":
            _maybe_write_golden(self.config, group.logs[0])
        if result.status == "skip":
            pytest.skip(escape_controls(result.message))
        if result.status == "fail":
            raise AccuracyError(result.message.splitlines() + self._next(report, result))

    def _next(self, report: Any, result: Any) -> list[str]:
        """The step this check names (where the curves part, else its worst), dumped next."""
        from pytest_accuracy.suite.next_step import loss_next_step

        step = report.divergence_step or next(iter(result.worst_steps), None)
        if step is None:
            return []
        assert isinstance(self.parent, LossGroup)
        npu, benches = self.parent.logs
        return loss_next_step(self, npu, benches[0] if benches else None, int(step))


def _criteria_dict(criteria: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: v for k, v in asdict(criteria).items() if v is not None}


def _maybe_write_golden(config: pytest.Config, npu: Any) -> None:
    target = setting(config, "write_golden")
    if target:
        from pytest_accuracy.logs import write_golden

        write_golden(npu, Path(str(target)))


def loss_section(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``loss`` part of the JSON document: measured values, status, allowed values."""
    if not records:
        return {}
    section: dict[str, Any] = dict(records[0].get("report") or {})
    section.pop("checks", None)
    section["criteria"] = records[0].get("criteria")
    section["checks"] = {r["name"]: {k: r.get(k) for k in ("status", "measured", "allowed",
                                                           "worst_steps", "bars")}
                         for r in records}
    for record in records:
        section["checks"][record["name"]]["message"] = record.get("summary")
    return section


def write_loss_plots(config: pytest.Config, out: Path) -> list[Path]:
    try:
        from pytest_accuracy.report.plots import plot_loss_report

        npu, benches = read_logs(config)
        return list(plot_loss_report(npu, benches, out, loss_criteria(config)))
    except ImportError as exc:  # the plot extra is optional: say so, don't fail the run
        from pytest_accuracy.safe_io import write_atomic

        write_atomic(out / "plots_unavailable.txt", f"{exc}\n")
        return []


_BARS = 20  # the local-norm chart: the parameters that differ most


def _bars(table: Any, original: dict[str, str]) -> list[dict[str, Any]]:
    rows = table.head(_BARS)[["param", "npu", "bench", "rel_diff"]].to_dict("records")
    return [{**row, "param": original.get(str(row["param"]), str(row["param"]))} for row in rows]


def _local_norm_summary(worst: Any, table: Any, step: int, allowed: float,
                        original: dict[str, str]) -> str:
    if not len(worst):
        return f"Local norms agree at step {step}: {len(table)} parameters within {allowed:g}."
    top = worst.iloc[0]
    name = original.get(str(top["param"]), top["param"])
    return (f"Local norms differ at step {step}: {len(worst)} of {len(table)} parameters beyond "
            f"{allowed:g} relative; worst {name} ({top['rel_diff']:.3g}).")


class LocalNormLogItem(AccuracyItem):
    """Per-parameter local norms from the two logs at one step (names mapped across conventions)."""

    def runtest(self) -> None:
        from pytest_accuracy.curves import compare_local_norms
        from pytest_accuracy.gradients import load_name_rules

        group = self.parent
        assert isinstance(group, LossGroup)
        npu, benches = group.logs
        rules = load_name_rules()
        original = {rules.canonical(str(p)): str(p) for p in npu.local_norm["param"]}
        frames = [t.local_norm.assign(param=t.local_norm["param"].map(rules.canonical))
                  for t in (npu, benches[0])]
        common = sorted(set(frames[0]["step"]) & set(frames[1]["step"]))
        if not common:
            pytest.skip("the two logs have no step with local norms in common")
        step = int(setting(self.config, "local_norm_step") or common[0])
        # every parameter: the message counts them all, the chart shows the worst
        table = compare_local_norms(frames[0], frames[1], step, top=len(frames[0]))
        if table.empty:  # comparing nothing must not read as a pass
            npu_names, bench_names = (sorted(set(f["param"]))[:2] for f in frames)
            pytest.skip(f"no parameter with a local norm in both logs at step {step} "
                        f"(NPU names like {npu_names}, bench names like {bench_names})")
        allowed = loss_criteria(self.config).gnorm_rel
        worst = table[~(table["rel_diff"] <= allowed)]
        self.stash[RECORD_KEY] = {
            "group": "loss", "name": "local_norm", "status": "fail" if len(worst) else "pass",
            "measured": {"step": step, "params": len(table)}, "allowed": {"rel_diff": allowed},
            "worst_steps": [step],
            "summary": _local_norm_summary(worst, table, step, allowed, original),
            "bars": _bars(table, original)}
        if len(worst):
            lines = [f"Local norms differ at step {step}: {len(worst)} of {len(table)} parameters "
                     f"beyond {allowed:g} relative, worst first:"]
            lines += [f"  {original.get(str(r.param), r.param)}: {r.npu:.6g} vs bench "
                      f"{r.bench:.6g} (relative difference {r.rel_diff:.3g})"
                      for r in worst.head(5).itertuples()]
            raise AccuracyError(lines)
