"""Time ``read_log`` on 1,000,000 MindFormers and 1,000,000 Megatron lines against a naive loop.

Usage: ``python benchmarks/bench_logs.py [--lines N]``.  Single process, single
thread (the parsers are pure Python + the C regex engine).  The naive baseline
is what log scripts in the wild do: per line ``re.search`` with one pattern per
field, a dict per step appended to a list, then ``pandas.DataFrame``; it reads
the same fields (step, loss, grad norm, lr, loss scale).  The calibration line
times a plain Python loop so numbers from different machines can be compared.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd

from pytest_accuracy.logs import read_log

TARGET_S = 2.0
T = TypeVar("T")


def write_mindformers(path: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    loss, gnorm = rng.uniform(1, 10, n), rng.uniform(1, 30, n)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(
                "2025-04-07 15:34:27,308 - [mindformers/core/callback/callback.py:529] - INFO - "
                f"{{ Epoch:[  1/  1], step:[{i + 1:5d}/{n:5d}], loss: {loss[i]:.6f}, "
                "per_step_time: 1758ms, lr: 9.8386645e-06, overflow cond: False, "
                f"loss_scale: 1.0, global_norm: [{gnorm[i]:.6f}], "
                "train_throughput_per_npu: 170.173T\n"
            )


def write_megatron(path: Path, n: int) -> None:
    rng = np.random.default_rng(1)
    loss, gnorm = rng.uniform(1, 10, n), rng.uniform(1, 30, n)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(
                f" [2025-10-22 16:59:16] iteration {i + 1:8d}/{n:8d} | consumed samples: "
                f"{(i + 1) * 8:12d} | elapsed time per iteration (ms): 16442.7 | "
                "throughput per GPU (TFLOP/s/GPU): 1.8 | learning rate: 3.900183E-07 | "
                f"global batch size:     8 | lm loss: {loss[i]:.6E} | "
                "seq_load_balancing_loss: 1.300237E+00 | loss scale: 1.0 | "
                f"grad norm: {gnorm[i]:.3f} | number of skipped iterations:   0 | "
                "number of nan iterations:   0 |\n"
            )


NAIVE = {
    "mindformers": (
        re.compile(r"step:\[\s*(\d+)/"),
        {
            "loss": re.compile(r"loss: ([\d.]+)"),
            "grad_norm": re.compile(r"global_norm: \[([\d.]+)\]"),
            "lr": re.compile(r"lr: ([\d.e+-]+)"),
            "loss_scale": re.compile(r"loss_scale: ([\d.]+)"),
        },
    ),
    "megatron": (
        re.compile(r"iteration\s+(\d+)/"),
        {
            "loss": re.compile(r"lm loss: ([\d.E+-]+)"),
            "grad_norm": re.compile(r"grad norm: ([\d.]+)"),
            "lr": re.compile(r"learning rate: ([\d.E+-]+)"),
            "loss_scale": re.compile(r"loss scale: ([\d.]+)"),
        },
    ),
}


def naive(path: Path, family: str) -> pd.DataFrame:
    """The baseline: per line ``re.search`` per field, a dict per row, then a DataFrame."""
    step_re, fields = NAIVE[family]
    rows = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            m = step_re.search(line)
            if not m:
                continue
            row: dict[str, float] = {"step": int(m.group(1))}
            for name, pattern in fields.items():
                found = pattern.search(line)
                row[name] = float(found.group(1)) if found else float("nan")
            rows.append(row)
    return pd.DataFrame(rows).set_index("step")


def cpu_time(fn: Callable[[], T]) -> tuple[float, T]:
    """CPU seconds of this process (other load on the machine does not count)."""
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def calibration() -> float:
    """Seconds for 10 million iterations of a trivial Python loop (about 0.4 s on a 2023 laptop)."""
    start = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args()
    print(f"calibration: 10M-iteration Python loop takes {calibration():.2f} s on this machine")
    with tempfile.TemporaryDirectory() as tmp:
        for family, writer in (("mindformers", write_mindformers), ("megatron", write_megatron)):
            path = Path(tmp) / f"{family}.log"
            writer(path, args.lines)
            ours, table = cpu_time(partial(read_log, path))
            base, frame = cpu_time(partial(naive, path, family))
            assert len(table.frame) == len(frame) == args.lines
            np.testing.assert_allclose(table.frame["loss"], frame["loss"])
            size = path.stat().st_size / 1e6
            verdict = "meets" if ours < TARGET_S * args.lines / 1e6 else "misses"
            print(
                f"{family:12s} {args.lines:,} lines ({size:.0f} MB): read_log {ours:.2f} s "
                f"({args.lines / ours:,.0f} lines/s), naive loop {base:.2f} s; "
                f"{base / ours:.1f}x faster; {verdict} the {TARGET_S:g} s per million target"
            )


if __name__ == "__main__":
    main()
