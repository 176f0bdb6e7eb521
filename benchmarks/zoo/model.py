"""Tiny GPT-2-style LM and one dumped training run of a zoo case (benign noise and/or one bug)."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

V, D, NH, T, B, NLAYER, STEPS = 64, 16, 2, 8, 2, 2, 3  # vocab, hidden, heads, seq, batch
HERE = Path(__file__).resolve().parent
INIT = HERE / "init_weights.npz"

# Un-hooked originals, captured before msprobe wraps anything.
_LINEAR = torch._C._nn.linear
_NARROW = torch.Tensor.narrow
_ADD = torch.Tensor.add
_RESHAPE = torch.Tensor.reshape
_VIEW = torch.Tensor.view


def split_k_linear(input: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ W.T + b with K split in two partial products summed: same call, other rounding.

    Computed on the 2-D [tokens, K] view and viewed back, so for the model's 3-D inputs the
    output's grad_fn (a view of a [tokens, N] result) matches native linear's and msprobe
    records the same backward shapes.
    """
    k = weight.shape[1]
    h = k // 2
    x2 = _RESHAPE(input, (-1, k))
    a = _LINEAR(_NARROW(x2, 1, 0, h), _NARROW(weight, 1, 0, h), bias)
    b = _LINEAR(_NARROW(x2, 1, h, k - h), _NARROW(weight, 1, h, k - h), None)
    return _VIEW(_ADD(a, b), (*input.shape[:-1], weight.shape[0]))


class LayerNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps
        self.shape = (d,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.shape, self.weight, self.bias, self.eps)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_attn = nn.Linear(D, 3 * D)
        self.c_proj = nn.Linear(D, D)
        self.scale = 1.0 / math.sqrt(D // NH)
        self.softmax_dtype: torch.dtype | None = None
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, -1)
        q = q.reshape(b, t, NH, d // NH).transpose(1, 2)
        k = k.reshape(b, t, NH, d // NH).transpose(1, 2)
        v = v.reshape(b, t, NH, d // NH).transpose(1, 2)
        s = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        s = s.masked_fill(self.mask, float("-inf"))
        if self.softmax_dtype is None:
            a = F.softmax(s, -1)
        else:
            a = F.softmax(s, -1, dtype=self.softmax_dtype)
        a = a.to(v.dtype)
        o = torch.matmul(a, v).transpose(1, 2).reshape(b, t, d)
        return self.c_proj(o)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_fc = nn.Linear(D, 4 * D)
        self.c_proj = nn.Linear(4 * D, D)
        self.approximate = "none"
        self.proj_bf16 = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.c_fc(x), approximate=self.approximate)
        if self.proj_bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.c_proj(h)
        return self.c_proj(h)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(D)
        self.attn = Attention()
        self.ln_2 = LayerNorm(D)
        self.mlp = MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.blocks = nn.ModuleList([Block() for _ in range(NLAYER)])
        self.ln_f = LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.register_buffer("pos", torch.arange(T), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe(self.pos)
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def save_init(path: Path = INIT) -> None:
    """Weights from torch.manual_seed(0) (default PyTorch init) and fixed ids, saved once."""
    torch.manual_seed(0)
    m = GPT()
    ids = torch.randint(0, V, (B, T + 1), generator=torch.Generator().manual_seed(1))
    arrs = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    arrs["__ids__"] = ids.numpy()
    np.savez(path, **arrs)


def param_groups(m: GPT, wd_norms: bool) -> list[dict[str, Any]]:
    """Golden: weight decay on matrices only; LayerNorm params and biases get wd=0."""
    decay, no_decay = [], []
    for name, p in m.named_parameters():
        is_norm = ".ln_" in f".{name}"
        if p.dim() >= 2 or (wd_norms and is_norm):
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]


def apply_bug(m: GPT, bug: str) -> dict[str, Any]:
    """Mutate the loaded model for `bug`; returns optimizer overrides."""
    opt: dict[str, Any] = {}
    with torch.no_grad():
        if bug == "softmax_fp16":
            m.blocks[0].attn.softmax_dtype = torch.float16
        elif bug == "linear_bf16_one":
            m.blocks[1].mlp.proj_bf16 = True
        elif bug == "embedding_fp32_in_bf16":
            m.wte.weight.data = m.wte.weight.data.to(torch.bfloat16)
        elif bug == "ln_eps":
            m.blocks[1].ln_1.eps = 1e-3
        elif bug == "gelu_tanh":
            m.blocks[0].mlp.approximate = "tanh"
        elif bug == "attn_scale":
            m.blocks[1].attn.scale = 1.0 / math.sqrt(D // NH + 1)
        elif bug == "qk_swapped":
            lin = m.blocks[1].attn.c_attn
            for t in (lin.weight, lin.bias):
                q = t[:D].clone()
                t[:D] = t[D:2 * D]
                t[D:2 * D] = q
        elif bug == "weight_transposed":
            w = m.blocks[0].attn.c_proj.weight
            w.copy_(w.t().clone())
        elif bug == "mask_off_by_one":
            attn = m.blocks[0].attn
            attn.mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 2)
        elif bug == "lr_step1":
            opt["lr"] = 1.1e-3
        elif bug == "wd_on_norms":
            opt["wd_norms"] = True
        elif bug == "adam_eps":
            opt["eps"] = 1e-6
        elif bug == "betas_step2":
            opt["betas"] = (0.8, 0.999)
        elif bug == "ln_eps_bf16":
            m.blocks[0].ln_2.eps = 1e-4
        elif bug:
            raise ValueError(f"unknown bug {bug!r}")
    return opt


def write_cfg(level: str, dump_path: str) -> str:
    if level == "mix":
        cfg: dict[str, Any] = {"task": "statistics", "level": "mix",
                               "statistics": {"scope": [], "list": [], "data_mode": ["all"],
                                              "summary_mode": "statistics"}}
    else:
        cfg = {"task": "tensor", "level": level,
               "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
    cfg.update({"dump_path": dump_path, "rank": [], "step": [], "async_dump": False})
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    return path


def run(level: str, dump_path: str, bf16: bool, noise: bool, bug: str = "") -> list[float]:
    """One dumped 3-step training run; returns the losses. Call once per process."""
    torch.use_deterministic_algorithms(True)
    if noise:
        F.linear = split_k_linear  # before the debugger wraps F.linear
    m = GPT()
    z = np.load(INIT)
    m.load_state_dict({k: torch.from_numpy(z[k].copy()) for k in z.files if k != "__ids__"})
    ids = torch.from_numpy(z["__ids__"].copy()).long()
    o = apply_bug(m, bug)
    from msprobe.pytorch import PrecisionDebugger
    cfg = write_cfg(level, dump_path)
    debugger = PrecisionDebugger(config_path=cfg)
    os.remove(cfg)
    opt = torch.optim.AdamW(param_groups(m, o.get("wd_norms", False)), lr=o.get("lr", 1e-3),
                            betas=o.get("betas", (0.9, 0.999)), eps=o.get("eps", 1e-8))
    inp, tgt = ids[:, :-1], ids[:, 1:]
    losses = []
    for _ in range(STEPS):
        debugger.start(m)
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = m(inp)
        else:
            logits = m(inp)
        loss = F.cross_entropy(logits.float().reshape(-1, V), tgt.reshape(-1))
        loss.backward()
        debugger.stop()
        debugger.step()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.item()))
    return losses
