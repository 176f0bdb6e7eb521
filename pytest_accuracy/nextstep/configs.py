"""msprobe 26.2.0 config.json contents for PrecisionDebugger, per framework."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pytest_accuracy.nextstep.situation import Framework

Task = Literal["statistics", "tensor", "nan_check"]
Level = Literal["L0", "L1", "mix"]


def dump_config(framework: Framework, *, task: Task, level: Level, steps: Sequence[int],
                rank: int | None, dump_path: str, select: Sequence[str] = (),
                acc_check_ops: Sequence[str] | None = None) -> dict[str, Any]:
    """One config.json as msprobe's template lays it out (common keys, then the task's section).

    ``select``: the task section's ``list`` (module entries at mix, API entries at L1); the
    ``scope`` stays empty: a scope is a [start, end] range of node names, and a module named
    at both ends dumps the module alone (msprobe 26.2.0 closes the range where it opens),
    while L1 refuses module names in it. ``acc_check_ops``: a PyTorch config also carries an
    ``acc_check`` section, read by ``msprobe acc_check -config`` (MindSpore's takes none).
    """
    if task == "nan_check" and framework != "pytorch":
        raise ValueError("msprobe's nan_check task is PyTorch-only (Ascend NPU)")
    section: dict[str, Any] = {"scope": [], "list": list(select), "data_mode": ["all"]}
    if task == "statistics":
        section["summary_mode"] = "statistics"  # max/min/mean/norm: compare across frameworks
    config: dict[str, Any] = {
        "task": task,
        "dump_path": dump_path,
        "rank": [] if rank is None else [rank],
        "step": sorted(set(steps)),
        "level": level,
        "async_dump": False,  # async tensor dumps need a list and hold tensors in memory
    }
    if framework == "pytorch" and level in ("L1", "mix") and not select:
        # msprobe 26.2.0 skips "low-risk" APIs at L1 and mix unless told otherwise (FOCUS)
        config["risk_level"] = "ALL"
    config[task] = section
    if acc_check_ops is not None and framework == "pytorch":
        config["acc_check"] = {"white_list": list(acc_check_ops), "black_list": [],
                               "error_data_path": "./"}
    return config
