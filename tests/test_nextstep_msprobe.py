"""msprobe 26.2.0 itself accepts every config the next step writes (its PrecisionDebugger's own
checks, in a child process per framework), refuses what the guide's older wording asks for,
and, run on a small model, dumps exactly what the next step said it would, about as big.

Needs mindstudio-probe (``pip install mindstudio-probe==26.2.0``; ``--no-deps`` is enough
for these checks next to torch) and torch; the MindSpore half needs a python with mindspore
2.10 and msprobe (``PYTEST_ACCURACY_MS_PYTHON``), skipped with the reason otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("msprobe", reason="mindstudio-probe is not installed: "
                    "pip install mindstudio-probe==26.2.0")
pytest.importorskip("torch", reason="msprobe's PyTorch config checks import torch")

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.nextstep import (
    NextStep,
    NodeShape,
    Side,
    Situation,
    TensorShape,
    msprobe_check,
    plan_next_step,
    write_step,
)
from pytest_accuracy.nextstep.from_dump import side_from_dump

CHECKER = Path(msprobe_check.__file__)
MS_VENV = Path("/work/bench/msvenv/bin/python")  # the development machine's MindSpore venv
X = TensorShape((16, 64), "float32")


def mindspore_python() -> str | None:
    """A python with mindspore and msprobe: $PYTEST_ACCURACY_MS_PYTHON, this one, or MS_VENV."""
    if os.environ.get("PYTEST_ACCURACY_MS_PYTHON"):
        return os.environ["PYTEST_ACCURACY_MS_PYTHON"]
    if importlib.util.find_spec("mindspore") is not None:
        return sys.executable
    return str(MS_VENV) if MS_VENV.exists() else None


def start_checker(python: str, framework: str, args: list[Path | str]) -> subprocess.Popen[str]:
    """msprobe's checks in a child (importing msprobe takes ~10 s: the children run at once)."""
    first = next(Path(a) for a in args if not str(a).startswith("--"))
    return subprocess.Popen([python, str(CHECKER), framework, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=first.parent)


def verdicts_of(proc: subprocess.Popen[str]) -> dict[str, str]:
    out, err = proc.communicate(timeout=300)
    lines = [x for x in out.splitlines() if x.startswith("MSPROBE_CHECK ")]
    assert lines, f"the checker printed no verdict:\n{out[-2000:]}\n{err[-2000:]}"
    return dict(json.loads(lines[-1].split(" ", 1)[1]))


def situations(npu_fw: str, bench_fw: str) -> list[Situation]:
    """One situation of each case, NPU run on ``npu_fw``, bench on ``bench_fw``."""
    pre = {"pytorch": "Module", "mindspore": "Cell"}
    mod, api = f"{pre[npu_fw]}.layers.1.mlp.MLP.forward.0", {
        "pytorch": "Functional.linear.3.forward", "mindspore": "MintFunctional.linear.3.forward"}
    shapes = (NodeShape(mod, (X, X)),)
    npu: Any = {"framework": npu_fw, "meta_bytes_per_node": 900.0}
    bench = Side(bench_fw)  # type: ignore[arg-type]
    return [
        Situation("loss", f"loss {npu_fw}", 153, Side(**npu, shapes=shapes), bench, rank=0,
                  ranks_in_run=8),
        Situation("module", f"module {npu_fw}", 153, Side(**npu, names=(mod,), shapes=shapes),
                  bench, rank=0, ranks_in_run=8),
        Situation("api", f"api {npu_fw}", 153, Side(**npu, names=(api[npu_fw],)), rank=1,
                  ranks_in_run=8),
        Situation("overflow", f"overflow module {npu_fw}", 153, Side(**npu, names=(mod,)),
                  rank=2, ranks_in_run=8),
        Situation("overflow", f"overflow api {npu_fw}", 153, Side(**npu, names=(api[npu_fw],)),
                  rank=2, ranks_in_run=8),
    ]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> list[NextStep]:
    root = tmp_path_factory.mktemp("nextstep")
    steps = [plan_next_step(s, root / s.case / s.item_id.replace(" ", "_"))
             for pair in (("pytorch", "mindspore"), ("mindspore", "pytorch"))
             for s in situations(*pair)]
    for step in steps:
        write_step(step)
    return steps


REFUSED: dict[str, dict[str, Any]] = {
    "task": {"task": "overflow_check"},  # the guide's older task: gone in 26.2.0
    "scope": {"level": "L1", "tensor": {"scope": ["Module.layers.1.mlp.MLP.forward.0"] * 2}},
    "data_mode": {"tensor": {"data_mode": ["all", "input"]}},
}


def refused_configs(root: Path) -> dict[str, Path]:
    """Configs msprobe must refuse: the checker is not vacuous."""
    paths = {}
    for why, change in REFUSED.items():
        config: dict[str, Any] = {"task": "tensor", "dump_path": str(root / "d"), "rank": [],
                                  "step": [0], "level": "mix",
                                  "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
        config.update(change)
        paths[why] = root / f"refused_{why}.json"
        paths[why].write_text(json.dumps(config))
    return paths


@pytest.fixture(scope="module")
def verdicts(written: list[NextStep], tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, dict[str, str]]:
    """Every check, one child a framework: plain, NPU assumed (nan_check), acc_check."""
    refused = list(refused_configs(tmp_path_factory.mktemp("refused")).values())
    tensor = [p for p in configs(written, "pytorch", "tensor") if "acc_check" in p.read_text()]
    jobs = {"pytorch": start_checker(sys.executable, "pytorch", [
        *configs(written, "pytorch"), *refused,
        "--assume-npu", *configs(written, "pytorch", "nan_check"), "--acc-check", *tensor])}
    python = mindspore_python()
    if python is not None:
        jobs["mindspore"] = start_checker(python, "mindspore", [*configs(written, "mindspore")])
    return {name: verdicts_of(proc) for name, proc in jobs.items()}


def configs(steps: list[NextStep], framework: str, task: str | None = None) -> list[Path]:
    return [step.path(f) for step in steps for f in step.files if f.framework == framework
            and (task is None or f.config["task"] == task)]


def expected(path: Path) -> str:
    config = json.loads(path.read_text())
    return f"ok: {config['task']} {config['level']}"


def test_msprobe_pytorch_accepts_every_config(written: list[NextStep],
                                               verdicts: dict[str, dict[str, str]]) -> None:
    paths = [p for p in configs(written, "pytorch") if "nan_check" not in p.name]
    assert len(paths) == 7  # NPU: loss, module, api, overflow x2 (module, api); bench: 2
    assert {p: verdicts["pytorch"][str(p)] for p in paths} == {p: expected(p) for p in paths}
    assert len(verdicts["pytorch"]) == 7 + 2 + len(REFUSED) + 2 + 1  # each checked once


def test_msprobe_pytorch_nan_check_wants_only_an_npu(written: list[NextStep],
                                                     verdicts: dict[str, dict[str, str]]) -> None:
    paths = configs(written, "pytorch", "nan_check")
    assert len(paths) == 2
    for path in paths:  # this machine has no torch_npu; with one, msprobe takes the rest
        assert "only supported in NPU environments" in verdicts["pytorch"][str(path)]
        assert verdicts["pytorch"][f"{path} --assume-npu"] == "ok: nan_check L1"


def test_msprobe_acc_check_reads_the_white_list(verdicts: dict[str, dict[str, str]]) -> None:
    found = [v for k, v in verdicts["pytorch"].items() if k.endswith(" --acc-check")]
    assert found == ["ok: white_list ['linear']"]


def test_msprobe_mindspore_accepts_every_config(written: list[NextStep],
                                                verdicts: dict[str, dict[str, str]]) -> None:
    if "mindspore" not in verdicts:
        pytest.skip(f"no python with mindspore and msprobe: set PYTEST_ACCURACY_MS_PYTHON "
                    f"(none here, nor {MS_VENV})")
    paths = configs(written, "mindspore")
    assert len(paths) == 7  # the same on MindSpore (no nan_check there)
    found = verdicts["mindspore"]
    if any("No module named" in v for v in found.values()):
        pytest.skip(f"that python lacks mindspore or msprobe: {next(iter(found.values()))}")
    assert found == {str(p): expected(p) for p in paths}


@pytest.mark.parametrize("why", list(REFUSED))
def test_msprobe_refuses_what_the_checker_must_catch(why: str,
                                                      verdicts: dict[str, dict[str, str]]) -> None:
    (verdict,) = [v for p, v in verdicts["pytorch"].items() if p.endswith(f"refused_{why}.json")]
    assert verdict.startswith("refused:"), verdict


PT_MODEL = r'''
import sys
import torch, torch.nn as nn, torch.nn.functional as F
D, T = 128, 64
class MLP(nn.Module):
    def __init__(self):
        super().__init__(); self.up = nn.Linear(D, 4 * D); self.down = nn.Linear(4 * D, D)
    def forward(self, x): return self.down(F.silu(self.up(x)))
class Block(nn.Module):
    def __init__(self):
        super().__init__(); self.ln = nn.LayerNorm(D); self.mlp = MLP()
    def forward(self, x): return x + self.mlp(self.ln(x))
class LM(nn.Module):
    def __init__(self):
        super().__init__(); self.layers = nn.ModuleList([Block() for _ in range(4)])
    def forward(self, x):
        for layer in self.layers: x = layer(x)
        return x
from msprobe.pytorch import PrecisionDebugger
debugger = PrecisionDebugger(config_path=sys.argv[1])
torch.manual_seed(0)
model = LM(); opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(int(sys.argv[2])):
    debugger.start(model)
    model(torch.randn(2, T, D)).pow(2).mean().backward(); opt.step(); opt.zero_grad()
    debugger.stop(); debugger.step()
'''

MS_MODEL = r'''
import sys
import numpy as np
import mindspore as ms
from mindspore import mint, nn, ops
mint.norm = ops.norm  # msprobe's statistics call mint.norm: no CPU kernel in MindSpore 2.10
ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
D, T = 64, 16
class MLP(nn.Cell):
    def __init__(self):
        super().__init__(); self.up = mint.nn.Linear(D, 4 * D); self.down = mint.nn.Linear(4 * D, D)
    def construct(self, x): return self.down(mint.nn.functional.silu(self.up(x)))
class Block(nn.Cell):
    def __init__(self):
        super().__init__(); self.ln = nn.LayerNorm((D,)); self.mlp = MLP()
    def construct(self, x): return x + self.mlp(self.ln(x))
class LM(nn.Cell):
    def __init__(self):
        super().__init__(); self.layers = nn.CellList([Block() for _ in range(4)])
    def construct(self, x):
        for layer in self.layers: x = layer(x)
        return x.sum()
from msprobe.mindspore import PrecisionDebugger
debugger = PrecisionDebugger(config_path=sys.argv[1])
model = LM(); grad = ms.grad(model, grad_position=None, weights=model.trainable_params())
for _ in range(int(sys.argv[2])):
    debugger.start(model)
    grad(ms.Tensor(np.random.default_rng(0).standard_normal((2, T, D)).astype(np.float32)))
    debugger.stop(); debugger.step()
'''


def run_model(python: str, source: str, step: NextStep, steps: int) -> Path:
    """Run the small model under the step's first config; its dump_path."""
    config = step.files[0]
    script = step.folder / "model.py"
    script.write_text(source)
    proc = subprocess.run([python, str(script), str(step.path(config)), str(steps)],
                          capture_output=True, text=True, timeout=300, cwd=step.folder)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return Path(config.config["dump_path"])


def dumped(root: Path, step: int) -> list[str]:
    (path,) = root.glob(f"step{step}/*/dump.json")
    return list(json.loads(path.read_text())["data"])


def folder_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


@pytest.mark.slow
def test_the_guides_loop_on_pytorch(tmp_path: Path) -> None:
    """loss at step 1 -> L0 statistics of steps 0 and 1 -> mix inside layers.1.mlp (as big as
    estimated) -> one linear call at L1 -> our precheck of it, each config run by msprobe."""
    loss = plan_next_step(Situation("loss", "loss", 1, Side("pytorch")), tmp_path / "1")
    write_step(loss)
    l0 = run_model(sys.executable, PT_MODEL, loss, 2)
    assert all(n.startswith("Module.") for n in dumped(l0, 0) + dumped(l0, 1))
    module = "Module.layers.1.mlp.MLP.forward.0"
    npu = side_from_dump(load_dumps(l0).dumps[(1, 0)], [module])
    inside = plan_next_step(Situation("module", "m", 1, npu, rank=0), tmp_path / "2")
    write_step(inside)
    mix = run_model(sys.executable, PT_MODEL, inside, 2)
    names = dumped(mix, 1)
    assert {"Functional.silu.1.forward", "Functional.linear.2.backward", module} <= set(names)
    assert all(".layers.1.mlp." in n for n in names if n.startswith("Module."))
    assert len(names) == 14  # MLP, up, down: forward, backward, 2 parameters_grad; 4 APIs x2
    estimate = inside.sizes[0][1]
    assert estimate is not None and 0.6 < estimate.bytes / folder_bytes(mix) < 1.2
    api = side_from_dump(load_dumps(mix).dumps[(1, 0)], ["Functional.linear.2.forward"],
                         given=str(mix))
    check = plan_next_step(Situation("api", "a", 1, api, rank=0), tmp_path / "3")
    write_step(check)
    assert dumped(run_model(sys.executable, PT_MODEL, check, 2), 1) == [
        "Functional.linear.2.forward", "Functional.linear.2.backward"]
    argv = shlex.split(check.message.splitlines()[-1])
    proc = subprocess.run([sys.executable, "-m", *argv, "-p", "no:cacheprovider", "-q"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|skipped|failed|error)",
                                                     proc.stdout))
    # the forward and backward item of that one call (the backward of a PyTorch linear may
    # skip: its dumped gradients are of an internal op), nothing failing
    assert counts.get("passed", 0) >= 1 and counts.get("passed", 0) + counts.get(
        "skipped", 0) == 2 and not counts.get("failed") and not counts.get("error"), proc.stdout


@pytest.mark.slow
def test_mix_inside_a_cell_on_mindspore(tmp_path: Path) -> None:
    python = mindspore_python()
    if python is None:
        pytest.skip(f"no python with mindspore and msprobe: set PYTEST_ACCURACY_MS_PYTHON "
                    f"(none here, nor {MS_VENV})")
    npu = Side("mindspore", ("Cell.layers.1.mlp.MLP.forward.0",))
    step = plan_next_step(Situation("module", "m", 1, npu), tmp_path)
    write_step(step)
    names = dumped(run_model(python, MS_MODEL, step, 2), 1)
    assert "Cell.layers.1.mlp.MLP.backward.0" in names
    assert any(n.startswith("MintFunctional.silu.") for n in names)
    assert all(".layers.1.mlp." in n for n in names if n.startswith("Cell."))


def _off_silu(where: Path) -> Path:
    """The clean PyTorch L1 tensor dump with one silu output 1 % off: its precheck fails."""
    import shutil

    import torch

    from tests.helpers import dump

    npu = where / "pt_npu"
    shutil.copytree(dump("pt_fp32", "L1_tensor"), npu)
    target = next(npu.glob("step0/*/dump_tensor_data/Functional.silu.0.forward.output.0.pt"))
    torch.save(torch.load(target, weights_only=True) * 1.01, target)
    return npu


def test_msprobe_accepts_what_failing_overflow_monitor_and_precheck_items_write(
        pytester: pytest.Pytester) -> None:
    """The configs the items themselves wrote into --acc-report (not planned here): an
    overflow's (plain, and nan_check on an NPU), a monitor parting's (NPU and bench) and a
    precheck miss's (with its acc_check white list)."""
    from tests.test_next_step_items import MONITOR, poisoned

    report = pytester.path / "report"
    for args in ([f"--acc-npu={poisoned(pytester.path)}"],
                 [f"--acc-npu-monitor={MONITOR / 'bug'}",
                  f"--acc-bench-monitor={MONITOR / 'bench'}"],
                 [f"--acc-npu={_off_silu(pytester.path)}", "--acc-precheck", "-k", "silu.0."]):
        assert pytester.runpytest(*args, f"--acc-report={report}", "-p",
                                  "no:cacheprovider").ret == pytest.ExitCode.TESTS_FAILED
    written = sorted(report.glob("next_step/*/config_*.json"))
    nan = [p for p in written if "nan_check" in p.name]
    plain = [p for p in written if p not in nan]
    assert len(plain) == 4 and len(nan) == 1
    precheck = [p for p in plain if "precheck" in p.parent.name]
    assert json.loads(precheck[0].read_text())["tensor"]["list"] == ["Functional.silu.0."]
    found = verdicts_of(start_checker(sys.executable, "pytorch", [
        *plain, "--assume-npu", *nan, "--acc-check", *precheck]))
    assert {str(p): found[str(p)] for p in plain} == {str(p): expected(p) for p in plain}
    assert found[f"{nan[0]} --assume-npu"] == "ok: nan_check L1"
    assert found[f"{precheck[0]} --acc-check"] == "ok: white_list ['silu']"
