"""MindSpore twin of ``benchmarks/tinyllama_pt.py`` with optional bugs, one dumped step.

The MindSpore ("npu") side of the cross-framework zoo (``make_ms_zoo.py``): the same tiny
Llama (vocab 64, hidden 32, 4 heads, FFN 64 SwiGLU, 2 layers, RMSNorm eps 1e-6, causal
softmax attention with a -1e9 triu mask, untied head, no biases) written with
``mindspore.mint`` APIs in PyNative mode on the CPU, with MindFormers-style cell names
(``tok_embeddings``, ``layers.N.attention.wqkv``, ``feed_forward.w1`` ...) while the PyTorch
bench uses HF-like ones (``emb``, ``layers.N.attn.qkv``, ``mlp.gate`` ...), as in a real
migration. Adapted from the fixture generator ``fixtures/scripts/tinyllama_ms.py``.

Weights and token ids are loaded from an ``init_weights.npz`` written from the PyTorch
model (PyTorch ``state_dict`` names), so both frameworks start from bit-identical inputs.
One step is dumped (forward + backward through ``mindspore.value_and_grad``); the
optimizer step is not needed for a one-step dump and is not run.

MindSpore 2.10 on the CPU needs (see the fixtures' README): numpy<2; ``mint.norm = ops.norm``
before msprobe is imported (msprobe's statistics call ``mint.norm``, which has no CPU
kernel); ``ops.gather`` for the embedding, ``ops.full`` for ``mint.full`` and
``ops.cross_entropy`` for the loss (no CPU kernels for the mint versions)::

    python tinyllama_ms.py --init init_weights.npz --level L1 --dump-path OUT --bug rms_eps

Bugs (``--bug``), each injected at one known site:
  rms_eps          layers.1.attention_norm: eps 1e-5 instead of 1e-6 (``x + eps``)
  softmax_fp16     layers.0.attention: softmax computed in float16 (cast, softmax, cast back)
  embedding_fp16   tok_embeddings: the embedding output is cast to float16 and kept so
  residual_dropped layers.1: ``x = attention(attention_norm(x))`` (no residual add)
  wo_transposed    layers.1.attention.wo: the weight is loaded transposed
  silu_to_gelu     layers.1.feed_forward: gelu (``ops.gelu``) instead of silu
  mask_off_by_one  layers.0.attention: ``triu(full, 2)`` instead of ``triu(full, 1)``
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, mint, nn, ops

# msprobe's MindSpore statistics call mint.norm (LinalgVectorNorm), which has no CPU kernel
# in MindSpore 2.10: route it to ops.norm (same L2 norm) before msprobe is imported.
mint.norm = ops.norm

V, D, H, FF, L, B, T = 64, 32, 4, 64, 2, 2, 8  # vocab, hidden, heads, ffn, layers, batch, seq
BUGS = ("", "rms_eps", "softmax_fp16", "embedding_fp16", "residual_dropped", "wo_transposed",
        "silu_to_gelu", "mask_off_by_one")


class Linear(nn.Cell):  # type: ignore[misc]
    def __init__(self, i: int, o: int) -> None:
        super().__init__()
        self.weight = Parameter(Tensor(np.zeros((o, i), np.float32)), name="weight")

    def construct(self, x: Any) -> Any:
        return mint.nn.functional.linear(x, self.weight)


class Embedding(nn.Cell):  # type: ignore[misc]
    def __init__(self, v: int, d: int) -> None:
        super().__init__()
        self.weight = Parameter(Tensor(np.zeros((v, d), np.float32)), name="weight")
        self.out_fp16 = False

    def construct(self, ids: Any) -> Any:
        # mint.nn.functional.embedding has no CPU kernel in MindSpore 2.10
        x = ops.gather(self.weight, ids, 0)
        if self.out_fp16:
            x = x.to(ms.float16)
        return x


class RMSNorm(nn.Cell):  # type: ignore[misc]
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = Parameter(Tensor(np.ones((d,), np.float32)), name="weight")
        self.eps = eps

    def construct(self, x: Any) -> Any:
        return x * mint.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LLamaAttention(nn.Cell):  # type: ignore[misc]
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.scale = (d // h) ** -0.5
        self.wqkv = Linear(d, 3 * d)
        self.wo = Linear(d, d)
        self.softmax_fp16 = False
        self.mask_diagonal = 1

    def construct(self, x: Any) -> Any:
        b, t, d = x.shape
        q, k, v = self.wqkv(x).split(d, -1)
        q = mint.transpose(q.reshape(b, t, self.h, -1), 1, 2)
        k = mint.transpose(k.reshape(b, t, self.h, -1), 1, 2)
        v = mint.transpose(v.reshape(b, t, self.h, -1), 1, 2)
        s = mint.matmul(q, mint.transpose(k, 2, 3)) * self.scale
        # mint.full has no CPU kernel (FillScalar) in MindSpore 2.10
        mask = mint.triu(ops.full((t, t), -1e9), self.mask_diagonal)
        if self.softmax_fp16:
            a = mint.softmax((s + mask).to(ms.float16), -1).to(ms.float32)
        else:
            a = mint.softmax(s + mask, -1)
        o = mint.transpose(mint.matmul(a, v), 1, 2).reshape(b, t, d)
        return self.wo(o)


class LlamaFeedForward(nn.Cell):  # type: ignore[misc]
    def __init__(self, d: int, f: int) -> None:
        super().__init__()
        self.w1 = Linear(d, f)
        self.w3 = Linear(d, f)
        self.w2 = Linear(f, d)
        self.gelu = False

    def construct(self, x: Any) -> Any:
        g = self.w1(x)
        # mint.nn.functional.gelu has no CPU kernel in MindSpore 2.10 ("GeluExt unregistered")
        act = ops.gelu(g) if self.gelu else mint.nn.functional.silu(g)
        return self.w2(act * self.w3(x))


class LLamaDecodeLayer(nn.Cell):  # type: ignore[misc]
    def __init__(self, d: int, h: int, f: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(d)
        self.attention = LLamaAttention(d, h)
        self.ffn_norm = RMSNorm(d)
        self.feed_forward = LlamaFeedForward(d, f)
        self.attn_residual = True

    def construct(self, x: Any) -> Any:
        if self.attn_residual:
            x = x + self.attention(self.attention_norm(x))
        else:
            x = self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class LlamaModel(nn.Cell):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.tok_embeddings = Embedding(V, D)
        self.layers = nn.CellList([LLamaDecodeLayer(D, H, FF) for _ in range(L)])
        self.norm_out = RMSNorm(D)
        self.lm_head = Linear(D, V)

    def construct(self, ids: Any) -> Any:
        x = self.tok_embeddings(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm_out(x))


# MindFormers-style parameter names -> PyTorch state_dict keys (init_weights.npz)
MS2PT_NAME = [("tok_embeddings.", "emb."), ("norm_out.", "norm."), ("lm_head.", "head."),
              ("attention_norm.", "n1."), ("ffn_norm.", "n2."), ("attention.wqkv.", "attn.qkv."),
              ("attention.wo.", "attn.o."), ("feed_forward.w1.", "mlp.gate."),
              ("feed_forward.w3.", "mlp.up."), ("feed_forward.w2.", "mlp.down.")]


def ms_to_pt_name(name: str) -> str:
    for a, b in MS2PT_NAME:
        name = name.replace(a, b)
    return name


def apply_bug(m: LlamaModel, bug: str) -> None:
    """Mutate the loaded model for `bug` (see the module docstring)."""
    layers: Any = m.layers
    if bug == "rms_eps":
        layers[1].attention_norm.eps = 1e-5
    elif bug == "softmax_fp16":
        layers[0].attention.softmax_fp16 = True
    elif bug == "embedding_fp16":
        m.tok_embeddings.out_fp16 = True
    elif bug == "residual_dropped":
        layers[1].attn_residual = False
    elif bug == "wo_transposed":
        w = layers[1].attention.wo.weight
        w.set_data(Tensor(np.ascontiguousarray(w.asnumpy().T)))
    elif bug == "silu_to_gelu":
        layers[1].feed_forward.gelu = True
    elif bug == "mask_off_by_one":
        layers[0].attention.mask_diagonal = 2
    elif bug:
        raise ValueError(f"unknown bug {bug!r}")


def write_cfg(level: str, task: str, dump_path: str) -> str:
    """An msprobe config.json (task tensor or statistics) in a temp file."""
    cfg: dict[str, Any] = {"task": task, "dump_path": dump_path, "rank": [], "step": [],
                           "level": level, "async_dump": False,
                           task: {"scope": [], "list": [], "data_mode": ["all"]}}
    if task == "statistics":
        cfg[task]["summary_mode"] = "statistics"
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    return path


def run(init: str, level: str, task: str, dump_path: str | None, bug: str,
        steps: int = 1) -> list[float]:
    """Dumped training step(s) without an optimizer update; returns the losses."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.set_deterministic(True)
    m = LlamaModel()
    z = np.load(init)
    params = {ms_to_pt_name(p.name): p for p in m.get_parameters()}
    if set(params) != set(z.files) - {"__ids__"}:
        raise SystemExit(f"parameter names differ: {sorted(params)} vs {sorted(z.files)}")
    for k, p in params.items():
        p.set_data(Tensor(z[k].copy()))
    ids = Tensor(z["__ids__"].astype(np.int64))
    inp, tgt = ids[:, :-1], ids[:, 1:]
    apply_bug(m, bug)

    debugger = None
    if dump_path:
        from msprobe.mindspore import PrecisionDebugger

        cfg = write_cfg(level, task, dump_path)
        debugger = PrecisionDebugger(config_path=cfg)
        os.remove(cfg)

    def forward_fn(x: Any, y: Any) -> Any:
        logits = m(x)
        return ops.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))

    grad_fn = ms.value_and_grad(forward_fn, None, m.trainable_params())
    losses = []
    for _ in range(steps):
        if debugger:
            debugger.start(m)
        loss, _grads = grad_fn(inp, tgt)
        if debugger:
            debugger.stop()
            debugger.step()
        losses.append(float(loss.asnumpy()))
    return losses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--init", required=True, help="init_weights.npz (PyTorch state_dict names)")
    ap.add_argument("--dump-path", help="msprobe dump_path (omit to run without dumping)")
    ap.add_argument("--level", default="L1", choices=["L0", "L1", "mix"])
    ap.add_argument("--task", default="tensor", choices=["tensor", "statistics"])
    ap.add_argument("--bug", default="", choices=BUGS)
    ap.add_argument("--steps", type=int, default=1)
    args = ap.parse_args()
    dump = os.path.abspath(args.dump_path) if args.dump_path else None
    losses = run(args.init, args.level, args.task, dump, args.bug, args.steps)
    print(json.dumps({"losses": losses}))


if __name__ == "__main__":
    main()
