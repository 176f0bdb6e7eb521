"""One pairing for every pair of runs: names where they hold, alignment where they do not."""

from __future__ import annotations

from pathlib import Path

from pytest_accuracy.dumps.model import Call, Dump, Stats, TensorRecord
from pytest_accuracy.dumps.msprobe import read_dump
from pytest_accuracy.pairing.align import auto_pairing
from pytest_accuracy.pairing.runs import pair_runs, shifted_apis
from tests.helpers import ROOT

MSPROBE = ROOT / "tests" / "data" / "real" / "msprobe"


def test_msprobe_ms_pt_fixture_pairs_every_node_with_a_counterpart() -> None:
    """msprobe's own MindSpore/PyTorch compare fixture (mstt test resources, Ascend names):
    fused kernels, primitives, renamed cells and wrappers, cells recorded before their
    children. Truth read off the two dump.json files by hand (tests/data/real/SOURCES.md)."""
    ms = read_dump(MSPROBE / "ms_mix_statistics" / "dump.json", step=0, rank=0)
    pt = read_dump(MSPROBE / "pt_mix_statistics" / "dump.json", step=0, rank=0)
    cell, module = "Cell.network_with_loss.module.", "Module.module.module."
    layer = "language_model.encoder.layers.0."
    truth = {
        "Tensor.__add__.1.forward": "Tensor.__add__.1.forward",  # int64 scalar adds
        "Mint.logical_or.0.forward": "Tensor.__or__.0.forward",
        "Distributed.all_reduce.0.forward": "Distributed.all_reduce.0.forward",
        f"{cell}language_model.embedding.word_embeddings.VocabParallelEmbedding.forward.0":
            f"{module}language_model.embedding.word_embeddings.VocabParallelEmbedding.forward.0",
        "Primitive.norm.RmsNorm.0.forward": "NPU.npu_rms_norm.0.forward",
        f"{cell}{layer}ParallelTransformerLayer.forward.0":
            f"{module}{layer}ParallelTransformerLayer.forward.0",
        f"{cell}{layer}attention.ParallelAttention.forward.0":
            f"{module}{layer}self_attention.ParallelAttention.forward.0",
        "Mint.cos.0.forward": "Torch.cos.0.forward",
        "Functional.flash_attention_score.0.forward": "NPU.npu_fusion_attention.0.forward",
        "Functional.flash_attention_score.0.backward": "NPU.npu_fusion_attention.0.backward",
    }
    result = pair_runs(ms, pt)
    assert result.pairs == truth
    # no counterpart: an int32+int64 add and a __bool__ PyTorch never made, a cell backward
    assert set(result.unmatched) == {
        "Tensor.__add__.0.forward", "Tensor.__bool__.1.forward",
        f"{cell}{layer}input_norm.FusedRMSNorm.backward.0"}


def _rec(path: str, shape: tuple[int, ...], mean: float) -> TensorRecord:
    return TensorRecord(path, "output" if path.startswith("output") else "input", "float32",
                        "float32", shape, Stats(max=mean + 1, min=mean - 1, mean=mean,
                                                norm=abs(mean) * 4 + 1))


def _call(name: str, order: int, shape: tuple[int, ...], mean: float) -> Call:
    prefix, op, index = name.split(".")[0], name.split(".")[1], int(name.split(".")[2])
    return Call(f"{name}.forward", "api", "forward", order, prefix=prefix, op=op, index=index,
                inputs=[_rec("input.0", shape, mean - 0.5)],
                outputs=[_rec("output.0", shape, mean)])


def _dump(calls: list[tuple[str, tuple[int, ...], float]]) -> Dump:
    made = [_call(n, i, shape, mean) for i, (n, shape, mean) in enumerate(calls)]
    return Dump(Path("dump.json"), "pytorch", "L1", "statistics", 0, 0, made)


def test_a_call_only_one_run_makes_shifts_only_its_api() -> None:
    """Eager attention's mask adds a Tensor.__add__ the bench (sdpa) never makes: every later
    add's counter shifts by one. By name, __add__.1 met the bench's __add__.1, another call."""
    bench = _dump([("Tensor.__add__.0", (2, 8), 1.0), ("Functional.linear.0", (2, 8), 2.0),
                   ("Tensor.__add__.1", (2, 8), 3.0), ("Functional.linear.1", (2, 8), 4.0)])
    npu = _dump([("Tensor.__add__.0", (2, 8), 1.0), ("Functional.linear.0", (2, 8), 2.0),
                 ("Tensor.__add__.1", (1, 8, 8), -50.0),  # the mask: only this run
                 ("Tensor.__add__.2", (2, 8), 3.0), ("Functional.linear.1", (2, 8), 4.0)])
    assert shifted_apis(npu, bench) == {"Tensor.__add__": (3, 2)}
    result = pair_runs(npu, bench)
    assert result.pairs == {
        "Tensor.__add__.0.forward": "Tensor.__add__.0.forward",
        "Functional.linear.0.forward": "Functional.linear.0.forward",
        "Tensor.__add__.2.forward": "Tensor.__add__.1.forward",
        "Functional.linear.1.forward": "Functional.linear.1.forward",
    }
    assert result.unmatched == ["Tensor.__add__.1.forward"]
    assert not result.by_name and "Tensor.__add__ called 3 times" in result.why_aligned


