"""Two frameworks, two codebases (issue 36): MindFormers' ChatGLM2 on MindSpore 2.10 against
transformers' GlmForCausalLM, same weights converted, real msprobe 26.2.0 dumps.

The data (tests/data/real/mf, README.md there) is the statistics of the zoo that
benchmarks/zoo/make_mf_zoo.py generates at task ``tensor`` (benchmarks/zoo/stats_only.py drops
the .npy names); each case's truth.json is the generator's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.pairing.runs import pair_runs
from tests.helpers import ROOT

MF = ROOT / "tests" / "data" / "real" / "mf"


def _run(pytester: pytest.Pytester, case: str, level: str) -> dict:
    out = pytester.path / "acc.json"
    pytester.runpytest(f"--acc-npu={MF / case / level}", f"--acc-bench={MF / '_bench' / level}",
                       f"--acc-json={out}", "-p", "no:cacheprovider")
    doc: dict = json.loads(out.read_text())
    return doc


def _truth(case: str, level: str) -> dict:
    want: dict = json.loads((MF / case / "truth.json").read_text())["levels"][level]
    return want


@pytest.mark.parametrize("level", ["L1", "L0"])
def test_the_clean_pair_of_two_frameworks_passes(pytester: pytest.Pytester, level: str) -> None:
    """Logits within 6e-8, loss within 1.4e-6: ~270 MindSpore primitives against ~90 PyTorch
    APIs at L1, module trees of two codebases at L0; nothing fails."""
    doc = _run(pytester, "mf_clean", level)
    assert doc["verdict"] == "pass", [n["npu_name"] for n in doc["compare"]["nodes"]
                                      if n["status"] == "fail"][:3]
    assert doc["compare"]["first_divergence"] is None


def test_a_softmax_in_fp16_is_named_through_its_cast(pytester: pytest.Pytester) -> None:
    """Every layer's softmax of a young model is near uniform: its statistics are the same
    in both layers. Pairing by that value put layer 1's softmax against the bench's layer 0;
    a value made again from other inputs anchors nothing, so the calls pair in order and the
    fp16 softmax is named, through the cast only MindSpore records."""
    doc = _run(pytester, "mf_softmax_fp16", "L1")
    first = doc["compare"]["first_divergence"]
    assert first["npu_name"] == "Functional.softmax.0.forward"
    assert first["bench_name"] == "Functional.softmax.0.forward"
    assert first["through"] == _truth("mf_softmax_fp16", "L1")["expected"]  # Tensor.to.0
    assert first["finding"] == "precision"
    # the cast's float16 output holds no Inf: msprobe-MindSpore summed its Norm in float16
    # (149666 > 65504), which is no NaN/Inf of the tensor
    record = json.loads(next((MF / "mf_softmax_fp16" / "L1").rglob("dump.json")).read_text())[
        "data"]["Tensor.to.0.forward"]["output"][0]
    assert record["Norm"] == float("inf") and abs(record["Min"]) < 65504
    assert doc["compare"]["first_nonfinite"] is None


def test_softmax_pairs_in_its_layer_not_by_a_coincident_value() -> None:
    dump = load_dumps(MF / "mf_softmax_fp16" / "L1").dumps[0, 0]
    bench = load_dumps(MF / "_bench" / "L1").dumps[0, 0]
    pairs = pair_runs(dump, bench).pairs
    assert pairs.get("Primitive.softmax.Softmax.0.forward") == "Functional.softmax.1.forward"


def test_the_odd_module_inside_a_module_only_one_side_has_is_named_at_l0(
        pytester: pytest.Pytester) -> None:
    """transformers' attention has no CoreAttention: the error enters through a module only
    the NPU run records, and inside it layer 0's softmax runs another class than layer 1's."""
    doc = _run(pytester, "mf_softmax_fp16", "L0")
    first = doc["compare"]["first_divergence"]
    assert first["kind"] == "between"
    assert first["through"] == _truth("mf_softmax_fp16", "L0")["expected"]
    assert first["likely_cause"].startswith(
        "transformer.encoder.layers.0.self_attention.core_attention.softmax is Fp16Softmax in "
        "this layer where the run's other layers hold Softmax")


@pytest.mark.parametrize("level", ["L1", "L0"])
def test_a_transposed_weight_is_named_where_the_primitive_computes(
        pytester: pytest.Pytester, level: str) -> None:
    """MindFormers' Linear is Reshape, Cast, MatMul, Reshape against one linear: the region
    is compared at its end, and the call that makes its value (the MatMul) is named, never
    the Reshape that passes it on."""
    doc = _run(pytester, "mf_dense_transposed", level)
    first = doc["compare"]["first_divergence"]
    want = _truth("mf_dense_transposed", level)
    assert first["npu_name"] == want["expected"]
    assert first["bench_name"] == want["bench_counterpart"]
    if level == "L1":
        assert first["likely_cause"].startswith("compared where a region ends (the NPU's ")


def test_data_is_statistics_only() -> None:
    """The shipped copies name no tensor files (what stats_only.py promises)."""
    for path in Path(MF).rglob("dump.json"):
        doc = json.loads(path.read_text())
        assert doc["task"] == "statistics" and "data_name" not in path.read_text(), path
