"""Items per region at scale: layer and run names, the same verdict and records as per node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_accuracy.compare.regions import NODE_ITEMS_UP_TO, Region, layer_path, regions
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.model import Call, Dump
from tests.helpers import ROOT, dump


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def document(pytester: pytest.Pytester, npu: Path, bench: Path, *args: str) -> dict:
    out = pytester.path / f"acc{len(list(pytester.path.glob('acc*.json')))}.json"
    run(pytester, f"--acc-npu={npu}", f"--acc-bench={bench}", f"--acc-json={out}", *args)
    doc = json.loads(out.read_text())
    doc.pop("inputs")
    return doc


def entries_of(path: Path) -> list[tuple[Dump, Call]]:
    return [(d, c) for d in load_dumps(path) for c in d.calls]


def test_layer_path_cuts_at_the_first_index() -> None:
    assert layer_path("model.layers.3.mlp.experts.5.w1") == "model.layers.3"
    assert layer_path("layers.0") == "layers.0"
    assert layer_path("emb") is None and layer_path("") is None


def test_a_mix_dump_is_cut_at_its_layers_each_node_once() -> None:
    entries = entries_of(dump("pt_bug", "mix_statistics"))
    found = regions(entries, range(len(entries)))
    names = [f"{r.step}/{r.rank}/{r.name}" for r in found]
    assert "0/0/Module.layers.0.Block.forward.0" in names
    assert "0/0/Module.layers.1.Block.backward.0" in names  # its parameter gradients with it
    assert not any("#" in n for n in names)  # no layer left in pieces
    assert len(names) == len(set(names))
    covered = [i for r in found for i in r.indices]
    assert covered == list(range(len(entries)))
    layer1 = next(r for r in found if r.name == "Module.layers.1.Block.backward.0"
                  and r.step == 0)
    members = {entries[i][1].name for i in layer1.indices}
    assert "Module.layers.1.mlp.down.Linear.parameters_grad.0" in members
    assert all("layers.1." in n or not n.startswith("Module.") for n in members)


def test_an_l1_dump_is_cut_in_runs_named_by_their_ends() -> None:
    entries = entries_of(dump("pt_bug", "L1_tensor"))
    found = regions(entries, range(len(entries)), size=50)
    assert all(len(r.indices) <= 50 for r in found)
    first = found[0]
    assert first.name == (f"{entries[first.indices[0]][1].name}.."
                          f"{entries[first.indices[-1]][1].name}")
    # a new step starts a new region
    assert {(r.step, r.rank) for r in found} == {(0, 0), (1, 0)}
    assert all(len({entries[i][0].step for i in r.indices}) == 1 for r in found)


def test_a_layer_longer_than_the_size_is_numbered() -> None:
    entries = entries_of(dump("pt_bug", "mix_statistics"))
    found = regions(entries, range(len(entries)), size=4)
    pieces = [r.name for r in found if r.step == 0
              and r.name.startswith("Module.layers.0.Block.forward.0")]
    assert pieces[:3] == ["Module.layers.0.Block.forward.0", "Module.layers.0.Block.forward.0#2",
                          "Module.layers.0.Block.forward.0#3"]
    assert isinstance(found[0], Region)


@pytest.mark.parametrize("config", ["L1_tensor", "L0_tensor", "mix_statistics"])
def test_region_items_give_the_document_node_items_give(pytester: pytest.Pytester,
                                                        config: str) -> None:
    npu, bench = dump("pt_bug", config), dump("pt_fp32", config)
    per_node = document(pytester, npu, bench, "--acc-items=node")
    per_region = document(pytester, npu, bench, "--acc-items=region")
    assert per_node["verdict"] == per_region["verdict"] == "fail"
    assert per_region["compare"]["first_divergence"] == per_node["compare"]["first_divergence"]
    assert per_region["compare"]["nodes"] == per_node["compare"]["nodes"]
    assert len(per_node["compare"]["nodes"]) > 100


def test_a_failing_region_names_its_node_and_the_node_evidence(pytester: pytest.Pytester) -> None:
    result = run(pytester, f"--acc-npu={dump('pt_bug', 'L1_tensor')}",
                 f"--acc-bench={dump('pt_fp32', 'L1_tensor')}", "--acc-items=region")
    assert result.ret == 1
    out = result.stdout.str()
    result.assert_outcomes(failed=1, passed=2, xfailed=3)
    assert "FAILED accuracy::compare::0/0/" in out
    assert "the first is Tensor.__add__.5.forward." in out
    assert "Outputs of Tensor.__add__.5.forward (step 0, rank 0) are not close" in out
    assert "non-tensor argument differs" in out  # the node's own evidence, as per node


def test_k_selects_a_layer_region(pytester: pytest.Pytester) -> None:
    result = run(pytester, f"--acc-npu={dump('pt_bug', 'mix_statistics')}",
                 f"--acc-bench={dump('pt_fp32', 'mix_statistics')}", "--acc-items=region",
                 "-k", "Module.layers.1.Block.forward", "--co", "-q")
    ids = [line for line in result.stdout.lines if line.startswith("accuracy::")]
    assert ids == ["accuracy::compare::0/0/Module.layers.1.Block.forward.0",
                   "accuracy::compare::1/0/Module.layers.1.Block.forward.0"]


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated statistics pair just over the per-node limit, failing from its middle."""
    out = tmp_path_factory.mktemp("many")
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_many_nodes.py"), "--out",
                    str(out), "--nodes", str(NODE_ITEMS_UP_TO + 100), "--fail-from", "0.5"],
                   check=True, capture_output=True)
    return out


