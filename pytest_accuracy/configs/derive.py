"""Derived config values: settings that one framework spells as flags, products or formulas."""

from __future__ import annotations

from pytest_accuracy.configs.keys import Found, Side, register_derive
from pytest_accuracy.configs.values import integer, number, truthy

M = "model.model_config."


# ---------------------------------------------------------------- network


@register_derive(
    "mf_ffn_hidden_size",
    reads=tuple(M + n for n in ("intermediate_size", "ffn_hidden_size", "hidden_size",
                                "multiple_of", "ffn_dim_multiplier")),
)  # fmt: skip
def mf_ffn_hidden_size(side: Side) -> Found | None:
    found = side.first((M + "intermediate_size", M + "ffn_hidden_size"))
    if found is not None:
        return found
    hidden = integer(side.get(M + "hidden_size"))
    multiple_of = integer(side.get(M + "multiple_of"))
    if hidden is None or (multiple_of is None and "llama" not in side.model_type().lower()):
        return None
    multiple_of = multiple_of or 256  # LlamaConfig's default
    multiplier = number(side.get(M + "ffn_dim_multiplier"))
    # MindFormers' LLaMA FeedForward rule: 4h (x multiplier + 0.01), x 2/3, round up to multiple_of.
    size = 4 * hidden
    if multiplier is not None:
        size = int((multiplier + 0.01) * size)
    size = int(2 * size / 3)
    size = multiple_of * ((size + multiple_of - 1) // multiple_of)
    extra = f", ffn_dim_multiplier {multiplier}" if multiplier is not None else ""
    return Found(size, f"{M}intermediate_size unset, derived from hidden_size {hidden}, "
                       f"multiple_of {multiple_of}{extra}")  # fmt: skip


@register_derive("megatron_ffn_hidden_size", reads=("ffn_hidden_size", "hidden_size", "swiglu"))
def megatron_ffn_hidden_size(side: Side) -> Found | None:
    found = side.first(("ffn_hidden_size",))
    hidden = integer(side.get("hidden_size"))
    if found is not None or hidden is None or not side.use_defaults:
        return found
    if side.flag("swiglu"):
        # Megatron's rule for --swiglu: 8h/3 rounded *down* to a multiple of 64.
        size = int((4 * hidden * 2 / 3) / 64) * 64
        return Found(size, f"--ffn-hidden-size unset, Megatron derives it from --hidden-size "
                           f"{hidden} with --swiglu")  # fmt: skip
    return Found(4 * hidden, f"--ffn-hidden-size unset, Megatron uses 4 x --hidden-size {hidden}")


@register_derive(
    "mf_kv_heads",
    reads=tuple(M + n for n in ("n_kv_heads", "num_key_value_heads", "num_query_groups",
                                "num_heads", "num_attention_heads")),
)  # fmt: skip
def mf_kv_heads(side: Side) -> Found | None:
    # r1.0-r1.3 spell it n_kv_heads, r1.5+ HF-style configs num_key_value_heads.
    found = side.first((M + "n_kv_heads", M + "num_key_value_heads", M + "num_query_groups"))
    if found is not None:
        return found
    heads = side.first((M + "num_heads", M + "num_attention_heads"))
    if heads is None:
        return None
    return Found(heads.value, f"{heads.source} (n_kv_heads unset)")


@register_derive(
    "megatron_kv_heads", reads=("group_query_attention", "num_query_groups", "num_attention_heads")
)
def megatron_kv_heads(side: Side) -> Found | None:
    groups = side.get("num_query_groups")
    if side.flag("group_query_attention") and groups is not None:
        return Found(groups, "--num-query-groups")
    heads = side.get("num_attention_heads")
    if heads is None:
        return None
    # Megatron ignores --num-query-groups unless --group-query-attention is also given.
    note = "; --num-query-groups is ignored without it" if groups is not None else ""
    return Found(heads, f"--num-attention-heads (no --group-query-attention{note})")


@register_derive("megatron_activation", reads=("swiglu", "squared_relu", "openai_gelu"))
def megatron_activation(side: Side) -> Found | None:
    if side.flag("swiglu"):
        return Found("swiglu", "--swiglu", True)
    if side.flag("squared_relu"):
        return Found("squared_relu", "--squared-relu", True)
    if side.get("swiglu") is None and not side.use_defaults:
        return None
    return Found("gelu", "no --swiglu (Megatron default GeLU)")


@register_derive(
    "megatron_position_embedding",
    reads=("position_embedding_type", "use_rotary_position_embeddings"),
)
def megatron_position_embedding(side: Side) -> Found | None:
    found = side.first(("position_embedding_type",))
    if found is not None:
        return found
    if side.flag("use_rotary_position_embeddings"):
        return Found("rope", "--use-rotary-position-embeddings", True)
    return side.default("learned_absolute", "position_embedding_type")


@register_derive(
    "megatron_padded_vocab",
    reads=("padded_vocab_size", "vocab_size", "make_vocab_size_divisible_by",
           "tensor_model_parallel_size"),
)  # fmt: skip
def megatron_padded_vocab(side: Side) -> Found | None:
    found = side.first(("padded_vocab_size",))
    vocab = integer(side.get("vocab_size"))
    if found is not None or vocab is None:
        return found
    divisible = integer(side.get("make_vocab_size_divisible_by")) or 128
    tp = integer(side.get("tensor_model_parallel_size")) or 1
    # Megatron pads the embedding to a multiple of make-vocab-size-divisible-by x TP.
    multiple = divisible * tp if side.use_defaults else 1
    padded = -(-vocab // multiple) * multiple
    if padded == vocab:
        return Found(vocab, "--vocab-size")
    return Found(padded, f"--vocab-size padded to a multiple of {divisible} x tp {tp}", vocab)


@register_derive("megatron_tied_embeddings", reads=("untie_embeddings_and_output_weights",))
def megatron_tied_embeddings(side: Side) -> Found | None:
    untie = side.get("untie_embeddings_and_output_weights")
    if untie is not None:
        return Found(not truthy(untie), "--untie-embeddings-and-output-weights", untie)
    if not side.use_defaults:
        return None
    return Found(True, "no --untie-embeddings-and-output-weights (Megatron default: tied)")


@register_derive("megatron_linear_bias", reads=("add_bias_linear",))
def megatron_linear_bias(side: Side) -> Found | None:
    bias = side.get("add_bias_linear")
    if bias is not None:
        on = truthy(bias)
        return Found(on, "--add-bias-linear" if on else "--disable-bias-linear", True)
    if not side.use_defaults:
        return None
    return Found(True, "no --disable-bias-linear (Megatron default: biases on)")


@register_derive("megatron_qkv_bias", reads=("add_qkv_bias", "add_bias_linear"))
def megatron_qkv_bias(side: Side) -> Found | None:
    if side.flag("add_qkv_bias"):
        return Found(True, "--add-qkv-bias", True)
    return megatron_linear_bias(side)


# ---------------------------------------------------------------- MoE


@register_derive(
    "megatron_sdrop", reads=("moe_token_drop_policy", "moe_pad_expert_input_to_capacity")
)
def megatron_sdrop(side: Side) -> Found | None:
    policy, pad = side.get("moe_token_drop_policy"), side.get("moe_pad_expert_input_to_capacity")
    if policy is None and pad is None and not side.use_defaults:
        return None
    policy = policy or "probs"  # Megatron default
    on = str(policy).lower() == "position" and truthy(pad)
    with_pad = "with" if truthy(pad) else "without"
    return Found(on, f"--moe-token-drop-policy {policy} {with_pad} "
                     "--moe-pad-expert-input-to-capacity")  # fmt: skip
