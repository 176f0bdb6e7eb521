"""TransformerLens adapter for the cross-codebase zoo: a ``HookedTransformer`` (TransformerLens 3.x,
the last line that still ships it; 4.0 removed it for ``TransformerBridge``, which wraps the HF
module itself and so would not be a second codebase) with weights converted from the HF
``LlamaForCausalLM`` by TransformerLens's own ``convert_llama_weights``.

Interface used by make_cross_zoo.py:
  NAME                      case-name prefix
  build(hf_model)           HookedTransformer, weights converted from hf_model (fp32, no processing)
  logits(model, inp)        logits for input ids [B, S] (clean check only)
  loss(model, ids)          forward + loss the TransformerLens way, ids [B, S+1]
  BUGS                      bug -> (class, patch(model) in place, site); lr_double's patch sets
                            ``model.opt_overrides = {"lr": 2e-3}`` (what make_cross_zoo reads)
  SITES                     bug -> site = (step, module path in the TL model, api prefix at L1)

How HookedTransformer differs from HF Llama (all exact in fp32 to < 1e-5 on the bench config):
- weights: W_Q/W_K/W_V [n_heads, d_model, d_head], W_O [n_heads, d_head, d_model], MLP W_in /
  W_gate / W_out stored transposed ([in, out]); zero b_Q/b_K/b_V/b_O/b_in/b_out/b_U exist (HF has
  no biases). They do not change the forward, but their grads are not zero and AdamW would move
  them by ~lr at the first step, so they are frozen (requires_grad False, grad stays None and
  AdamW skips them) to train like the bias-free HF model.
- rotary: rotary_adjacent_pairs False = HF rotate-half; sin/cos tables of n_ctx rows built at init.
- attention: q @ k^T / sqrt(d_head) (a division, HF multiplies by the scale), the causal mask is
  torch.where(mask, scores, -inf) built per forward, softmax then a NaN -> 0 torch.where.
- loss: HookedTransformer(tokens, return_type="loss") runs all S+1 tokens and drops the last
  logit; we run ids[:, :-1] so shapes match HF, then do what lm_cross_entropy_loss does
  (log_softmax, gather the next token, negative mean).
"""
from __future__ import annotations

import math
import types
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

NAME = "tl"


def build(hf_model: nn.Module) -> nn.Module:
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.loading_from_pretrained import _get_rope_theta
    from transformer_lens.pretrained.weight_conversions.llama import convert_llama_weights

    c = hf_model.config
    hd = c.hidden_size // c.num_attention_heads
    cfg = HookedTransformerConfig(
        d_model=c.hidden_size, d_head=hd, n_heads=c.num_attention_heads,
        d_mlp=c.intermediate_size, n_layers=c.num_hidden_layers, n_ctx=c.max_position_embeddings,
        eps=c.rms_norm_eps, d_vocab=c.vocab_size, act_fn=c.hidden_act,
        n_key_value_heads=(c.num_key_value_heads
                           if c.num_key_value_heads != c.num_attention_heads else None),
        normalization_type="RMS", positional_embedding_type="rotary",
        rotary_adjacent_pairs=False, rotary_dim=hd, rotary_base=_get_rope_theta(c),
        final_rms=True, gated_mlp=True, original_architecture="LlamaForCausalLM",
        dtype=torch.float32, device="cpu", default_prepend_bos=False, seed=None)
    model = HookedTransformer(cfg, move_to_device=False)
    sd = convert_llama_weights(hf_model, cfg)
    sd = {k: v.detach().clone() for k, v in sd.items()}
    model.load_and_process_state_dict(sd, fold_ln=False, center_writing_weights=False,
                                      center_unembed=False, fold_value_biases=False,
                                      refactor_factored_attn_matrices=False)
    # HF Llama has no biases: keep TL's zero biases out of training (see the module docstring)
    for name, p in model.named_parameters():
        if name.split(".")[-1].startswith(("b_", "_b_")):
            p.requires_grad_(False)
    return model.train()


def logits(model: nn.Module, inp: torch.Tensor) -> torch.Tensor:
    return model(inp, return_type="logits")


def loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    inp, target = ids[:, :-1], ids[:, 1:]
    out = model(inp, return_type="logits")
    # transformer_lens.utilities.lm_utils.lm_cross_entropy_loss, on S (not S+1) positions
    log_probs = F.log_softmax(out, dim=-1)
    return -log_probs.gather(dim=-1, index=target[..., None])[..., 0].mean()


# --- bugs: TL layer i = blocks.{i}: ln1, attn, ln2, mlp ---

def _norm_eps(m: nn.Module) -> None:
    m.blocks[1].ln1.eps = 1e-5  # RMSNorm.forward reads self.eps


def _attn_scale(m: nn.Module) -> None:
    a = m.blocks[1].attn
    assert abs(a.attn_scale - math.sqrt(a.cfg.d_head)) < 1e-12
    a.attn_scale = float(a.cfg.d_head)  # scores / d_head, i.e. scale 1/head_dim


