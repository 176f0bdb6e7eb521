"""Multi-rank msprobe dumps (gloo, CPU) of a two-block tiny decoder under TP x PP layouts.

Made for comparing across parallel layouts with a pipeline in play: an NPU run at TP=2 x PP=2
against a bench at TP=1 x PP=1 or TP=4 x PP=1. Run with torch and mindstudio-probe installed
(tests/data/real/layouts_pp/ was made with torch 2.13.0+cpu and mindstudio-probe 26.2.0):

    python benchmarks/make_layouts_pp.py OUT [--keep-stack]

The building blocks (vocabulary-parallel embedding, RMSNorm, column/row-parallel linears, the
gathered vocabulary head, Megatron's conjugate autograd functions, the batch, the weights of the
embedding, block 0 and the head) are imported from make_layouts.py; this script adds a second
decoder block and a two-stage pipeline::

    ids -> embed -> layers[0] -> layers[1] -> final_norm -> head (gathered) -> cross_entropy
    block = x + fc2(silu(fc1(norm(x))))     fc1 column-parallel, fc2 row-parallel (all-reduce)

Weights: make_layouts.full_weights() (seed 0) gives the embedding, block 0's fc1/fc2 and the
head, so block 0 is make_layouts' block; block 1's fc1/fc2 come from a second generator seeded
with 2 (same scales). Every rank builds all of them and keeps its shard, so every layout starts
from the same model.

Ranks are Megatron's ``rank = tp_rank + tp * (dp_rank + dp * pp_rank)`` with DP=1. With PP=2
stage 0 holds ``embed`` + ``layers[0]`` (global layer 0) and stage 1 holds ``layers[0]`` (global
layer 1: Megatron names layers by their local index) + ``final_norm`` + ``head`` + the loss. One
micro-batch, no interleaving, all inside the dump window: stage 0 forward, ``dist.send`` of the
activation to rank + tp; stage 1 ``dist.recv`` (then requires_grad), forward, loss, backward,
``dist.send`` of the activation's gradient to rank - tp; stage 0 ``dist.recv`` of it and
``activation.backward(grad)``. Send and recv pass ``group=`` the pipeline group ([0, 2] or
[1, 3], as Megatron's p2p does) with ``dst``/``src`` as global ranks. The SGD step (lr 0.5) is
outside the dump window. 2 steps.

Runs (under OUT/<level>/<run>/step<k>/rank<r>/ as msprobe writes them):
  tp1                     1 rank, TP=1 x PP=1 (bench)
  tp4                     4 ranks, TP=4 x PP=1 (bench)
  tp2pp2                  4 ranks, TP=2 x PP=2, clean (NPU)
  tp2pp2_fc1_transposed   rank 3 (stage 1, tp 1) loads its fc1 shard transposed
  tp2pp2_no_allreduce     rank 3 keeps its fc2 partial sum (still joins the all-reduce)
  tp2pp2_vocab_split      rank 1 (stage 0, tp 1) has its vocabulary range off by one
  tp2, tp2_<bug>          2 ranks, TP=2 x PP=1: the same three bugs on rank 1 (NPU against a
                          bench with more stages, tp2pp2)
  tp4_no_allreduce,       4 ranks, TP=4 x PP=1, the bug on rank 3 / rank 1 (a transposed fc1
  tp4_vocab_split         shard is not square at TP=4: no such run)
at levels L1 (task tensor), L0 (task tensor) and mix (task statistics). stack.json files are
deleted unless --keep-stack (they name the machine's paths). OUT/losses.json holds
run -> level -> rank -> per-step loss for the ranks that compute one (the last stage).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_layouts import (
    FF,
    LEVELS,
    LR,
    STEPS,
    B,
    ColumnParallelLinear,
    D,
    RMSNorm,
    RowParallelLinear,
    T,
    V,
    VocabParallelEmbedding,
    batch,
    full_weights,
)
from make_multirank import free_port, make_debugger

N_LAYERS, BLOCK1_SEED = 2, 2
RUNS: dict[str, tuple[int, int, str | None]] = {  # name -> (tp, pp, bug)
    "tp1": (1, 1, None), "tp4": (4, 1, None), "tp2pp2": (2, 2, None),
    "tp2pp2_fc1_transposed": (2, 2, "fc1_transposed"),
    "tp2pp2_no_allreduce": (2, 2, "no_allreduce"),
    "tp2pp2_vocab_split": (2, 2, "vocab_split"),
    # a bench with more stages than the NPU: these one-stage NPU runs against tp2pp2
    "tp2": (2, 1, None),
    "tp2_fc1_transposed": (2, 1, "fc1_transposed"),
    "tp2_no_allreduce": (2, 1, "no_allreduce"),
    "tp2_vocab_split": (2, 1, "vocab_split"),
    "tp4_no_allreduce": (4, 1, "no_allreduce"),
    "tp4_vocab_split": (4, 1, "vocab_split"),
}
# data-parallel runs: name -> (tp, dp, bug); one stage, the batch's B rows split over DP
DP_RUNS: dict[str, tuple[int, int, str | None]] = {
    "dp2": (1, 2, None), "tp2dp2": (2, 2, None),
    "dp2_grad_not_reduced": (1, 2, "grad_not_reduced"),
    "dp2_rows_repeated": (1, 2, "rows_repeated"),
    "tp2dp2_fc1_transposed": (2, 2, "fc1_transposed"),
    # clean: every rank's loss normalised over the whole batch (sum / B*T), the gradients
    # summed over DP (Megatron's calculate_per_token_loss): batch gradients 1x the bench's
    "dp2_global_loss": (1, 2, "global_loss"),
}
BUG_RANKS = {"fc1_transposed": 3, "no_allreduce": 3, "vocab_split": 1, "grad_not_reduced": 1,
             "rows_repeated": 1}


def bug_rank(bug: str, world: int) -> int:
    """The rank a bug is on: BUG_RANKS', or the last rank of a smaller run (rank 1 at TP=2)."""
    return min(BUG_RANKS[bug], world - 1)


