"""Multi-rank msprobe dumps (gloo, CPU) of one tiny decoder at TP=1, 2 and 4, clean and buggy.

Made for comparing across parallel layouts (an NPU run at TP=2 against a bench at TP=1 or TP=4).
Run with torch and mindstudio-probe installed (tests/data/real/layouts/ was made with
torch 2.13.0+cpu and mindstudio-probe 26.2.0):

    python benchmarks/make_layouts.py tests/data/real/layouts

Model (Megatron-style tensor parallelism, DP=1 so only TP differs between runs)::

    ids -> embed (VocabParallelEmbedding: rows [t*V/tp, (t+1)*V/tp) of the table, ids outside
           the range masked to zero, all-reduce over TP)
        -> norm1 (RMSNorm) -> fc1 (ColumnParallelLinear, no bias, output sharded along F)
        -> silu -> fc2 (RowParallelLinear: partial sums, then all-reduce) -> + residual
        -> norm2 (RMSNorm) -> head (ColumnParallelLinear over the vocabulary, logits sharded along
           V, then all_gather along the last dim) -> cross_entropy (outside the model)

V=16, D=16, F=32, batch 2 x 4 tokens, 2 SGD steps (lr 0.5). Ranks are TP-major,
``rank = dp * tp + tp_rank`` (with DP=1 the rank is the TP rank). Every rank builds the full
weights from one seed and keeps its shard, so the TP=1, 2, 4 runs start from the same model. The
model code is the same at every TP size (the embedding's range mask runs at TP=1 too); only the
collectives (and the ``torch.cat`` of the gathered logits) are skipped at TP=1.

Runs (dump roots, each with step<k>/rank<r>/ dirs as msprobe writes them):
  tp1, tp2, tp4          clean
  tp2_fc1_transposed     rank 1's fc1 shard ([F/2, D] = [16, 16]) loaded transposed
  tp2_no_allreduce       rank 1 keeps its fc2 partial sum: it still joins the all-reduce (so that
                         rank 0 does not hang in gloo) but uses its un-reduced input afterwards
  tp2_vocab_split        rank 1's vocabulary range is off by one: [V/2 - 1, V - 1) instead of
                         [V/2, V) (range mask and table rows both), so id 7 is counted twice and
                         id 15 by no rank
each at three levels: L1 (APIs) task tensor, L0 (modules) task tensor, mix task statistics, under
OUT/<level>/<run>/. stack.json is removed (it names the machine's paths and is most of the size).
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
from make_multirank import CopyToTP, free_port, make_debugger

V, D, FF, B, T, STEPS, LR, EPS = 16, 16, 32, 2, 4, 2, 0.5, 1e-6
BUG_RANK = 1
RUNS = {"tp1": (1, None), "tp2": (2, None), "tp4": (4, None),
        "tp2_fc1_transposed": (2, "fc1_transposed"),
        "tp2_no_allreduce": (2, "no_allreduce"),
        "tp2_vocab_split": (2, "vocab_split")}
LEVELS = {
    "L1": {"task": "tensor", "level": "L1",
           "tensor": {"scope": [], "list": [], "data_mode": ["all"]}},
    "L0": {"task": "tensor", "level": "L0",
           "tensor": {"scope": [], "list": [], "data_mode": ["all"]}},
    "mix": {"task": "statistics", "level": "mix",
            "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                           "summary_mode": "statistics"}},
}


# --- Megatron's conjugate autograd functions -------------------------------------------------

class ReduceFromTP(torch.autograd.Function):
    """All-reduce forward, identity backward (Megatron's ``g``). ``keep_partial``: the bug."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, keep_partial: bool) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out, group=group)
        return x.clone() if keep_partial else out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grad, None, None


class GatherFromTP(torch.autograd.Function):
    """All-gather along the last dim forward; backward keeps this rank's slice."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        n, r = dist.get_world_size(ctx.group), dist.get_rank(ctx.group)
        return grad.chunk(n, dim=-1)[r].contiguous(), None


# --- model -----------------------------------------------------------------------------------

def full_weights() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"embed": torch.randn(V, D, generator=g),
            "fc1": torch.randn(FF, D, generator=g) * 0.25,
            "fc2": torch.randn(D, FF, generator=g) * 0.18,
            "head": torch.randn(V, D, generator=g) * 0.25}


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    # Fixed ids: both halves of the vocabulary, and the split points 7/8 and the ends 0/15.
    ids = torch.tensor([[1, 7, 8, 15], [12, 0, 7, 9]])
    g = torch.Generator().manual_seed(1)
    return ids, torch.randint(0, V, (B, T), generator=g)


class VocabParallelEmbedding(torch.nn.Module):
    def __init__(self, table: torch.Tensor, start: int, end: int, tp: int, group: Any) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(table[start:end].clone())
        self.start, self.end, self.tp, self.group = start, end, tp, group

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        outside = (ids < self.start) | (ids >= self.end)
        local = (ids - self.start).masked_fill(outside, 0)
        out = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return ReduceFromTP.apply(out, self.group, False) if self.tp > 1 else out


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = EPS) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ColumnParallelLinear(torch.nn.Module):
    """Holds rows [t*O/tp, (t+1)*O/tp) of W [O, I]; the output is sharded along its last dim."""

    def __init__(self, shard: torch.Tensor, tp: int, group: Any, gather_output: bool) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(shard)
        self.tp, self.group, self.gather_output = tp, group, gather_output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp > 1:
            x = CopyToTP.apply(x, self.group)
        y = F.linear(x, self.weight)
        return GatherFromTP.apply(y, self.group) if self.tp > 1 and self.gather_output else y


class RowParallelLinear(torch.nn.Module):
    """Holds columns [t*I/tp, (t+1)*I/tp) of W [O, I]; partial sums all-reduced over TP."""

    def __init__(self, shard: torch.Tensor, tp: int, group: Any, keep_partial: bool) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(shard)
        self.tp, self.group, self.keep_partial = tp, group, keep_partial

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight)
        return ReduceFromTP.apply(y, self.group, self.keep_partial) if self.tp > 1 else y


class TinyDecoder(torch.nn.Module):
    def __init__(self, tp: int, tp_rank: int, group: Any, bug: str | None) -> None:
        super().__init__()
        w = full_weights()
        buggy = bug is not None and tp_rank == BUG_RANK
        vs, ve = tp_rank * V // tp, (tp_rank + 1) * V // tp
        if buggy and bug == "vocab_split":
            vs, ve = vs - 1, ve - 1
        cols = slice(tp_rank * FF // tp, (tp_rank + 1) * FF // tp)
        fc1 = w["fc1"][cols].clone()
        if buggy and bug == "fc1_transposed":
            fc1 = fc1.t().contiguous()  # [F/2, D] = [16, 16] at TP=2
        rows_v = slice(tp_rank * V // tp, (tp_rank + 1) * V // tp)
        self.embed = VocabParallelEmbedding(w["embed"], vs, ve, tp, group)
        self.norm1 = RMSNorm(D)
        self.fc1 = ColumnParallelLinear(fc1, tp, group, gather_output=False)
        self.fc2 = RowParallelLinear(w["fc2"][:, cols].clone(), tp, group,
                                     keep_partial=buggy and bug == "no_allreduce")
        self.norm2 = RMSNorm(D)
        self.head = ColumnParallelLinear(w["head"][rows_v].clone(), tp, group, gather_output=True)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        x = x + self.fc2(F.silu(self.fc1(self.norm1(x))))
        return self.head(self.norm2(x))


# --- driver ----------------------------------------------------------------------------------

def worker(rank: int, world: int, bug: str | None, level: str, dump_path: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    tp = world  # DP=1: rank = dp * tp + tp_rank = tp_rank
    group = dist.new_group(list(range(tp))) if tp > 1 else None
    model = TinyDecoder(tp, rank % tp, group, bug)
    ids, y = batch()
    debugger = make_debugger(LEVELS[level], dump_path, f"{level}_{rank}")
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        debugger.start(model)
        loss = F.cross_entropy(model(ids).reshape(-1, V), y.reshape(-1))
        loss.backward()
        debugger.stop()
        debugger.step()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    Path(dump_path, f".loss_{rank}.json").write_text(json.dumps(losses))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--keep-stack", action="store_true", help="keep msprobe's stack.json files")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.chdir(args.out)  # relative dump paths: no machine path ends up in dump.json
    losses: dict[str, dict[str, dict[int, list[float]]]] = {}
    for level in LEVELS:
        for name, (tp, bug) in RUNS.items():
            root = Path(level, name)
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            mp.spawn(worker, args=(tp, bug, level, str(root), free_port()), nprocs=tp)
            per_rank = {}
            for r in range(tp):
                f = root / f".loss_{r}.json"
                per_rank[r] = json.loads(f.read_text())
                f.unlink()
            losses.setdefault(level, {})[name] = per_rank
            if not args.keep_stack:
                for f in root.rglob("stack.json"):
                    f.unlink()
    Path("losses.json").write_text(json.dumps(losses, indent=1) + "\n")
    print("written", [f"{lv}/{r}" for lv in LEVELS for r in RUNS], "under", args.out,
          file=sys.stderr)


if __name__ == "__main__":
    main()
