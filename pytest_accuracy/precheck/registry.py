"""The precheck allow-list: dump API names -> canonical ops -> float64 numpy references.

A dump name resolves only through an exact lookup in ``_PYTORCH`` / ``_MINDSPORE``
below.  Anything else (``Torch.save``, ``Mint.save``, ``Tensor.__reduce_ex__``, a
typo, an API we have no reference for) has no reference and its case is skipped with
the reason; no name from a dump ever reaches ``getattr``, ``eval`` or ``importlib``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

import numpy as np

from pytest_accuracy.precheck import refs_attention as att
from pytest_accuracy.precheck import refs_math as m
from pytest_accuracy.precheck import refs_nn as nn
from pytest_accuracy.precheck import refs_shape as sh
from pytest_accuracy.precheck.args import Bound, Signature

Forward = Callable[[Bound], list[np.ndarray]]
Backward = Callable[[Bound, list[np.ndarray | None]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class RefOp:
    """One canonical op: its float64 reference and, where we have one, its gradient."""

    forward: Forward
    backward: Backward | None = None
    compared_outputs: int | None = None  # fused kernels return internals after these
    no_grad: frozenset[str] = frozenset()  # float arguments autograd does not differentiate


_UNARY_OPS: tuple[str, ...] = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "square", "sin")
_UNARY_OPS += ("cos", "tanh", "sigmoid", "relu")


def _unary(name: str) -> RefOp:
    forward, backward = m.unary(name)
    return RefOp(forward, backward)


REFERENCES: dict[str, RefOp] = {
    "linear": RefOp(nn.linear, nn.linear_bw),
    "matmul": RefOp(nn.matmul, nn.matmul_bw),
    "add": RefOp(m.add, m.add_bw),
    "sub": RefOp(m.sub, m.sub_bw),
    "rsub": RefOp(m.rsub, m.rsub_bw),
    "mul": RefOp(m.mul, m.mul_bw),
    "div": RefOp(m.div, m.div_bw),
    "rdiv": RefOp(m.rdiv, m.rdiv_bw),
    "pow": RefOp(m.pow_, m.pow_bw),
    "maximum": RefOp(m.maximum, m.maximum_bw),
    "minimum": RefOp(m.minimum, m.minimum_bw),
    "where": RefOp(m.where, m.where_bw),
    "masked_fill": RefOp(m.masked_fill, m.masked_fill_bw),
    **{name: RefOp(m.comparison(name)) for name in ("gt", "ge", "lt", "le", "eq", "ne")},
    **{name: _unary(name) for name in (*_UNARY_OPS, "silu", "fast_gelu")},
    "cast": _unary("identity"),  # .float(), .half(), .contiguous(): the output dtype rounds
    "gelu": RefOp(m.gelu, m.gelu_bw),
    "softmax": RefOp(nn.softmax, nn.softmax_bw),
    "log_softmax": RefOp(nn.log_softmax, nn.log_softmax_bw),
    "sum": RefOp(m.sum_, m.sum_bw),
    "mean": RefOp(m.mean, m.mean_bw),
    "max": RefOp(m.extremum("max"), m.extremum_bw("max")),
    "min": RefOp(m.extremum("min"), m.extremum_bw("min")),
    "cross_entropy": RefOp(nn.cross_entropy, nn.cross_entropy_bw, no_grad=frozenset({"weight"})),
    "layer_norm": RefOp(nn.layer_norm, nn.layer_norm_bw),
    "rms_norm": RefOp(nn.rms_norm, nn.rms_norm_bw),
    "embedding": RefOp(nn.embedding, nn.embedding_bw),
    "gather": RefOp(nn.gather, nn.gather_bw),
    "transpose": RefOp(sh.transpose, sh.transpose_bw),
    "permute": RefOp(sh.permute, sh.permute_bw),
    "reshape": RefOp(sh.reshape, sh.reshape_bw),
    "flatten": RefOp(sh.flatten, sh.reshape_bw),
    "unsqueeze": RefOp(sh.unsqueeze, sh.reshape_bw),
    "squeeze": RefOp(sh.squeeze, sh.reshape_bw),
    "split": RefOp(sh.split, sh.split_bw),
    "chunk": RefOp(sh.chunk, sh.chunk_bw),
    "cat": RefOp(sh.cat),
    "getitem": RefOp(sh.getitem, sh.getitem_bw),
    "triu": RefOp(sh.triangle(True), sh.triangle_bw(True)),
    "tril": RefOp(sh.triangle(False), sh.triangle_bw(False)),
    "full": RefOp(sh.full),
    "cumsum": RefOp(sh.cumsum, sh.cumsum_bw),
    "swiglu": RefOp(nn.swiglu, nn.swiglu_bw),
    "rotary_mul": RefOp(nn.rotary_mul, nn.rotary_mul_bw),
    "fusion_attention": RefOp(att.fusion_attention, compared_outputs=1),
    "sdpa": RefOp(att.sdpa),
}


@dataclass(frozen=True)
class ApiSpec:
    """How one dump name maps onto a canonical op, with that framework's signature."""

    op: str
    signature: Signature

    @property
    def ref(self) -> RefOp:
        return REFERENCES[self.op]


