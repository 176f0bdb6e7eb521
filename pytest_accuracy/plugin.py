"""pytest glue: options, ini keys, the accuracy marker, fixtures, collection, summary, report."""

from __future__ import annotations

import argparse
from collections.abc import Generator
from typing import Any

import pytest

# The fixtures are registered with this module. Not through ``pytest_plugins``: pytest would
# scan every installed distribution's entry points again to find that name.
from pytest_accuracy.fixtures import (  # noqa: F401
    acc_bench_dump,
    acc_bench_logs,
    acc_compare,
    acc_npu_dump,
    acc_npu_log,
)
from pytest_accuracy.marker import MARKER_HELP, unknown_keys, unknown_keys_message
from pytest_accuracy.options import INPUT_DESTS, OPTIONS

# Every pytest run of a project that merely has the plugin installed pays for this module and
# for what its start-up hooks import (benchmarks/bench_startup.py): the options table, the
# marker's keys, the fixtures and settings; the suite, numpy and the compare core load only
# when an --acc-* option, an acc_* ini key or an accuracy:: node id is given.

_NODE_PREFIX = "accuracy::"
SELECTED_KEY = pytest.StashKey[list[str]]()
AUTO_WORKERS_KEY = pytest.StashKey[str]()  # why -n auto ran without workers
ACTIVE_KEY = pytest.StashKey[bool]()  # inputs given: the header says what this run checks


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("accuracy", "model-migration accuracy (pytest-accuracy)")
    for option in OPTIONS:
        text = f"{option.help} [{option.form}]"
        if option.kind == "flag":
            group.addoption(option.flag, dest=option.dest, action="store_true", default=None,
                            help=option.help)
        elif option.kind in ("paths", "globs"):
            group.addoption(option.flag, dest=option.dest, action="append", default=[],
                            metavar=option.form.split()[0], help=option.help)
        elif option.dest == "acc_bench":
            group.addoption(option.flag, dest=option.dest, action=_BenchRuns, default=None,
                            metavar="PATH", help=f"{text}; given twice, the second is "
                            "--acc-bench-noise")
        else:
            group.addoption(option.flag, dest=option.dest, default=None,
                            metavar=option.form.split()[0] if option.kind in ("path", "text")
                            else "VALUE",
                            help=text)
        if option.kind in ("paths", "globs"):
            parser.addini(option.dest, option.help, type="linelist", default=None)
        else:
            parser.addini(option.dest, option.help, type="string", default=None)


