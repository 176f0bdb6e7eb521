"""Multi-rank msprobe dumps (gloo, CPU) for a DP replica check without a bench: TP=2 x DP=2.

Run with torch and mindstudio-probe installed (tests/data/real/dp_replicas/ was made with
torch 2.13.0+cpu and mindstudio-probe 26.2.0):

    python benchmarks/make_dp_replicas.py tests/data/real/dp_replicas

Model: the same math as make_multirank's ``ShardedMLP``, built from submodules so that msprobe's
module dumps (L0, mix) record each module's ``parameters`` and ``parameters_grad``::

    x -> norm (RMSNorm, weight [D], eps 1e-6)
      -> fc1 (ColumnParallelLinear: CopyToTP, then rows [t*F/2, (t+1)*F/2) of W1) -> silu
      -> fc2 (RowParallelLinear: columns of W2, partial sums all-reduced over TP inside it)
      -> + x -> head (nn.Linear(D, V, bias=False), replicated) -> cross_entropy (outside)

D=16, F=32, V=8; global batch 4 sequences x 4 tokens, 2 sequences per DP rank; 3 steps of SGD
(lr 0.5). Ranks are TP-major as in Megatron, ``rank = dp * tp + tp_rank``: TP groups {0,1},
{2,3}; DP groups {0,2}, {1,3}. Ranks of one DP group hold the same TP shard, so their parameters
must be bit-identical at every step. Every rank builds the full weights from one seed.

Inside the dump window (after ``loss.backward()``, before ``debugger.stop()``) every gradient is
summed over the DP group with ``dist.all_reduce`` and divided by dp (``/=``, which msprobe does
not hook), so L1 and mix record those all-reduces; SGD steps after ``debugger.stop()``.

Runs (OUT/<run>/<level>/step<k>/rank<r>/ as msprobe writes them; levels L0 and L1 task tensor,
mix task statistics):
  golden/         correct: DP replicas identical at every step
  grad_unscaled/  rank 3 (dp 1, tp 1) does not divide fc2's gradient by dp after the DP
                  all-reduce, so its fc2 step is twice its replica's (rank 1): fc2 weights differ
                  from step 1 on
  init_drift/     rank 2 (dp 1, tp 0) initialises head's weight from another seed (a missed
                  broadcast of the initial parameters): differs from rank 0's at step 0
``losses.json`` (per run, level and rank) is written by the script; stack.json is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_multirank import (
    CopyToTP,
    ReduceFromTP,
    free_port,
    full_weights,
    global_batch,
    groups,
    make_debugger,
)

D, FF, V, GLOBAL_BATCH, STEPS, LR, EPS = 16, 32, 8, 4, 3, 0.5, 1e-6
TP, DP = 2, 2
DRIFT_SEED = 7
RUNS: dict[str, tuple[int | None, str | None]] = {  # run -> (bug rank, bug)
    "golden": (None, None), "grad_unscaled": (3, "grad_unscaled"),
    "init_drift": (2, "init_drift")}
LEVELS = {
    "L0": {"task": "tensor", "level": "L0",
           "tensor": {"scope": [], "list": [], "data_mode": ["all"]}},
    "mix": {"task": "statistics", "level": "mix",
            "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                           "summary_mode": "statistics"}},
    "L1": {"task": "tensor", "level": "L1",
           "tensor": {"scope": [], "list": [], "data_mode": ["all"]}},
}


class RMSNorm(torch.nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float = EPS) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight.clone())
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ColumnParallelLinear(torch.nn.Module):
    """Rows of W [O, I]; the input gradient is summed over TP (CopyToTP); output sharded."""

    def __init__(self, shard: torch.Tensor, group: Any) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(shard.clone())
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(CopyToTP.apply(x, self.group), self.weight)


class RowParallelLinear(torch.nn.Module):
    """Columns of W [O, I]; the partial sums are all-reduced over TP (ReduceFromTP)."""

    def __init__(self, shard: torch.Tensor, group: Any) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(shard.clone())
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ReduceFromTP.apply(F.linear(x, self.weight), self.group)


class ShardedMLP(torch.nn.Module):
    def __init__(self, tp_rank: int, group: Any, drift_head: bool) -> None:
        super().__init__()
        w = full_weights()
        cols = slice(tp_rank * FF // TP, (tp_rank + 1) * FF // TP)
        head = w["head"]
        if drift_head:  # a missed broadcast: this replica's head comes from another seed
            head = torch.randn(V, D, generator=torch.Generator().manual_seed(DRIFT_SEED)) * 0.2
        self.norm = RMSNorm(w["norm"])
        self.fc1 = ColumnParallelLinear(w["fc1"][cols], group)
        self.fc2 = RowParallelLinear(w["fc2"][:, cols], group)
        self.head = torch.nn.Linear(D, V, bias=False)
        with torch.no_grad():
            self.head.weight.copy_(head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x + self.fc2(F.silu(self.fc1(self.norm(x)))))


def average_grads(model: torch.nn.Module, dp_group: Any, skip_divide: str | None) -> None:
    """Data parallel: sum every gradient over the DP group, then divide by dp."""
    for name, p in model.named_parameters():
        assert p.grad is not None
        dist.all_reduce(p.grad, group=dp_group)
        if name != skip_divide:
            p.grad /= DP  # Tensor.__itruediv__: not in msprobe's hooked API list


def worker(rank: int, bug: tuple[int | None, str | None], level: str, dump_path: str,
           port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=TP * DP)
    tp_group, dp_group = groups(TP * DP, TP)
    dp_rank, tp_rank = rank // TP, rank % TP
    bug_rank, kind = bug
    model = ShardedMLP(tp_rank, tp_group, drift_head=rank == bug_rank and kind == "init_drift")
    skip = "fc2.weight" if rank == bug_rank and kind == "grad_unscaled" else None
    x, y = global_batch()
    per = GLOBAL_BATCH // DP
    x, y = x[dp_rank * per:(dp_rank + 1) * per], y[dp_rank * per:(dp_rank + 1) * per]
    debugger = make_debugger(LEVELS[level], dump_path, str(rank))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        debugger.start(model)
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        average_grads(model, dp_group, skip)  # inside the dump window
        debugger.stop()
        debugger.step()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    Path(dump_path, f".loss_{rank}.json").write_text(json.dumps(losses))
    dist.barrier()
    dist.destroy_process_group()


def run_one(name: str, level: str, keep_stack: bool) -> dict[int, list[float]]:
    root = Path(name, level)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    mp.spawn(worker, args=(RUNS[name], level, str(root), free_port()), nprocs=TP * DP)
    per_rank = {}
    for r in range(TP * DP):
        f = root / f".loss_{r}.json"
        per_rank[r] = json.loads(f.read_text())
        f.unlink()
        print(f"{name} {level} rank {r} losses {per_rank[r]}", flush=True)
    if not keep_stack:
        for f in root.rglob("stack.json"):
            f.unlink()
    return per_rank


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--keep-stack", action="store_true", help="keep msprobe's stack.json files")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.chdir(args.out)  # relative dump paths: no machine path ends up in dump.json
    losses = {name: {level: run_one(name, level, args.keep_stack) for level in LEVELS}
              for name in RUNS}
    Path("losses.json").write_text(json.dumps(losses, indent=1) + "\n")
    print("written", [f"{r}/{lv}" for r in RUNS for lv in LEVELS], "under", args.out,
          file=sys.stderr)


if __name__ == "__main__":
    main()