def test_auto_takes_regions_beyond_the_limit(pytester: pytest.Pytester, many: Path) -> None:
    result = run(pytester, f"--acc-npu={many / 'npu'}", f"--acc-bench={many / 'bench'}",
                 "--co", "-q")
    ids = [line for line in result.stdout.lines if line.startswith("accuracy::compare::0/0/")]
    assert 30 < len(ids) < 60  # 2100 nodes in runs of up to 64
    assert all(".." in i for i in ids)


def test_regions_under_xdist_write_the_serial_document(pytester: pytest.Pytester,
                                                       many: Path) -> None:
    pytest.importorskip("xdist")
    serial = document(pytester, many / "npu", many / "bench")
    parallel = document(pytester, many / "npu", many / "bench", "-n", "2")
    assert serial["verdict"] == "fail"
    assert len(serial["compare"]["nodes"]) == NODE_ITEMS_UP_TO + 100
    assert serial["compare"]["first_divergence"]["npu_name"]
    assert parallel == serial


@pytest.mark.parametrize("items", ["node", "region"])
@pytest.mark.parametrize(("pair", "level"), [
    (("pt_bug", "pt_fp32"), "mix_statistics"), (("ms_fp32", "pt_fp32"), "mix_statistics"),
    (("pt_bug", "pt_fp32"), "L1_tensor"), (("ms_fp32", "pt_fp32"), "L1_tensor")])
def test_a_gate_writing_nothing_gives_the_verdict_of_a_run_writing_the_document(
    pytester: pytest.Pytester, items: str, pair: tuple[str, str], level: str
) -> None:
    """Without --acc-json, --acc-report or a Markdown summary a pass (a plain one, or a
    tensor node's full compare) keeps only what the verdict reads (records.verdict_record):
    the terminal's accuracy section, the outcomes and the exit code are those of the run
    that writes every field."""
    npu, bench = (dump(side, level) for side in pair)
    args = (f"--acc-npu={npu}", f"--acc-bench={bench}", f"--acc-items={items}", "-rA")
    gate = run(pytester, *args)
    full = run(pytester, *args, f"--acc-json={pytester.path / 'acc.json'}")
    assert gate.ret == full.ret
    assert gate.parseoutcomes() == full.parseoutcomes()

    def section(result: pytest.RunResult) -> list[str]:
        lines = result.outlines
        start = next(i for i, line in enumerate(lines) if "= accuracy =" in line)
        return lines[start:-1]  # up to pytest's closing line (its time differs)

    assert section(gate) == section(full)
    # the passing pair's count of passes and the failing pair's first divergence
    assert any(line.startswith(("No divergence: all ", "First divergence: "))
               for line in section(gate))
    nodes = json.loads((pytester.path / "acc.json").read_text())["compare"]["nodes"]
    assert sum(n["status"] == "pass" for n in nodes) > 20  # plain passes among them


def test_a_gate_keeps_five_keys_of_a_tensor_pass_and_the_full_record_of_a_failure() -> None:
    """A tensor node's pass in a gate is sent (from an xdist worker) and kept as the verdict's
    five keys; its failures keep every field, for the terminal's messages."""
    from pytest_accuracy.compare import Comparison, NodeResult
    from pytest_accuracy.suite.compare_items import judge_node

    cmp = Comparison(load_dumps(dump("pt_bug", "L1_tensor")), load_dumps(dump("pt_fp32",
                                                                              "L1_tensor")))
    judged = [judge_node(cmp, i, (), detail="verdict") for i in range(len(cmp))]
    passes = [r for result, _, r in judged if type(result) is NodeResult and r["status"] == "pass"]
    failures = [r for result, _, r in judged if result.status == "fail"]
    assert passes and failures
    assert all(set(r) == {"npu_name", "step", "rank", "status", "order"} for r in passes)
    assert all("rows" in r and "reason" in r for r in failures)
    full = judge_node(cmp, passes[0]["order"], (), detail="record")[2]
    assert {k: full[k] for k in passes[0]} == passes[0]
