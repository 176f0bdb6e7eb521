"""Per-parameter gradient norms across naming conventions, and the gradient view across steps."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.gradients import (
    compare_norms,
    gradient_view,
    load_name_rules,
    local_norm_diffs,
    match_names,
    param_grads,
)
from pytest_accuracy.pairing.align import auto_align
from pytest_accuracy.pairing.naming import cell_mapping_pairing
from tests.helpers import ROOT, dump

CopyDump = Callable[[str, str], Path]

# ---------------------------------------------------------------- naming conventions


@pytest.mark.parametrize(
    "names",
    [
        (
            "model.layers.0.attention.wqkv.weight",  # MindFormers
            "module.module.decoder.layers.0.self_attention.linear_qkv.weight",  # Megatron-Core
            "language_model.encoder.layers.0.self_attention.query_key_value.weight",  # legacy
            "layers.0.attn.qkv.weight",  # the fixture's PyTorch twin
        ),
        ("model.tok_embeddings.embedding_weight", "model.embed_tokens.weight",
         "embedding.word_embeddings.weight"),
        ("model.layers.3.attention_norm.weight", "model.layers.3.input_layernorm.weight",
         "decoder.layers.3.self_attention.linear_qkv.layer_norm_weight"),
        ("model.layers.1.feed_forward.w2.weight", "model.layers.1.mlp.down_proj.weight",
         "decoder.layers.1.mlp.linear_fc2.weight"),
        ("model.norm_out.weight", "model.norm.weight", "decoder.final_layernorm.weight"),
        ("lm_head.weight", "output_layer.weight"),
    ],
)  # fmt: skip
def test_conventions_share_one_canonical_name(names: tuple[str, ...]) -> None:
    rules = load_name_rules()
    assert len({rules.canonical(n) for n in names}) == 1, [rules.canonical(n) for n in names]


def test_fused_parameters_compare_with_their_parts() -> None:
    """HF q/k/v (norms 3, 4, 12) vs Megatron's fused linear_qkv (norm 13): equal."""
    hf = {
        "model.layers.0.self_attn.q_proj.weight": 3.0,
        "model.layers.0.self_attn.k_proj.weight": 4.0,
        "model.layers.0.self_attn.v_proj.weight": 12.0,
        "model.layers.0.mlp.gate_proj.weight": 6.0,
        "model.layers.0.mlp.up_proj.weight": 8.0,
        "model.layers.0.mlp.down_proj.weight": 2.0,
    }
    megatron = {
        "decoder.layers.0.self_attention.linear_qkv.weight": 13.0,
        "decoder.layers.0.mlp.linear_fc1.weight": 10.0,
        "decoder.layers.0.mlp.linear_fc2.weight": 3.0,
    }
    result = compare_norms(megatron, hf)
    assert not result.unmatched_npu and not result.unmatched_bench
    worst = result.diffs[0]
    assert worst.npu_params == ("decoder.layers.0.mlp.linear_fc2.weight",)
    assert worst.rel_diff == pytest.approx(0.5)
    by_name = {d.name: d for d in result.diffs}
    qkv = by_name["decoder.layers.0.self_attention.linear_qkv.weight"]
    assert len(qkv.bench_params) == 3 and qkv.rel_diff == pytest.approx(0.0)
    # The other direction too: the split side is the NPU.
    assert compare_norms(hf, megatron).diffs[0].bench_params == (
        "decoder.layers.0.mlp.linear_fc2.weight",
    )


