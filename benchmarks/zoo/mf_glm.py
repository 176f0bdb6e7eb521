"""Tiny GLM-4 on both sides of a migration: MindFormers (MindSpore) vs transformers (PyTorch).

The two sides of ``make_mf_zoo.py``, one script run by two interpreters:

  pt  (torch 2.13 + transformers 5.24 + msprobe 26.2.0)
      ``transformers.GlmForCausalLM`` (the HF port of THUDM/glm-4-9b), eager attention
      (``--attn sdpa``: the zoo's fp16 "noise" bench run, the same training under transformers'
      SDPA attention kernel).
  ms  (mindspore 2.10 CPU + mindformers 2.1.0 + msprobe 26.2.0)
      ``mindformers.models.glm2.ChatGLM2ForConditionalGeneration`` (the MindFormers legacy
      model that serves ChatGLM2/3 and GLM-4-9B), PyNative mode.

Subcommands::

  python mf_glm.py init  --out init.npz                 # pt: seed-0 model -> HF state_dict + ids
  python mf_glm.py pt    --init init.npz [--dump-path D --level L1] [--save-logits F] [--attn sdpa]
  python mf_glm.py ms    --init init.npz [--dump-path D --level L1] [--bug B] [--save-logits F]
  (pt/ms: --precision fp32|fp16|bf16, default fp32; bf16 has no MindSpore CPU kernels)

Model: vocab 64, hidden 32, 4 heads (head_dim 8), 2 kv groups (GQA), FFN 64 (SwiGLU,
fused gate_up), 2 layers, RMSNorm eps 1e-6, q/k/v bias, partial interleaved rotary (half of
each head), rope base 10000, untied head, fp32. ``torch.manual_seed(0)`` builds the HF model
(HF init: N(0, 0.02), biases zero); the q/k/v biases are then redrawn N(0, 0.02) from the same
stream so the bias mapping is exercised; ``pad_token_id=None`` (HF's embedding would zero the
pad row's gradient, MindFormers' gather does not). Ids: ``randint(0, 64, (2, 9), Generator
seed 1)``; input ``ids[:, :-1]``, labels ``ids[:, 1:]``.

Steps: forward + loss + backward, then an AdamW step (lr 1e-3, betas (0.9, 0.999), eps 1e-8,
weight decay 0.01; torch.optim.AdamW / the same update in numpy on the MindSpore side),
``--steps`` times; each step is dumped as msprobe step N.

MindSpore-side CPU workarounds (see MF.md): ``mint.norm = ops.norm``; ChatGLM2RMSNorm forced
off the Ascend-only fused RmsNorm; a float causal ``attention_mask`` passed in, because the
model's own uint8 mask times -10000 wraps to +240 on CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from typing import Any

V, D, H, KV, HD, FF, L, B, T = 64, 32, 4, 2, 8, 64, 2, 2, 8
EPS = 1e-6
BUGS = ("", "norm_eps", "silu_to_gelu", "dense_transposed", "softmax_fp16", "attn_scale",
        "mask_shift")


def write_cfg(level: str, task: str, dump_path: str, steps: int) -> str:
    cfg: dict[str, Any] = {"task": task, "dump_path": dump_path, "rank": [],
                           "step": list(range(steps)), "level": level, "async_dump": False,
                           task: {"scope": [], "list": [], "data_mode": ["all"]}}
    if task == "statistics":
        cfg[task]["summary_mode"] = "statistics"
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    return path


# ----------------------------------------------------------------------------- PyTorch side
ATTNS = ("eager", "sdpa")


def pt_model(attn: str = "eager") -> Any:
    import torch
    from transformers import GlmConfig, GlmForCausalLM

    cfg = GlmConfig(vocab_size=V, hidden_size=D, intermediate_size=FF, num_hidden_layers=L,
                    num_attention_heads=H, num_key_value_heads=KV, head_dim=HD,
                    rms_norm_eps=EPS, max_position_embeddings=T, pad_token_id=None,
                    eos_token_id=2, attention_bias=True, tie_word_embeddings=False,
                    attention_dropout=0.0)
    cfg._attn_implementation = attn  # read at every forward (ALL_ATTENTION_FUNCTIONS)
    torch.manual_seed(0)
    m = GlmForCausalLM(cfg)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("_proj.bias"):
                p.normal_(0.0, 0.02)
    return m


def pt_ids() -> Any:
    import torch
    return torch.randint(0, V, (B, T + 1), generator=torch.Generator().manual_seed(1))


def cmd_init(args: argparse.Namespace) -> None:
    import numpy as np
    m = pt_model()
    a = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    a["__ids__"] = pt_ids().numpy()
    np.savez(args.out, **a)


def cmd_pt(args: argparse.Namespace) -> None:
    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.use_deterministic_algorithms(True)
    z = np.load(args.init)
    attns = args.attn.split(",")  # per step; the last one repeats
    if any(a not in ATTNS for a in attns):
        raise SystemExit(f"--attn: each of {args.attn!r} must be one of {ATTNS}")
    m = pt_model(attns[0])
    sd = m.state_dict()
    for k in sd:  # the model is rebuilt from the seed; check it equals init.npz
        if not np.array_equal(sd[k].numpy(), z[k]):
            raise SystemExit(f"{k}: rebuilt model differs from {args.init}")
    if args.precision == "bf16":  # the usual HF way: the whole model (and AdamW state) in bf16
        m.to(torch.bfloat16)
    # fp16: autocast (fp32 master weights, fp16 matmuls: HF Trainer's fp16=True, no grad
    # scaler); m.half() + AdamW(eps=1e-8) gives NaN at step 1 (eps rounds to 0 in fp16, 0/0
    # for the embedding rows no id uses)
    amp = (torch.autocast("cpu", dtype=torch.float16) if args.precision == "fp16"
           else contextlib.nullcontext())
    ids = torch.from_numpy(z["__ids__"])
    inp, tgt = ids[:, :-1], ids[:, 1:]
    debugger = None
    if args.dump_path:
        from msprobe.pytorch import PrecisionDebugger
        cfg = write_cfg(args.level, args.task, os.path.abspath(args.dump_path), args.steps)
        debugger = PrecisionDebugger(config_path=cfg)
        os.remove(cfg)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m.train()
    losses = []
    for step in range(args.steps):
        attn = attns[min(step, len(attns) - 1)]
        if attn != m.config._attn_implementation:
            m.set_attn_implementation(attn)
        if debugger:
            debugger.start(m)
        with amp:
            logits = m(input_ids=inp).logits
        loss = F.cross_entropy(logits.float().reshape(-1, V), tgt.reshape(-1))
        loss.backward()
        if debugger:
            debugger.stop()
            debugger.step()
        if step == 0 and args.save_logits:
            np.save(args.save_logits, logits.detach().float().numpy())
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.item()))
    print(json.dumps({"losses": losses}))


# --------------------------------------------------------------------------- MindSpore side
# HF (transformers GlmForCausalLM) state_dict name -> MindFormers ChatGLM2 parameter name
def hf_to_mf_name(k: str) -> str:
    k = k.replace("model.embed_tokens.weight", "transformer.embedding.embedding_weight")
    k = k.replace("model.layers.", "transformer.encoder.layers.")
    k = k.replace(".self_attn.q_proj.", ".self_attention.wq.")
    k = k.replace(".self_attn.k_proj.", ".self_attention.wk.")
    k = k.replace(".self_attn.v_proj.", ".self_attention.wv.")
    k = k.replace(".self_attn.o_proj.", ".self_attention.dense.")
    k = k.replace(".mlp.gate_up_proj.", ".mlp.dense_h_to_4h.")
    k = k.replace(".mlp.down_proj.", ".mlp.dense_4h_to_h.")
    k = k.replace("model.norm.", "transformer.encoder.final_layernorm.")
    k = k.replace("lm_head.", "transformer.output_layer.")
    return k


def ms_setup() -> None:
    """CPU workarounds, before MindFormers builds a model and before msprobe is imported."""
    import mindspore as ms
    from mindspore import mint, ops
    from mindspore.ops import operations as P

    # msprobe's statistics call mint.norm (no CPU kernel in MindSpore 2.10)
    mint.norm = ops.norm
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.set_deterministic(True)
    import mindformers.models.glm2.glm2_modules as gm

    # The fused RmsNorm kernel is Ascend-only: take ChatGLM2RMSNorm's own square/mean/rsqrt
    # path (the one MindFormers uses on 910A), whose _self_norm needs a `cast` it only
    # creates for the fused path.
    gm.check_rmsnorm_big_kernel_valid = lambda: False
    orig = gm.ChatGLM2RMSNorm.__init__

    def init(self: Any, *a: Any, **k: Any) -> None:
        orig(self, *a, **k)
        self.cast = P.Cast()

    gm.ChatGLM2RMSNorm.__init__ = init


# --precision bf16 / fp16: MindFormers' own GLM-4 training dtypes
# (configs/glm4/finetune_glm4_9b.yaml): low-precision compute (Linear matmuls, attention
# scores/context), fp32 master weights, fp32 RMSNorm, fp32 rotary, fp32 residual
# (ChatGLM2Config default; the yaml does not set it), softmax in fp32
# (attention_softmax_in_fp32: True). fp16 is that yaml with compute_dtype float16 (what
# 910A, which has no bf16, runs). MindSpore 2.10 CPU has no bf16 MatMul / BatchMatMul /
# Softmax / Sigmoid kernel ("Select CPU operator[MatMul] fail! Unsupported data type!").
PRECISIONS = ("fp32", "bf16", "fp16")
MF_DTYPES = {p: {"param_init_type": "float32",
                 "compute_dtype": {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[p],
                 "layernorm_compute_type": "float32", "residual_dtype": "float32",
                 "rotary_dtype": "float32"} for p in PRECISIONS}


def ms_model(precision: str = "fp32") -> Any:
    from mindformers.models.glm2 import ChatGLM2Config, ChatGLM2ForConditionalGeneration

    cfg = ChatGLM2Config(
        batch_size=B, num_layers=L, padded_vocab_size=V, hidden_size=D, ffn_hidden_size=FF,
        kv_channels=HD, num_attention_heads=H, seq_length=T, layernorm_epsilon=EPS,
        add_qkv_bias=True, add_bias_linear=False, multi_query_attention=True,
        multi_query_group_num=KV, **MF_DTYPES[precision], attention_softmax_in_fp32=True,
        qkv_concat=False, mlp_concat=True, use_flash_attention=False, use_past=False,
        hidden_dropout=0.0, attention_dropout=0.0)
    return ChatGLM2ForConditionalGeneration(cfg)


def apply_bug(m: Any, bug: str) -> None:
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor, nn, ops
    from mindspore.ops import operations as P

    layers = m.transformer.encoder.layers
    if bug == "norm_eps":
        layers[1].input_layernorm.eps = Tensor(1e-5, ms.float32)
    elif bug == "silu_to_gelu":
        layers[1].mlp.activation_func.silu.silu = P.GeLU()
    elif bug == "dense_transposed":
        w = layers[1].self_attention.dense.weight
        w.set_data(Tensor(np.ascontiguousarray(w.asnumpy().T)))
    elif bug == "softmax_fp16":
        class Fp16Softmax(nn.Cell):  # type: ignore[misc]
            def construct(self, x: Any) -> Any:
                return ops.softmax(x.astype(ms.float16), -1).astype(ms.float32)

        layers[0].self_attention.core_attention.softmax = Fp16Softmax()
    elif bug == "attn_scale":
        layers[1].self_attention.core_attention.norm_factor = float(HD)  # 1/d, not 1/sqrt(d)
    elif bug == "mask_shift":
        pass  # made in causal_mask(): triu(.., 2), each token also sees the next one
    elif bug:
        raise ValueError(f"unknown bug {bug!r}")


def causal_mask(bug: str) -> Any:
    """The (B, 1, T, T) float mask given to ChatGLM2 as ``attention_mask`` (1 = masked).

    Without it ChatGLM2Model.get_masks builds a uint8 mask and CoreAttention multiplies it by
    -10000: on the MindSpore 2.10 CPU backend (PyNative) uint8 * -10000 stays uint8 and wraps
    to 240, so every masked (future) score gets +240 instead of -10000. A float mask takes
    ChatGLM2Model's `full_attention_mask = attention_mask` path (the dataset-mask path)."""
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor

    diag = 2 if bug == "mask_shift" else 1
    return Tensor(np.triu(np.ones((B, 1, T, T), np.float32), diag), ms.float32)


