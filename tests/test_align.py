"""Automatic MS<->PT alignment and msprobe mapping files, measured against a hand-built truth."""

from __future__ import annotations

import copy
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pytest_accuracy.compare import Comparison
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.model import Call, Dump, TensorRecord
from pytest_accuracy.pairing.align import AlignmentResult, auto_align, auto_pairing
from pytest_accuracy.pairing.backward import incomparable_backward
from pytest_accuracy.pairing.base import Pairing
from pytest_accuracy.pairing.mapfiles import load_mapping_yaml
from pytest_accuracy.pairing.mapping_yaml import read_mapping_yaml
from pytest_accuracy.pairing.naming import (
    api_mapping_pairing,
    cell_mapping_pairing,
    combine_pairings,
    layer_mapping_pairing,
    pairing_from_file,
)
from tests.helpers import ROOT, dump

MAPPINGS = ROOT / "example_data" / "mappings"
LEVELS = ("L0_tensor", "L1_tensor", "mix_statistics", "L1_md5")

# ---------------------------------------------------------------- the truth, by construction
# fixtures/README.txt: MindFormers-style cell names vs the PyTorch twin's module names.
MODULE_RENAMES = {
    "tok_embeddings": "emb",
    "norm_out": "norm",
    "lm_head": "head",
    "attention_norm": "n1",
    "ffn_norm": "n2",
    "attention": "attn",
    "wqkv": "qkv",
    "wo": "o",
    "feed_forward": "mlp",
    "w1": "gate",
    "w3": "up",
    "w2": "down",
}
CLASS_RENAMES = {"LLamaDecodeLayer": "Block", "LLamaAttention": "Attn", "LlamaFeedForward": "MLP"}
# PyTorch's msprobe drops these at risk_level FOCUS; MindSpore dumps them: no counterpart.
PT_FILTERED = {"reshape", "transpose", "split", "full", "triu", "float"}
# MindSpore API -> PyTorch API (the MS script's API choices, README "MindSpore API choices").
API_PREFIXES = {"Mint": "Torch", "MintFunctional": "Functional"}
API_RENAMES = {"Functional.gather": "Functional.embedding"}
# PT API backward records the grads of the last internal autograd node (Pain point 9).
PT_COMPOSITE = {"Functional.linear", "Torch.matmul", "Functional.cross_entropy"}


def true_counterpart(name: str) -> str | None:
    """The PyTorch node of a MindSpore node: renamed path/class/API, same call index."""
    parts = name.split(".")
    if parts[0] == "Cell":
        path = [MODULE_RENAMES.get(p, p) for p in parts[1:-3]]
        cls = CLASS_RENAMES.get(parts[-3], parts[-3])
        return ".".join(["Module", *path, cls, *parts[-2:]])
    prefix, op, index, direction = parts[0], ".".join(parts[1:-2]), parts[-2], parts[-1]
    if op in PT_FILTERED:
        return None
    api = API_RENAMES.get(f"{prefix}.{op}", f"{API_PREFIXES.get(prefix, prefix)}.{op}")
    return f"{api}.{index}.{direction}"


def true_pairs(ms: Dump) -> dict[str, str | None]:
    return {c.name: true_counterpart(c.name) for c in ms.calls}


def load_pair(level: str, step: int = 0, bench: str = "pt_fp32") -> tuple[Dump, Dump]:
    ms = load_dumps(dump("ms_fp32", level)).dumps[(step, 0)]
    return ms, load_dumps(dump(bench, level)).dumps[(step, 0)]


def accuracy(pairs: dict[str, str], ms: Dump) -> tuple[float, int, int]:
    """Share of MS nodes with a counterpart paired right, and the count of spurious pairs."""
    truth = true_pairs(ms)
    with_counterpart = [n for n, t in truth.items() if t is not None]
    right = sum(pairs.get(n) == truth[n] for n in with_counterpart)
    spurious = sum(1 for n in pairs if truth.get(n) is None)
    return right / len(with_counterpart), right, spurious


def _cos(a: TensorRecord, b: TensorRecord) -> float:
    x, y = a.load().astype(np.float64).ravel(), b.load().astype(np.float64).ravel()
    if x.size == 1:
        return 1.0 if abs(x[0] - y[0]) <= 1e-5 * max(abs(y[0]), 1.0) else 0.0
    nx, ny = np.linalg.norm(x), np.linalg.norm(y)
    return 1.0 if nx == ny == 0 else float(x @ y / (nx * ny))