@dataclass(frozen=True)
class Layout:
    """One rank's place: ``rank = tp_rank + tp * (dp_rank + dp * pp_rank)`` (Megatron's)."""

    rank: int
    tp: int
    pp: int
    group: Any  # this rank's TP group (None at TP=1)
    pp_group: Any  # this rank's pipeline group, e.g. [1, 3] (None at PP=1)
    dp: int = 1
    dp_group: Any = None  # this rank's data-parallel group (None at DP=1)

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp

    @property
    def dp_rank(self) -> int:
        return self.rank // self.tp % self.dp

    @property
    def pp_rank(self) -> int:
        return self.rank // (self.tp * self.dp)

    @property
    def first(self) -> bool:
        return self.pp_rank == 0

    @property
    def last(self) -> bool:
        return self.pp_rank == self.pp - 1


def layer_weights() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Full (fc1 [F, D], fc2 [D, F]) of each block: block 0 is make_layouts', block 1 seed 2."""
    w = full_weights()
    g = torch.Generator().manual_seed(BLOCK1_SEED)
    fc1 = torch.randn(FF, D, generator=g) * 0.25
    fc2 = torch.randn(D, FF, generator=g) * 0.18
    return [(w["fc1"], w["fc2"]), (fc1, fc2)]


class Block(torch.nn.Module):
    """norm -> fc1 (column-parallel) -> silu -> fc2 (row-parallel) -> + residual."""

    def __init__(self, fc1: torch.Tensor, fc2: torch.Tensor, lay: Layout, bug: str | None) -> None:
        super().__init__()
        cols = slice(lay.tp_rank * FF // lay.tp, (lay.tp_rank + 1) * FF // lay.tp)
        fc1_shard = fc1[cols].clone()
        if bug == "fc1_transposed":
            fc1_shard = fc1_shard.t().contiguous()  # [F/2, D] = [16, 16] at TP=2
        self.norm = RMSNorm(D)
        self.fc1 = ColumnParallelLinear(fc1_shard, lay.tp, lay.group, gather_output=False)
        self.fc2 = RowParallelLinear(fc2[:, cols].clone(), lay.tp, lay.group,
                                     keep_partial=bug == "no_allreduce")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.silu(self.fc1(self.norm(x))))


