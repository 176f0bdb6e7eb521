"""What a failing item hands the next step (plain values) and what the next step is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Framework = Literal["pytorch", "mindspore"]
Case = Literal["loss", "module", "api", "overflow"]
FRAMEWORKS: tuple[Framework, ...] = ("pytorch", "mindspore")
CASES: tuple[Case, ...] = ("loss", "module", "api", "overflow")


@dataclass(frozen=True)
class TensorShape:
    """One tensor record of a dumped node: its shape and dtype (msprobe's or numpy's spelling)."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class NodeShape:
    """One dumped node (API call, module call or parameters_grad) and its tensor records."""

    name: str
    tensors: tuple[TensorShape, ...] = ()


@dataclass(frozen=True)
class Side:
    """One run (the NPU run or the bench) as the next step sees it.

    ``names``: the failing node(s) as this run's dump names them: the module of an L0 compare
    failure (several for a region), the API of an L1 one, the node an overflow item names;
    empty for a loss item. ``shapes``: what the failing dump recorded of them (for a loss item:
    every node of one step of any dump of this model), the only source of the size estimate.
    ``meta_bytes_per_node``: that dump's dump.json + stack.json + construct.json bytes per node.
    """

    framework: Framework
    names: tuple[str, ...] = ()
    shapes: tuple[NodeShape, ...] = ()
    dump: str = ""  # the failing dump as given (--acc-npu / --acc-bench), for commands
    dump_json: str = ""  # its dump.json of the failing step and rank, for msprobe acc_check
    meta_bytes_per_node: float | None = None

    def __post_init__(self) -> None:
        if self.framework not in FRAMEWORKS:
            raise ValueError(f"framework must be one of {FRAMEWORKS}, not {self.framework!r}")
        if isinstance(self.names, str):  # a lone name would be split into characters
            raise TypeError("names is a tuple of node names, not one string")


@dataclass(frozen=True)
class Situation:
    """What a failing item found: the case, where (step, rank) and the runs' sides.

    ``step`` is msprobe's step: the number of ``debugger.step()`` calls before it (a log's
    step 1 is msprobe's step 0 unless ``PrecisionDebugger.set_init_step`` said otherwise).
    ``rank`` None: every rank (``ranks_in_run`` of them, for the size).
    """

    case: Case
    item_id: str
    step: int
    npu: Side
    bench: Side | None = None
    rank: int | None = None
    ranks_in_run: int = 1

    def __post_init__(self) -> None:
        if self.case not in CASES:
            raise ValueError(f"case must be one of {CASES}, not {self.case!r}")
        for name, value, low in (("step", self.step, 0), ("ranks_in_run", self.ranks_in_run, 1),
                                 ("rank", 0 if self.rank is None else self.rank, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, not {value!r}")
        if self.case != "loss" and not self.npu.names:
            raise ValueError(f"a {self.case} next step needs the failing node's name (npu.names)")


@dataclass(frozen=True)
class Estimate:
    """The size of a dump the next step asks for, worked out from the failing dump's records."""

    bytes: int
    nodes: int
    tensors: int  # tensor files written (0 for a statistics dump)
    bound: Literal["about", "at most"] = "about"

    def text(self) -> str:
        mb = self.bytes / 1e6
        if mb >= 10:
            shown = f"{mb:.0f}"
        elif mb >= 1:
            shown = f"{mb:.1f}"
        elif mb >= 0.01:
            shown = f"{mb:.2f}"
        else:
            return f"{self.bound} 0.01 MB or less" if self.bound == "at most" else "under 0.01 MB"
        return f"{self.bound} {shown} MB"


@dataclass(frozen=True)
class ConfigFile:
    """One msprobe config.json the next step writes: for which run and framework."""

    name: str  # file name inside the next step's folder
    role: str  # "NPU", "bench", "NPU, nan_check"
    framework: Framework
    config: dict[str, Any]


@dataclass(frozen=True)
class NextStep:
    """The next action: its configs, the size of the dump it makes, the commands and message."""

    situation: Situation
    folder: Path
    headline: str  # "dump step 153 rank 0 at mix inside Module.layers.1.mlp" (one line)
    files: tuple[ConfigFile, ...]
    sizes: tuple[tuple[str, Estimate | None], ...]  # (role, estimate) of each dump it makes
    commands: tuple[str, ...] = field(default=())  # one line each, the last the one to run
    message: str = ""

    def path(self, config: ConfigFile) -> Path:
        return self.folder / config.name
