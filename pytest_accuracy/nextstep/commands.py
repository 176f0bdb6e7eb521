"""The command lines a next step names: PrecisionDebugger, pytest-accuracy and msprobe's CLI."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from pytest_accuracy.nextstep.names import k_expression
from pytest_accuracy.nextstep.situation import Framework
from pytest_accuracy.text import escape_line

LOOP = ("each training step: debugger.start(model); <forward, backward, optimizer step>; "
        "debugger.stop(); debugger.step()")
# The guide's setting for MindSpore on Ascend: an overflow shows as Inf/NaN, as on PyTorch.
INFNAN = "export MS_ASCEND_CHECK_OVERFLOW_MODE=INFNAN_MODE"


def shell(*args: str) -> str:
    """One shell line, each argument quoted; escaped so that it stays one line."""
    return escape_line(" ".join(shlex.quote(a) for a in args))


def debugger(framework: Framework, config: Path, role: str) -> str:
    """The lines that load a config into msprobe's PrecisionDebugger in the training script."""
    return escape_line(f"{role} ({framework}): from msprobe.{framework} import "
                       f"PrecisionDebugger; debugger = PrecisionDebugger(config_path="
                       f"{str(config)!r})")


def steps_text(steps: Sequence[int]) -> str:
    return ",".join(str(s) for s in sorted(set(steps)))


def _where(steps: Sequence[int], rank: int | None) -> list[str]:
    args = [f"--acc-steps-select={steps_text(steps)}"]
    return args + ([f"--acc-ranks={rank}"] if rank is not None else [])


def pytest_compare(npu: str, bench: str | None, steps: Sequence[int], rank: int | None) -> str:
    """Compare the two new dumps (or, without a bench, check the NPU one for overflows)."""
    runs = [f"--acc-npu={npu}"] + ([f"--acc-bench={bench}"] if bench else [])
    return shell("pytest", *runs, *_where(steps, rank))


def pytest_precheck(dump: str, step: int, rank: int | None, api: str) -> str:
    """Our precheck of one API call (``--acc-scope`` narrows compare items only: ``-k`` here)."""
    return shell("pytest", f"--acc-npu={dump}", "--acc-precheck", *_where([step], rank),
                 "-k", k_expression(api))


def msprobe_acc_check(dump_json: str, out: Path, config: Path | None) -> str:
    """msprobe's own precheck (26.2.0: no ``-f``; the framework comes from dump.json)."""
    extra = ["-config", str(config)] if config is not None else []
    return shell("msprobe", "acc_check", "-api_info", dump_json, *extra, "-o", str(out))


def msprobe_overflow_check(dump_path: str, step: int, out: Path) -> str:
    """msprobe's overflow analyser of a PyTorch statistics dump (one step folder)."""
    return shell("msprobe", "overflow_check", "-i", f"{dump_path}/step{step}", "-o", str(out))