def test_user_rules_are_tried_first(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - ['blk(\\d+)\\.wq\\.weight', 'layers.\\1.attn.q.weight']\n")
    rules = load_name_rules(path)
    assert rules.canonical("blk7.wq.weight") == "layers.7.attn.q.weight"
    groups, lost_a, lost_b = match_names(
        ["blk7.wq.weight"], ["model.layers.7.self_attn.q_proj.weight"], rules
    )
    assert len(groups) == 1 and not lost_a and not lost_b


@pytest.mark.parametrize(
    "text",
    ["rules: [[1, 2]]\n", "rules: [['(unclosed', 'x']]\n", "- a\n", "strip_prefixes: 3\n",
     "rules: [\n"],
)  # fmt: skip
def test_bad_rule_files_name_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    with pytest.raises(AccuracyInputError, match=r"rules\.yaml"):
        load_name_rules(path)


# ---------------------------------------------------------------- local norms on the dumps


def test_param_grads_of_a_dump() -> None:
    grads = param_grads(load_dumps(dump("ms_fp32", "L0_tensor")).dumps[(0, 0)])
    assert len(grads) == 17
    qkv = grads["layers.0.attention.wqkv.weight"]
    assert qkv.node == "Cell.layers.0.attention.wqkv.Linear.parameters_grad.0"
    assert qkv.norm() == pytest.approx(0.6409993767738342)


@pytest.mark.parametrize("level", ["L0_tensor", "mix_statistics"])
def test_cross_framework_local_norms_agree(level: str) -> None:
    ms, pt = load_dumps(dump("ms_fp32", level)), load_dumps(dump("pt_fp32", level))
    by_rules = local_norm_diffs(ms, pt)
    by_pairing = local_norm_diffs(ms, pt, pairing=auto_align())
    for result in (by_rules, by_pairing):
        assert len(result.diffs) == 17 and not result.unmatched_npu and not result.unmatched_bench
        assert result.diffs[0].rel_diff < 1e-6  # fp32 kernel noise only
    pairs = {(d.npu_params, d.bench_params) for d in by_rules.diffs}
    assert pairs == {(d.npu_params, d.bench_params) for d in by_pairing.diffs}
    assert (("layers.1.attention_norm.weight",), ("layers.1.n1.weight",)) in pairs


def _scale_grad_norm(root: Path, node: str, factor: float) -> None:
    """The guide's case: one parameter's recorded gradient norm differs (step 0)."""
    path = next((root / "step0").glob("*/dump.json"))
    doc = json.loads(path.read_text())
    doc["data"][node]["weight"][0]["Norm"] *= factor
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("level", ["L0_tensor", "mix_statistics"])
@pytest.mark.parametrize("mapping", ["rules", "auto", "cell mapping"])
def test_local_norms_name_the_corrupted_parameter_first(
    copy_dump: CopyDump, level: str, mapping: str
) -> None:
    root = copy_dump("ms_fp32", level)
    _scale_grad_norm(root, "Cell.layers.1.attention.wo.Linear.parameters_grad.0", 1.2)
    pairing = {
        "rules": None,
        "auto": auto_align(),
        "cell mapping": cell_mapping_pairing(ROOT / "example_data/mappings/cell_mapping.yaml"),
    }[mapping]
    result = local_norm_diffs(load_dumps(root), load_dumps(dump("pt_fp32", level)), pairing=pairing)
    worst, second = result.diffs[0], result.diffs[1]
    assert worst.npu_params == ("layers.1.attention.wo.weight",)
    assert worst.bench_params == ("layers.1.attn.o.weight",)
    assert worst.rel_diff == pytest.approx(0.2, rel=1e-5)
    assert second.rel_diff < 1e-6
    # Step 1 was not touched.
    clean = local_norm_diffs(load_dumps(root), load_dumps(dump("pt_fp32", level)), step=1)
    assert clean.diffs[0].rel_diff < 1e-6


def test_local_norms_same_framework(copy_dump: CopyDump) -> None:
    root = copy_dump("pt_fp32", "mix_statistics")
    _scale_grad_norm(root, "Module.layers.0.mlp.gate.Linear.parameters_grad.0", 0.5)
    result = local_norm_diffs(load_dumps(root), load_dumps(dump("pt_fp32", "mix_statistics")))
    assert result.worst is not None and result.worst.name == "layers.0.mlp.gate.weight"
    assert result.worst.rel_diff == pytest.approx(0.5)
    assert all(d.rel_diff == 0 for d in result.diffs[1:])


def test_local_norms_missing_step_is_a_named_error() -> None:
    pt = load_dumps(dump("pt_fp32", "mix_statistics"))
    with pytest.raises(AccuracyInputError, match="no dump for step 7"):
        local_norm_diffs(pt, pt, step=7)


# ---------------------------------------------------------------- gradient view across steps


@pytest.mark.parametrize("level", ["L0_tensor", "mix_statistics"])
def test_identical_runs_never_part(level: str) -> None:
    pt = load_dumps(dump("pt_fp32", level))
    view = gradient_view(pt, load_dumps(dump("pt_fp32", level)))
    assert view.steps == [0, 1] and len(view.params) == 17
    assert view.first_parting_step is None
    assert set(view.parted_at().values()) == {None}


@pytest.mark.parametrize("level", ["L0_tensor", "mix_statistics"])
def test_cross_framework_fp32_twins_never_part(level: str) -> None:
    ms, pt = load_dumps(dump("ms_fp32", level)), load_dumps(dump("pt_fp32", level))
    for pairing in (None, auto_align()):
        view = gradient_view(ms, pt, pairing=pairing)
        assert len(view.params) == 17 and view.first_parting_step is None


@pytest.mark.parametrize("level", ["L0_tensor", "mix_statistics"])
def test_eps_bug_parts_at_step_zero(level: str) -> None:
    view = gradient_view(load_dumps(dump("pt_bug", level)), load_dumps(dump("pt_fp32", level)))
    assert view.first_parting_step == 0
    # The bug sits in layer 1's attention norm: its weight grad moves most (norm -0.9 %).
    assert view.parted_params(0)[0] == "layers.1.n1.weight"
    row = view.params["layers.1.n1.weight"][0]
    assert row.parted and row.norm_ratio == pytest.approx(0.991, abs=1e-3)
    if level == "L0_tensor":  # tensor data: cosine and relative L2 error are measured
        assert row.cosine is not None and 0.99999 < row.cosine < 1.0
        assert row.rel_err is not None and row.rel_err > 1e-3


def test_gradient_view_without_data_uses_norms() -> None:
    bug, pt = load_dumps(dump("pt_bug", "L0_tensor")), load_dumps(dump("pt_fp32", "L0_tensor"))
    view = gradient_view(bug, pt, use_data=False)
    row = view.params["layers.1.n1.weight"][0]
    assert row.cosine is None and row.parted and math.isclose(row.rel_err or 0, 0.009, rel_tol=0.05)
    assert view.first_parting_step == 0