def _zipped(
    mine: list[TensorRecord], theirs: list[TensorRecord]
) -> list[tuple[TensorRecord, TensorRecord]]:
    """Floating tensors side by side (a PT composite backward may have fewer outputs)."""

    def floats(records: list[TensorRecord]) -> list[TensorRecord]:
        return [r for r in records if r.dtype.startswith(("float", "bfloat"))]

    return list(zip(floats(mine), floats(theirs), strict=False))


# ---------------------------------------------------------------- the truth is right


@pytest.mark.parametrize("level", ["L0_tensor", "L1_tensor"])
def test_true_pairing_is_numerically_right(level: str) -> None:
    """Every true pair exists in the PT dump and its tensors agree to fp32 noise."""
    ms, pt = load_pair(level)
    checked = 0
    for name, other in true_pairs(ms).items():
        if other is None:
            continue
        mine, theirs = ms.get(name), pt.get(other)
        assert mine is not None and theirs is not None, (name, other)
        if mine.direction == "forward":
            pairs = _zipped(mine.output_tensors, theirs.output_tensors)
        else:
            # Incoming grads (grad w.r.t. the forward outputs) are comparable everywhere.
            pairs = _zipped(mine.input_tensors, theirs.input_tensors)
            composite = f"{theirs.prefix}.{theirs.op}" in PT_COMPOSITE
            if not composite:
                pairs += _zipped(mine.output_tensors, theirs.output_tensors)
            elif theirs.op != "cross_entropy":
                # Pain point 9: PT's output.0 is the grad of an internal view/bmm.
                assert mine.output_tensors[0].shape != theirs.output_tensors[0].shape
        for a, b in pairs:
            assert a.shape == b.shape or a.numel == b.numel, (name, a.path)
            assert _cos(a, b) > 0.9999, (name, other, a.path)
            checked += 1
    assert checked > 80  # L0 85 tensors, L1 >200


def test_true_pairing_mix_statistics_agree() -> None:
    ms, pt = load_pair("mix_statistics")
    for name, other in true_pairs(ms).items():
        if other is None or not name.endswith((".forward", ".forward.0")):
            continue
        mine, theirs = ms.get(name), pt.get(other)
        assert mine is not None and theirs is not None, (name, other)
        for a, b in _zipped(mine.output_tensors, theirs.output_tensors):
            assert a.stats.norm == pytest.approx(b.stats.norm, rel=1e-4), name


# ---------------------------------------------------------------- automatic pairing


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("step", [0, 1])
def test_auto_pairing_accuracy(level: str, step: int) -> None:
    ms, pt = load_pair(level, step)
    result = auto_pairing(ms, pt)
    share, right, spurious = accuracy(result.pairs, ms)
    assert share >= 0.95, f"{level}: {right} right"
    assert share == 1.0  # measured: every node with a counterpart, at every level
    assert spurious == 0
    assert set(result.pairs) == set(result.confidence) == set(result.evidence)
    assert all(0.5 <= c <= 1.0 for c in result.confidence.values())
    assert set(result.unmatched) == set(n for n, t in true_pairs(ms).items() if t is None)


def test_auto_pairing_evidence_names_what_matched() -> None:
    ms, pt = load_pair("mix_statistics")
    result = auto_pairing(ms, pt)
    ev = result.evidence
    assert (
        "op Functional.gather->Functional.embedding (known alternative)"
        in ev["Functional.gather.0.forward"]
    )
    assert "parent same" in ev["Functional.gather.0.forward"]
    assert "class LLamaDecodeLayer~Block" in ev["Cell.layers.0.LLamaDecodeLayer.forward.0"]
    assert "same module instance" in ev["Cell.lm_head.Linear.parameters_grad.0"]
    assert "outputs not comparable" in ev["MintFunctional.linear.0.backward"]
    assert "outputs not comparable" not in ev["Tensor.__mul__.0.backward"]
    assert result.confidence["Mint.rsqrt.0.forward"] == 1.0


def test_backward_pairs_follow_the_forward_not_the_index() -> None:
    """msprobe -am pairs the first-fired MS linear backward with PT's last; we must not."""
    ms, pt = load_pair("L1_tensor")
    result = auto_pairing(ms, pt)
    assert result.pairs["MintFunctional.linear.10.backward"] == "Functional.linear.10.backward"
    assert result.pairs["Functional.cross_entropy.0.backward"] == (
        "Functional.cross_entropy.0.backward"
    )