def _sig(*params: str, varargs: str | None = None, **aliases: str) -> Signature:
    return Signature(params=params, varargs=varargs, aliases=aliases)


def _names(op: str, sig: Signature, names: Iterable[str]) -> dict[str, ApiSpec]:
    return {name: ApiSpec(op, sig) for name in names}


def _fw(*prefixes: str, api: str) -> list[str]:
    return [f"{p}.{api}" for p in prefixes]


BINARY = _sig("input", "other")
ALPHA = _sig("input", "other", "alpha")
UNARY = _sig("input")
DIM = _sig("input", "dim", "dtype", axis="dim")
REDUCE = _sig("input", "dim", "keepdim", "dtype", axis="dim", keep_dims="keepdim")
CE_PT = _sig(
    "input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction",
    "label_smoothing",
)  # fmt: skip
CE_MS = _sig(
    "input", "target", "weight", "ignore_index", "reduction", "label_smoothing", inputs="input"
)
FUSED_RMS = Signature(
    params=("input", "weight", "eps"),
    aliases={"x": "input", "gamma": "weight", "epsilon": "eps"},
    constants={"fused": True},
)
NPU_FA = _sig(
    "query", "key", "value", "head_num", "input_layout", "pse", "padding_mask", "atten_mask",
    "scale", "keep_prob", "pre_tokens", "next_tokens", "inner_precise", "prefix",
    "actual_seq_qlen", "actual_seq_kvlen", "sparse_mode", "gen_mask_parallel", "sync",
    pre_tockens="pre_tokens", next_tockens="next_tokens",
)  # fmt: skip
MS_FA = _sig(
    "query", "key", "value", "head_num", "pse", "drop_mask", "padding_mask", "atten_mask",
    "prefix", "actual_seq_qlen", "actual_seq_kvlen", "keep_prob", "scale", "pre_tokens",
    "next_tokens", "inner_precise", "input_layout", "sparse_mode",
    real_shift="pse", attn_mask="atten_mask", scalar_value="scale",
)  # fmt: skip

_T = ("Torch", "Tensor")