def adamw_numpy(weights: list[Any], grads: Any, state: dict[str, Any], t: int) -> None:
    """torch.optim.AdamW's update (lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.01) in numpy:
    mindspore.mint.optim.AdamW has no CPU kernel ("AdamW unregistered") in MindSpore 2.10."""
    import numpy as np
    from mindspore import Tensor

    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-8, 0.01
    for p, g in zip(weights, grads, strict=True):
        w, g = p.asnumpy().astype(np.float32), g.asnumpy().astype(np.float32)
        m_, v_ = state.setdefault(p.name, (np.zeros_like(w), np.zeros_like(w)))
        w = w * np.float32(1 - lr * wd)
        m_ = np.float32(b1) * m_ + np.float32(1 - b1) * g
        v_ = np.float32(b2) * v_ + np.float32(1 - b2) * g * g
        state[p.name] = (m_, v_)
        den = np.sqrt(v_) / np.float32(np.sqrt(1 - b2 ** t)) + np.float32(eps)
        w = w - np.float32(lr / (1 - b1 ** t)) * m_ / den
        p.set_data(Tensor(w.astype(np.float32)))


def cmd_ms(args: argparse.Namespace) -> None:
    ms_setup()
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor

    m = ms_model(args.precision)
    z = np.load(args.init)
    params = {p.name: p for p in m.get_parameters() if "paged_attention_mgr" not in p.name}
    src = {hf_to_mf_name(k): k for k in z.files if k != "__ids__"}
    if set(params) != set(src):
        raise SystemExit(f"parameter names differ: {sorted(set(params) ^ set(src))}")
    for k, p in params.items():
        p.set_data(Tensor(z[src[k]].copy()))
    ids = Tensor(z["__ids__"].astype(np.int32))
    inp, tgt = ids[:, :-1], ids[:, 1:]
    apply_bug(m, args.bug)
    mask = causal_mask(args.bug)

    if args.save_logits:
        m.set_train(False)
        out = m(inp, attention_mask=mask)[0].astype(ms.float32)  # compute dtype
        np.save(args.save_logits, out.asnumpy().reshape(B, T, V))
    m.set_train(True)
    debugger = None
    if args.dump_path:
        from msprobe.mindspore import PrecisionDebugger
        cfg = write_cfg(args.level, args.task, os.path.abspath(args.dump_path), args.steps)
        debugger = PrecisionDebugger(config_path=cfg)
        os.remove(cfg)

    def forward_fn(x: Any, y: Any) -> Any:
        return m(x, y, attention_mask=mask)

    weights = m.trainable_params()
    grad_fn = ms.value_and_grad(forward_fn, None, weights)
    state: dict[str, Any] = {}
    losses = []
    for step in range(args.steps):
        if debugger:
            debugger.start(m)
        loss, grads = grad_fn(inp, tgt)
        if debugger:
            debugger.stop()
            debugger.step()
        adamw_numpy(weights, grads, state, step + 1)
        losses.append(float(loss.asnumpy()))
    print(json.dumps({"losses": losses}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init")
    p.add_argument("--out", required=True)
    for name in ("pt", "ms"):
        p = sub.add_parser(name)
        p.add_argument("--init", required=True)
        p.add_argument("--dump-path")
        p.add_argument("--level", default="L1", choices=["L0", "L1", "mix"])
        p.add_argument("--task", default="tensor", choices=["tensor", "statistics"])
        p.add_argument("--steps", type=int, default=1)
        p.add_argument("--save-logits")
        p.add_argument("--precision", default="fp32", choices=PRECISIONS,
                       help="pt: bf16 model.to(bfloat16), fp16 autocast; ms: MindFormers' "
                            "GLM-4 training dtypes with that compute_dtype")
        if name == "ms":
            p.add_argument("--bug", default="", choices=BUGS)
        else:
            p.add_argument("--attn", default="eager",
                           help="transformers attn_implementation: eager (the bench) or sdpa "
                                "(torch scaled_dot_product_attention: the noise bench run); a "
                                "comma list gives one per step (sdpa,eager: step 0 sdpa, then "
                                "eager), the last one repeating")
    args = ap.parse_args()
    {"init": cmd_init, "pt": cmd_pt, "ms": cmd_ms}[args.cmd](args)


if __name__ == "__main__":
    main()
