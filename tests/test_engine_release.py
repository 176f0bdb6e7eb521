"""A passing node's result is let go once its record is made, where metadata alone makes it
again (statistics, md5); made again, it is the same result. Tensor nodes keep theirs."""

from __future__ import annotations

import pytest

from pytest_accuracy.compare import Comparison
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.report.records import node_record
from tests.helpers import dump


@pytest.mark.parametrize("config", ["mix_statistics", "L1_md5"])
def test_released_results_are_made_again_alike(config: str) -> None:
    cmp = Comparison(load_dumps(dump("pt_bug", config)), load_dumps(dump("pt_fp32", config)))
    before = [node_record(cmp.node(i), None) for i in range(len(cmp))]
    passing = [i for i, r in enumerate(before) if r["status"] == "pass"]
    assert passing
    for i in range(len(cmp)):
        cmp.release(i)
    assert not any(i in cmp._done for i in passing)
    assert all(i in cmp._done for i, r in enumerate(before) if r["status"] != "pass")
    assert [node_record(cmp.node(i), None) for i in range(len(cmp))] == before


def test_tensor_results_are_kept() -> None:
    cmp = Comparison(load_dumps(dump("pt_bug", "L1_tensor")),
                     load_dumps(dump("pt_fp32", "L1_tensor")))
    done = [cmp.node(i) for i in range(len(cmp))]
    for i in range(len(cmp)):
        cmp.release(i)
    assert all(cmp._done[i] is done[i] for i in range(len(cmp)))