def _shared(t: tuple[str, ...]) -> dict[str, ApiSpec]:
    """Names both frameworks dump the same way (Tensor dunders, elementwise methods)."""
    table: dict[str, ApiSpec] = {}
    for op in _UNARY_OPS:
        table |= _names(op, UNARY, _fw(*t, "Tensor", api=op))
    for op in ("gt", "ge", "lt", "le", "eq", "ne"):
        table |= _names(op, BINARY, [f"Tensor.__{op}__", *_fw(*t, api=op)])
    table |= _names("neg", UNARY, ["Tensor.__neg__"])
    table |= _names("add", ALPHA, ["Tensor.__add__", "Tensor.__radd__", *_fw(*t, api="add")])
    table |= _names("sub", ALPHA, ["Tensor.__sub__", *_fw(*t, api="sub")])
    table |= _names("rsub", ALPHA, ["Tensor.__rsub__"])
    table |= _names("mul", BINARY, ["Tensor.__mul__", "Tensor.__rmul__", *_fw(*t, api="mul")])
    table |= _names("div", _sig("input", "other", "rounding_mode"), ["Tensor.__truediv__"])
    table |= _names("div", _sig("input", "other", "rounding_mode"), _fw(*t, api="div"))
    table |= _names("rdiv", BINARY, ["Tensor.__rtruediv__"])
    table |= _names("pow", _sig("input", "exponent"), ["Tensor.__pow__", *_fw(*t, api="pow")])
    table |= _names("matmul", BINARY, ["Tensor.__matmul__", *_fw(*t, api="matmul")])
    table |= _names("matmul", BINARY, [n for a in ("mm", "bmm") for n in _fw(*t, api=a)])
    table |= _names("maximum", BINARY, _fw(*t, api="maximum"))
    table |= _names("minimum", BINARY, _fw(*t, api="minimum"))
    table |= _names("masked_fill", _sig("input", "mask", "value"), _fw(*t, api="masked_fill"))
    table |= _names("softmax", DIM, _fw(*t, api="softmax"))
    table |= _names("mean", REDUCE, _fw(*t, api="mean"))
    table |= _names("sum", REDUCE, _fw(*t, api="sum"))
    table |= _names("cumsum", DIM, _fw(*t, api="cumsum"))
    for op in ("triu", "tril"):
        table |= _names(op, _sig("input", "diagonal"), _fw(*t, api=op))
    for method in ("float", "half", "double", "bfloat16", "contiguous", "clone"):
        table |= _names("cast", _sig("input", "memory_format"), [f"Tensor.{method}"])
    table |= _names("cast", _sig("input", "other"), ["Tensor.type_as"])
    table |= _names("reshape", _sig("input", varargs="shape"), ["Tensor.reshape", "Tensor.view"])
    table |= _names("permute", _sig("input", varargs="dims"), ["Tensor.permute"])
    table |= _names("unsqueeze", _sig("input", "dim"), _fw(*t, api="unsqueeze"))
    table |= _names("squeeze", _sig("input", "dim"), _fw(*t, api="squeeze"))
    table |= _names("flatten", _sig("input", "start_dim", "end_dim"), _fw(*t, api="flatten"))
    table |= _names("getitem", _sig("input", "index"), ["Tensor.__getitem__"])
    return table


def _pytorch() -> dict[str, ApiSpec]:
    t = ("Torch", "Tensor")
    table = _shared(t)
    table |= _names("linear", _sig("input", "weight", "bias"), ["Functional.linear"])
    table |= _names("linear", _sig("input", "weight", "bias"), ["NPU.npu_linear"])
    table |= _names("rsub", ALPHA, ["Torch.rsub"])
    table |= _names("div", _sig("input", "other", "rounding_mode"), ["Torch.true_divide"])
    table |= _names("where", _sig("condition", "input", "other"), ["Torch.where"])
    table |= _names("where", _sig("input", "condition", "other"), ["Tensor.where"])
    for op in ("relu", "sigmoid", "tanh", "silu"):
        table |= _names(op, _sig("input", "inplace"), [f"Functional.{op}"])
    table |= _names("gelu", _sig("input", "approximate"), ["Functional.gelu"])
    table |= _names("fast_gelu", UNARY, ["NPU.npu_fast_gelu", "NPU.fast_gelu"])
    table |= _names("softmax", _sig("input", "dim", "_stacklevel", "dtype"), ["Functional.softmax"])
    table |= _names("log_softmax", DIM, _fw(*t, api="log_softmax"))
    log_sm = _sig("input", "dim", "_stacklevel", "dtype")
    table |= _names("log_softmax", log_sm, ["Functional.log_softmax"])
    table |= _names("max", _sig("input", "dim", "keepdim"), _fw(*t, api="max"))
    table |= _names("min", _sig("input", "dim", "keepdim"), _fw(*t, api="min"))
    table |= _names("cross_entropy", CE_PT, ["Functional.cross_entropy"])
    norm = _sig("input", "normalized_shape", "weight", "bias", "eps")
    table |= _names("layer_norm", norm, ["Functional.layer_norm"])
    rms = _sig("input", "normalized_shape", "weight", "eps")
    table |= _names("rms_norm", rms, ["Functional.rms_norm"])
    table |= _names("rms_norm", FUSED_RMS, ["NPU.npu_rms_norm"])
    emb = _sig(
        "input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"
    )
    table |= _names("embedding", emb, ["Functional.embedding"])
    table |= _names("transpose", _sig("input", "dim0", "dim1"), _fw(*t, api="transpose"))
    table |= _names("permute", _sig("input", "dims"), ["Torch.permute"])
    table |= _names("reshape", _sig("input", "shape"), ["Torch.reshape"])
    split = _sig("input", "split_size_or_sections", "dim", tensor="input")
    table |= _names("split", split, _fw(*t, api="split"))
    table |= _names("chunk", _sig("input", "chunks", "dim"), _fw(*t, api="chunk"))
    table |= _names("cat", _sig("tensors", "dim"), _fw("Torch", api="cat"))
    table |= _names("cat", _sig("tensors", "dim"), ["Torch.concat", "Torch.concatenate"])
    table |= _names("full", _sig("size", "fill_value", "dtype"), ["Torch.full"])
    table |= _names("cast", UNARY, ["Torch.clone"])
    table |= _names("swiglu", _sig("input", "dim"), ["NPU.npu_swiglu"])
    rotary = _sig("input", "r1", "r2", "rotary_mode")
    table |= _names("rotary_mul", rotary, ["NPU.npu_rotary_mul"])
    table |= _names("fusion_attention", NPU_FA, ["NPU.npu_fusion_attention"])
    sdpa = _sig(
        "query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"
    )
    table |= _names("sdpa", sdpa, ["Functional.scaled_dot_product_attention"])
    return table


