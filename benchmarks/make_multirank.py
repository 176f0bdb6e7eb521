"""Multi-rank msprobe dumps (gloo, CPU): tensor- and data-parallel tiny MLP, golden and buggy runs.

Run with torch and mindstudio-probe installed (the dumps in tests/data/multirank/ were made with
torch 2.13.0+cpu and mindstudio-probe 26.2.0):

    python benchmarks/make_multirank.py tests/data/multirank

Model, per token: ``x -> RMSNorm -> fc1 (column-parallel) -> silu -> fc2 (row-parallel) ->
all-reduce over the TP group -> + x -> head -> cross_entropy``. D=16, F=32, V=8; global batch 4
sequences of 4 tokens, split over the DP ranks. Ranks are numbered TP-major as in Megatron:
``rank = dp * tp + tp_rank``. The full weights come from one seed on every rank, and each TP rank
keeps its shard, so TP=1 and TP=2 runs start from the same model. Gradients are averaged over the
DP group after ``debugger.stop()`` (outside the dump window), then SGD steps. Two steps are dumped
(msprobe level L1, task tensor).

Runs written under OUT:
  golden_tp2dp2/  4 ranks, TP=2 x DP=2, RMSNorm eps 1e-6 everywhere (bench)
  bug_tp2dp2/     the same, but rank 2 (dp 1, tp 0) runs its RMSNorm with eps 1e-5 (NPU)
  golden_tp1dp2/  2 ranks, TP=1 x DP=2 (no tensor parallelism): a bench sharded differently
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

D, FF, V, GLOBAL_BATCH, T, STEPS, LR = 16, 32, 8, 4, 4, 2, 0.5
BUG_RANK, BUG_EPS, EPS = 2, 1e-5, 1e-6
RUNS = {"golden_tp2dp2": (2, 2, False), "bug_tp2dp2": (2, 2, True), "golden_tp1dp2": (1, 2, False)}


class CopyToTP(torch.autograd.Function):
    """Identity forward; the input gradient is summed over the TP group (Megatron's ``f``)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTP(torch.autograd.Function):
    """Partial sums of the row-parallel Linear summed over the TP group (Megatron's ``g``)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def full_weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"norm": torch.ones(D),
            "fc1": torch.randn(FF, D, generator=g) * 0.2,
            "fc2": torch.randn(D, FF, generator=g) * 0.2,
            "head": torch.randn(V, D, generator=g) * 0.2}


def global_batch() -> tuple[torch.Tensor, torch.Tensor]:
    # Small activations (like embeddings at init) so an eps of 1e-5 vs 1e-6 shows in the norm.
    g = torch.Generator().manual_seed(1)
    return (torch.randn(GLOBAL_BATCH, T, D, generator=g) * 0.01,
            torch.randint(0, V, (GLOBAL_BATCH, T), generator=g))


class ShardedMLP(torch.nn.Module):
    def __init__(self, tp: int, tp_rank: int, group: Any, eps: float) -> None:
        super().__init__()
        w = full_weights()
        cols = slice(tp_rank * FF // tp, (tp_rank + 1) * FF // tp)
        self.norm = torch.nn.Parameter(w["norm"])
        self.fc1 = torch.nn.Parameter(w["fc1"][cols].clone())     # column-parallel: rows of W1
        self.fc2 = torch.nn.Parameter(w["fc2"][:, cols].clone())  # row-parallel: columns of W2
        self.head = torch.nn.Parameter(w["head"])
        self.tp, self.group, self.eps = tp, group, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm
        if self.tp > 1:
            h = CopyToTP.apply(h, self.group)
        h = F.linear(F.silu(F.linear(h, self.fc1)), self.fc2)
        if self.tp > 1:
            h = ReduceFromTP.apply(h, self.group)
        return F.linear(x + h, self.head)


def groups(world: int, tp: int) -> tuple[Any, Any]:
    """This rank's TP and DP groups; every rank creates every group, in the same order."""
    rank, mine_tp, mine_dp = dist.get_rank(), None, None
    for d in range(world // tp):
        ranks = list(range(d * tp, (d + 1) * tp))
        group = dist.new_group(ranks) if tp > 1 else None
        if rank in ranks:
            mine_tp = group
    for t in range(tp):
        ranks = list(range(t, world, tp))
        group = dist.new_group(ranks)
        if rank in ranks:
            mine_dp = group
    return mine_tp, mine_dp


def worker(rank: int, world: int, tp: int, bug: bool, dump_path: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    tp_group, dp_group = groups(world, tp)
    dp_rank, tp_rank, dp = rank // tp, rank % tp, world // tp
    eps = BUG_EPS if bug and rank == BUG_RANK else EPS
    model = ShardedMLP(tp, tp_rank, tp_group, eps)
    x, y = global_batch()
    per = GLOBAL_BATCH // dp
    x, y = x[dp_rank * per:(dp_rank + 1) * per], y[dp_rank * per:(dp_rank + 1) * per]
    from msprobe.pytorch import PrecisionDebugger

    cfg = {"task": "tensor", "dump_path": dump_path, "rank": [], "step": [], "level": "L1",
           "async_dump": False, "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
    cfg_path = Path(dump_path).parent / f".cfg_{rank}.json"
    cfg_path.write_text(json.dumps(cfg))
    debugger = PrecisionDebugger(config_path=str(cfg_path))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        debugger.start(model)
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        debugger.stop()
        debugger.step()
        for p in model.parameters():  # data parallel: average gradients (outside the dump)
            assert p.grad is not None
            dist.all_reduce(p.grad, group=dp_group)
            p.grad /= dp
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.8f}", flush=True)
    cfg_path.unlink()
    dist.barrier()
    dist.destroy_process_group()


def make_debugger(config: dict[str, Any], dump_path: str, tag: str) -> Any:
    """msprobe's PrecisionDebugger for one level's ``config`` dumping into ``dump_path``, all
    steps and ranks (its config file, ``.cfg_<tag>.json``, is read at start and removed)."""
    from msprobe.pytorch import PrecisionDebugger

    cfg = dict(config, dump_path=dump_path, rank=[], step=[], async_dump=False)
    cfg_path = Path(f".cfg_{tag}.json")
    cfg_path.write_text(json.dumps(cfg))
    debugger = PrecisionDebugger(config_path=str(cfg_path))
    cfg_path.unlink()
    return debugger


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.chdir(args.out)  # relative dump paths: no machine path ends up in dump.json
    for name, (tp, dp, bug) in RUNS.items():
        shutil.rmtree(name, ignore_errors=True)
        Path(name).mkdir()
        mp.spawn(worker, args=(tp * dp, tp, bug, name, free_port()), nprocs=tp * dp)
    print("written", sorted(RUNS), "under", args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
