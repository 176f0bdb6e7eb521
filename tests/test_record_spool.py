"""Node records and their rows kept on disk while the compare runs (issue 41): what comes back
is what went in, the keys the session reads are at hand, and the documents are the same."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_accuracy.report.record_spool import RecordSpool, SpooledRecord
from pytest_accuracy.report.rows_spool import RowsRef, RowsSpool, rows_of

ZOO = Path(__file__).parent / "data" / "zoo"


def test_rows_come_back_as_they_were_kept() -> None:
    spool = RowsSpool()
    rows = [["stats", "Functional.linear.0.forward.output.0", 1.5, math.inf, -math.inf, None,
             True, 7, "x\u2028\"y\""]]
    refs = [spool.put(rows), spool.put([["md5", "a"]])]
    assert all(isinstance(r, RowsRef) for r in refs)
    back = rows_of(refs[0])
    assert back == rows and [type(v) for v in back[0]] == [type(v) for v in rows[0]]
    assert rows_of(refs[1]) == [["md5", "a"]] and rows_of(refs[0]) == rows  # any order
    assert rows_of([["kept"]]) == [["kept"]] and rows_of(None) == []
    nan = rows_of(spool.put([[math.nan]]))[0][0]
    assert math.isnan(nan)
    spool.close()


def test_a_spooled_record_reads_changes_and_comes_back_whole() -> None:
    rows = RowsSpool()
    record = {"npu_name": "Tensor.add.0.forward", "bench_name": "Tensor.add.0.forward",
              "step": 0, "rank": 3, "status": "pass", "reason": "", "first_divergence": False,
              "tolerance": {"rel_err": 1e-4}, "max_diff": math.nan, "findings": [],
              "rows": rows.put([["stats", 1.0]]), "order": 12, "parent": None}
    original = dict(record)
    spool = RecordSpool()
    stub = spool.put(record)
    assert isinstance(stub, SpooledRecord) and len(spool) == 1
    assert (stub["npu_name"], stub["rank"], stub["status"], stub["order"]) == (
        "Tensor.add.0.forward", 3, "pass", 12)
    assert stub["tolerance"] == {"rel_err": 1e-4} and stub.get("parent") is None
    assert stub.get("missing", "none") == "none" and "missing" not in stub
    stub["status"], stub["carried_from"] = "carried", "Tensor.mul.0.forward"
    stub["first_divergence"] = False  # what it was: nothing kept beside
    del stub["parent"]
    whole = stub.materialize()
    assert list(whole) == [k for k in original if k != "parent"] + ["carried_from"]
    assert whole["status"] == "carried" and whole["carried_from"] == "Tensor.mul.0.forward"
    assert rows_of(whole["rows"]) == [["stats", 1.0]] and math.isnan(whole["max_diff"])
    assert {k: v for k, v in whole.items() if k not in ("rows", "max_diff")} == {
        **{k: v for k, v in original.items() if k not in ("rows", "max_diff", "parent")},
        "status": "carried", "carried_from": "Tensor.mul.0.forward"}
    assert stub.copy().keys() == whole.keys() and len(stub) == len(whole)
    with pytest.raises(KeyError):
        stub["parent"]


def test_documents_from_spooled_records_hold_every_node_whole(pytester: pytest.Pytester
                                                             ) -> None:
    """A run writing the JSON and the report: every passing node's record in the JSON is
    whole (its metrics), the CSV has its rows, and each item's report keeps only a brief of
    what was spooled, not the record (the session would hold every record twice)."""
    out, report = pytester.path / "acc.json", pytester.path / "r"
    case = ZOO / "ln_eps"
    recorded = pytester.inline_run(f"--acc-npu={case / 'npu' / 'L0'}",
                                   f"--acc-bench={case / 'bench' / 'L0'}", f"--acc-json={out}",
                                   f"--acc-report={report}", "-p", "no:cacheprovider")
    assert recorded.ret == 1
    nodes = json.loads(out.read_text())["compare"]["nodes"]
    passed = [n for n in nodes if n["status"] == "pass"]
    assert len(passed) > 30 and all(n["tolerance"] and "cosine" in n for n in passed)
    assert all("rows" not in n and "order" not in n for n in nodes)
    table = (report / "compare_result.csv").read_text()
    assert all(f",{n['npu_name']}." in table for n in passed)  # its rows, read back
    kept = [v for r in recorded.getreports("pytest_runtest_logreport") if r.when == "call"
            for name, v in r.user_properties if name == "accuracy"]
    briefs = [json.loads(v) for v in kept if isinstance(v, str) and v.startswith('{"nodes"')]
    assert len(briefs) == len(passed) and all(b == {"nodes": 1, "status": ["pass"]}
                                              for b in briefs)


def test_a_spool_that_cannot_be_written_keeps_the_records_in_memory(
        pytester: pytest.Pytester) -> None:
    """A full disk where the spool lies: the records stay in memory from there on, and the
    documents are the same as a run that spooled."""
    case = ZOO / "ln_eps"
    args = [f"--acc-npu={case / 'npu' / 'L0'}", f"--acc-bench={case / 'bench' / 'L0'}",
            "-p", "no:cacheprovider"]
    spooled = pytester.runpytest(*args, f"--acc-json={pytester.path / 'a.json'}")
    pytester.makeconftest("""
        import errno
        from pytest_accuracy.report import record_spool

        KEPT = record_spool.RecordSpool.put

        def full(self, record):
            open("spool-was-full", "w").close()
            raise OSError(errno.ENOSPC, "No space left on device")

        def pytest_configure(config):
            record_spool.RecordSpool.put = full

        def pytest_unconfigure(config):  # in process: the next run spools again
            record_spool.RecordSpool.put = KEPT
    """)
    full = pytester.runpytest(*args, f"--acc-json={pytester.path / 'b.json'}")
    assert (spooled.ret, full.ret) == (1, 1)
    assert (pytester.path / "spool-was-full").exists()  # the second run's spool failed
    assert "INTERNALERROR" not in full.stdout.str() + full.stderr.str()
    a, b = (json.loads((pytester.path / f).read_text())["compare"]["nodes"]
            for f in ("a.json", "b.json"))
    assert a == b and len(a) == 60


def test_the_spool_file_writes_in_batches_and_a_failed_batch_stays_readable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_accuracy.report import spool_file

    monkeypatch.setattr(spool_file, "_BATCH", 8)
    store = spool_file.SpoolFile("acc-test-")
    first, second = store.put(b"abcdefgh"), store.put(b"ij")  # the first fills a batch
    assert (first, second) == (0, 8)
    assert (store.read(0, 8), store.read(8, 2), store.read(2, 3)) == (b"abcdefgh", b"ij",
                                                                        b"cde")

    class Full:
        name = "full"

        def write(self, data: bytes) -> int:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "_file", Full())
    with pytest.raises(OSError, match="No space"):
        store.put(b"klmnop")  # 2 + 6 bytes: a batch, whose write fails
    assert store.read(8, 2) == b"ij" and store.read(10, 6) == b"klmnop"  # kept, readable
    monkeypatch.undo()
    store.close()


def test_a_record_msgpack_cannot_hold_is_kept_as_it_is(pytester: pytest.Pytester) -> None:
    """A lone surrogate in a string (JSON can hold one, UTF-8 cannot) or an integer past 64
    bits: msgpack refuses the record, which stays in memory as it is; the next is spooled."""
    from pytest_accuracy.suite.summary import AccuracyResults

    results = AccuracyResults(pytester.parseconfig())
    base = {"npu_name": "Tensor.add.0.forward", "step": 0, "rank": 0, "status": "pass",
            "order": 0, "reason": "", "tolerance": {"rel_err": 1e-4}, "max_diff": 0.0}
    odd = [{**base, "npu_name": "Tensor.x\ud800.0.forward"}, {**base, "count": 2 ** 70}]
    for record in [*odd, dict(base)]:
        results._add_node(record)
    assert results.nodes[:2] == odd and all(type(n) is dict for n in results.nodes[:2])
    assert type(results.nodes[2]) is not dict and results.nodes[2]["max_diff"] == 0.0
    assert not results.spool_failed
