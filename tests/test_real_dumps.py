"""Real msprobe dumps (tests/data/real/msprobe): node counts, framework, and the cross pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from tests.helpers import ROOT

MSPROBE = ROOT / "tests" / "data" / "real" / "msprobe"
# What each dump is, from the file's own content: MindSpore writes Cell/Mint/Primitive nodes and
# dtypes like BFloat16, PyTorch Module/Torch/NPU nodes and torch.float16.
EXPECTED = {
    "ms_mix_statistics_no_framework": "mindspore",
    "ms_mix_statistics": "mindspore",
    "ms_layer_mapping_no_framework": "mindspore",
    "pt_mix_statistics_no_framework": "pytorch",
    "pt_mix_statistics": "pytorch",
    "pt_layer_mapping_no_framework": "pytorch",
    "pt_run_ut_no_framework": "pytorch",
}


def raw(name: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads((MSPROBE / name / "dump.json").read_text("utf-8"))
    return doc


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_dump_framework_and_node_count(name: str) -> None:
    doc = raw(name)
    dump = next(iter(load_dumps(MSPROBE / name)))
    assert dump.framework == EXPECTED[name]
    assert len(dump) == len(doc["data"])  # type: ignore[arg-type]
    assert [c.name for c in dump.calls] == list(doc["data"])  # type: ignore[call-overload]
    if "framework" in doc:
        assert doc["framework"] == dump.framework and dump.notes == []
    else:
        head = "dump.json has no 'framework' key: read as "
        assert dump.notes[0].startswith(head + dump.framework)


def test_the_evidence_is_named() -> None:
    note = next(iter(load_dumps(MSPROBE / "ms_mix_statistics_no_framework"))).notes[0]
    assert "node prefixes Cell, Mint, Primitive" in note
    assert "tensor dtype(s) written the MindSpore way" in note


def test_old_mindspore_dump_reads_like_its_later_version() -> None:
    old = next(iter(load_dumps(MSPROBE / "ms_mix_statistics_no_framework")))
    new = next(iter(load_dumps(MSPROBE / "ms_mix_statistics")))
    assert (old.framework, old.level, old.mode) == (new.framework, new.level, new.mode)
    assert [c.name for c in old.calls] == [c.name for c in new.calls]


def write_dump(root: Path, data: dict[str, object]) -> Path:
    root.mkdir(parents=True)
    (root / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "data": data}))
    return root


def tensor(dtype: str, kind: str) -> dict[str, object]:
    return {"type": kind, "dtype": dtype, "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
            "Norm": 1.0}


def test_mindtorch_is_pytorch_names_on_mindspore_tensors(tmp_path: Path) -> None:
    # No real mindtorch dump found: msprobe hooks torch-named APIs while tensors are MindSpore's.
    out = {"input_args": [tensor("Float32", "mindspore.Tensor")], "input_kwargs": {},
           "output": [tensor("Float32", "mindspore.Tensor")]}
    root = write_dump(tmp_path / "mt", {"Torch.matmul.0.forward": out,
                                        "Module.fc.Linear.forward.0": out})
    dump = next(iter(load_dumps(root)))
    assert dump.framework == "mindtorch"
    assert "PyTorch code run on MindSpore" in dump.notes[0]


def test_dump_without_any_tensor_says_it_assumed_pytorch(tmp_path: Path) -> None:
    flag = {"type": "bool", "value": True}
    root = write_dump(tmp_path / "none", {"Tensor.__bool__.0.forward": {
        "input_args": [flag], "output": [flag]}})
    dump = next(iter(load_dumps(root)))
    assert dump.framework == "pytorch"
    assert "no tensor or node prefix tells" in dump.notes[0]


def test_old_mindspore_vs_pytorch_pair_is_aligned_not_paired_by_name(
    pytester: pytest.Pytester,
) -> None:
    # Read as PyTorch, Tensor.__add__.0.forward paired by name with a different PyTorch call and
    # was reported as the first divergence.
    result = pytester.runpytest(f"--acc-npu={MSPROBE / 'ms_mix_statistics_no_framework'}",
                                f"--acc-bench={MSPROBE / 'pt_mix_statistics_no_framework'}",
                                "--acc-json=acc.json", "-p", "no:cacheprovider")
    doc = json.loads((pytester.path / "acc.json").read_text())
    assert doc["compare"]["first_divergence"] is None
    pairs = {n["npu_name"]: n.get("bench_name") for n in doc["compare"]["nodes"]}
    assert pairs["Mint.cos.0.forward"] == "Torch.cos.0.forward"
    assert pairs["Tensor.__add__.0.forward"] is None
    embedding = "VocabParallelEmbedding.forward.0"
    assert [b for n, b in pairs.items() if n.endswith(embedding)] == [
        "Module.module.module.language_model.embedding.word_embeddings." + embedding]
    assert not [n for n in doc["compare"]["nodes"] if n["status"] == "fail"]
    # every node with a counterpart pairs (fused ops, renamed cells, logical_or vs __or__), so
    # the partial test files now pass coverage: 10 of 13 nodes
    assert pairs["Primitive.norm.RmsNorm.0.forward"] == "NPU.npu_rms_norm.0.forward"
    assert pairs["Mint.logical_or.0.forward"] == "Tensor.__or__.0.forward"
    assert result.ret == 0, result.stdout.str()