def test_runs_that_make_the_same_calls_pair_by_name() -> None:
    calls = [("Tensor.__add__.0", (2, 8), 1.0), ("Functional.linear.0", (2, 8), 2.0)]
    other = [("Tensor.__add__.0", (2, 8), 9.0), ("Functional.linear.0", (4, 8), 7.0)]
    result = pair_runs(_dump(calls), _dump(other))  # values and shapes are the compare's
    assert result.by_name and result.pairs == {f"{n}.forward": f"{n}.forward" for n, _, _ in calls}
    assert auto_pairing(_dump(calls), _dump(calls)).pairs == result.pairs


def _module(path: str, cls: str) -> Call:
    rec = _rec("output.0", (2, 8), 1.0)
    return Call(f"Module.{path}.{cls}.forward.0", "module", "forward", 0, prefix="Module", op=cls,
                scope=path, outputs=[rec])


def test_a_module_of_another_class_at_the_same_path_is_paired() -> None:
    npu = Dump(Path("d"), "pytorch", "L0", "statistics", 0, 0,
               [_module("model.layers.1.mlp.act_fn", "GELUActivation")])
    bench = Dump(Path("d"), "pytorch", "L0", "statistics", 0, 0,
                 [_module("model.layers.1.mlp.act_fn", "SiLUActivation")])
    result = pair_runs(npu, bench)
    name = "Module.model.layers.1.mlp.act_fn.GELUActivation.forward.0"
    assert result.pairs == {name: "Module.model.layers.1.mlp.act_fn.SiLUActivation.forward.0"}
    assert "class GELUActivation~SiLUActivation" in result.evidence[name]


ZOO_TP = ROOT / "tests" / "data" / "zoo_tp" / "sdpa_vs_eager"


def test_eager_attention_pairs_with_sdpa_as_a_region() -> None:
    """transformers' eager attention (matmul, add mask, softmax, dropout, matmul) against
    sdpa (one call): the region's last matmul pairs with sdpa, the boundary tensor compared;
    its backward stays unpaired (other gradients)."""
    from pytest_accuracy.dumps.layout import load_dumps

    npu = load_dumps(ZOO_TP / "npu" / "L1").dumps[(0, 0)]
    bench = load_dumps(ZOO_TP / "bench" / "L1").dumps[(0, 0)]
    result = pair_runs(npu, bench)
    assert {k: result.pairs[k] for k in result.regions} == {
        "Torch.matmul.1.forward": "Functional.scaled_dot_product_attention.0.forward",
        "Torch.matmul.3.forward": "Functional.scaled_dot_product_attention.1.forward"}
    assert result.regions["Torch.matmul.1.forward"] == (
        "the NPU's 6 calls, Torch.matmul .. Torch.matmul")
    assert "Torch.matmul.1.backward" not in result.pairs
    assert result.pairs.regions == result.regions  # what the compare reads


def test_a_region_pair_is_compared_and_names_its_region(pytester, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import json
    import shutil

    torch = __import__("pytest").importorskip("torch")
    npu = tmp_path / "npu"
    shutil.copytree(ZOO_TP / "npu" / "L1", npu)
    bench = ZOO_TP / "bench" / "L1"
    out = pytester.path / "good.json"
    assert pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", f"--acc-json={out}",
                              "-p", "no:cacheprovider").ret == 0
    node = next(n for n in json.loads(out.read_text())["compare"]["nodes"]
                if n["npu_name"] == "Torch.matmul.1.forward")
    assert (node["status"], node["bench_name"]) == (
        "pass", "Functional.scaled_dot_product_attention.0.forward")
    # the eager attention's output off by 1 %, its record's statistics with it
    rank = next((npu / "step0").iterdir())
    data = rank / "dump_tensor_data" / "Torch.matmul.1.forward.output.0.pt"
    value = torch.load(data) * 1.01
    torch.save(value, data)
    doc = json.loads((rank / "dump.json").read_text())
    record = doc["data"]["Torch.matmul.1.forward"]["output"][0]
    record.update(Max=float(value.max()), Min=float(value.min()), Mean=float(value.mean()),
                  Norm=float(value.norm()))
    (rank / "dump.json").write_text(json.dumps(doc))
    out = pytester.path / "bad.json"
    assert pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", f"--acc-json={out}",
                              "-p", "no:cacheprovider").ret == 1
    first = json.loads(out.read_text())["compare"]["first_divergence"]
    assert first["npu_name"] == "Torch.matmul.1.forward"
    assert first["likely_cause"].startswith(
        "compared where a region ends (the NPU's 6 calls, Torch.matmul .. Torch.matmul) "
        "against one call of the bench")
