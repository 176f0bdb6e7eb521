"""accuracy::compare::inputs (issue 39): token ids inside the vocabulary, the first batch equal.

Real dumps: tests/data/real/cross (x-transformers and transformers, Functional.embedding),
tests/data/real/mf (MindFormers on MindSpore: a Gather primitive at L1, the GLMEmbedding cell at
L0, against transformers), tests/data/real/layouts (a vocabulary-parallel embedding at TP=2).
The failing cases change one record of a copy: the first lookup's ids.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import ROOT

REAL = ROOT / "tests" / "data" / "real"
PAIRS = {"x-transformers": (REAL / "cross" / "xt_clean" / "L1",
                            REAL / "cross" / "_bench_fp32" / "L1"),
         "x-transformers-mix": (REAL / "cross" / "xt_clean" / "mix",
                                REAL / "cross" / "_bench_fp32" / "mix"),
         "mindformers-L1": (REAL / "mf" / "mf_clean" / "L1", REAL / "mf" / "_bench" / "L1"),
         "mindformers-L0": (REAL / "mf" / "mf_clean" / "L0", REAL / "mf" / "_bench" / "L0"),
         "vocab-parallel": (REAL / "layouts" / "L1" / "tp2", REAL / "layouts" / "L1" / "tp1")}


def _inputs(pytester: pytest.Pytester, npu: Path, bench: Path) -> tuple[pytest.RunResult, dict]:
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", f"--acc-json={out}",
                                "-p", "no:cacheprovider", "accuracy::compare::inputs")
    record = json.loads(out.read_text())["data"]["keys"][0]
    return result, record


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_the_same_batch_inside_the_vocabulary_passes(pytester: pytest.Pytester,
                                                     pair: str) -> None:
    result, record = _inputs(pytester, *PAIRS[pair])
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert record["status"] == "pass" and record["lookups_checked"] >= 1
    # tensors tell a batch; statistics only where a Mean or Norm is recorded on both sides
    # (msprobe-PyTorch records none for integers); a vocabulary-parallel shard's lookup reads
    # masked ids of its own: not compared
    assert record["first_batches_compared"] == (1 if pair == "x-transformers" else 0)


def _edited(where: Path, source: Path, node: str, path: str, **stats: float) -> Path:
    """A copy of ``source`` whose ``node``'s ``path`` record has other statistics."""
    shutil.copytree(source, where)
    dump = sorted(where.rglob("dump.json"))[0]  # step 0
    doc = json.loads(dump.read_text())
    record = doc["data"][node]
    for part in path.split("."):
        record = record[int(part)] if isinstance(record, list) else record[part]
    record.update(stats)
    dump.write_text(json.dumps(doc))
    return where


def test_another_first_batch_fails_before_any_node_is_read(pytester: pytest.Pytester) -> None:
    npu, bench = PAIRS["x-transformers-mix"]
    other = _edited(pytester.path / "other", bench, "Functional.embedding.0.forward",
                    "input_args.0", Max=61)
    result, record = _inputs(pytester, npu, other)
    assert result.ret == 1
    assert record["status"] == "fail" and record["problems"][0]["kind"] == "batch_differs"
    assert ("step 0, rank 0: the first batch's token ids differ: Functional.embedding.0.forward "
            "reads ids of shape [2, 8] with Max 63, Min 0, Mean ?, the bench's "
            "Functional.embedding.0.forward [2, 8] with Max 61, Min 0, Mean ?: the data "
            "differs, not the model") in result.stdout.str()


def test_ids_past_the_table_fail_naming_the_lookup(pytester: pytest.Pytester) -> None:
    npu, bench = PAIRS["mindformers-L1"]
    past = _edited(pytester.path / "past", npu, "Primitive.gather.Gather.0.forward",
                   "input_args.1", Max=64)
    result, record = _inputs(pytester, past, bench)
    assert result.ret == 1
    assert record["problems"][0]["kind"] == "out_of_vocabulary"
    result.stdout.fnmatch_lines([
        "*Primitive.gather.Gather.0.forward reads token ids 0..64 from a table of 64 rows "
        "(ids must be 0..63)*"])


def test_rank_items_check_their_ranks_inputs_and_say_the_data_first(
        pytester: pytest.Pytester) -> None:
    """--acc-items=rank (one item per rank, many-rank runs): each rank item checks its own
    rank's lookups and first batch; another batch fails it, the data said before the nodes."""
    npu, bench = PAIRS["x-transformers-mix"]
    out = pytester.path / "acc.json"
    clean = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", "--acc-items=rank",
                               f"--acc-json={out}", "-p", "no:cacheprovider")
    assert clean.ret == 0, clean.stdout.str()[-2000:]
    assert "Inputs:" not in clean.stdout.str()
    other = _edited(pytester.path / "other", bench, "Functional.embedding.0.forward",
                    "input_args.0", Max=61)
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={other}", "--acc-items=rank",
                                "-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*_ accuracy::compare::rank0 _*",
        "Inputs: 1 problem(s) with the data itself:",
        "  step 0, rank 0: the first batch's token ids differ: Functional.embedding.0.forward*"])
