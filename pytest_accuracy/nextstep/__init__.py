"""The next step of the accuracy guide's loop, written out: msprobe configs and the command."""

from __future__ import annotations

from pytest_accuracy.nextstep.plans import (
    api_step,
    loss_step,
    module_step,
    overflow_step,
    plan_next_step,
)
from pytest_accuracy.nextstep.situation import (
    ConfigFile,
    Estimate,
    NextStep,
    NodeShape,
    Side,
    Situation,
    TensorShape,
)
from pytest_accuracy.nextstep.writer import next_step_dir, write_next_step, write_step

__all__ = [
    "ConfigFile",
    "Estimate",
    "NextStep",
    "NodeShape",
    "Side",
    "Situation",
    "TensorShape",
    "api_step",
    "loss_step",
    "module_step",
    "next_step_dir",
    "overflow_step",
    "plan_next_step",
    "write_next_step",
    "write_step",
]
