"""What a monitor run holds: per rank, metric, step and parameter, the statistics recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# metric (file prefix or TensorBoard folder) -> (state kind, phase within an optimizer step).
# Phases order the states of one step as training makes them: the weights entering the step,
# Adam's moments as the previous update left them (TrainerMon reads them before opt.step),
# activations, their gradients, the weight gradients, the weights after the update.
METRICS: dict[str, tuple[str, int]] = {
    "param_origin": ("param", 0),
    "exp_avg": ("exp_avg", 1),
    "exp_avg_sq": ("exp_avg_sq", 1),
    "actv": ("actv", 2),
    "actv_grad": ("actv_grad", 3),
    "grad_unreduced": ("grad", 4),
    "grad_reduced": ("grad", 4),
    "grad_summary": ("grad", 4),  # legacy grad_probe
    "param_updated": ("param", 5),
}
KINDS = ("grad", "exp_avg", "exp_avg_sq", "param", "actv", "actv_grad")
KIND_WORDS = {"grad": "gradients", "exp_avg": "Adam exp_avg (first moment)",
              "exp_avg_sq": "Adam exp_avg_sq (second moment)", "param": "weights",
              "actv": "activations", "actv_grad": "activation gradients"}
STATS = ("norm", "max", "min")  # judged; "nans" is checked for new NaNs


@dataclass(frozen=True)
class Stat:
    """One parameter's (or module's) statistics of one metric at one step."""

    metric: str
    step: int
    micro: int
    name: str
    values: dict[str, float]
    quantum: float  # rounding of the file's values: msprobe writes ``ndigits`` decimals
    dtype: str
    source: str


@dataclass
class RankRecords:
    """The monitor output of one rank."""

    rank: int
    path: Path
    stats: dict[str, dict[tuple[int, int, str], Stat]] = field(default_factory=dict)
    signs: dict[tuple[int, str], Path] = field(default_factory=dict)  # grad_probe sign files

    def add(self, stat: Stat) -> None:
        self.stats.setdefault(stat.metric, {})[(stat.step, stat.micro, stat.name)] = stat

    def kinds(self) -> set[str]:
        return {METRICS[m][0] for m, rows in self.stats.items() if rows}


@dataclass
class MonitorRun:
    """One run's monitor output: its layout in words and its ranks."""

    root: Path
    layout: str
    ranks: dict[int, RankRecords]
