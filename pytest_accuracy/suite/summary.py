"""Gather item records on the controller; write the terminal summary, JSON document and report."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

# The report (and with it numpy and the compare core) is imported where a record or the
# outputs are made: an xdist controller makes neither before it has started its workers.
from pytest_accuracy.compare.diagnose import ROUNDING
from pytest_accuracy.report.record_spool import RecordSpool
from pytest_accuracy.report.rows_spool import RowsSpool
from pytest_accuracy.safe_io import ensure_dir
from pytest_accuracy.settings import typed_setting
from pytest_accuracy.suite import NATIVE_KEY, RECORD_KEY
from pytest_accuracy.suite.state import STATE_KEY
from pytest_accuracy.text import escape_controls


class AccuracyResults:
    """Registered plugin object: sees every report (also those coming from xdist workers)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        # node records: dicts, and passing nodes' for the documents spooled until written
        self.nodes: list[Any] = []
        self.rows = RowsSpool()  # the nodes' rows of msprobe's table, for the report's CSV
        self.spool = RecordSpool()
        self.spool_failed = False
        # passing nodes a rank item counted instead of sending (a gate writing no document
        # needs no more of them), and the waivers their names matched
        self.passes = 0
        self.ranked = False  # records came from rank items
        self.waivers_matched: set[str] = set()
        self.groups: dict[str, list[dict[str, Any]]] = {}
        self.coverage: dict[str, Any] | None = None
        self.layouts: dict[str, Any] | None = None
        self.nonfinite: dict[str, Any] | None = None
        self.compared_on: dict[str, Any] | None = None
        self.first: dict[str, Any] | None = None
        self.outcomes: dict[str, int] = {}
        # Collection order, so that group records (which xdist delivers as workers finish)
        # come out in the same order as in a serial run: the same JSON document either way.
        self.positions: dict[str, int] = {}
        self.group_ids: dict[int, str] = {}
        self.worker = hasattr(config, "workerinput")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:  # empty on the xdist controller: the workers collect
            self.positions = {item.nodeid: i for i, item in enumerate(session.items)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.positions:
            self.positions = {nodeid: i for i, nodeid in enumerate(ids)}

    def _in_order(self) -> None:
        for records in self.groups.values():
            records.sort(key=lambda r: self.positions.get(self.group_ids.get(id(r), ""), -1))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        record = item.stash.get(RECORD_KEY, None)
        if record is not None and call.when == "call":
            del item.stash[RECORD_KEY]  # the report holds it now: one copy per node, not two
        elif call.when == "call" or (call.when == "setup" and not report.passed):
            record = _suite_record(item, report)  # a user's own @accuracy test, else None
        else:
            record = None
        if record is not None:
            from pytest_accuracy.report.records import json_native

            # a region item of plain passes vouches for its record (report.records.json_native)
            native = item.stash.get(NATIVE_KEY, None)
            if self.worker or not (native if native is not None else json_native(record)):
                # user_properties travel from xdist workers to the controller, as JSON text
                report.user_properties.append(("accuracy", json.dumps(record, default=str)))
            else:  # in process: what JSON would give back, without the round trip's copy
                report.user_properties.append(("accuracy", record))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for k, (name, value) in enumerate(report.user_properties):
            if name == "accuracy":
                spooled = len(self.spool)
                record = record_of(value)
                self._add(report, record)
                if len(self.spool) > spooled:  # kept for the documents: the report need not
                    report.user_properties[k] = (name, _brief(record))

    def _add(self, report: pytest.TestReport, record: dict[str, Any]) -> None:
        self.outcomes[report.outcome] = self.outcomes.get(report.outcome, 0) + 1
        if "coverage" in record:
            self.coverage = record["coverage"]
            # the layouts as the process that compared saw them (-n: a worker)
            self.layouts = record.get("layouts_seen") or self.layouts
            self.nonfinite = record.get("first_nonfinite")
            self.compared_on = record.get("compared_on")
        elif "group" in record:
            self.groups.setdefault(record["group"], []).append(record)
            self.group_ids[id(record)] = report.nodeid
        else:
            nodes = record.get("region_nodes", [record])
            for node in nodes:  # a region or rank item: its nodes
                self._add_node(node)
            if "rank_coverage" in record:  # a rank item: its rank's share of the coverage
                self._add_rank_coverage(record["rank_coverage"])
                self.ranked = True
                self.passes += int(record.get("passes", 0))
                self.waivers_matched.update(record.get("waivers_matched") or ())

    def _add_rank_coverage(self, part: dict[str, Any]) -> None:
        """The run's coverage, summed over its rank items as they arrive."""
        from pytest_accuracy.report.merge import summed_coverage

        self.coverage = summed_coverage([self.coverage, part["coverage"]])
        found = part.get("first_nonfinite")
        if found and (self.nonfinite is None or _earlier(found, self.nonfinite)):
            self.nonfinite = found
        self.compared_on = self.compared_on or part.get("compared_on")

    def _add_node(self, record: dict[str, Any]) -> None:
        first = record.pop("first", None)
        if first and (self.first is None or _earlier(first, self.first)):
            self.first = first
        if self.worker or self.spool_failed:  # a worker sends its records on
            self.nodes.append(record)
            return
        try:
            if record.get("rows"):  # only the report's CSV reads them, at the end: on disk
                record["rows"] = self.rows.put(record["rows"])
            if record.get("status") == "pass" and len(record) > _VERDICT_KEYS:
                self.nodes.append(self.spool.put(record))  # for the documents, at the end
                return
        except OSError:  # a full disk, a file size limit: kept in memory from here on
            self.spool_failed = True
        except (ValueError, OverflowError, TypeError):
            pass  # what msgpack cannot hold (a lone surrogate in a name): this one kept as is
        self.nodes.append(record)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(
        self, terminalreporter: Any, exitstatus: int, config: pytest.Config
    ) -> Generator[None, None, None]:
        _index_teardown_reports(terminalreporter)  # before pytest prints the failures
        yield
        lines = self.summary_lines()
        from pytest_accuracy.suite.usage import run_mode

        mode = run_mode(config)
        if mode and "nothing is compared" in mode:  # a pass here is no compare's pass
            lines.insert(0, mode)
        if lines:
            terminalreporter.write_sep("=", "accuracy")
            for line in lines:
                terminalreporter.write_line(line)

    def summary_lines(self) -> list[str]:
        """The accuracy section; its last sentence is the answer (the first divergence)."""
        self._in_order()
        lines: list[str] = []
        if self.nonfinite:
            n = self.nonfinite
            lines.append(f"First NaN/Inf on the NPU: {n['npu_name']} (step {n['step']}, rank "
                         f"{n['rank']}), {n['tensor']}, from finite inputs.")
        unmatched = [n for n in self.nodes if n["status"] == "unmatched"]
        if unmatched:
            names = ", ".join(f"{n['step']}/{n['rank']}/{n['npu_name']}" for n in unmatched[:5])
            more = f" and {len(unmatched) - 5} more" if len(unmatched) > 5 else ""
            lines.append(f"{len(unmatched)} NPU nodes had no bench counterpart (skipped, never "
                         f"counted as passes): {names}{more}")
        if self.coverage:
            c = self.coverage
            theirs = (f" {c['bench_total'] - c['bench_matched']} of {c['bench_total']} bench "
                      "nodes have no NPU counterpart." if c.get("bench_total") else "")
            lines.append(f"Matched {c['matched']} of {c['total']} NPU nodes "
                         f"({c['matched_share']:.1%}; at least {c['min_matched']:.0%} required)."
                         f"{theirs}")
        if self.compared_on:
            lines.append(str(self.compared_on["note"]))
        from pytest_accuracy.suite.group_summary import group_lines

        for group, records in sorted(self.groups.items()):
            lines += group_lines(group, records)
        state = self.config.stash.get(STATE_KEY, None)
        criteria = getattr(state, "criteria", None) if self.nodes or self.passes else None
        if criteria is not None and criteria.waivers:
            lines += stale_waivers(criteria.waivers, self.nodes, self.waivers_matched)
        from pytest_accuracy.suite.noise_lines import layout_lines, learned_lines

        if self.nodes or self.passes:
            lines += layout_lines(state, self.layouts)
        lines += learned_lines(self.nodes, getattr(state, "criteria", None))
        lines += compare_verdict_lines(self.nodes, self.first, self.passes)
        return [escape_controls(line) for line in lines]  # names come from other machines

    def verdict(self, exitstatus: int) -> str:
        checked = self.outcomes.get("passed", 0) + self.outcomes.get("failed", 0)
        return "pass" if exitstatus == 0 and checked > 0 else "fail"

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = session.config
        if hasattr(config, "workerinput"):
            return  # only the controller writes the one document
        if self.ranked:  # each rank item saw its rank alone, as a shard of a merge does
            from pytest_accuracy.report.merge import carry_across_shards

            self.nodes.sort(key=_order)
            carry_across_shards(self.nodes)
        json_path = config.getoption("acc_json") or config.getini("acc_json")
        report_dir = config.getoption("acc_report") or config.getini("acc_report")
        from pytest_accuracy.suite.markdown_out import markdown_wanted, write_markdown

        markdown = markdown_wanted(config)
        state = config.stash.get(STATE_KEY, None)  # None: a run of a user's suite only
        if state is not None and (json_path or report_dir or markdown):
            state.release()  # the records hold what the outputs need: not the dump models
        settle_nodes(self.nodes, self.first)
        why = run_failure(self.nodes, self.passes) if session.exitstatus == 0 else None
        if why is None and session.exitstatus == 0 and not self.nodes and not self.passes:
            why = groups_unchecked(self.groups)
        if why is None and session.exitstatus == 0 and typed_setting(config, "strict_waivers"):
            stale = (stale_waivers(state.criteria.waivers, self.nodes, self.waivers_matched)
                     if state else [])
            why = f"--acc-strict-waivers: {stale[0]}" if stale else None
        if why is not None:
            # carried nodes are xfailed and skipped ones are not checked: the run still fails,
            # as one failed report that the terminal, JUnit and the exit code all count
            _log_verdict_failure(session, why)
            exitstatus = int(session.exitstatus)
        _sort_failures(config)
        if not (json_path or report_dir or markdown):
            return
        from pytest_accuracy.safe_io import AccuracyOutputError, folder_lock

        try:
            with folder_lock(report_dir):
                doc = self.write_outputs(int(exitstatus), json_path, report_dir)
                if markdown:
                    write_markdown(config, doc)
            self.rows.close()
        except AccuracyOutputError as exc:
            _outputs_failed(session, f"not written: {exc}", pytest.ExitCode.INTERNAL_ERROR)
        except KeyboardInterrupt:
            _outputs_failed(session, "interrupted while writing the outputs: each file is "
                            "the previous run's or this one's, whole", pytest.ExitCode.INTERRUPTED)

    def write_outputs(self, exitstatus: int, json_path: Any, report_dir: Any) -> dict[str, Any]:
        from pytest_accuracy.report.document import (
            build_document,
            compare_section,
            write_compare_csv,
            write_html,
            write_json,
        )

        self._in_order()
        state = self.config.stash.get(STATE_KEY, None)  # released: its layouts and criteria
        summary: dict[str, Any] = {"first_divergence": _public_first(self.first),
                                   "first_nonfinite": self.nonfinite,
                                   "coverage": self.coverage,
                                   **(layouts_record(state) or (
                                       {"layouts": self.layouts} if self.layouts
                                       and self.layouts.get("npu") else {})),
                                   **({"compared_on": self.compared_on} if self.compared_on
                                      else {})}
        sections: dict[str, Any] = {"compare": compare_section(self.nodes, summary)
                                    if self.nodes or self.coverage else None}
        for group, records in self.groups.items():
            sections[group] = _group_section(group, records)
        doc = build_document(
            verdict=self.verdict(exitstatus),
            inputs=_inputs(self.config),
            criteria={**({"compare": _compare_criteria(self.config, state)}
                         if sections["compare"] and state is not None else {}),
                      **_group_criteria(self.groups)},
            sections=sections,
        )
        if json_path:
            write_json(doc, json_path)
        if report_dir:
            out = ensure_dir(report_dir)
            write_compare_csv(self.nodes, out, self.first)
            images = _write_group_reports(self.config, self.groups, out)
            write_html(doc, out, images)
        return doc


def layouts_record(state: Any) -> dict[str, Any]:
    """The layouts the compare used where they differ: given, or inferred and why."""
    layouts = getattr(state, "layouts", None) if state is not None else None
    if not layouts:
        return {}
    return {"layouts": layouts_seen(state)}


def layouts_seen(state: Any) -> dict[str, Any]:
    """The layouts as the process that compared saw them, for the controller (-n): as used,
    or why they were not read."""
    layouts = getattr(state, "layouts", None) if state is not None else None
    if not layouts:
        unread = getattr(state, "unread_layouts", None) if state is not None else None
        return {"unread": unread} if unread else {}
    inferred = None if state.given_layouts else state.inferred
    return {"npu": str(layouts[0]), "bench": str(layouts[1]),
            "inferred": inferred[2] if inferred else None,
            **({"notes": list(state.view_notes)} if state.view_notes else {})}


def _compare_criteria(config: pytest.Config, state: Any) -> dict[str, Any]:
    """The compare criteria as JSON, with how tolerances are learned where a second bench run
    was given."""
    from pytest_accuracy.settings import setting

    out: dict[str, Any] = state.criteria.as_dict()
    if setting(config, "bench_noise"):
        from pytest_accuracy.compare import bench_noise

        out["bench_noise"] = {"factor": bench_noise.NOISE_FACTOR,
                              "floors": {d: bench_noise.noise_floor(d)
                                         for d in out["tolerances"]},
                              "max": bench_noise.MAX_LEARNED}
    return out


def _index_teardown_reports(reporter: Any) -> None:
    """pytest finds each failure's teardown report by scanning every setup/teardown report:
    quadratic in failures x items (minutes at 50,000 nodes).  Index them once; no report
    arrives during the summary.  Left alone where pytest's internals differ."""
    lookup = getattr(reporter, "_get_teardown_reports", None)
    reports = getattr(reporter, "getreports", None)
    if lookup is None or reports is None:
        return
    index: dict[str, list[Any]] = {}
    for report in reports(""):
        if getattr(report, "when", None) == "teardown":
            index.setdefault(str(report.nodeid), []).append(report)

    def teardown_reports(node_id: Any) -> list[Any]:
        return index.get(str(getattr(node_id, "nodeid", node_id)), [])

    reporter._get_teardown_reports = teardown_reports


def _earlier(a: dict[str, Any], b: dict[str, Any]) -> bool:
    from pytest_accuracy.compare.divergence import causal_key

    return causal_key(a) < causal_key(b)


# a verdict record's keys and its order (report/records.py verdict_record): more is a full one
_VERDICT_KEYS = 5


def _brief(record: dict[str, Any]) -> str:
    """What an item's report keeps of a record spooled for the documents: its count and
    verdicts, not a second copy of the record."""
    nodes = record.get("region_nodes", [record])
    return json.dumps({"nodes": len(nodes), "status": sorted({str(n.get("status"))
                                                               for n in nodes})})


def _order(node: dict[str, Any]) -> tuple[int, int, int]:
    return (node["step"], node["rank"], node.get("order", 0))


def run_failure(nodes: list[dict[str, Any]], passes: int = 0) -> str | None:
    """Why a run whose items all passed, xfailed or skipped still fails, else None;
    ``passes``: passing nodes counted, not listed."""
    carried = [n for n in nodes if n["status"] == "carried"]
    if carried:
        return (f"{len(carried)} compared nodes carry a divergence whose cause was not among "
                f"the items run (the first is carried from {carried[0]['carried_from']}): run "
                "the cause too, or waive it with known_divergence.")
    checked = [n for n in nodes if n["status"] in ("pass", "fail", "waived")]
    if nodes and not checked and not passes:
        reasons = sorted({str(n.get("reason") or n["status"]).splitlines()[0] for n in nodes})
        return (f"Nothing was checked: all {len(nodes)} compared nodes were skipped "
                f"({'; '.join(reasons[:3])}{' ...' if len(reasons) > 3 else ''}).")
    return None


def groups_unchecked(groups: dict[str, list[dict[str, Any]]]) -> str | None:
    """Why a run of built-in groups (overflow, ...) whose every item skipped fails: it checked
    nothing, and a gate that checked nothing never passes."""
    records = [r for g, rs in groups.items() if g != "suites" for r in rs]
    if not records or any(r.get("status") != "skip" for r in records):
        return None
    kinds = ", ".join(sorted({str(r.get("group")) for r in records}))
    return (f"Nothing was checked: all {len(records)} {kinds} items were skipped (see their "
            "reasons above).")


def _outputs_failed(session: pytest.Session, why: str, code: pytest.ExitCode) -> None:
    """One line on the terminal (no traceback) and an exit status that is not a pass."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    line = escape_controls(f"pytest-accuracy: {why}")
    if reporter is not None:
        reporter.write_line(f"\n{line}", red=True, bold=True)  # after the progress line
    else:
        sys.stderr.write(line + "\n")
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        session.exitstatus = code


def _log_verdict_failure(session: pytest.Session, why: str) -> None:
    from _pytest.reports import TestReport

    nodeid = "accuracy::compare::verdict"
    report = TestReport(nodeid, ("accuracy", None, nodeid), {}, "failed",
                        escape_controls(why), "call")
    session.config.hook.pytest_runtest_logreport(report=report)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def waived_sentence(nodes: list[dict[str, Any]], waived: int) -> str:
    """The waived nodes by name and waiver reason (the ones waived themselves; those carrying
    them counted): what a CI log must show of a decision to waive."""
    own = [n for n in nodes if n["status"] == "waived"
           and not str(n.get("reason") or "").startswith("carries ")]
    named = "; ".join(f"{n['npu_name']} (step {n['step']}, rank {n['rank']}): "
                      f"{n.get('waiver') or 'no reason given'}" for n in own[:3])
    more = f"; and {len(own) - 3} more" if len(own) > 3 else ""
    carried = waived - len(own)
    carry = f", with {carried} that carry them" if carried else ""
    return (f"{waived} {'node is' if waived == 1 else 'nodes are'} waived as known divergences"
            f"{carry}: {named}{more}.")


def stale_waivers(waivers: Any, nodes: list[dict[str, Any]],
                  matched: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """A waiver whose pattern matched no compared node (``matched``: the patterns passing
    nodes counted, not listed, matched): said, since a stale one would hide the next bug at a
    node it comes to match."""
    import fnmatch

    # a waiver names a node or an op (a name's dotted part: linear, RMSNorm)
    names = {part for n in nodes for part in (n["npu_name"], *n["npu_name"].split("."))}
    return [f"Waiver {w.pattern!r} ({w.reason}) matched no compared node: remove it or fix its "
            "pattern (a stale waiver hides the next bug there)."
            for w in waivers if w.pattern not in matched
            and not any(fnmatch.fnmatchcase(name, w.pattern) for name in names)]


def settle_nodes(nodes: list[dict[str, Any]], first: dict[str, Any] | None) -> None:
    """Where all records meet: mark the first divergence, and name for each carried node the
    latest node before it that made an error of its own (workers only knew their share); a
    node that carries a divergence waived as known is waived with it."""
    ordered = sorted(nodes, key=_order)  # a carrier's own carriers come after it
    waived = {n["npu_name"]: n["npu_name"] for n in nodes if n["status"] == "waived"}
    for node in ordered if waived else ():
        source = str(node.get("carried_from") or "").split(" (step ")[0]
        if node["status"] == "carried" and source in waived:
            waived[node["npu_name"]] = waived[source]
            node["status"] = "waived"
            node["reason"] = f"carries {waived[source]}, waived as a known divergence"
    latest: str | None = None
    for node in ordered:
        own = node["status"] == "fail" and node.get("first_divergence")
        if first is not None:
            node["first_divergence"] = bool(own) and (node["step"], node["rank"],
                                                      node.get("order")) == (
                first["step"], first["rank"], first.get("index"))
        if own:
            latest = node["npu_name"]
        elif node["status"] == "carried" and latest is not None:
            node["carried_from"] = latest


def compare_verdict_lines(nodes: list[dict[str, Any]], first: dict[str, Any] | None,
                          passes: int = 0) -> list[str]:
    """How many nodes make, carry or escape a divergence; the first divergence comes last.
    ``passes``: passing nodes counted, not listed."""
    if not nodes and not passes:
        return []
    counted = Counter(n["status"] for n in nodes)  # one pass over 100k nodes, not seven
    counted["pass"] += passes
    count = {s: counted[s]
             for s in ("pass", "fail", "carried", "error", "skip", "unmatched", "waived")}
    lines = []
    repeats = sum(n["status"] == "carried" and bool(n.get("finding")) for n in nodes)
    carriers = count["carried"] - repeats
    if carriers:
        lines.append(f"{carriers} {'node only carries' if carriers == 1 else 'nodes only carry'} "
                     "an earlier divergence (xfailed: their inputs already differ and they add "
                     "no error of their own).")
    if repeats:
        lines.append(f"{repeats} {'node repeats' if repeats == 1 else 'nodes repeat'} an earlier "
                     "failure's cause (xfailed: the same finding, or the same call's own error in "
                     "a later step; one cause fails once).")
    if count["waived"]:
        lines.append(waived_sentence(nodes, count["waived"]))
    rounding = [n for n in nodes if n["status"] == "pass"
                and str(n.get("reason") or "").startswith(ROUNDING)]
    if rounding:
        lines.append(f"{len(rounding)} {'node passes' if len(rounding) == 1 else 'nodes pass'} "
                     f"beyond tolerance by only the rounding its inputs carry in a 16-bit step "
                     f"(first: {rounding[0]['npu_name']}, step {rounding[0]['step']}; see its "
                     "reason).")
    if first:
        lines.append(_first_sentence(first))
    elif count["fail"]:
        lines.append("Compare failed; the first divergent node was not among the items run.")
    elif count["carried"]:  # its cause skipped by a mark, or deselected: still no pass
        source = next(n for n in nodes if n["status"] == "carried")
        many = "node carries" if count["carried"] == 1 else "nodes carry"
        lines.append(f"Compare failed: {count['carried']} {many} a divergence whose cause "
                     f"was not among the items run (the first is carried from "
                     f"{source['carried_from']}).")
    elif count["error"] and not count["pass"]:
        bad = next(n for n in nodes if n["status"] == "error")
        why = str(bad["reason"]).splitlines()[0] if bad["reason"] else "unreadable"
        lines.append(f"Nothing could be compared: {count['error']} of {len(nodes) + passes} "
                     "nodes could not be read"
                     f" (first: {bad['npu_name']}: {why}).")
    elif count["pass"] and count["waived"]:  # a waiver is a decision, never "no divergence"
        lines.append(f"No divergence beyond the {count['waived']} waived nodes above: the other "
                     f"{count['pass']} compared nodes meet the criteria.")
    elif count["pass"]:
        some = f" ({len(rounding)} by its inputs' rounding, above)" if rounding else ""
        lines.append(f"No divergence: all {count['pass']} compared nodes meet the criteria{some}.")
    else:
        lines.append(f"Nothing was compared: none of the {len(nodes)} NPU nodes had a tensor "
                     "to compare with the bench (see the skip reasons).")
    return lines


def _first_sentence(first: dict[str, Any]) -> str:
    from pytest_accuracy.compare.divergence import divergence_sentence

    return divergence_sentence(first)


def record_of(value: Any) -> dict[str, Any]:
    """An item's record from its report: the dict itself in process, JSON text from a worker."""
    return value if isinstance(value, dict) else dict(json.loads(str(value)))


def _sort_failures(config: pytest.Config) -> None:
    """Failure blocks in execution order, also under xdist: the first divergence leads."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    failed = getattr(reporter, "stats", {}).get("failed") if reporter else None
    if not failed:
        return

    def key(report: Any) -> tuple[int, int, int, int]:
        for name, value in getattr(report, "user_properties", []):
            if name == "accuracy":
                record = record_of(value)
                if "step" in record and "order" in record:
                    return (0, record["step"], record["rank"], record["order"])
        return (1, 0, 0, 0)

    failed.sort(key=key)


def _public_first(first: dict[str, Any] | None) -> dict[str, Any] | None:
    if first is None:
        return None
    public = {k: first.get(k) for k in ("npu_name", "bench_name", "step", "rank", "tensor",
                                        "reason", "kind", "previous", "likely_cause", "stack",
                                        "finding", "twin_step", "through", "received", "order")}
    # where the order needs them: a pipeline stage's phase, shards joined over ranks
    return {**public, **{k: first[k] for k in ("phase", "joined", "summed", "bench_ranks")
                         if first.get(k)}}


def _inputs(config: pytest.Config) -> dict[str, Any]:
    from pytest_accuracy.settings import setting

    keys = ("npu", "bench", "bench_noise", "npu_layout", "bench_layout", "npu_log",
            "bench_logs", "npu_config", "bench_config", "mapping", "waivers", "npu_monitor",
            "bench_monitor")
    return {k: (str(v) if not isinstance(v, list) else [str(x) for x in v])
            for k in keys if (v := setting(config, k))}


def _suite_record(item: pytest.Item, report: pytest.TestReport) -> dict[str, Any] | None:
    from pytest_accuracy.suite.suite_records import is_suite_test, suite_record

    return suite_record(item, report) if is_suite_test(item) else None


def _group_section(group: str, records: list[dict[str, Any]]) -> Any:
    from pytest_accuracy.suite.registry import group_section

    return group_section(group, records)


def _group_criteria(groups: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    from pytest_accuracy.suite.registry import group_criteria

    return group_criteria(groups)


def _write_group_reports(config: pytest.Config, groups: dict[str, list[dict[str, Any]]],
                         out: Path) -> list[Path]:
    from pytest_accuracy.suite.registry import write_group_reports

    return write_group_reports(config, groups, out)