class _BenchRuns(argparse.Action):
    """``--acc-bench A --acc-bench B``: B is the bench's second run (--acc-bench-noise), never
    a silent replacement of A."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is None:
            setattr(namespace, self.dest, values)
        elif getattr(namespace, "acc_bench_noise", None) is None:
            namespace.acc_bench_noise = values
        else:
            raise argparse.ArgumentError(self, "given a third time: the bench and one second "
                                         "run of it (--acc-bench-noise) are compared, no more")


def pytest_load_initial_conftests(args: list[str]) -> None:
    """``--acc-bnech``: a usage error naming the closest ``--acc-*`` option (argparse would
    only say "unrecognized arguments")."""
    for token in args:
        if token == "--":
            break
        if token.startswith("--acc-") and token.split("=", 1)[0] not in _FLAGS:
            from pytest_accuracy.suite.usage import unknown_option_message

            raise pytest.UsageError(unknown_option_message(token))


_FLAGS = frozenset(o.flag for o in OPTIONS)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from pytest_accuracy.settings import setting, validate_options

    config.addinivalue_line("markers", MARKER_HELP)
    find = getattr(config, "_get_unknown_ini_keys", None)  # pytest's own, as its warning does
    if find is not None and any(k.startswith("acc_") for k in find()):
        from pytest_accuracy.suite.usage import unknown_ini_message

        raise pytest.UsageError(unknown_ini_message(config) or "unknown acc_* ini key")
    given = validate_options(config)
    _check_outputs(config, setting)
    config.stash[SELECTED_KEY] = _take_node_ids(config)
    if not given and not config.stash[SELECTED_KEY]:
        # nothing given for the built-in suite: its summary loads only if a user's suite
        # test (the marker, a fixture) turns up, so that those get the section and the step
        # summary too
        config.pluginmanager.register(_SuiteWatch(config), "accuracy-suite-watch")
        return
    from pytest_accuracy.limits import LimitError, check_limits

    try:
        check_limits()
    except LimitError as exc:
        raise pytest.UsageError(str(exc)) from None
    from pytest_accuracy.suite.state import STATE_KEY, make_state

    config.stash[STATE_KEY] = make_state(config)
    config.stash[ACTIVE_KEY] = True
    if setting(config, "merge"):
        from pytest_accuracy.suite.merge_items import MergePlugin

        config.pluginmanager.register(MergePlugin(config), "accuracy-merge")
        return
    if _suite_wanted(config):
        from pytest_accuracy.suite.usage import missing_dump_message

        missing = missing_dump_message(config)
        if missing:  # here, not at collection: xdist's controller says it too
            raise pytest.UsageError(missing)
    from pytest_accuracy.suite.heap import HeapSettings

    # made before the imports below: under its collector setting, numpy's and the compare
    # core's objects no longer set off a pass over the whole heap as they load (0.06 s)
    heap = HeapSettings(config)
    from pytest_accuracy.suite.protocol import LightProtocol
    from pytest_accuracy.suite.readahead import ReadAhead
    from pytest_accuracy.suite.summary import AccuracyResults

    config.pluginmanager.register(AccuracyResults(config), "accuracy-results")
    config.pluginmanager.register(ReadAhead(config), "accuracy-readahead")
    config.pluginmanager.register(LightProtocol(config), "accuracy-protocol")
    config.pluginmanager.register(heap, "accuracy-heap")


class _SuiteWatch:
    """Loads the results plugin once a user's @accuracy or fixture test is collected (or, on
    xdist's controller, once a record of one arrives); a run with none imports nothing."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: Any = None

    def _load(self) -> Any:
        if self.results is None:
            from pytest_accuracy.suite.summary import AccuracyResults

            self.results = AccuracyResults(self.config)
            self.config.pluginmanager.register(self.results, "accuracy-results")
        return self.results

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if self.results is None and any(_may_be_suite_test(i) for i in items):
            from pytest_accuracy.suite.suite_records import is_suite_test

            if any(is_suite_test(i) for i in items):
                self._load()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.results is None and any(n == "accuracy" for n, _ in report.user_properties):
            self._load().pytest_runtest_logreport(report)  # registered now: this one by hand


