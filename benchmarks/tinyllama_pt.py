"""Llama-style LM in PyTorch, trained with AdamW on CPU and dumped with msprobe.

A copy of the fixture generator (fixtures/scripts/tinyllama_pt.py, the one that made
``example_data/dumps``) with the model size taken from the command line, so the benchmark
can make dumps of hundreds of MB. Needs ``torch`` and ``mindstudio-probe`` (msprobe), so
run it with the msprobe venv's python, not the project venv::

  python tinyllama_pt.py --variant fp32 --level L1 --task tensor --dump-path OUT/pt_fp32 \
      --vocab 1000 --hidden 512 --heads 8 --ffn 1024 --layers 8 --batch 2 --seq 128 --steps 1

Variants (as in the fixtures):
  fp32 : plain fp32 (golden / bench)
  bf16 : same weights, forward under torch.autocast('cpu', dtype=torch.bfloat16)
  bug  : fp32, but layers[1].n1 (first RMSNorm of layer 1) uses eps=1e-5 instead of 1e-6

Weights are N(0, 0.02) (RMSNorm weights 1) after torch.manual_seed(0) and the token ids come
from torch.Generator seed 1, drawn in-process, so every variant of one size starts from
bit-identical parameters and inputs (the fixtures stored them in init_weights.npz instead).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_DIMS = {"vocab": 64, "hidden": 32, "heads": 4, "ffn": 64, "layers": 2, "batch": 2, "seq": 8}


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attn(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.scale = (d // h) ** -0.5
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, -1)
        q = torch.transpose(q.reshape(b, t, self.h, -1), 1, 2)
        k = torch.transpose(k.reshape(b, t, self.h, -1), 1, 2)
        v = torch.transpose(v.reshape(b, t, self.h, -1), 1, 2)
        s = torch.matmul(q, torch.transpose(k, 2, 3)) * self.scale
        mask = torch.triu(torch.full((t, t), -1e9), 1)
        a = torch.softmax(s + mask, -1)
        o = torch.transpose(torch.matmul(a, v), 1, 2).reshape(b, t, d)
        return self.o(o)


class MLP(nn.Module):
    def __init__(self, d: int, f: int) -> None:
        super().__init__()
        self.gate = nn.Linear(d, f, bias=False)
        self.up = nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, d: int, h: int, f: int) -> None:
        super().__init__()
        self.n1 = RMSNorm(d)
        self.attn = Attn(d, h)
        self.n2 = RMSNorm(d)
        self.mlp = MLP(d, f)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


class LM(nn.Module):
    def __init__(self, vocab: int, d: int, h: int, f: int, layers: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([Block(d, h, f) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def llama_init(m: nn.Module) -> None:
    torch.manual_seed(0)
    for name, p in m.named_parameters():
        if name.endswith(("n1.weight", "n2.weight")) or name == "norm.weight":
            nn.init.ones_(p)
        else:
            nn.init.normal_(p, 0.0, 0.02)


def write_cfg(level: str, task: str, dump_path: str) -> str:
    """An msprobe config.json like fixtures/configs/{L1_tensor,L0_tensor,mix_statistics}.json."""
    cfg: dict[str, object] = {
        "task": task,
        "dump_path": dump_path,
        "rank": [],
        "step": [],
        "level": level,
        "async_dump": False,
    }
    if task == "tensor":
        cfg["tensor"] = {"scope": [], "list": [], "data_mode": ["all"]}
    else:
        cfg["statistics"] = {
            "scope": [],
            "list": [],
            "data_mode": ["all"],
            "summary_mode": "md5" if task == "md5" else "statistics",
        }
        cfg["task"] = "statistics"
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump-path", help="msprobe dump_path (omit to train without dumping)")
    ap.add_argument("--variant", default="fp32", choices=["fp32", "bf16", "bug"])
    ap.add_argument("--level", default="L1", choices=["L0", "L1", "mix"])
    ap.add_argument("--task", default="tensor", choices=["tensor", "statistics", "md5"])
    ap.add_argument("--steps", type=int, default=2)
    for name, value in DEFAULT_DIMS.items():
        ap.add_argument(f"--{name}", type=int, default=value)
    args = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    m = LM(args.vocab, args.hidden, args.heads, args.ffn, args.layers)
    llama_init(m)
    ids = torch.randint(
        0, args.vocab, (args.batch, args.seq + 1), generator=torch.Generator().manual_seed(1)
    )
    if args.variant == "bug":
        m.layers[1].n1.eps = 1e-5  # deliberate bug: golden is 1e-6

    debugger = None
    if args.dump_path:
        from msprobe.pytorch import PrecisionDebugger

        tmp_cfg = write_cfg(args.level, args.task, args.dump_path)
        debugger = PrecisionDebugger(config_path=tmp_cfg)
        os.remove(tmp_cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)  # wd=0.01, betas=(0.9,0.999), eps=1e-8
    inp, tgt = ids[:, :-1], ids[:, 1:]
    for step in range(args.steps):
        if debugger:
            debugger.start(m)
        if args.variant == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = m(inp)
        else:
            logits = m(inp)
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), tgt.reshape(-1))
        loss.backward()
        if debugger:
            debugger.stop()
            debugger.step()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.8f}")


if __name__ == "__main__":
    main()
