"""Per-process state of the built-in suite: inputs resolved once, compare computed lazily."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pytest

from pytest_accuracy.compare import Comparison, Pairing
from pytest_accuracy.compare.criteria import CompareCriteria
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.settings import compare_criteria, parse_int_set, path_setting, setting


@dataclass
class SuiteState:
    """What the generated items of one process share."""

    config: pytest.Config
    npu: Path | None
    bench: Path | None

    @property
    def has_dumps(self) -> bool:
        """Compare items are wanted: a bench dump, or an NPU dump that is not only prechecked."""
        precheck_only = bool(self.config.getoption("acc_precheck")) and self.bench is None
        return (self.npu is not None or self.bench is not None) and not precheck_only

    @cached_property
    def criteria(self) -> CompareCriteria:
        return compare_criteria(self.config)

    @cached_property
    def comparison(self) -> Comparison:
        from pytest_accuracy.errors import AccuracyInputError

        if self.npu is None or self.bench is None:
            missing = "--acc-bench" if self.npu else "--acc-npu"
            given = self.npu or self.bench
            raise AccuracyInputError(str(given), f"compare needs both dumps: {missing} is missing")
        steps = parse_int_set(setting(self.config, "steps_select"), "steps")
        ranks = parse_int_set(setting(self.config, "ranks"), "ranks")
        npu = load_dumps(self.npu, steps=steps, ranks=ranks)
        bench = load_dumps(self.bench, steps=steps, ranks=ranks)
        inputs = str(setting(self.config, "inputs") or "failing")
        if inputs not in ("failing", "all"):
            raise pytest.UsageError(f"--acc-inputs: expected failing or all, got {inputs!r}")
        return Comparison(npu, bench, self.criteria,
                          self.pairing(npu.framework, bench.framework), inputs=inputs)

    def pairing(self, npu_framework: str, bench_framework: str) -> Pairing | None:
        from pytest_accuracy.suite.pairing import choose_pairing

        return choose_pairing(self.config, npu_framework, bench_framework)

    def extra_groups(self) -> Iterator[tuple[str, type[pytest.Collector]]]:
        from pytest_accuracy.suite.registry import extra_groups

        yield from extra_groups(self.config)


def make_state(config: pytest.Config) -> SuiteState:
    return SuiteState(config, path_setting(config, "npu"), path_setting(config, "bench"))


STATE_KEY = pytest.StashKey[SuiteState]()
