"""A run's parallel sizes read from its training config (Megatron arguments, MindFormers)."""

from __future__ import annotations

from pathlib import Path

from pytest_accuracy.configs.derive_train import megatron_data_parallel
from pytest_accuracy.configs.keys import Side, config_flavour
from pytest_accuracy.configs.readers import read_config
from pytest_accuracy.configs.values import integer

# (tp, pp, dp) keys of each flavour; Megatron's dp may also be derived from the world size
_KEYS = {"megatron": ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                      "data_parallel_size"),
         "mindformers": ("parallel_config.model_parallel", "parallel_config.pipeline_stage",
                         "parallel_config.data_parallel")}


def config_parallel(path: str | Path) -> tuple[int, int, int, str] | None:
    """(tp, dp, pp) the config sets and where it says dp; None where it sets no data-parallel
    size (a MindFormers config without parallel_config, Megatron without a world size)."""
    cfg = read_config(path)
    flavour = config_flavour(cfg)
    if flavour is None:
        return None
    side = Side(cfg, flavour, "NPU", str(path))
    tp_key, pp_key, dp_key = _KEYS[flavour]
    tp, pp = integer(side.get(tp_key)) or 1, integer(side.get(pp_key)) or 1
    if flavour == "megatron":
        found = megatron_data_parallel(side)
        dp, where = (integer(found.value), found.source) if found is not None else (None, "")
    else:
        dp, where = integer(side.get(dp_key)), side.source(dp_key)
    if not dp or dp < 1 or tp < 1 or pp < 1:
        return None
    return tp, dp, pp, f"{path}: {where}"
