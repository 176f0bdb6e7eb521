"""MindSpore vs PyTorch through the plugin: automatic alignment, mapping files, round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import ROOT, dump

MAPPINGS = ROOT / "example_data" / "mappings"


def run(pytester: pytest.Pytester, config: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest(f"--acc-npu={dump('ms_fp32', config)}",
                              f"--acc-bench={dump('pt_fp32', config)}", "-p", "no:cacheprovider",
                              *args)


@pytest.mark.parametrize("config", ["L0_tensor", "L1_tensor", "mix_statistics"])
def test_ms_vs_pt_passes_without_any_mapping(pytester: pytest.Pytester, config: str) -> None:
    result = run(pytester, config)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["No divergence: * compared nodes meet the criteria."])


def test_pt_composite_backward_is_skipped_with_the_reason(pytester: pytest.Pytester) -> None:
    result = run(pytester, "L1_tensor", "-rs", "-k", "0/0/MintFunctional.linear.0.backward")
    result.stdout.fnmatch_lines(["*Functional.linear.0.backward is a PyTorch API backward: "
                                 "msprobe records the gradient of the API's last internal op*"])


def nodes(path: Path) -> dict[str, str | None]:
    doc = json.loads(path.read_text())
    return {n["npu_name"]: n["bench_name"] for n in doc["compare"]["nodes"] if n["step"] == 0}


def test_inferred_mapping_fed_back_reproduces_the_pairing(pytester: pytest.Pytester) -> None:
    rep = pytester.path / "rep"
    run(pytester, "L1_tensor", f"--acc-report={rep}", f"--acc-json={pytester.path / 'a.json'}")
    mapping = rep / "inferred_mapping.yaml"
    assert mapping.exists()
    again = run(pytester, "L1_tensor", f"--acc-mapping={mapping}",
                f"--acc-json={pytester.path / 'b.json'}")
    assert again.ret == 0
    first, second = nodes(pytester.path / "a.json"), nodes(pytester.path / "b.json")
    assert first == second
    assert first["Functional.gather.0.forward"] == "Functional.embedding.0.forward"


def test_msprobe_cell_mapping_file_pairs_every_l0_node(pytester: pytest.Pytester) -> None:
    out = pytester.path / "a.json"
    result = run(pytester, "L0_tensor", f"--acc-mapping={MAPPINGS / 'cell_mapping.yaml'}",
                 f"--acc-json={out}")
    assert result.ret == 0
    doc = json.loads(out.read_text())
    assert doc["compare"]["coverage"]["matched_share"] == 1.0
    pairs = nodes(out)
    assert pairs["Cell.layers.0.attention_norm.RMSNorm.forward.0"] == (
        "Module.layers.0.n1.RMSNorm.forward.0")
