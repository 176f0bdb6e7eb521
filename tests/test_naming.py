"""API map, msprobe mapping files (-am/-cm/-dm/-lm) and our mapping yaml: parsing and pairing."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.model import Call, Dump
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.pairing import naming
from pytest_accuracy.pairing.mapfiles import (
    MAPPING_FORMAT,
    load_api_map,
    load_mapping_yaml,
    node_of_row,
    read_api_mapping,
    read_data_mapping,
    read_layer_mapping,
)
from pytest_accuracy.pairing.mapping_yaml import read_mapping_yaml, write_mapping_yaml
from pytest_accuracy.pairing.naming import (
    api_mapping_pairing,
    cell_mapping_pairing,
    combine_pairings,
    complete_backward,
    data_mapping_pairing,
    fixed_pairing,
    layer_mapping_pairing,
    pairing_from_file,
)
from tests.helpers import ROOT, dump

MAPPINGS = ROOT / "example_data" / "mappings"


def pair(level: str) -> tuple[Dump, Dump]:
    return (
        load_dumps(dump("ms_fp32", level)).dumps[(0, 0)],
        load_dumps(dump("pt_fp32", level)).dumps[(0, 0)],
    )


# ---------------------------------------------------------------- built-in API map


@pytest.mark.parametrize(
    ("ms", "pt"),
    [
        ("Mint.rsqrt", "Torch.rsqrt"),
        ("MintFunctional.linear", "Functional.linear"),
        ("Functional.dense", "Functional.linear"),
        ("Functional.full", "Torch.full"),
        ("Functional.cross_entropy", "Functional.cross_entropy"),
        ("Tensor.__mul__", "Tensor.__mul__"),
        ("Tensor.astype", "Tensor.to"),
        ("Functional.flash_attention_score", "NPU.npu_fusion_attention"),
    ],
)
def test_builtin_api_map(ms: str, pt: str) -> None:
    assert load_api_map().to_pt(ms) == pt


def test_api_map_facts() -> None:
    amap = load_api_map()
    assert amap.base_op("Tensor.__add__") == amap.base_op("Torch.add") == "add"
    assert amap.base_op("Functional.dense") == "linear"
    assert amap.is_low_risk("Tensor.reshape") and amap.is_low_risk("Torch.triu")
    assert not amap.is_low_risk("Functional.linear")
    assert amap.is_composite_backward("Functional.linear")
    assert "Functional.embedding" in amap.alternatives["Functional.gather"]


def test_user_api_mapping_in_msprobe_format() -> None:
    amap = read_api_mapping(MAPPINGS / "api_mapping.yaml")
    assert amap.to_pt("Functional.gather") == "Functional.embedding"
    arg = amap.arg_maps["Functional.gather"]
    assert (arg.ms_args, arg.pt_args, arg.ms_outputs, arg.pt_outputs) == (
        (0, 1),
        (1, 0),
        (0,),
        (0,),
    )
    assert amap.to_pt("Mint.rsqrt") == "Torch.rsqrt"  # built-in rules still apply


def test_user_api_mapping_dict_and_sectioned(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text("Functional.my_op: Torch.their_op\n")
    assert read_api_mapping(plain).to_pt("Functional.my_op") == "Torch.their_op"
    sectioned = tmp_path / "sectioned.yaml"
    sectioned.write_text("prefix_rules: {Custom: Torch}\napis: {Functional.x: Torch.y}\n")
    amap = read_api_mapping(sectioned)
    assert amap.to_pt("Custom.z") == "Torch.z" and amap.to_pt("Functional.x") == "Torch.y"
    assert amap.to_pt("Mint.rsqrt") == "Torch.rsqrt"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- ms_api: Functional.gather\n", "needs 'ms_api' and 'pt_api'"),
        ("- {ms_api: A.b, pt_api: C.d, ms_args: [0, 1], pt_args: [0]}\n", "differ in length"),
        ("- {ms_api: A.b, pt_api: C.d, ms_args: x, pt_args: [0]}\n", "list of ints"),
        ("just a string\n", "must be a list"),
        ("a: [1, 2\n", "not valid YAML"),
        ("Functional.x: 3\n", "must map names to names"),
    ],
)
def test_bad_api_mappings_name_the_file(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "am.yaml"
    path.write_text(text)
    with pytest.raises(AccuracyInputError, match=problem) as info:
        read_api_mapping(path)
    assert str(path) in str(info.value)


# ---------------------------------------------------------------- msprobe -am pairing


def test_api_mapping_pairs_backward_through_the_forward() -> None:
    """msprobe's -am renames the un-renumbered target key: MS linear.10 (first backward
    fired) meets PT linear.0 (renumbered 0 = first fired). We pair through the forward."""
    ms, pt = pair("L1_tensor")
    pairs = api_mapping_pairing(MAPPINGS / "api_mapping.yaml")(ms, pt)
    assert pairs["MintFunctional.linear.10.backward"] == "Functional.linear.10.backward"
    assert pairs["MintFunctional.linear.0.backward"] == "Functional.linear.0.backward"
    assert pairs["Functional.gather.0.forward"] == "Functional.embedding.0.forward"
    assert pairs["Functional.gather.0.backward"] == "Functional.embedding.0.backward"
    assert "Tensor.reshape.0.forward" not in pairs  # PT did not dump it
    # Without the user entry, gather has no PT counterpart in the built-in map.
    assert "Functional.gather.0.forward" not in api_mapping_pairing()(ms, pt)


def test_api_mapping_backward_only_dump_pairs_kth_fired_with_kth_fired() -> None:
    """data_mode backward: no forward nodes; k-th fired backward of an API <-> k-th fired."""
    ms, pt = pair("L1_tensor")
    ms_bw = Dump(ms.path, ms.framework, ms.level, ms.mode, 0, 0, _backward(ms))
    pt_bw = Dump(pt.path, pt.framework, pt.level, pt.mode, 0, 0, _backward(pt))
    pairs = api_mapping_pairing()(ms_bw, pt_bw)
    assert pairs["MintFunctional.linear.10.backward"] == "Functional.linear.10.backward"
    assert pairs["Mint.matmul.0.backward"] == "Torch.matmul.0.backward"
    assert all(k.rsplit(".", 2)[1] == v.rsplit(".", 2)[1] for k, v in pairs.items())


def _backward(d: Dump) -> list[Call]:
    return [c for c in d.calls if c.direction == "backward"]


def test_complete_backward_keeps_explicit_pairs() -> None:
    ms, pt = pair("L1_tensor")
    explicit = {
        "Mint.rsqrt.0.forward": "Torch.rsqrt.0.forward",
        "Mint.rsqrt.0.backward": "Torch.rsqrt.1.backward",  # a person said so
    }
    out = complete_backward(ms, pt, explicit)
    assert out["Mint.rsqrt.0.backward"] == "Torch.rsqrt.1.backward"
    out = complete_backward(ms, pt, {"Mint.rsqrt.2.forward": "Torch.rsqrt.2.forward"})
    assert out == {
        "Mint.rsqrt.2.forward": "Torch.rsqrt.2.forward",
        "Mint.rsqrt.2.backward": "Torch.rsqrt.2.backward",
    }


# ---------------------------------------------------------------- -cm / -dm / -lm


def test_cell_mapping_pairs_modules_and_parameter_grads() -> None:
    ms, pt = pair("L0_tensor")
    pairs = cell_mapping_pairing(MAPPINGS / "cell_mapping.yaml")(ms, pt)
    assert len(pairs) == len(ms.calls) == 63
    assert pairs["Cell.lm_head.Linear.parameters_grad.0"] == "Module.head.Linear.parameters_grad.0"
    assert pairs["Cell.layers.1.LLamaDecodeLayer.backward.0"] == "Module.layers.1.Block.backward.0"


def test_cell_mapping_without_file_only_renames_the_prefix() -> None:
    ms, pt = pair("L0_tensor")
    assert cell_mapping_pairing()(ms, pt) == {}  # msprobe: 0/125 rows for the fixtures
    same = load_dumps(dump("pt_bug", "L0_tensor")).dumps[(0, 0)]
    assert len(cell_mapping_pairing()(same, pt)) == 63


def test_cell_mapping_substring_fallback() -> None:
    ms, pt = pair("L0_tensor")
    table = {"tok_embeddings": "emb", "lm_head": "head", "norm_out": "norm"}
    pairs = cell_mapping_pairing(table)(ms, pt)
    assert pairs == {
        "Cell.tok_embeddings.Embedding.forward.0": "Module.emb.Embedding.forward.0",
        "Cell.tok_embeddings.Embedding.backward.0": "Module.emb.Embedding.backward.0",
        "Cell.tok_embeddings.Embedding.parameters_grad.0": "Module.emb.Embedding.parameters_grad.0",
        "Cell.lm_head.Linear.forward.0": "Module.head.Linear.forward.0",
        "Cell.lm_head.Linear.backward.0": "Module.head.Linear.backward.0",
        "Cell.lm_head.Linear.parameters_grad.0": "Module.head.Linear.parameters_grad.0",
        "Cell.norm_out.RMSNorm.forward.0": "Module.norm.RMSNorm.forward.0",
        "Cell.norm_out.RMSNorm.backward.0": "Module.norm.RMSNorm.backward.0",
        "Cell.norm_out.RMSNorm.parameters_grad.0": "Module.norm.RMSNorm.parameters_grad.0",
    }


@pytest.mark.parametrize(
    ("row", "node"),
    [
        ("Functional.gather.0.forward.input.0", "Functional.gather.0.forward"),
        ("Tensor.__add__.5.backward.output.1", "Tensor.__add__.5.backward"),
        ("Cell.layers.0.attention.wqkv.Linear.forward.0.input.0",
         "Cell.layers.0.attention.wqkv.Linear.forward.0"),
        ("Module.head.Linear.parameters_grad.0.weight", "Module.head.Linear.parameters_grad.0"),
        ("Module.layers.0.n1.RMSNorm.forward.0.parameters.weight",
         "Module.layers.0.n1.RMSNorm.forward.0"),
        ("Torch.sum.0.forward.input.dim.1", "Torch.sum.0.forward"),
        ("Mint.rsqrt.0.forward", "Mint.rsqrt.0.forward"),
    ],
)  # fmt: skip
def test_node_of_row(row: str, node: str) -> None:
    assert node_of_row(row) == node


def test_data_mapping_rows_reduce_to_nodes() -> None:
    rows = read_data_mapping(MAPPINGS / "data_mapping.yaml")
    assert rows["Functional.gather.0.forward.input.0"] == "Functional.embedding.0.forward.input.1"
    ms, pt = pair("L1_tensor")
    pairs = data_mapping_pairing(MAPPINGS / "data_mapping.yaml")(ms, pt)
    assert pairs["Functional.gather.0.forward"] == "Functional.embedding.0.forward"
    assert pairs["Functional.gather.0.backward"] == "Functional.embedding.0.backward"
    assert pairs["Mint.rsqrt.0.forward"] == "Torch.rsqrt.0.forward"
    assert pairs["Mint.rsqrt.0.backward"] == "Torch.rsqrt.0.backward"
    assert pairs["Tensor.pow.3.backward"] == "Tensor.pow.3.backward"  # unlisted: same name
    assert "Mint.rsqrt.1.forward" not in pairs  # as in msprobe: only listed rows are renamed


def test_data_mapping_majority_vote() -> None:
    ms, pt = pair("L1_tensor")
    rows = {
        "Tensor.pow.0.forward.input.0": "Tensor.pow.1.forward.input.0",
        "Tensor.pow.0.forward.output.0": "Tensor.pow.1.forward.output.0",
        "Tensor.pow.0.forward.input.1": "Tensor.pow.2.forward.input.1",
    }
    pairs = data_mapping_pairing(rows)(ms, pt)
    assert pairs["Tensor.pow.0.forward"] == "Tensor.pow.1.forward"
    assert pairs["Tensor.pow.0.backward"] == "Tensor.pow.1.backward"
    assert pairs.get("Tensor.pow.1.forward") != "Tensor.pow.1.forward"  # taken


def test_layer_mapping_reads_msprobe_format() -> None:
    table = read_layer_mapping(MAPPINGS / "layer_mapping.yaml")
    assert table["TopLayer"]["tok_embeddings"] == "emb"
    assert table["LLamaAttention"] == {"wqkv": "qkv", "wo": "o"}


def test_layer_mapping_pairs_modules_apis_and_parameter_grads() -> None:
    ms, pt = pair("mix_statistics")
    pairs = layer_mapping_pairing(MAPPINGS / "layer_mapping.yaml")(ms, pt)
    assert pairs["Cell.layers.1.attention.wqkv.Linear.parameters_grad.0"] == (
        "Module.layers.1.attn.qkv.Linear.parameters_grad.0"
    )
    assert pairs["Tensor.__add__.5.forward"] == "Tensor.__add__.5.forward"  # inside layers.1.n1
    assert pairs["MintFunctional.linear.5.backward"] == "Functional.linear.5.backward"


@pytest.mark.parametrize(
    ("reader", "text"),
    [
        (read_layer_mapping, "TopLayer: [a, b]\n"),
        (read_layer_mapping, "TopLayer: {a: 1}\n"),
        (read_data_mapping, "- a\n"),
        (lambda p: cell_mapping_pairing(p), "a: {b: c}\n"),
    ],
)
def test_bad_mapping_files_name_the_file(tmp_path: Path, reader: object, text: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(AccuracyInputError) as info:
        reader(path)  # type: ignore[operator]
    assert str(path) in str(info.value)


def test_combine_pairings_first_wins_and_bench_nodes_are_used_once() -> None:
    ms, pt = pair("L1_tensor")
    first = fixed_pairing({"Tensor.pow.0.forward": "Tensor.pow.1.forward"})
    combined = combine_pairings(first, api_mapping_pairing())(ms, pt)
    assert combined["Tensor.pow.0.forward"] == "Tensor.pow.1.forward"
    assert combined["Tensor.pow.0.backward"] == "Tensor.pow.1.backward"
    assert "Tensor.pow.1.forward" not in combined  # its bench node is taken
    assert len(set(combined.values())) == len(combined)


@pytest.mark.parametrize(
    ("name", "level", "count"),
    [
        ("api_mapping.yaml", "L1_tensor", 122),
        ("cell_mapping.yaml", "mix_statistics", 183),  # + built-in API map; gather needs -am
        ("layer_mapping.yaml", "L0_tensor", 63),
        ("data_mapping.yaml", "L1_tensor", 122),
    ],
)
def test_pairing_from_file_recognises_each_format(name: str, level: str, count: int) -> None:
    ms, pt = pair(level)
    assert len(pairing_from_file(MAPPINGS / name)(ms, pt)) == count


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("api_mapping.yaml", "api"),
        ("cell_mapping.yaml", "cell"),
        ("layer_mapping.yaml", "layer"),
        ("data_mapping.yaml", "data"),
    ],
)
def test_a_mapping_file_is_read_once_into_one_form(
    name: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The house: one reader recognises the file and checks it; the pairing takes its form."""
    from pytest_accuracy.pairing import mapfiles

    reads: list[str] = []
    real = mapfiles.load_yaml
    monkeypatch.setattr(mapfiles, "load_yaml", lambda p, w: reads.append(str(p)) or real(p, w))
    file = mapfiles.read_mapping_file(MAPPINGS / name)
    ms, pt = pair("L1_tensor")
    naming.pairing_of(file)(ms, pt)
    assert file.kind == kind
    assert reads == [str(MAPPINGS / name)]
    held = {"api": file.api_map, "layer": file.layers, "cell": file.names, "data": file.names}
    assert held[kind]