def test_min_confidence_leaves_weak_pairs_unmatched() -> None:
    ms, pt = load_pair("L0_tensor")
    strict = auto_pairing(ms, pt, min_confidence=0.95)
    # A renamed class at the same path (LLamaDecodeLayer vs Block at layers.0) scores 0.9:
    # rejected, with reasons. A renamed class at a renamed path (LLamaAttention vs Attn) pairs
    # all the same: its submodules' weights are the bench attention's (full confidence).
    bench, conf, evidence = strict.rejected["Cell.layers.0.LLamaDecodeLayer.forward.0"]
    assert bench == "Module.layers.0.Block.forward.0" and conf == 0.9
    assert evidence == "same module path layers.0; class LLamaDecodeLayer~Block"
    attention = "Cell.layers.0.attention.LLamaAttention.forward.0"
    assert strict.pairs[attention] == "Module.layers.0.attn.Attn.forward.0"
    assert strict.evidence[attention].startswith("same parameter values")
    assert "Cell.layers.0.attention_norm.RMSNorm.forward.0" in strict.pairs
    assert auto_pairing(ms, pt, min_confidence=1.01).pairs == {}


@pytest.mark.parametrize("bench", ["pt_bug", "pt_bf16"])
@pytest.mark.parametrize("level", ["L1_tensor", "mix_statistics"])
def test_same_framework_pairs_by_identity(bench: str, level: str) -> None:
    """A run against its own framework (bf16 autocast, a bug) pairs every node with its name."""
    npu = load_dumps(dump(bench, level)).dumps[(0, 0)]
    ref = load_dumps(dump("pt_fp32", level)).dumps[(0, 0)]
    result = auto_pairing(npu, ref)
    assert result.pairs == {c.name: c.name for c in npu.calls}


def test_ms_against_buggy_pt_still_pairs_everything() -> None:
    """A real divergence (eps bug in layer 1) must not make nodes unmatched."""
    ms, pt = load_pair("L1_tensor", bench="pt_bug")
    assert accuracy(auto_pairing(ms, pt).pairs, ms)[0] == 1.0


# ---------------------------------------------------------------- mapping files


def _mapping_pairings(level: str) -> list[tuple[str, Pairing]]:
    am = api_mapping_pairing(MAPPINGS / "api_mapping.yaml")
    cm = cell_mapping_pairing(MAPPINGS / "cell_mapping.yaml")
    lm = layer_mapping_pairing(MAPPINGS / "layer_mapping.yaml")
    lm_am = combine_pairings(lm, am)
    if level.startswith("L1"):
        return [("am", am), ("lm+am", lm_am)]
    if level.startswith("L0"):
        return [
            ("cm", cm),
            ("lm", lm),
            ("file cm", pairing_from_file(MAPPINGS / "cell_mapping.yaml")),
        ]
    return [("cm+am", combine_pairings(cm, am)), ("lm+am", lm_am)]


@pytest.mark.parametrize("level", LEVELS)
def test_msprobe_mapping_files_pair_every_node(level: str) -> None:
    ms, pt = load_pair(level)
    for label, pairing in _mapping_pairings(level):
        share, right, spurious = accuracy(dict(pairing(ms, pt)), ms)
        assert (share, spurious) == (1.0, 0), f"{level} {label}: {right} right"


def test_layer_mapping_alone_misses_only_what_the_api_map_cannot_know() -> None:
    """-lm + built-in API map: everything but ops.gather <-> F.embedding (user -am entry)."""
    ms, pt = load_pair("mix_statistics")
    pairs = layer_mapping_pairing(MAPPINGS / "layer_mapping.yaml")(ms, pt)
    truth = true_pairs(ms)
    missed = {n for n, t in truth.items() if t is not None and pairs.get(n) != t}
    assert missed == {"Functional.gather.0.forward", "Functional.gather.0.backward"}


# ---------------------------------------------------------------- inferred mapping round trip


