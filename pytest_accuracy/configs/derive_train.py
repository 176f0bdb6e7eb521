"""Derived training settings: warmup, clipping, precision, loss scale, parallel sizes, batch."""

from __future__ import annotations

from pytest_accuracy.configs.keys import Found, Side, register_derive
from pytest_accuracy.configs.values import integer, number, truthy

_WARMUP_MF = ("lr_schedule.warmup_ratio", "lr_schedule.warmup_steps", "lr_schedule.total_steps")
_WARMUP_MEGATRON = ("lr_warmup_fraction", "lr_warmup_iters", "lr_decay_iters", "train_iters")
_PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")


# ---------------------------------------------------------------- learning-rate warmup


@register_derive("mf_warmup_fraction", reads=_WARMUP_MF)
def mf_warmup_fraction(side: Side) -> Found | None:
    found = side.first(("lr_schedule.warmup_ratio",))
    steps = number(side.get("lr_schedule.warmup_steps"))
    total = number(side.get("lr_schedule.total_steps"))
    if found is not None or steps is None:
        return found
    if steps == 0:
        return Found(0.0, "lr_schedule.warmup_steps", 0)
    if total is None or total <= 0:  # -1: MindFormers takes it from the dataset at run time
        return None
    return Found(steps / total, f"lr_schedule.warmup_steps {steps:g} / total_steps {total:g}")


@register_derive("mf_warmup_iters", reads=_WARMUP_MF)
def mf_warmup_iters(side: Side) -> Found | None:
    found = side.first(("lr_schedule.warmup_steps",))
    ratio = number(side.get("lr_schedule.warmup_ratio"))
    total = number(side.get("lr_schedule.total_steps"))
    if found is not None or ratio is None:
        return found
    if ratio == 0:
        return Found(0, "lr_schedule.warmup_ratio", 0.0)
    if total is None or total <= 0:
        return None
    # MindFormers: warmup_steps = int(total_steps * warmup_ratio).
    return Found(int(total * ratio), f"lr_schedule.warmup_ratio {ratio:g} x total_steps {total:g}")


def _megatron_decay_iters(side: Side) -> tuple[float, str] | None:
    for name in ("lr_decay_iters", "train_iters"):
        value = number(side.get(name))
        if value is not None:
            return value, "--" + name.replace("_", "-")
    return None


@register_derive("megatron_warmup_fraction", reads=_WARMUP_MEGATRON)
def megatron_warmup_fraction(side: Side) -> Found | None:
    found = side.first(("lr_warmup_fraction",))
    if found is not None:
        return found
    iters = number(side.get("lr_warmup_iters"))
    decay = _megatron_decay_iters(side)
    if iters is None:
        return Found(0.0, "--lr-warmup-iters (Megatron default 0)") if side.use_defaults else None
    if iters == 0 or decay is None:
        return Found(0.0, "--lr-warmup-iters", 0) if iters == 0 else None
    return Found(iters / decay[0], f"--lr-warmup-iters {iters:g} / {decay[1]} {decay[0]:g}")


@register_derive("megatron_warmup_iters", reads=_WARMUP_MEGATRON)
def megatron_warmup_iters(side: Side) -> Found | None:
    fraction = number(side.get("lr_warmup_fraction"))
    if fraction is None:
        found = side.first(("lr_warmup_iters",))
        return found or side.default(0, "lr_warmup_iters")
    decay = _megatron_decay_iters(side)
    if decay is None:
        return None
    # Megatron: warmup steps = lr_warmup_fraction * lr_decay_iters (train_iters when unset).
    return Found(int(fraction * decay[0]), f"--lr-warmup-fraction {fraction:g} x {decay[1]} "
                                           f"{decay[0]:g}")  # fmt: skip


# ---------------------------------------------------------------- clipping, precision


@register_derive(
    "mf_clip_grad", reads=("runner_wrapper.use_clip_grad", "runner_wrapper.max_grad_norm")
)
def mf_clip_grad(side: Side) -> Found | None:
    use = side.get("runner_wrapper.use_clip_grad")
    if use is None:
        if side.get("runner_wrapper") is None or not side.use_defaults:
            return None
        return Found(0.0, "runner_wrapper.use_clip_grad (MindFormers default)", False)
    if not truthy(use):
        return Found(0.0, "runner_wrapper.use_clip_grad", use)
    found = side.first(("runner_wrapper.max_grad_norm",))
    return found or side.default(1.0, "runner_wrapper.max_grad_norm")


