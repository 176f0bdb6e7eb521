"""``-n 2`` writes the same JSON document and compare table as a serial run of the same dumps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import dump


def outputs(pytester: pytest.Pytester, name: str, config: str, *args: str) -> tuple[dict, str]:
    out = pytester.path / name
    result = pytester.runpytest_subprocess(
        f"--acc-npu={dump('pt_bug', config)}", f"--acc-bench={dump('pt_fp32', config)}",
        f"--acc-json={out / 'acc.json'}", f"--acc-report={out / 'report'}",
        "-p", "no:cacheprovider", "--acc-inputs=all", *args)
    assert result.ret == 1  # the eps bug fails, in both runs
    doc = json.loads((out / "acc.json").read_text())
    doc.pop("inputs")  # names the output paths, which differ
    return doc, (out / "report" / "compare_result.csv").read_text()


@pytest.mark.parametrize("config", ["L1_tensor", "mix_statistics"])
def test_xdist_document_equals_serial(pytester: pytest.Pytester, config: str) -> None:
    pytest.importorskip("xdist")
    serial = outputs(pytester, "serial", config)
    parallel = outputs(pytester, "parallel", config, "-n", "2")
    assert serial[0]["compare"]["first_divergence"]["npu_name"] == "Tensor.__add__.5.forward"
    assert parallel[0] == serial[0]
    assert parallel[1] == serial[1] and serial[1].count("\n") > 100


def test_nothing_outside_the_share_is_read(tmp_path: Path) -> None:
    """A worker's read-ahead names only the nodes it runs: the compare computes no others."""
    from pytest_accuracy.compare import Comparison
    from pytest_accuracy.dumps.layout import load_dumps

    cmp = Comparison(load_dumps(dump("pt_bug", "L1_tensor")),
                     load_dumps(dump("pt_fp32", "L1_tensor")), workers=2)
    share = [3, 7, 8]
    for i, index in enumerate(share):
        cmp.node(index, ahead=share[i + 1 :])
    cmp.close()
    assert sorted({*cmp._futures, *cmp._done}) == share  # computed: asked for or read ahead