@pytest.mark.parametrize("level", LEVELS)
def test_inferred_mapping_fed_back_reproduces_the_pairing(level: str, tmp_path: Path) -> None:
    ms, pt = load_pair(level)
    result = auto_pairing(ms, pt)
    path = result.write_yaml(tmp_path / "mapping.yaml", source=f"ms_fp32/{level} vs pt_fp32")
    assert load_mapping_yaml(path) == result.pairs
    assert dict(read_mapping_yaml(path)(ms, pt)) == result.pairs
    assert dict(pairing_from_file(path)(ms, pt)) == result.pairs
    # Node names repeat every step: the step-0 mapping is the step-1 pairing too.
    ms1, pt1 = load_pair(level, step=1)
    assert dict(read_mapping_yaml(path)(ms1, pt1)) == auto_pairing(ms1, pt1).pairs
    assert path.read_text().count(": null  # unmatched") == len(result.unmatched)


# ---------------------------------------------------------------- compare over the pairing


def _statuses(level: str) -> tuple[Counter[str], set[str]]:
    """Status counts, and the nodes that neither pass nor are unmatched (fail or skip)."""
    ms, pt = load_dumps(dump("ms_fp32", level)), load_dumps(dump("pt_fp32", level))
    results = Comparison(ms, pt, pairing=auto_align()).results()
    other = {r.npu.name for r in results if r.status not in ("pass", "unmatched")}
    return Counter(r.status for r in results), other


def test_compare_over_auto_pairing_l0_passes() -> None:
    counts, other = _statuses("L0_tensor")
    assert counts == Counter({"pass": 124, "skip": 2})
    assert other == {"Cell.tok_embeddings.Embedding.backward.0"}  # no grad outputs to compare


def test_compare_over_auto_pairing_l1_fails_only_composite_backward() -> None:
    """Every non-passing pair is a PT composite-API backward (Pain point 9), all flagged.

    Their outputs fail (shapes differ; cross_entropy cosine 0.992) unless compare already
    skips such nodes; either way nothing else may fail.
    """
    counts, other = _statuses("L1_tensor")
    assert counts["pass"] == 212 and counts["unmatched"] == 98  # 49 PT-filtered per step
    assert counts["fail"] + counts["skip"] == 32
    assert {n.rsplit(".", 2)[0] for n in other} == {
        "MintFunctional.linear",
        "Mint.matmul",
        "Functional.cross_entropy",
    }
    assert all(n.endswith(".backward") for n in other)
    ms, pt = load_pair("L1_tensor")
    pairs = auto_pairing(ms, pt).pairs
    for name in other:
        mine, theirs = ms.get(name), pt.get(pairs[name])
        assert mine is not None and theirs is not None
        assert incomparable_backward(ms, pt, mine, theirs) is not None, name


# ---------------------------------------------------------------- speed


def _replicated(d: Dump, k: int) -> Dump:
    """k copies of the forward calls, then k of the backward ones, with unique names."""
    calls: list[Call] = []
    fwd = [c for c in d.calls if c.direction == "forward"]
    rest = [c for c in d.calls if c.direction != "forward"]
    for rep, group in [(r, fwd) for r in range(k)] + [(r, rest) for r in reversed(range(k))]:
        for c in group:
            clone = copy.copy(c)
            clone.name = c.name.replace(f".{c.index}.", f".{c.index + 1000 * rep}.")
            clone.order = len(calls)
            calls.append(clone)
    return Dump(d.path, d.framework, d.level, d.mode, d.step, d.rank, calls)


def test_alignment_is_fast() -> None:
    ms, pt = load_pair("L1_tensor")
    auto_pairing(ms, pt)  # warm the API map
    start = time.perf_counter()
    auto_pairing(ms, pt)
    assert time.perf_counter() - start < 0.5  # 171 vs 122 nodes
    big_ms, big_pt = _replicated(ms, 20), _replicated(pt, 20)  # 3420 vs 2440 nodes
    start = time.perf_counter()
    result = auto_pairing(big_ms, big_pt)
    assert time.perf_counter() - start < 10.0  # measured ~1.3 s
    assert len(result.pairs) == len(big_pt.calls)


def test_alignment_result_as_pairing_filters_foreign_names() -> None:
    ms, pt = load_pair("L1_tensor")
    result = AlignmentResult(pairs={"Mint.rsqrt.0.forward": "Torch.rsqrt.0.forward", "x": "y"})
    assert dict(result.as_pairing()(ms, pt)) == {"Mint.rsqrt.0.forward": "Torch.rsqrt.0.forward"}
