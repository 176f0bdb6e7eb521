"""Dump a tiny Llama whose MLP overflows, with msprobe, then run msprobe's overflow_check on it.

Run with msprobe (mindstudio-probe 26.2.0) and torch installed, from any directory:

    python example_data/dumps/pt_overflow/make_overflow.py

It writes, beside this script:
  mix_statistics/step0/rank0/{dump.json,construct.json,stack.json}   one forward+backward step
  overflow_check/anomaly_analyze_<time_ns>.json                      msprobe overflow_check -i ... -o ...
Layer 1's MLP output is scaled by 1e38 (finite in float32, up to about 3e37); the next RMSNorm
squares it, and x.pow(2) is the first op whose output holds inf.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
V, D, FF, L, B, T = 32, 16, 32, 2, 1, 6  # vocab, hidden, ffn, layers, batch, seq


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MLP(nn.Module):
    def __init__(self, d: int, f: int, scale: float) -> None:
        super().__init__()
        self.up = nn.Linear(d, f, bias=False)
        self.down = nn.Linear(f, d, bias=False)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.up(x))) * self.scale  # the injected overflow: 1e38


class Block(nn.Module):
    def __init__(self, d: int, f: int, scale: float) -> None:
        super().__init__()
        self.n1 = RMSNorm(d)
        self.mlp = MLP(d, f, scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.n1(x))


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList([Block(D, FF, 1.0), Block(D, FF, 1e38)])
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def dump(out: Path) -> None:
    """One training step of LM under msprobe's statistics dump (level mix) into ``out``."""
    from msprobe.pytorch import PrecisionDebugger

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("gloo", rank=0, world_size=1)  # rank0/ dirs, not proc<PID>/
    cfg = {"task": "statistics", "dump_path": str(out), "rank": [], "step": [], "level": "mix",
           "async_dump": False, "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                                "summary_mode": "statistics"}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    debugger = PrecisionDebugger(config_path=f.name)
    os.remove(f.name)
    torch.manual_seed(0)
    model = LM()
    ids = torch.randint(0, V, (B, T + 1), generator=torch.Generator().manual_seed(1))
    debugger.start(model)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    debugger.stop()
    debugger.step()
    dist.destroy_process_group()
    print(f"loss {loss.item()}")


def main() -> None:
    out, check = HERE / "mix_statistics", HERE / "overflow_check"
    for old in (out, check):
        shutil.rmtree(old, ignore_errors=True)
    dump(out)
    msprobe = Path(sys.executable).with_name("msprobe")
    subprocess.run([str(msprobe), "overflow_check", "-i", str(out / "step0"), "-o", str(check)],
                   check=True)


if __name__ == "__main__":
    main()
