"""The next step written out (pytest_accuracy.nextstep): each case's msprobe configs hold what
the guide prescribes, the size comes from the failing dump's records, and names from a dump
stay data (JSON) and one line (messages). msprobe's own checks of the files:
tests/test_nextstep_msprobe.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.nextstep import (
    NodeShape,
    Side,
    Situation,
    TensorShape,
    api_step,
    loss_step,
    module_step,
    overflow_step,
    plan_next_step,
    write_next_step,
)
from pytest_accuracy.nextstep.estimate import tensor_dump
from pytest_accuracy.nextstep.from_dump import ranks_of, side_from_dump
from pytest_accuracy.nextstep.names import api_entry, k_expression, module_entry, safe_name
from pytest_accuracy.nextstep.writer import next_step_dir
from tests.helpers import dump

M_PT = "Module.model.layers.1.mlp.MLP.forward.0"
M_MS = "Cell.network.model.layers.1.mlp.MLP.forward.0"
API = "Functional.linear.3.forward"


def mlp_shapes(prefix: str, hidden: int, tokens: int = 4096, dtype: str = "bfloat16") -> tuple[
        NodeShape, ...]:
    """An L0 dump's records of an MLP (up, down, the MLP; forward and backward), as plain
    values: what a compare item hands over."""
    h, f = hidden, 4 * hidden
    x, y = TensorShape((tokens, h), dtype), TensorShape((tokens, f), dtype)
    base = f"{prefix}.model.layers.1.mlp"
    return (
        NodeShape(f"{base}.up.Linear.forward.0", (x, TensorShape((f, h), dtype), y)),
        NodeShape(f"{base}.down.Linear.forward.0", (y, TensorShape((h, f), dtype), x)),
        NodeShape(f"{base}.MLP.forward.0", (x, x)),
        NodeShape(f"{base}.down.Linear.backward.0", (x, y)),
        NodeShape(f"{base}.up.Linear.backward.0", (y, x)),
        NodeShape(f"{base}.MLP.backward.0", (x, x)),
    )


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def module_situation(hidden: int = 1024, **kw: object) -> Situation:
    npu = Side("mindspore", (M_MS,), mlp_shapes("Cell", hidden), dump="/runs/ms_l0",
               meta_bytes_per_node=2000.0)
    bench = Side("pytorch", (M_PT,), mlp_shapes("Module", hidden, dtype="float32"))
    args: dict[str, object] = {"case": "module", "item_id": f"accuracy::compare::153/0/{M_MS}",
                               "step": 153, "npu": npu, "bench": bench, "rank": 0,
                               "ranks_in_run": 8}
    args.update(kw)
    return Situation(**args)  # type: ignore[arg-type]


def test_loss_dumps_the_step_and_the_one_before_at_l0_statistics(tmp_path: Path) -> None:
    shapes = tuple(NodeShape(f"Module.layers.{i}.Block.forward.0") for i in range(40))
    npu = Side("pytorch", shapes=shapes, meta_bytes_per_node=1500.0)
    s = Situation("loss", "accuracy::loss::npu", 153, npu, Side("mindspore"), rank=None,
                  ranks_in_run=8)
    step = loss_step(s, tmp_path)
    pt, ms = (f.config for f in step.files)
    for config in (pt, ms):
        assert config["task"] == "statistics" and config["level"] == "L0"
        assert config["step"] == [152, 153] and config["rank"] == []  # every rank
        assert config["statistics"] == {"scope": [], "list": [], "data_mode": ["all"],
                                        "summary_mode": "statistics"}
        assert Path(config["dump_path"]).is_absolute()
    assert [f.name for f in step.files] == ["config_pytorch.json", "config_mindspore.json"]
    assert pt["dump_path"] != ms["dump_path"]
    # 40 nodes x 1500 B x 2 steps x 8 ranks = 0.96 MB; the bench gave no dump to count
    assert step.sizes[0][1] is not None and step.sizes[0][1].bytes == 40 * 1500 * 2 * 8
    assert step.sizes[1][1] is None
    assert step.message.startswith(
        "Next: dump steps 152 and 153 on all 8 ranks at L0 statistics (about 0.96 MB): ")
    assert shlex.split(step.message.splitlines()[-1]) == [
        "pytest", f"--acc-npu={pt['dump_path']}", f"--acc-bench={ms['dump_path']}",
        "--acc-steps-select=152,153"]
    first = loss_step(Situation("loss", "x", 0, npu), tmp_path)
    assert first.files[0].config["step"] == [0]


def test_module_dumps_the_apis_inside_it_at_mix(tmp_path: Path) -> None:
    step = module_step(module_situation(), tmp_path)
    ms, pt = (f.config for f in step.files)
    assert [f.name for f in step.files] == ["config_mindspore.json", "config_pytorch.json"]
    for config, entry in ((ms, "Cell.network.model.layers.1.mlp."),
                          (pt, "Module.model.layers.1.mlp.")):
        assert config["task"] == "tensor" and config["level"] == "mix"
        assert config["step"] == [153] and config["rank"] == [0]
        assert config["tensor"] == {"scope": [], "list": [entry], "data_mode": ["all"]}
        assert "risk_level" not in config  # a list narrows: no risk filter to lift
    first = step.message.splitlines()[0]
    assert first.startswith("Next: dump step 153 rank 0 as tensors at level mix inside "
                            "Cell.network.model.layers.1.mlp (about ")
    assert "MB NPU, " in first and "MB bench)" in first
    assert step.message.splitlines()[-1].endswith("--acc-steps-select=153 --acc-ranks=0")


def test_module_bench_name_from_the_npu_path_when_not_paired(tmp_path: Path) -> None:
    s = module_situation(bench=Side("pytorch"))
    pt = module_step(s, tmp_path).files[1].config
    assert pt["tensor"]["list"] == ["Module.network.model.layers.1.mlp."]


def test_module_region_and_parameters_grad_names(tmp_path: Path) -> None:
    names = ("Module.layers.1.mlp.up.Linear.parameters_grad.0", "Module.layers.1.mlp.MLP.forward.0",
             "Module.layers.2.attn.Attn.backward.0")
    s = Situation("module", "r", 5, Side("pytorch", names), rank=0)
    config = module_step(s, tmp_path).files[0].config
    # the region's modules, the one inside another dropped (a substring takes it already)
    assert config["tensor"]["list"] == ["Module.layers.1.mlp.", "Module.layers.2.attn."]
    assert config["rank"] == []  # one process: msprobe knows no rank, a rank list dumps nothing


def test_api_precheck_command_and_its_tensor_dump(tmp_path: Path) -> None:
    shapes = (NodeShape(API, (TensorShape((8, 512), "float32"),) * 2),
              NodeShape("Functional.linear.3.backward", (TensorShape((8, 512), "float32"),)))
    npu = Side("pytorch", (API,), shapes, dump="/runs/pt_l1",
               dump_json="/runs/pt_l1/step153/rank0/dump.json")
    step = api_step(Situation("api", "i", 153, npu, rank=0, ranks_in_run=2), tmp_path)
    (file,) = step.files
    config = file.config
    assert config["task"] == "tensor" and config["level"] == "L1"
    assert config["tensor"]["list"] == ["Functional.linear.3."]
    assert config["acc_check"] == {"white_list": ["linear"], "black_list": [],
                                   "error_data_path": "./"}
    lines = step.message.splitlines()
    assert lines[0].startswith("Next: precheck Functional.linear.3 at step 153 rank 0 (a tensor "
                               "dump of its inputs and outputs: about 0.")
    assert shlex.split(lines[-1]) == ["pytest", "--acc-npu=/runs/pt_l1", "--acc-precheck",
                                      "--acc-steps-select=153", "--acc-ranks=0", "-k",
                                      "Functional.linear.3."]
    assert shlex.split(lines[-2]) == [
        "msprobe", "acc_check", "-api_info", "/runs/pt_l1/step153/rank0/dump.json", "-config",
        str(step.folder / "config_pytorch.json"), "-o", str(step.folder / "acc_check")]


def test_api_on_mindspore_has_no_acc_check_section(tmp_path: Path) -> None:
    npu = Side("mindspore", ("MintFunctional.linear.0.forward",))
    step = api_step(Situation("api", "i", 0, npu), tmp_path)
    assert "acc_check" not in step.files[0].config
    assert "-config" not in step.message.splitlines()[-2]
    assert step.files[0].config["tensor"]["list"] == ["MintFunctional.linear.0."]


def test_overflow_in_a_module_pytorch(tmp_path: Path) -> None:
    npu = Side("pytorch", ("Module.layers.1.mlp.MLP.forward.0",), mlp_shapes("Module", 64))
    step = overflow_step(Situation("overflow", "o", 7, npu, rank=3, ranks_in_run=8), tmp_path)
    main, nan = step.files
    assert main.config["task"] == "statistics" and main.config["level"] == "mix"
    assert main.config["statistics"]["list"] == ["Module.layers.1.mlp."]
    assert (main.config["step"], main.config["rank"]) == ([7], [3])
    # msprobe 26.2.0 has no overflow_check task: nan_check (Ascend) flags each API's overflow
    assert nan.name == "config_pytorch_nan_check.json"
    assert nan.config["task"] == "nan_check" and nan.config["level"] == "L1"
    assert (nan.config["step"], nan.config["rank"]) == ([7], [3])
    assert nan.config["nan_check"] == {"scope": [], "list": [], "data_mode": ["all"]}
    assert nan.config["risk_level"] == "ALL"
    lines = step.message.splitlines()
    assert shlex.split(lines[-2])[:3] == ["msprobe", "overflow_check", "-i"]
    assert shlex.split(lines[-1])[0] == "pytest"


def test_overflow_at_an_api_mindspore(tmp_path: Path) -> None:
    npu = Side("mindspore", ("Mint.matmul.2.forward",),
               (NodeShape("Mint.matmul.2.forward", (TensorShape((64, 64), "Float16"),) * 3),))
    step = overflow_step(Situation("overflow", "o", 7, npu), tmp_path)
    (main,) = step.files  # no nan_check for MindSpore
    assert main.config["task"] == "tensor" and main.config["level"] == "L1"
    assert main.config["tensor"]["list"] == ["Mint.matmul.2."]
    lines = step.message.splitlines()
    assert lines[1] == "  export MS_ASCEND_CHECK_OVERFLOW_MODE=INFNAN_MODE"
    assert "--acc-precheck" in lines[-1]


def test_size_scales_with_the_module() -> None:
    small = module_situation(hidden=512)
    big = module_situation(hidden=2048)
    s_est = tensor_dump(small.npu, small.npu.shapes, leaf_apis=True)
    b_est = tensor_dump(big.npu, big.npu.shapes, leaf_apis=True)
    assert s_est is not None and b_est is not None

    def data(hidden: int) -> int:  # every tensor, the leaf Linears' twice (their linear APIs)
        nodes = mlp_shapes("Cell", hidden)
        leaves = [n for n in nodes if ".MLP." not in n.name]
        return sum(2 * _numel(t.shape) for n in (*nodes, *leaves) for t in n.tensors)

    # the same files and nodes: the difference is the data, bf16 bytes of the shapes given
    assert b_est.bytes - s_est.bytes == data(2048) - data(512)
    assert b_est.bytes > 4 * s_est.bytes
    # bf16 NPU against fp32 bench: the bench dump is about twice as big
    step = module_step(small, "out")
    npu_size, bench_size = (e.bytes for _, e in step.sizes if e is not None)
    assert 1.8 < bench_size / npu_size < 2.1
    # leaf modules stand for their APIs: up and down again, forward and backward
    assert s_est.nodes == 6 + 4


def test_size_counts_the_nodes_of_an_l0_step(tmp_path: Path) -> None:
    def size(nodes: int) -> int:
        shapes = tuple(NodeShape(f"Module.layers.{i}.Block.forward.0") for i in range(nodes))
        est = loss_step(Situation("loss", "x", 3, Side("pytorch", shapes=shapes)), tmp_path)
        return est.sizes[0][1].bytes  # type: ignore[union-attr]

    assert size(200) == 2 * size(100)


def test_size_of_an_api_only_step_is_an_upper_bound(tmp_path: Path) -> None:
    shapes = (NodeShape(API), NodeShape("Functional.silu.0.forward"))
    step = loss_step(Situation("loss", "x", 3, Side("pytorch", shapes=shapes)), tmp_path)
    assert "(at most" in step.message.splitlines()[0]
    unknown = loss_step(Situation("loss", "x", 3, Side("pytorch")), tmp_path)
    assert "(size unknown: the failing dump recorded none of it)" in unknown.message


HOSTILE = 'Module.la"yers\n  pytest --acc-npu=/evil\n.1\x1b[2J\\.m\'lp.MLP.forward.0'
HOSTILE_API = 'Functional.li"near\n  pytest --acc-npu=/evil\n\x1b[2J\\\'.3.forward'


def test_hostile_names_stay_data_and_one_line(tmp_path: Path) -> None:
    for case in ("module", "api", "overflow"):
        name = HOSTILE_API if case == "api" else HOSTILE
        npu = Side("pytorch", (name,), dump="/runs/a\nb")
        s = Situation(case, f"id\n{HOSTILE}\n{case}", 1, npu,
                      Side("pytorch") if case == "module" else None)
        message = write_next_step(s, tmp_path)
        lines = message.splitlines()
        assert lines[0].startswith("Next: ") and all(x.startswith("  ") for x in lines[1:])
        assert not any(x.lstrip().startswith("pytest --acc-npu=/evil") for x in lines)
        assert "\x1b" not in message and "\\x1b" in message
        folder = next_step_dir(tmp_path, s.item_id)
        assert folder.parent == tmp_path / "next_step" and "\n" not in folder.name
        for path in folder.glob("config_*.json"):
            config = json.loads(path.read_text())
            section = config[config["task"]]
            assert path.read_text().isascii()
            if config["task"] != "nan_check":  # the name, as it was, read back from JSON
                assert section["list"] == [module_entry(name) if case != "api" else
                                           api_entry(name)]
    assert api_entry(HOSTILE_API) == HOSTILE_API[:-len("forward")]


def test_k_expression_and_names() -> None:
    assert k_expression("Functional.linear.3.") == "Functional.linear.3."
    assert k_expression("Tensor.__add__.1.") == "Tensor.__add__.1."
    assert k_expression("a b(not)c") == "a and b and c"
    assert api_entry("Primitive.dense.Dense.3.backward") == "Primitive.dense.Dense.3."
    assert module_entry("Cell.layers.0.Block.forward.0", "pytorch") == "Module.layers.0."
    assert module_entry("Module.LM.forward.0") == "Module."  # the root: the whole model
    assert safe_name("accuracy::compare::0/0/M.x") == "accuracy_compare_0_0_M.x-" + \
        safe_name("accuracy::compare::0/0/M.x").rsplit("-", 1)[1]
    assert safe_name("../..") != safe_name("..") and not safe_name("../..").startswith(".")


def test_writer_writes_atomically_and_again(tmp_path: Path) -> None:
    s = module_situation()
    first = write_next_step(s, tmp_path)
    folder = next_step_dir(tmp_path, s.item_id)
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["config_mindspore.json", "config_pytorch.json", "next_step.txt"]
    assert (folder / "next_step.txt").read_text() == first + "\n"
    (folder / "config_pytorch.json").unlink()
    (folder / "config_pytorch.json").symlink_to(tmp_path / "elsewhere.json")
    write_next_step(s, tmp_path)  # a planted link is replaced, never written through
    assert not (tmp_path / "elsewhere.json").exists()
    assert not (folder / "config_pytorch.json").is_symlink()


def test_a_path_msprobe_refuses_is_said(tmp_path: Path) -> None:
    message = write_next_step(module_situation(), tmp_path / "my runs")
    assert message.splitlines()[1].startswith("  (msprobe 26.2.0 refuses these paths")


def test_side_from_a_real_l0_dump() -> None:
    dumps = load_dumps(dump("pt_fp32", "L0_tensor"))
    one = dumps.dumps[(0, 0)]
    side = side_from_dump(one, ["Module.layers.1.mlp.MLP.forward.0"], given="pt_l0")
    names = {n.name for n in side.shapes}
    assert "Module.layers.1.mlp.up.Linear.forward.0" in names
    assert "Module.layers.1.mlp.down.Linear.parameters_grad.0" in names
    assert not any("layers.0." in n or ".attn." in n for n in names)
    assert side.meta_bytes_per_node and side.dump_json.endswith("dump.json")
    assert ranks_of(dumps) == 1
    whole = side_from_dump(one, whole_step=True)
    assert len(whole.shapes) == len(one)
    s = Situation("module", "x", 0, side, rank=0)
    est = plan_next_step(s, "out").sizes[0][1]
    data = sum(p.stat().st_size for p in
               Path(side.dump_json).parent.glob("dump_tensor_data/Module.layers.1.mlp.*"))
    assert est is not None and est.bytes > data  # the modules' own tensors, and the APIs'


def test_side_from_a_mix_dump_takes_the_apis_inside() -> None:
    one = load_dumps(dump("pt_fp32", "mix_statistics")).dumps[(0, 0)]
    side = side_from_dump(one, ["Module.layers.1.mlp.MLP.forward.0"])
    names = {n.name for n in side.shapes}
    assert any(n.startswith("Functional.linear.") for n in names)
    assert any(n.startswith("Functional.silu.") or "silu" in n for n in names)


def test_bad_situations_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="API call names"):
        api_step(Situation("api", "x", 1, Side("pytorch", (M_PT,))), tmp_path)
    with pytest.raises(ValueError, match="failing node"):
        Situation("module", "x", 1, Side("pytorch"))
    with pytest.raises(ValueError, match="step"):
        Situation("loss", "x", -1, Side("pytorch"))
    with pytest.raises(ValueError, match="framework"):
        Side("tensorflow")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tuple"):
        Side("pytorch", M_PT)  # type: ignore[arg-type]