def _mindspore() -> dict[str, ApiSpec]:
    t = ("Mint", "Tensor", "Functional")
    table = _shared(t)
    linear = _sig("input", "weight", "bias")
    table |= _names("linear", linear, ["MintFunctional.linear", "Functional.dense"])
    table |= _names("where", _sig("condition", "input", "other"), ["Mint.where"])
    for op in ("relu", "sigmoid", "tanh", "silu"):
        table |= _names(op, UNARY, [f"MintFunctional.{op}", f"Functional.{op}"])
    gelu = _sig("input", "approximate", input_x="input")
    table |= _names("gelu", gelu, ["MintFunctional.gelu", "Functional.gelu"])
    table |= _names("softmax", DIM, ["MintFunctional.softmax"])
    table |= _names("log_softmax", _sig("input", "dim", "dtype", axis="dim", logits="input"),
                    ["MintFunctional.log_softmax", "Functional.log_softmax"])  # fmt: skip
    table |= _names("max", _sig("input", "dim", "keepdim"), ["Mint.max"])
    table |= _names("min", _sig("input", "dim", "keepdim"), ["Mint.min"])
    ce = ["Functional.cross_entropy", "MintFunctional.cross_entropy"]
    table |= _names("cross_entropy", CE_MS, ce)
    norm = _sig("input", "normalized_shape", "weight", "bias", "eps")
    table |= _names("layer_norm", norm, ["MintFunctional.layer_norm"])
    table |= _names("rms_norm", FUSED_RMS, ["Functional.rms_norm"])
    emb = _sig("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq")
    table |= _names("embedding", emb, ["MintFunctional.embedding"])
    gather = _sig(
        "input", "indices", "axis", "batch_dims", input_params="input", input_indices="indices"
    )
    table |= _names("gather", gather, ["Functional.gather"])
    table |= _names("transpose", _sig("input", "dim0", "dim1"), ["Mint.transpose"])
    # MindSpore's Tensor.transpose(*axes) and ops.transpose(x, perm) permute.
    table |= _names("permute", _sig("input", varargs="dims"), ["Tensor.transpose"])
    perm = _sig("input", "dims", input_perm="dims", input_x="input")
    table |= _names("permute", perm, ["Functional.transpose", "Functional.permute", "Mint.permute"])
    shape = _sig("input", "shape", input_x="input")
    table |= _names("reshape", shape, ["Mint.reshape", "Functional.reshape"])
    split = _sig("input", "split_size_or_sections", "dim", axis="dim", tensor="input")
    table |= _names("split", split, ["Tensor.split", "Mint.split", "Functional.split"])
    cat = _sig("tensors", "dim", axis="dim")
    table |= _names("cat", cat, ["Mint.cat", "Functional.cat", "Functional.concat"])
    table |= _names("full", _sig("size", "fill_value", "dtype"), ["Functional.full", "Mint.full"])
    table |= _names("swiglu", _sig("input", "dim"), ["Functional.swiglu"])
    table |= _names("fusion_attention", MS_FA, ["Functional.flash_attention_score"])
    return table