def test_our_mapping_file_recognised_by_its_pairs(tmp_path: Path) -> None:
    from pytest_accuracy.pairing.mapfiles import read_mapping_file

    path = tmp_path / "m.yaml"
    path.write_text(f"format: {MAPPING_FORMAT}\npairs:\n  a: b\n  c: null\n")
    assert read_mapping_file(path).names == {"a": "b"}
    path.write_text("pairs: {a: x, b: x}\n")
    with pytest.raises(AccuracyInputError, match="used twice"):
        read_mapping_file(path)


# ---------------------------------------------------------------- our mapping yaml


def test_mapping_yaml_round_trip(tmp_path: Path) -> None:
    pairs = {
        "Tensor.__add__.0.forward": "Tensor.__add__.0.forward",
        'odd "quoted" #name: x': "bench: with colon # and hash",
        "Mint.rsqrt.0.forward": "Torch.rsqrt.0.forward",
    }
    evidence = {"Mint.rsqrt.0.forward": "op Mint.rsqrt->Torch.rsqrt\nsecond line # hash"}
    path = write_mapping_yaml(
        pairs,
        evidence,
        tmp_path / "m.yaml",
        confidence={"Mint.rsqrt.0.forward": 0.987654},
        unmatched=["Tensor.reshape.0.forward"],
        source="ms vs pt",
    )
    text = path.read_text()
    assert f"format: {MAPPING_FORMAT}" in text
    assert '"Mint.rsqrt.0.forward": "Torch.rsqrt.0.forward"  # 0.988 op Mint.rsqrt' in text
    assert '"Tensor.reshape.0.forward": null  # unmatched' in text
    assert load_mapping_yaml(path) == pairs
    assert list(load_mapping_yaml(path)) == list(pairs)  # order kept