def _may_be_suite_test(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return item.get_closest_marker("accuracy") is not None or any(
        n.startswith("acc_") for n in names)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pytest-xdist) on a compare of dumps with no tensor files: no workers."""
    if not _npu_given(config):
        return None  # a project's own tests: xdist's count, and nothing of ours imported
    from pytest_accuracy.suite.auto_workers import auto_workers

    return auto_workers(config)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    lines = []
    if config.stash.get(ACTIVE_KEY, False):
        from pytest_accuracy.suite.usage import run_mode

        mode = run_mode(config)
        if mode:
            lines.append(mode)
    if AUTO_WORKERS_KEY in config.stash:
        lines.append(config.stash[AUTO_WORKERS_KEY])
    elif (getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
            and _npu_given(config)):
        from pytest_accuracy.suite.auto_workers import workers_note

        note = workers_note(config)
        if note:
            lines.append(note)
    return lines or None


def _npu_given(config: pytest.Config) -> bool:
    from pytest_accuracy.settings import setting

    return bool(setting(config, "npu"))


def _check_outputs(config: pytest.Config, setting: Any) -> None:
    """An output that cannot be written (its folder is a file) is a usage error now, not a
    traceback when the session ends."""
    given = [(name, folder, value) for name, folder in (
        ("json", False), ("report", True), ("markdown", False), ("write_golden", False))
        if (value := setting(config, name))]
    if not given:
        return  # a plain run imports nothing more
    from pytest_accuracy.safe_io import AccuracyOutputError, check_output

    for name, folder, value in given:
        if value:
            try:
                check_output(str(value), folder=folder)
            except AccuracyOutputError as exc:
                raise pytest.UsageError(f"--acc-{name.replace('_', '-')}: {exc}") from None


def _take_node_ids(config: pytest.Config) -> list[str]:
    """``pytest accuracy::compare::0/0/x`` selects generated items: there is no such file."""
    ids = [a for a in config.args if a.startswith(_NODE_PREFIX) or a == "accuracy"]
    config.args[:] = [a for a in config.args if a not in ids]
    return ids


def _suite_wanted(config: pytest.Config) -> bool:
    """``auto``: when an input is given on the command line, or a generated item's node id
    is, or an input is given in the ini file (an ini that names the dumps is a CI directory's,
    as a command line would be) and no test is picked by node id."""
    from pytest_accuracy.settings import setting, typed_setting

    mode = typed_setting(config, "suite") or "auto"
    if mode in ("on", "off"):
        return bool(mode == "on")
    if config.stash[SELECTED_KEY] or any(config.getoption(d, None) for d in INPUT_DESTS):
        return True
    # inputs from the ini only: not when the command line picks tests by node id (a suite's
    # one test selected must not run the built-in items the ini's logs would add)
    return (any(setting(config, dest[4:]) for dest in INPUT_DESTS)
            and not any("::" in str(arg) for arg in config.args))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for item in items:
        for mark in item.iter_markers("accuracy"):
            bad = unknown_keys(mark.kwargs)
            if bad:
                raise pytest.UsageError(unknown_keys_message(f"{item.nodeid}: @accuracy", bad))
    if _suite_wanted(config):
        from pytest_accuracy.suite import AccuracySuite

        suite = AccuracySuite.from_parent(session, name="accuracy", nodeid="accuracy")
        items.extend(session.genitems(suite))
    selected = config.stash[SELECTED_KEY]
    if selected:
        _select(session, config, items, selected)


def _select(session: pytest.Session, config: pytest.Config, items: list[pytest.Item],
            selected: list[str]) -> None:
    """Keep the generated items the ``accuracy::`` arguments name; an argument that names
    none is a collection error with the closest ids (unless collection already failed). Not
    a UsageError: under xdist the workers collect, and a worker's UsageError is a crash."""
    if not session.testsfailed:
        from pytest_accuracy.suite.usage import unknown_node_ids

        unknown = unknown_node_ids(selected, items)
        if unknown:
            report = pytest.CollectReport("accuracy", "failed", unknown, [])
            config.hook.pytest_collectreport(report=report)
    keep = [i for i in items if not i.nodeid.startswith(_NODE_PREFIX)
            or any(_selects(s, i.nodeid) for s in selected)]
    kept = set(map(id, keep))  # a set: 50,000 items would make `in keep` quadratic
    config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
    items[:] = keep


def _selects(node_id: str, item_id: str) -> bool:
    return item_id == node_id or item_id.startswith(node_id + "::")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A path an @accuracy marker names that is not there: the test errors in one line."""
    if isinstance(item, pytest.Function) and item.get_closest_marker("accuracy") is not None:
        from pytest_accuracy.suite.usage import marker_path_problem

        problem = marker_path_problem(item)
        if problem:
            pytest.fail(problem, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """With @accuracy giving inputs (or the log fixtures), the marker itself is an assertion."""
    yield
    if any(True for _ in item.iter_markers("accuracy")):
        from pytest_accuracy.suite.marker_check import assert_marker

        assert_marker(item)