def _mask_shift(m: nn.Module) -> None:
    a = m.blocks[0].attn

    def _make_causal_mask(self, query_ctx_length, key_ctx_length, past_kv_pos_offset, device):
        # off by one: query positions start one later, so each position also sees the next token
        q = torch.arange(past_kv_pos_offset + 1, past_kv_pos_offset + 1 + query_ctx_length,
                         device=device)
        k = torch.arange(key_ctx_length, device=device)
        return (k[None, :] <= q[:, None])[None, None, :, :]
    a._make_causal_mask = types.MethodType(_make_causal_mask, a)


def _softmax_fp16(m: nn.Module) -> None:
    # hook_attn_scores hands the masked scores to F.softmax: cast them to fp16 there, so the
    # softmax runs in fp16; AbstractAttention.forward's own pattern.to(v.dtype) casts back
    m.blocks[0].attn.hook_attn_scores.register_forward_hook(lambda mod, inp, out: out.half())


def _linear_bf16(m: nn.Module) -> None:
    mlp = m.blocks[1].mlp
    orig_out = mlp.hook_post

    # GatedMLP.forward ends F.linear(post_act, W_out.T.contiguous(), b_out): run that in bf16
    def forward(self, x):
        if self.W_gate.device != x.device:
            x = x.to(self.W_gate.device)
        pre_act = self.hook_pre(F.linear(x, self.W_gate.T.contiguous()))
        pre_linear = self.hook_pre_linear(F.linear(x, self.W_in.T.contiguous()))
        post_act = orig_out((self.act_fn(pre_act) * pre_linear) + self.b_in)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.linear(post_act, self.W_out.T.contiguous(), self.b_out)
    mlp.forward = types.MethodType(forward, mlp)


def _qk_swapped(m: nn.Module) -> None:
    a = m.blocks[1].attn
    with torch.no_grad():
        q = a.W_Q.clone()
        a.W_Q.copy_(a.W_K)
        a.W_K.copy_(q)


def _wo_transposed(m: nn.Module) -> None:
    # W_O [n_heads, d_head, d_model] seen as the d_model x d_model matrix [(n h), m], transposed
    w = m.blocks[0].attn.W_O
    n, h, d = w.shape
    with torch.no_grad():
        w.copy_(w.reshape(n * h, d).t().reshape(n, h, d).clone())


def _silu_gelu(m: nn.Module) -> None:
    m.blocks[0].mlp.act_fn = lambda x: F.gelu(x)


def _lr(m: nn.Module) -> None:
    m.opt_overrides = {"lr": 2e-3}


_BUGS: dict[str, tuple[str, Callable[[nn.Module], None]]] = {
    "norm_eps": ("hyperparameter", _norm_eps),
    "attn_scale": ("hyperparameter", _attn_scale),
    "mask_shift": ("logic", _mask_shift),
    "softmax_fp16": ("precision", _softmax_fp16),
    "linear_bf16": ("precision", _linear_bf16),
    "qk_swapped": ("weights", _qk_swapped),
    "wo_transposed": ("weights", _wo_transposed),
    "silu_gelu": ("activation", _silu_gelu),
    "lr_double": ("optimizer", _lr),  # sets model.opt_overrides = {"lr": 2e-3}
}

# (first step whose forward differs, module path in the TL model, api prefix at L1 there),
# checked against msprobe 26.2.0 dumps (python cross_tl.py --smoke DIR tl mix BUG).
SITES: dict[str, tuple[int, str, str]] = {
    "norm_eps": (0, "blocks.1.ln1", "Tensor.__add__."),  # mean(x^2) + eps
    "attn_scale": (0, "blocks.1.attn", "Tensor.__truediv__."),  # q @ k / attn_scale
    "mask_shift": (0, "blocks.0.attn", "Tensor.__le__."),  # its query-position input; softmax
    # is the first node whose output statistics differ (the masked where keeps Max/Min)
    "softmax_fp16": (0, "blocks.0.attn", "Functional.softmax."),
    "linear_bf16": (0, "blocks.1.mlp", "Functional.linear."),
    "qk_swapped": (0, "blocks.1.attn", "Functional.linear."),
    "wo_transposed": (0, "blocks.0.attn", "Functional.linear."),
    "silu_gelu": (0, "blocks.0.mlp", "Functional.gelu."),  # an extra node: TL's clean silu is
    # F.silu bound at import, which msprobe's wrapper may never see (HF records Functional.silu)
    "lr_double": (1, "blocks.0.ln1", "Tensor.pow."),  # W_E[tokens] is not an L1 node
}

# bug -> (class, patch(model), site): the shape make_cross_zoo.py reads (BUGS[b][1](m),
# BUGS[b][2] as the site), as in cross_xt.py
BUGS: dict[str, tuple[str, Callable[[nn.Module], None], tuple[int, str, str]]] = {
    k: (cls, fn, SITES[k]) for k, (cls, fn) in _BUGS.items()}


# --- self check: python cross_tl.py | python cross_tl.py --smoke DIR tl|hf L1|L0|mix [BUG] ---

EMB_STD = None  # --emb-std1: embedding re-drawn with std 1 (as make_cross_zoo may do)