@register_derive("megatron_compute_dtype", reads=("bf16", "fp16"))
def megatron_compute_dtype(side: Side) -> Found | None:
    if side.flag("bf16"):
        return Found("bfloat16", "--bf16", True)
    if side.flag("fp16"):
        return Found("float16", "--fp16", True)
    if side.get("bf16") is None and side.get("fp16") is None and not side.use_defaults:
        return None
    return Found("float32", "no --bf16/--fp16")


@register_derive(
    "megatron_grad_reduce_dtype",
    reads=("grad_reduce_in_bf16", "accumulate_allreduce_grads_in_fp32", "bf16", "fp16"),
)
def megatron_grad_reduce_dtype(side: Side) -> Found | None:
    if side.flag("grad_reduce_in_bf16"):
        return Found("bfloat16", "--grad-reduce-in-bf16", True)
    if side.flag("accumulate_allreduce_grads_in_fp32"):
        return Found("float32", "--accumulate-allreduce-grads-in-fp32", True)
    dtype = megatron_compute_dtype(side)
    if dtype is None:
        return None
    if dtype.value == "float16":  # fp16 gradients are reduced in the weight dtype
        return Found("float16", "--fp16 (gradients reduced in float16)")
    # Megatron forces fp32 gradient accumulation and all-reduce for bf16.
    return Found("float32", f"{dtype.source} (Megatron reduces gradients in float32)")


# ---------------------------------------------------------------- loss scale


def _mf_scale(side: Side) -> tuple[str, object, object, str] | None:
    """(type, value, window, source) of runner_wrapper.scale_sense."""
    sense = side.get("runner_wrapper.scale_sense")
    src = "runner_wrapper.scale_sense"
    if sense is None:
        if side.get("runner_wrapper") is None or not side.use_defaults:
            return None
        return "static", 1.0, None, f"{src} (MindFormers default)"
    if not isinstance(sense, dict):
        return "static", sense, None, src
    kind = "dynamic" if "dynamic" in str(sense.get("type", "")).lower() else "static"
    return kind, sense.get("loss_scale_value"), sense.get("scale_window"), f"{src}.loss_scale_value"


@register_derive("mf_loss_scale_type", reads=("runner_wrapper.scale_sense",))
def mf_loss_scale_type(side: Side) -> Found | None:
    scale = _mf_scale(side)
    if scale is None:
        return None
    raw = scale[1] if scale[3] == "runner_wrapper.scale_sense" else None
    return Found(scale[0], scale[3].removesuffix(".loss_scale_value"), raw)


@register_derive("mf_loss_scale_value", reads=("runner_wrapper.scale_sense",))
def mf_loss_scale_value(side: Side) -> Found | None:
    scale = _mf_scale(side)
    return None if scale is None or scale[1] is None else Found(scale[1], scale[3])


@register_derive("mf_loss_scale_window", reads=("runner_wrapper.scale_sense",))
def mf_loss_scale_window(side: Side) -> Found | None:
    scale = _mf_scale(side)
    if scale is None or scale[0] != "dynamic" or scale[2] is None:
        return None
    return Found(scale[2], "runner_wrapper.scale_sense.scale_window")


_SCALE_READS = ("loss_scale", "initial_loss_scale", "loss_scale_window", "bf16", "fp16")


def _megatron_scale(side: Side) -> tuple[str, Found | None, Found | None] | None:
    """(type, value, window) as Megatron's optimizer builds its grad scaler."""
    static = side.first(("loss_scale",))
    if static is not None:
        return "static", static, None
    dtype = megatron_compute_dtype(side)
    if dtype is None:
        return None
    if dtype.value != "float16":
        return "static", Found(1.0, f"{dtype.source} (no loss scaling)"), None
    value = side.first(("initial_loss_scale",)) or side.default(2.0**32, "initial_loss_scale")
    window = side.first(("loss_scale_window",)) or side.default(1000, "loss_scale_window")
    return "dynamic", value, window


@register_derive("megatron_loss_scale_type", reads=_SCALE_READS)
def megatron_loss_scale_type(side: Side) -> Found | None:
    scale = _megatron_scale(side)
    if scale is None or scale[1] is None:
        return None
    if scale[0] == "dynamic":
        return Found("dynamic", "--fp16 without --loss-scale")
    return Found("static", scale[1].source)


