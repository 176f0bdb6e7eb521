"""x-transformers (lucidrains) adapter for the cross-codebase zoo: a Llama-equivalent
``TransformerWrapper(Decoder(...))`` with weights converted from the HF ``LlamaForCausalLM``.

Interface used by make_cross_zoo.py (any ``cross_<name>.py`` may provide the same):
  NAME                      case-name prefix
  build(hf_model)           this codebase's model, weights converted from hf_model (fp32)
  logits(model, inp)        logits for input ids [B, S] (clean check only)
  loss(model, ids)          forward + loss this codebase's way, ids [B, S+1]
  BUGS                      bug -> (class, patch(model) in place, site (step, module, api))
A patch may set ``model.opt_overrides = {"lr": ...}`` for an optimizer bug.

Differences from HF Llama that the conversion absorbs (all exact in real arithmetic):
- rotary: x-transformers rotates interleaved pairs (2i, 2i+1), HF rotate-half pairs (i, i+d/2);
  the q/k projection rows are permuted per head so the two agree.
- RMSNorm: x-transformers computes F.normalize(x) * sqrt(dim) * g, i.e. no eps. HF adds
  eps=1e-6 to mean(x^2); make_cross_zoo initialises the embedding with std 1 so that the
  eps is below fp32 resolution relative to mean(x^2) ~ 1.
- SwiGLU: one fused GLU proj (cat[up; gate]) -> up * silu(gate); its (unused) bias is removed.
- loss: torch_einops_utils.cross_entropy on logits rearranged 'b n c -> b c n' (what
  x-transformers' AutoregressiveWrapper calls), on inputs ids[:, :-1] (the wrapper itself runs
  the net on all S+1 tokens and drops the last logit; we feed S tokens so shapes match HF).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

NAME = "xt"
PACKAGE = "x-transformers"  # distribution, for the versions recorded in truth.json


def _permute_rotary(w: torch.Tensor, heads: int) -> torch.Tensor:
    """HF rotate-half row order -> interleaved: per head, row 2i <- i, row 2i+1 <- i + d/2."""
    out_dim, dim = w.shape
    hd = out_dim // heads
    w = w.reshape(heads, 2, hd // 2, dim)  # [h, half, i, in]
    return w.transpose(1, 2).reshape(out_dim, dim)  # [h, i, half, in]


def build(hf_model: nn.Module) -> nn.Module:
    from x_transformers import Decoder, TransformerWrapper
    cfg = hf_model.config
    hd = cfg.hidden_size // cfg.num_attention_heads
    assert cfg.num_key_value_heads == cfg.num_attention_heads
    m = TransformerWrapper(
        num_tokens=cfg.vocab_size, max_seq_len=cfg.max_position_embeddings,
        use_abs_pos_emb=False, tie_embedding=False,
        attn_layers=Decoder(
            dim=cfg.hidden_size, depth=cfg.num_hidden_layers, heads=cfg.num_attention_heads,
            attn_dim_head=hd, rotary_pos_emb=True, rotary_emb_dim=hd,
            use_rmsnorm=True, norm_add_unit_offset=False,  # gamma = g, not g + 1
            ff_glu=True, ff_swish=True, ff_no_bias=True,
            ff_mult=cfg.intermediate_size / cfg.hidden_size))
    assert m.attn_layers.rotary_pos_emb is not None
    sd = hf_model.state_dict()
    h = cfg.num_attention_heads
    new: dict[str, torch.Tensor] = {
        "token_emb.emb.weight": sd["model.embed_tokens.weight"],
        "attn_layers.final_norm.g": sd["model.norm.weight"],
        "to_logits.weight": sd["lm_head.weight"],
    }
    for i in range(cfg.num_hidden_layers):
        p, a, f = f"model.layers.{i}.", f"attn_layers.layers.{2 * i}.", \
            f"attn_layers.layers.{2 * i + 1}."
        new[a + "0.0.g"] = sd[p + "input_layernorm.weight"]
        new[a + "1.to_q.weight"] = _permute_rotary(sd[p + "self_attn.q_proj.weight"], h)
        new[a + "1.to_k.weight"] = _permute_rotary(sd[p + "self_attn.k_proj.weight"], h)
        new[a + "1.to_v.weight"] = sd[p + "self_attn.v_proj.weight"]
        new[a + "1.to_out.weight"] = sd[p + "self_attn.o_proj.weight"]
        new[f + "0.0.g"] = sd[p + "post_attention_layernorm.weight"]
        new[f + "1.ff.0.proj.weight"] = torch.cat([sd[p + "mlp.up_proj.weight"],
                                                   sd[p + "mlp.gate_proj.weight"]])
        new[f + "1.ff.2.weight"] = sd[p + "mlp.down_proj.weight"]
        m.attn_layers.layers[2 * i + 1][1].ff[0].proj.register_parameter("bias", None)
    missing, unexpected = m.load_state_dict({k: v.clone() for k, v in new.items()}, strict=False)
    missing = [k for k in missing if not k.endswith("inv_freq")]
    if missing or unexpected:
        raise RuntimeError(f"conversion incomplete: missing {missing}, unexpected {unexpected}")
    return m.train()


def logits(model: nn.Module, inp: torch.Tensor) -> torch.Tensor:
    return model(inp)


def loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    from einops import rearrange
    from x_transformers.autoregressive_wrapper import cross_entropy
    inp, target = ids[:, :-1], ids[:, 1:]
    out = model(inp)
    return cross_entropy(rearrange(out, "b n c -> b c n"), target, ignore_index=-100)


# --- bugs: xt layer i attention = attn_layers.layers.{2i}, FFN = attn_layers.layers.{2i+1} ---

def _attn(m: nn.Module, layer: int) -> nn.Module:
    return m.attn_layers.layers[2 * layer][1]


def _ff(m: nn.Module, layer: int) -> nn.Module:
    return m.attn_layers.layers[2 * layer + 1][1]


def _norm_eps(eps: float) -> Callable[[nn.Module], None]:
    def patch(m: nn.Module) -> None:
        norm = m.attn_layers.layers[2][0][0]  # layer 1 attention (input) norm

        def forward(x: torch.Tensor) -> torch.Tensor:
            # x-transformers' RMSNorm has no eps; the bug gives it a Llama-style one
            gamma = norm.g + float(norm.unit_offset)
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gamma
        norm.forward = forward
    return patch


def _attn_scale(m: nn.Module) -> None:
    att = _attn(m, 1).attend
    assert abs(att.scale - 8 ** -0.5) < 1e-12, att.scale
    att.scale = 1.0 / 8  # 1/head_dim instead of 1/sqrt(head_dim)


def _mask_shift(m: nn.Module) -> None:
    def create_causal_mask(i: int, j: int, device: Any) -> torch.Tensor:
        # off by one: each position also sees the next token
        return torch.ones((i, j), device=device, dtype=torch.bool).triu(j - i + 2)
    _attn(m, 0).attend.create_causal_mask = create_causal_mask


def _softmax_fp16(m: nn.Module) -> None:
    # F.softmax(dtype=fp16) casts the scores in; Attend casts the result back to fp32
    att = _attn(m, 0).attend
    att.attn_fn = lambda sim: F.softmax(sim, dim=-1, dtype=torch.float16)


def _linear_bf16(m: nn.Module) -> None:
    lin = _ff(m, 1).ff[2]  # layer 1 MLP down projection

    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.linear(x, lin.weight, lin.bias)
    lin.forward = forward


def _qk_swapped(m: nn.Module) -> None:
    a = _attn(m, 1)
    with torch.no_grad():
        q = a.to_q.weight.clone()
        a.to_q.weight.copy_(a.to_k.weight)
        a.to_k.weight.copy_(q)


def _weight_transposed(m: nn.Module) -> None:
    w = _attn(m, 0).to_out.weight
    with torch.no_grad():
        w.copy_(w.t().clone())


def _silu_gelu(m: nn.Module) -> None:
    _ff(m, 0).ff[0].act = nn.GELU()


def _lr(m: nn.Module) -> None:
    m.opt_overrides = {"lr": 2e-3}


L1A, L0A, L1F, L0F = ("attn_layers.layers.2.1", "attn_layers.layers.0.1",
                      "attn_layers.layers.3.1", "attn_layers.layers.1.1")
# A 4th element is the clean twin of a bug that changes the calls: the truth compares the
# buggy run with it (x-transformers' RMSNorm has no eps; the bug gives it one, the twin 0).
BUGS: dict[str, tuple[Any, ...]] = {
    "norm_eps": ("hyperparameter", _norm_eps(1e-5),
                 (0, "attn_layers.layers.2.0.0", "Tensor.__add__."), _norm_eps(0.0)),
    "norm_eps_big": ("hyperparameter", _norm_eps(1e-3),
                     (0, "attn_layers.layers.2.0.0", "Tensor.__add__."), _norm_eps(0.0)),
    "attn_scale": ("hyperparameter", _attn_scale, (0, L1A + ".attend", "Tensor.__mul__.")),
    "mask_shift": ("logic", _mask_shift, (0, L0A + ".attend", "Tensor.masked_fill.")),
    "softmax_fp16": ("precision", _softmax_fp16, (0, L0A + ".attend", "Functional.softmax.")),
    "linear_bf16": ("precision", _linear_bf16, (0, L1F + ".ff.2", "Functional.linear.")),
    "qk_swapped": ("weights", _qk_swapped, (0, L1A + ".to_q", "Functional.linear.")),
    "weight_transposed": ("weights", _weight_transposed,
                          (0, L0A + ".to_out", "Functional.linear.")),
    "silu_gelu": ("activation", _silu_gelu, (0, L0F + ".ff.0.act", "Functional.gelu.")),
    "lr": ("optimizer", _lr, (1, "token_emb.emb", "Functional.embedding.")),
}