def _hf_model() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, num_attention_heads=4, num_key_value_heads=4,
                      intermediate_size=64, num_hidden_layers=2, rms_norm_eps=1e-6,
                      tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                      max_position_embeddings=64)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).float().train()
    if EMB_STD is not None:
        with torch.no_grad():
            m.model.embed_tokens.weight.normal_(0.0, EMB_STD)
    return m


def _hf_loss(hf: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    out = hf(input_ids=ids[:, :-1], use_cache=False).logits
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), ids[:, 1:].reshape(-1))


def _ids(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, (2, 9), generator=g)


def _clean_check() -> bool:
    import copy
    hf = _hf_model()
    tl = build(copy.deepcopy(hf))
    ids = _ids()
    ok = True
    with torch.no_grad():
        dl = (logits(tl, ids[:, :-1]) - hf(input_ids=ids[:, :-1], use_cache=False).logits)
    print(f"step 0 logits max|diff| = {dl.abs().max().item():.3e}")
    ok &= dl.abs().max().item() < 1e-5
    oh = torch.optim.AdamW(hf.parameters(), lr=1e-3)
    ot = torch.optim.AdamW([p for p in tl.parameters() if p.requires_grad], lr=1e-3)
    for step in range(3):
        lh, lt = _hf_loss(hf, ids), loss(tl, ids)
        d = abs(lh.item() - lt.item())
        print(f"step {step} loss hf={lh.item():.7f} tl={lt.item():.7f} |diff|={d:.3e}")
        ok &= d < 1e-5
        for opt, loss_ in ((oh, lh), (ot, lt)):
            opt.zero_grad()
            loss_.backward()
            opt.step()
    with torch.no_grad():
        dl = (logits(tl, ids[:, :-1]) - hf(input_ids=ids[:, :-1], use_cache=False).logits)
    print(f"step 3 logits max|diff| = {dl.abs().max().item():.3e}")
    ok &= dl.abs().max().item() < 1e-5
    return bool(ok)


def _trajectory(m: nn.Module, ids: torch.Tensor, lr: float, steps: int) -> list[float]:
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=lr)
    out = []
    for _ in range(steps):
        ls = loss(m, ids)
        out.append(ls.item())
        opt.zero_grad()
        ls.backward()
        opt.step()
    return out


def _bug_deltas(steps: int = 4) -> bool:
    """Per bug: TL loss with the bug minus clean TL loss, at step 0 and at step ``steps``-1."""
    import copy
    hf = _hf_model()
    ids = _ids()
    base = _trajectory(build(copy.deepcopy(hf)), ids, 1e-3, steps)
    ok = True
    for name, (cls, fn, _site) in BUGS.items():
        tl = build(copy.deepcopy(hf))
        fn(tl)
        traj = _trajectory(tl, ids, getattr(tl, "opt_overrides", {}).get("lr", 1e-3), steps)
        d = [a - b for a, b in zip(traj, base, strict=True)]
        print(f"bug {name:14s} ({cls:14s}) loss delta step0 {d[0]:+.3e} step{steps - 1} "
              f"{d[-1]:+.3e}  site {SITES[name]}")
        ok &= max(abs(x) for x in d) > 1e-7
    return bool(ok)


def _smoke(out_dir: str, side: str, level: str, bug: str | None = None, steps: int = 2) -> None:
    """``steps`` steps (forward+backward+AdamW) of one side under msprobe ``level`` statistics.
    One side and level per process: msprobe's PrecisionDebugger is a process-wide singleton."""
    import copy
    import json
    import os

    from msprobe.pytorch import PrecisionDebugger
    hf = _hf_model()
    ids = _ids()
    m = build(copy.deepcopy(hf)) if side == "tl" else hf
    if side == "tl" and bug is not None:
        BUGS[bug][1](m)
    d = os.path.join(out_dir, f"{side}_{level}" + (f"_{bug}" if bug else ""))
    os.makedirs(out_dir, exist_ok=True)
    cfgp = d + ".json"
    with open(cfgp, "w") as f:
        json.dump({"task": "statistics", "dump_path": d, "rank": [], "step": [], "level": level,
                   "async_dump": False, "statistics": {"scope": [], "list": [],
                   "data_mode": ["all"], "summary_mode": "statistics"}}, f)
    dbg = PrecisionDebugger(config_path=cfgp)
    opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3)
    for step in range(steps):
        dbg.start(model=m)
        ls = loss(m, ids) if side == "tl" else _hf_loss(m, ids)
        ls.backward()
        dbg.stop()
        opt.step()
        opt.zero_grad()
        dbg.step()
        print(side, level, "step", step, "loss", ls.item())


if __name__ == "__main__":
    import sys
    if "--emb-std1" in sys.argv:
        sys.argv.remove("--emb-std1")
        EMB_STD = 1.0
    if len(sys.argv) > 2 and sys.argv[1] == "--smoke":
        _smoke(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
        sys.exit(0)
    good = _clean_check()
    good &= _bug_deltas()
    print("OK" if good else "FAIL")
    sys.exit(0 if good else 1)