def test_edited_mapping_yaml_is_what_pairs(tmp_path: Path) -> None:
    ms, pt = pair("L1_tensor")
    path = tmp_path / "m.yaml"
    path.write_text(
        f"format: {MAPPING_FORMAT}\npairs:\n"
        "  Functional.gather.0.forward: Functional.embedding.0.forward\n"
        "  Tensor.reshape.0.forward: null\n"
        "  Not.in.the.dump: Functional.linear.0.forward\n"
    )
    assert dict(read_mapping_yaml(path)(ms, pt)) == {
        "Functional.gather.0.forward": "Functional.embedding.0.forward"
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("pairs: [a, b]\n", "no 'pairs' mapping"),
        ("format: other/9\npairs: {a: b}\n", "unsupported format"),
        ("pairs: {a: 3}\n", "is not node name"),
        ("pairs: {a: x, b: x}\n", "used twice"),
        ("pairs: {a: [\n", "not valid YAML"),
    ],
)
def test_bad_mapping_yaml_names_the_file(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(AccuracyInputError, match=problem) as info:
        load_mapping_yaml(path)
    assert str(path) in str(info.value)


def test_unreadable_mapping_file(tmp_path: Path) -> None:
    with pytest.raises(AccuracyInputError, match="cannot read"):
        pairing_from_file(tmp_path / "missing.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(AccuracyInputError, match="empty or unrecognised"):
        pairing_from_file(empty)