@register_derive("megatron_loss_scale_value", reads=_SCALE_READS)
def megatron_loss_scale_value(side: Side) -> Found | None:
    scale = _megatron_scale(side)
    return None if scale is None else scale[1]


@register_derive("megatron_loss_scale_window", reads=_SCALE_READS)
def megatron_loss_scale_window(side: Side) -> Found | None:
    scale = _megatron_scale(side)
    return None if scale is None else scale[2]


# ---------------------------------------------------------------- parallel sizes, batch


_DP_READS = ("data_parallel_size", "world_size", "nproc_per_node", "nnodes", *_PARALLEL)


def _parallel_product(side: Side) -> tuple[int, str]:
    sizes = [
        (label, integer(side.get(name)) or 1)
        for label, name in zip(("tp", "pp", "cp"), _PARALLEL, strict=True)
    ]
    product = sizes[0][1] * sizes[1][1] * sizes[2][1]
    return product, " x ".join(f"{label} {size}" for label, size in sizes)


@register_derive("megatron_data_parallel", reads=_DP_READS)
def megatron_data_parallel(side: Side) -> Found | None:
    found = side.first(("data_parallel_size",))
    if found is not None:
        return found
    world, world_src = integer(side.get("world_size")), "--world-size"
    nproc, nnodes = integer(side.get("nproc_per_node")), side.get("nnodes")
    if world is None and nproc is not None and (nnodes is None or integer(nnodes) is not None):
        world = nproc * (integer(nnodes) or 1)
        world_src = f"--nproc-per-node {nproc} x --nnodes {integer(nnodes) or 1}"
    if world is None:
        return None
    product, parts = _parallel_product(side)
    # Megatron: data parallel size = world size / (TP x PP x CP).
    return Found(world // product, f"world size {world} ({world_src}) / ({parts})")


@register_derive(
    "mf_global_batch",
    reads=("runner_config.batch_size", "runner_config.gradient_accumulation_steps",
           "parallel_config.data_parallel", "parallel_config.micro_batch_num",
           "parallel_config.pipeline_stage"),
)  # fmt: skip
def mf_global_batch(side: Side) -> Found | None:
    batch = integer(side.get("runner_config.batch_size"))
    if batch is None:
        return None
    dp = integer(side.get("parallel_config.data_parallel")) or 1
    pipeline = integer(side.get("parallel_config.pipeline_stage")) or 1
    # micro_batch_num only multiplies the batch with pipeline parallelism.
    micro = (integer(side.get("parallel_config.micro_batch_num")) or 1) if pipeline > 1 else 1
    accumulate = integer(side.get("runner_config.gradient_accumulation_steps")) or 1
    return Found(
        batch * dp * micro * accumulate,
        f"runner_config.batch_size {batch} x data_parallel {dp} x micro_batch_num {micro} "
        f"x gradient_accumulation_steps {accumulate}",
    )


@register_derive(
    "megatron_global_batch",
    reads=("global_batch_size", "micro_batch_size", *_DP_READS),
)
def megatron_global_batch(side: Side) -> Found | None:
    found = side.first(("global_batch_size",))
    micro = integer(side.get("micro_batch_size"))
    if found is not None or micro is None or not side.use_defaults:
        return found
    dp = megatron_data_parallel(side)
    if dp is None or integer(dp.value) is None:
        return None
    return Found(micro * (integer(dp.value) or 1),
                 f"--micro-batch-size {micro} x data parallel {dp.value} "
                 "(no --global-batch-size)")  # fmt: skip


@register_derive(
    "mf_recompute", reads=("recompute_config.recompute", "recompute_config.select_recompute")
)
def mf_recompute(side: Side) -> Found | None:
    if side.flag("recompute_config.recompute"):
        return Found("full", "recompute_config.recompute", side.get("recompute_config.recompute"))
    if side.flag("recompute_config.select_recompute"):
        raw = side.get("recompute_config.select_recompute")
        return Found("selective", "recompute_config.select_recompute", raw)
    if side.get("recompute_config") is None and not side.use_defaults:
        return None
    return Found("none", "recompute_config.recompute/select_recompute off")


@register_derive("megatron_recompute", reads=("recompute_granularity", "recompute_activations"))
def megatron_recompute(side: Side) -> Found | None:
    found = side.first(("recompute_granularity",))
    if found is not None:
        return found
    if side.flag("recompute_activations"):
        return Found("selective", "--recompute-activations", True)
    return Found("none", "no --recompute-granularity") if side.use_defaults else None
