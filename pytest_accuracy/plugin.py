"""pytest glue: options, ini keys, the accuracy marker, fixtures, collection, summary, report."""

from __future__ import annotations

import json
from collections.abc import Generator

import pytest

from pytest_accuracy.marker import MARKER_HELP, unknown_keys, unknown_keys_message
from pytest_accuracy.suite import RECORD_KEY, AccuracySuite
from pytest_accuracy.suite.state import STATE_KEY, make_state

pytest_plugins = ["pytest_accuracy.fixtures"]

_PATH_OPTIONS = {
    "npu": "NPU (device under test) msprobe dump: root, step dir, rank dir or dump.json",
    "bench": "bench msprobe dump (same layouts as --acc-npu)",
    "npu-log": "NPU training log (MindFormers, Megatron, MindSpeed, HF, torchtitan, CSV/JSONL)",
    "npu-config": "NPU training config (MindFormers yaml or Megatron args)",
    "bench-config": "bench training config (MindFormers yaml or Megatron args)",
    "json": "write the versioned JSON result document here",
    "report": "write the report folder (CSV tables, HTML page, plots) here",
    "waivers": "waivers yaml: node/API patterns with a relaxed tolerance or a known divergence",
    "mapping": "msprobe mapping yaml (api/cell/data/layer mapping) or an inferred mapping",
}
_VALUE_OPTIONS = {
    "rel-err": "compare: relative L2 error allowed, overriding the per-dtype defaults",
    "min-cosine": "compare: minimum cosine, overriding the per-dtype defaults",
    "min-matched": "compare: minimum share of NPU nodes with a bench counterpart (0.5)",
    "steps-select": "only these steps of the dumps, e.g. '0,2-4'",
    "ranks": "only these ranks of the dumps, e.g. '0-7'",
    "align": "cross-framework pairing: auto (default), always, or name",
    "device": "precheck device: dump (default), cpu, cuda, npu",
    "standard": "precheck standard: default or dtype",
    "suite": "built-in suite: auto (when inputs are on the command line), on, off",
    "inputs": "compare inputs too: failing (default: only where the first divergence needs "
              "them) or all (the full msprobe-style table)",
    "local-norm-step": "compare per-parameter gradient norms at this step (default: the first)",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("accuracy", "model-migration accuracy (pytest-accuracy)")
    for name, help_text in {**_PATH_OPTIONS, **_VALUE_OPTIONS}.items():
        dest = "acc_" + name.replace("-", "_")
        group.addoption(f"--acc-{name}", dest=dest, default=None, help=help_text)
        parser.addini(dest, help_text, default=None)
    group.addoption("--acc-bench-log", dest="acc_bench_logs", action="append", default=[],
                    help="bench training log; repeat for repeated bench runs (the band)")
    parser.addini("acc_bench_logs", "bench training logs", type="linelist", default=[])
    group.addoption("--acc-scope", dest="acc_scope", action="append", default=[],
                    help="only NPU nodes matching this glob (repeatable), e.g. 'Module.layers.1.*'")
    group.addoption("--acc-precheck", dest="acc_precheck", action="store_true", default=False,
                    help="generate per-API precheck items from the NPU dump")
    group.addoption("--acc-no-dtype-aware", dest="acc_dtype_aware", action="store_false",
                    default=None, help="judge every float tensor with the float32 tolerance")
    parser.addini("acc_dtype_aware", "judge tensors by their least precise upstream dtype",
                  default=None)
    from pytest_accuracy.suite.loss_options import add_loss_options

    add_loss_options(group, parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    config.stash[STATE_KEY] = make_state(config)
    from pytest_accuracy.suite.summary import AccuracyResults

    config.pluginmanager.register(AccuracyResults(config), "accuracy-results")


def _suite_wanted(config: pytest.Config) -> bool:
    mode = str(config.getoption("acc_suite") or config.getini("acc_suite") or "auto")
    if mode in ("on", "off"):
        return mode == "on"
    inputs = ("acc_npu", "acc_bench", "acc_npu_log", "acc_bench_logs", "acc_npu_config",
              "acc_bench_config")
    return any(config.getoption(name) for name in inputs)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for item in items:
        for mark in item.iter_markers("accuracy"):
            bad = unknown_keys(mark.kwargs)
            if bad:
                raise pytest.UsageError(unknown_keys_message(item.nodeid, bad))
    if _suite_wanted(config):
        suite = AccuracySuite.from_parent(session, name="accuracy", nodeid="accuracy")
        items.extend(session.genitems(suite))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """With @accuracy and the log fixtures, the marker itself asserts the migration standard."""
    yield
    funcargs = getattr(item, "funcargs", {})
    if "acc_npu_log" in funcargs and "acc_bench_logs" in funcargs:
        from pytest_accuracy.suite.marker_check import assert_migration_standard

        assert_migration_standard(item, funcargs["acc_npu_log"], funcargs["acc_bench_logs"])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    record = item.stash.get(RECORD_KEY, None)
    if record is not None and call.when == "call":
        # user_properties travel from xdist workers to the controller.
        report.user_properties.append(("accuracy", json.dumps(record, default=str)))
    return report