class StageModel(torch.nn.Module):
    """One pipeline stage: embed on the first, its blocks, final_norm + head on the last."""

    def __init__(self, lay: Layout, bug: str | None) -> None:
        super().__init__()
        per_stage = N_LAYERS // lay.pp
        mine = layer_weights()[lay.pp_rank * per_stage:(lay.pp_rank + 1) * per_stage]
        self.embed: VocabParallelEmbedding | None = None
        self.final_norm: RMSNorm | None = None
        self.head: ColumnParallelLinear | None = None
        if lay.first:
            vs, ve = lay.tp_rank * V // lay.tp, (lay.tp_rank + 1) * V // lay.tp
            if bug == "vocab_split":
                vs, ve = vs - 1, ve - 1
            self.embed = VocabParallelEmbedding(full_weights()["embed"], vs, ve, lay.tp, lay.group)
        self.layers = torch.nn.ModuleList(Block(w1, w2, lay, bug) for w1, w2 in mine)
        if lay.last:
            rows_v = slice(lay.tp_rank * V // lay.tp, (lay.tp_rank + 1) * V // lay.tp)
            self.final_norm = RMSNorm(D)
            self.head = ColumnParallelLinear(full_weights()["head"][rows_v].clone(), lay.tp,
                                             lay.group, gather_output=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        if self.head is not None and self.final_norm is not None:
            x = self.head(self.final_norm(x))
        return x


# --- driver ----------------------------------------------------------------------------------

def groups(rank: int, world: int, tp: int, dp: int = 1) -> tuple[Any, Any, Any]:
    """This rank's TP, PP and DP groups (None where of size 1). Every rank creates every group
    in the same order: TP groups of consecutive ranks, then PP groups (the ranks of one TP and
    DP place, Megatron's [t, t+tp*dp, ...]), then DP groups (one TP place of one stage)."""
    inner = tp * dp
    tp_lists = [list(range(s, s + tp)) for s in range(0, world, tp)] if tp > 1 else []
    pp_lists = [list(range(t, world, inner)) for t in range(inner)] if world > inner else []
    dp_lists = [[s + t + tp * d for d in range(dp)] for s in range(0, world, inner)
                for t in range(tp)] if dp > 1 else []
    made = [[dist.new_group(ranks) for ranks in lists] for lists in (tp_lists, pp_lists, dp_lists)]
    mine = [next((g for r, g in zip(lists, gs, strict=True) if rank in r), None)
            for lists, gs in zip((tp_lists, pp_lists, dp_lists), made, strict=True)]
    return mine[0], mine[1], mine[2]


def rows(lay: Layout, bug: str | None) -> slice:
    """The batch rows this rank reads: its DP rank's share (``rows_repeated``: rank 0's)."""
    per = B // lay.dp
    start = 0 if bug == "rows_repeated" else lay.dp_rank * per
    return slice(start, start + per)


def pipeline_step(model: StageModel, lay: Layout, bug: str | None = None
                  ) -> torch.Tensor | None:
    """Forward and backward of one micro-batch (this DP rank's rows of the batch, its loss
    their mean); returns the loss on the last stage."""
    ids, y = batch()
    ids, y = ids[rows(lay, bug)], y[rows(lay, bug)]
    if lay.first:
        x = ids
    else:
        x = torch.empty(len(ids), T, D)
        # the activation from the same tp_rank of stage 0; src/dst are global ranks
        dist.recv(x, src=lay.rank - lay.tp * lay.dp, group=lay.pp_group)
        x.requires_grad_()
    out = model(x)
    if not lay.last:
        dist.send(out.detach(), dst=lay.rank + lay.tp * lay.dp, group=lay.pp_group)
        grad = torch.empty_like(out)
        dist.recv(grad, src=lay.rank + lay.tp * lay.dp, group=lay.pp_group)
        out.backward(grad)
        return None
    if bug == "global_loss":  # normalised over the whole batch: the DP all-reduce sums
        loss = F.cross_entropy(out.reshape(-1, V), y.reshape(-1), reduction="sum") / (B * T)
    else:
        loss = F.cross_entropy(out.reshape(-1, V), y.reshape(-1))
    loss.backward()
    if not lay.first:
        assert x.grad is not None
        dist.send(x.grad, dst=lay.rank - lay.tp * lay.dp, group=lay.pp_group)
    return loss


def reduce_grads(model: StageModel, lay: Layout, bug: str | None) -> None:
    """The data-parallel gradient all-reduce (mean over DP ranks), outside the dump window as
    Megatron's DDP runs it after the backward; ``grad_not_reduced``: this rank joins the
    all-reduce but steps with its own gradients."""
    for param in model.parameters():
        assert param.grad is not None
        reduced = param.grad.clone()
        dist.all_reduce(reduced, group=lay.dp_group)
        if bug != "grad_not_reduced":
            param.grad.copy_(reduced if bug == "global_loss" else reduced / lay.dp)


def worker(rank: int, world: int, tp: int, bug: str | None, level: str, dump_path: str,
           port: int, dp: int = 1) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    tp_group, pp_group, dp_group = groups(rank, world, tp, dp)
    lay = Layout(rank, tp, world // (tp * dp), tp_group, pp_group, dp, dp_group)
    mine = bug if bug == "global_loss" or (bug is not None and bug_rank(bug, world) == rank) \
        else None
    model = StageModel(lay, mine)
    debugger = make_debugger(LEVELS[level], dump_path, f"{level}_{rank}")
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        debugger.start(model)
        loss = pipeline_step(model, lay, mine)
        debugger.stop()
        debugger.step()
        if dp > 1:
            reduce_grads(model, lay, mine)
        opt.step()
        opt.zero_grad()
        if loss is not None:
            losses.append(loss.item())
    if losses:
        Path(dump_path, f".loss_{rank}.json").write_text(json.dumps(losses))
    dist.barrier()
    dist.destroy_process_group()


def generate(level: str, name: str, keep_stack: bool) -> dict[int, list[float]]:
    """One run at one level under level/name; returns rank -> per-step loss."""
    tp, pp, dp, bug = (*RUNS[name][:2], 1, RUNS[name][2]) if name in RUNS else (
        DP_RUNS[name][0], 1, DP_RUNS[name][1], DP_RUNS[name][2])
    root = Path(level, name)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    world = tp * pp * dp
    mp.spawn(worker, args=(world, tp, bug, level, str(root), free_port(), dp), nprocs=world)
    per_rank = {}
    for r in range(world):
        f = root / f".loss_{r}.json"
        if f.exists():
            per_rank[r] = json.loads(f.read_text())
            f.unlink()
    if not keep_stack:
        for f in root.rglob("stack.json"):
            f.unlink()
    return per_rank


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--keep-stack", action="store_true", help="keep msprobe's stack.json files")
    ap.add_argument("--runs", nargs="+", choices=[*RUNS, *DP_RUNS], default=list(RUNS),
                    help="only these runs (losses.json then holds only theirs)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.chdir(args.out)  # relative dump paths: no machine path ends up in dump.json
    losses: dict[str, dict[str, dict[int, list[float]]]] = {}
    for level in LEVELS:
        for name in args.runs:
            losses.setdefault(name, {})[level] = generate(level, name, args.keep_stack)
    Path("losses.json").write_text(json.dumps(losses, indent=1) + "\n")
    print("written", [f"{lv}/{r}" for lv in LEVELS for r in args.runs], "under", args.out,
          file=sys.stderr)


if __name__ == "__main__":
    main()