_TABLES: dict[str, dict[str, ApiSpec]] = {"pytorch": _pytorch(), "mindspore": _mindspore()}
# MindTorch runs PyTorch-API code on MindSpore: its dumps use PyTorch names and signatures.
_FAMILY = {"pytorch": "pytorch", "mindtorch": "pytorch", "mindspore": "mindspore"}

_RANDOM = "draws random numbers; a re-run cannot reproduce it"
SKIP_REASONS: dict[str, str] = {
    **{f"Functional.{n}": _RANDOM for n in ("dropout", "dropout1d", "dropout2d", "dropout3d")},
    **{f"Torch.{n}": _RANDOM for n in ("rand", "randn", "randint", "rand_like", "randn_like")},
    **{f"Torch.{n}": _RANDOM for n in ("bernoulli", "multinomial", "normal", "dropout")},
    **{f"NPU.{n}": _RANDOM for n in ("npu_dropout", "npu_dropout_with_add_softmax")},
    "MintFunctional.dropout": _RANDOM,
    **{f"Mint.{n}": _RANDOM for n in ("rand", "randn", "randint", "rand_like", "randn_like")},
    **{f"Mint.{n}": _RANDOM for n in ("randperm", "normal", "bernoulli", "multinomial")},
    **{f"Functional.{n}": _RANDOM for n in ("uniform", "standard_normal", "multinomial")},
    "Tensor.to": "moves or casts between devices; nothing is computed",
    "Tensor.__setitem__": "in-place indexed write; not re-run",
}


def resolve(framework: str, name: str) -> ApiSpec | None:
    """The spec for a dump API name (``Functional.linear``), or None: an exact lookup only.

    A MindSpore primitive (``Primitive.add.Add``) is looked up through the one canonical
    MS -> PT table, where it lists the primitive as replayable in PyTorch's parameter order.
    """
    family = _FAMILY.get(framework)
    if family is None:
        return None
    if family == "mindspore" and name.startswith("Primitive."):
        return _primitive(name)
    return _TABLES[family].get(name)


@cache
def _primitive(name: str) -> ApiSpec | None:
    from pytest_accuracy.pairing.mapfiles import load_api_map

    pt = load_api_map().replayed_as(name)
    return _TABLES["pytorch"].get(pt) if pt is not None else None


def no_reference_reason(framework: str, name: str) -> str:
    """Why ``name`` is not checked, for the skip message."""
    if name in SKIP_REASONS:
        return f"{name} {SKIP_REASONS[name]}"
    if name.endswith("_") and not name.endswith("__"):  # Tensor.add_, Tensor.copy_ ...
        return f"{name} works in place (it overwrites its input); not re-run"
    if framework not in _FAMILY:
        return f"framework {framework!r} has no precheck allow-list"
    if _FAMILY[framework] == "mindspore" and name.startswith("Primitive."):
        return (
            f"{name} is a MindSpore primitive the replay cannot run as its PyTorch API: the dump "
            "leaves out attributes that change its math (transpose_b, axis, keep_dims) or lists "
            "its inputs in another order; nothing was executed"
        )
    return (
        f"no reference implementation for {name} ({framework}); it is not in the precheck "
        "allow-list, so nothing was executed"
    )


def supported_names(framework: str) -> list[str]:
    """Every dump name the allow-list resolves for one framework (for documentation)."""
    family = _FAMILY.get(framework)
    return sorted(_TABLES[family]) if family else []
