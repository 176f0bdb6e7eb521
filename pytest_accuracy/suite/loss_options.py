"""Command-line options and ini keys of the migration standard on training logs."""

from __future__ import annotations

import pytest

LOSS_VALUE_OPTIONS = {
    "first-loss-abs": "loss: first-step absolute error allowed (default 0.005)",
    "first-loss-rel": "loss: first-step relative error allowed (default 0.005)",
    "mean-abs": "loss: mean absolute error allowed (default 0.01)",
    "mean-rel": "loss: mean relative error allowed (default 0.01)",
    "gnorm-rel": "loss: grad-norm mean relative error allowed (default 0.10)",
    "band-factor": "loss: band width in multiples of the bench runs' own spread",
    "loss-steps": "loss: inclusive step window 'start:end'",
    "write-golden": "write the NPU log as a Megatron golden-values JSON to this path",
}


def add_loss_options(group: pytest.OptionGroup, parser: pytest.Parser) -> None:
    for name, help_text in LOSS_VALUE_OPTIONS.items():
        dest = "acc_" + name.replace("-", "_")
        group.addoption(f"--acc-{name}", dest=dest, default=None, help=help_text)
        parser.addini(dest, help_text, default=None)
    group.addoption("--acc-relax-to-bench-noise", dest="acc_relax_to_bench_noise",
                    action="store_true", default=None,
                    help="loss: widen each threshold to the bench runs' spread (>= 2 bench logs)")
    parser.addini("acc_relax_to_bench_noise", "loss: widen thresholds to bench noise",
                  default=None)
