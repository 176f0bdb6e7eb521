"""Time ``read_log`` on 1,000,000-line MindFormers and Megatron logs against a naive loop.

Usage: ``python benchmarks/bench_logs.py [--lines N] [--repeat R]``.  One process,
one thread (BLAS pinned to one thread before numpy loads: the target is one core).
``read_log`` is timed twice: with the compiled scanner (``logs/_scan.c``, one C
pass over the bytes) and with the pure path (``PYTEST_ACCURACY_PURE_LOGS=1``: the
regex engine finds the step lines, pandas' C tokenizer reads their fields).  Six
shapes: a MindFormers log as MFLossMonitor writes it (a step line and a
progress-bar line per step), the worst case of a step line on every line,
Megatron's one ``iteration`` line per step, HF printed dicts, coloured torchtitan
and JSON lines.  The naive baseline is what log scripts in the wild do: per line
``re.search`` with one pattern per field (or ``literal_eval`` / ``json.loads``),
a dict per step, then ``pandas.DataFrame``; both paths must give values
bit-identical to it.  The calibration lines time a plain Python loop and a 256 MB
memory copy, so numbers from different machines can be compared.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads: idle BLAS threads spin on CPU time

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pytest_accuracy.logs import read_log, speedups  # noqa: E402

TARGET_S = 2.0
T = TypeVar("T")


def write_mindformers(path: Path, n: int, progress: bool = False) -> None:
    """``n`` lines: step lines only, or (``progress``) each followed by its progress bar."""
    steps = n // 2 if progress else n
    rng = np.random.default_rng(0)
    loss, gnorm = rng.uniform(1, 10, steps), rng.uniform(1, 30, steps)
    lr = np.geomspace(1e-4, 1e-6, steps)  # a decaying schedule: a new value every step
    with path.open("w", encoding="utf-8") as f:
        for i in range(steps):
            f.write(
                "2025-04-07 15:34:27,308 - [mindformers/core/callback/callback.py:529] - INFO - "
                f"{{ Epoch:[  1/  1], step:[{i + 1:5d}/{steps:5d}], loss: {loss[i]:.6f}, "
                f"per_step_time: 1758ms, lr: {lr[i]:.8g}, overflow cond: False, "
                f"loss_scale: 1.0, global_norm: [{gnorm[i]:.6f}], "
                "train_throughput_per_npu: 170.173T\n"
            )
            if progress:
                f.write(
                    "2025-04-07 15:34:27,309 - [mindformers/core/callback/callback.py:558] - "
                    f"INFO -   {100 * (i + 1) / steps:5.1f}% |{'#' * 10}{' ' * 40}| "
                    "0.59 samples/s/p  1:54:17 }\n"
                )


def write_megatron(path: Path, n: int) -> None:
    rng = np.random.default_rng(1)
    loss, gnorm = rng.uniform(1, 10, n), rng.uniform(1, 30, n)
    lr = np.geomspace(1e-4, 1e-6, n)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(
                f" [2025-10-22 16:59:16] iteration {i + 1:8d}/{n:8d} | consumed samples: "
                f"{(i + 1) * 8:12d} | elapsed time per iteration (ms): 16442.7 | "
                f"throughput per GPU (TFLOP/s/GPU): 1.8 | learning rate: {lr[i]:.6E} | "
                f"global batch size:     8 | lm loss: {loss[i]:.6E} | "
                "seq_load_balancing_loss: 1.300237E+00 | loss scale: 1.0 | "
                f"grad norm: {gnorm[i]:.3f} | number of skipped iterations:   0 | "
                "number of nan iterations:   0 |\n"
            )


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _values(n: int, seed: int) -> tuple[list[float], list[float], list[float]]:
    rng = np.random.default_rng(seed)
    lr = np.geomspace(1e-4, 1e-6, n)
    return rng.uniform(1, 10, n).tolist(), rng.uniform(0.1, 30, n).tolist(), lr.tolist()


def write_hf(path: Path, n: int) -> None:
    """HF Trainer's printed log dicts (logging_steps=1)."""
    loss, gnorm, lr = _values(n, 2)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(
                f"{{'loss': {loss[i]:.4f}, 'grad_norm': {gnorm[i]!r}, "
                f"'learning_rate': {lr[i]!r}, 'epoch': {i / n:.2f}}}\n"
            )


def write_torchtitan(path: Path, n: int) -> None:
    """torchtitan's metrics line as captured from a colour console (a code before each key)."""
    loss, gnorm, _ = _values(n, 3)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(
                "[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - "
                f"\x1b[31mstep: {i + 1:2}  \x1b[32mloss: {loss[i]:8.5f}  "
                f"\x1b[33mgrad_norm: {gnorm[i]:7.4f}  \x1b[34mmemory:  9.46GiB(64.99%)  "
                "\x1b[35mtps: 7,282  \x1b[36mtflops: 0.52  \x1b[35mmfu: 0.17%\x1b[39m\n"
            )


def write_jsonl(path: Path, n: int) -> None:
    loss, gnorm, lr = _values(n, 4)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            record = {"step": i + 1, "loss": loss[i], "grad_norm": gnorm[i], "lr": lr[i]}
            f.write(json.dumps(record) + "\n")


def naive_hf(path: Path) -> pd.DataFrame:
    """Per line ``ast.literal_eval`` of the printed dict (what HF log scrapers do)."""
    rows = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.startswith("{'loss'"):
                d = ast.literal_eval(line)
                rows.append(
                    {"loss": d["loss"], "grad_norm": d["grad_norm"], "lr": d["learning_rate"]}
                )
    frame = pd.DataFrame(rows)
    frame.index = pd.RangeIndex(1, len(frame) + 1, name="step")
    return frame


def naive_torchtitan(path: Path) -> pd.DataFrame:
    """Per line: strip colour codes, then one ``re.search`` per field."""
    step_re, loss_re, gn_re = (
        re.compile(p) for p in (r"step: *(\d+)", r"loss: *(\S+)", r"grad_norm: *(\S+)")
    )
    rows = []
    with path.open(encoding="utf-8") as f:
        for raw in f:
            line = ANSI.sub("", raw)
            if m := step_re.search(line):
                rows.append(
                    {
                        "step": int(m.group(1)),
                        "loss": float(loss_re.search(line).group(1)),  # type: ignore[union-attr]
                        "grad_norm": float(gn_re.search(line).group(1)),  # type: ignore[union-attr]
                    }
                )
    return pd.DataFrame(rows).set_index("step")


def naive_jsonl(path: Path) -> pd.DataFrame:
    """Per line ``json.loads``, then a DataFrame."""
    with path.open(encoding="utf-8") as f:
        return pd.DataFrame([json.loads(line) for line in f if line.strip()]).set_index("step")


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


def read_hf(path: Path) -> object:
    """read_log of the printed HF dicts, written with logging_steps=1 (they carry no step)."""
    return read_log(path, logging_steps=1) if path.name == "hf.log" else read_log(path)


def read_pure(path: Path) -> object:
    """read_log with the compiled scanner switched off."""
    os.environ[speedups.PURE_ENV] = "1"
    try:
        return read_hf(path)
    finally:
        del os.environ[speedups.PURE_ENV]


def cpu_time(fn: Callable[[], T]) -> tuple[float, T]:
    """CPU seconds of this process (other load on the machine does not count)."""
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def best_of(repeat: int, fn: Callable[[], T]) -> tuple[float, T]:
    """The fastest of ``repeat`` runs (other load on a shared box only ever adds time)."""
    runs = [cpu_time(fn) for _ in range(repeat)]
    return min(t for t, _ in runs), runs[-1][1]


def calibration() -> float:
    """Seconds for 10 million iterations of a trivial Python loop (about 0.4 s on a 2023 laptop)."""
    start = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - start


def copy_rate() -> float:
    """GB/s of copying a fresh 256 MB buffer (parsing big logs is mostly moving bytes)."""
    src = b"x" * (1 << 28)
    start = time.perf_counter()
    bytearray(src)
    return (1 << 28) / (time.perf_counter() - start) / 1e9


def write_tee_pp(path: Path, steps: int, ranks: int = 4) -> None:
    """torchtitan PP=2 run tee'd from ``ranks`` ranks into one file (``[rankN]:`` prefixes):
    the first half print the -1.0 placeholder; every 50th record of the last rank is cut
    in two by the tee, another rank's line between the pieces."""
    loss, gnorm, _ = _values(steps, 5)
    with path.open("w", encoding="utf-8") as f:
        for i in range(steps):
            for r in range(ranks):
                line = (f"[titan] 2026-05-18 16:04:46,338 - root - INFO - step: {i + 1:2}  "
                        f"loss: {-1.0 if r < ranks // 2 else loss[i]:8.5f}  grad_norm: "
                        f"{gnorm[i]:7.4f}  memory:  9.46GiB(64.99%)  tps: 7,282  mfu: 0.17%")
                if r == ranks - 1 and i % 50 == 7:
                    f.write(f"[rank{r}]:{line[:70]}\n[rank0]:NCCL INFO\n[rank{r}]:{line[70:]}\n")
                else:
                    f.write(f"[rank{r}]:{line}\n")


_NA = "N/A (non-last PP stage, refer to last stage for real loss)"


def write_rank_dir(folder: Path, steps: int, ranks: int) -> None:
    """msrun_log/worker_N.log of a PP run: the last quarter of the ranks have the loss."""
    loss, gnorm, _ = _values(steps, 6)
    folder.mkdir()
    for r in range(ranks):
        last = r >= ranks * 3 // 4
        with (folder / f"worker_{r}.log").open("w", encoding="utf-8") as f:
            for i in range(steps):
                value = f"{loss[i]:10.6f}" if last else _NA
                f.write(f"2026-01-15 10:00:00,100 - mindformers[loss_callback.py:88] - INFO - "
                        f"{{ step:[{i + 1:5d}/{steps:5d}], loss: {value}, per_step_time:   "
                        f"1357ms, lr: 1.000000e-05, grad_norm: {gnorm[i]:10.6f}, throughput:"
                        "   1.36T }\n")


def cluster(repeat: int, steps: int, ranks: int, dir_steps: int) -> None:
    """Multi-rank reading: a ``steps``-step log of 4 ranks in one file, a ``ranks``-rank
    directory; both linear in the bytes (each rank's lines read once)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tee.log"
        write_tee_pp(path, steps)
        took, table = best_of(repeat, partial(read_log, path))
        assert len(table.frame) == steps and (table.frame["loss"] > 0).all()  # type: ignore[attr-defined]
        size = path.stat().st_size / 1e6
        print(f"multi-rank file: {steps:,} steps x 4 ranks, cut lines ({size:.0f} MB): "
              f"read_log {took:.2f} s ({size / took:.0f} MB/s)")
        folder = Path(tmp) / "msrun_log"
        write_rank_dir(folder, dir_steps, ranks)
        took, table = best_of(repeat, partial(read_log, folder))
        assert len(table.frame) == dir_steps  # type: ignore[attr-defined]
        size = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
        print(f"rank directory: {ranks} worker logs x {dir_steps:,} steps ({size:.0f} MB): "
              f"read_log {took:.2f} s ({size / took:.0f} MB/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool; the fastest counts")
    parser.add_argument("--cluster-steps", type=int, default=200_000,
                        help="steps of the multi-rank one-file log (0: skip the cluster shapes)")
    parser.add_argument("--ranks", type=int, default=100, help="worker logs in the rank directory")
    parser.add_argument("--rank-steps", type=int, default=2_000, help="steps per worker log")
    args = parser.parse_args()
    print(
        f"calibration: 10M-iteration Python loop {calibration():.2f} s, "
        f"memory copy {copy_rate():.1f} GB/s on this machine"
    )
    compiled = speedups.scanner() is not None
    print(f"compiled scanner: {'built' if compiled else 'NOT built (read_log = pure path)'}")
    shapes: list[tuple[str, str, Callable[[Path, int], None], Callable[[Path], pd.DataFrame]]] = [
        (
            "mindformers",
            "MFLossMonitor log",
            partial(write_mindformers, progress=True),
            partial(naive, family="mindformers"),
        ),
        ("mindformers", "step lines only", write_mindformers, partial(naive, family="mindformers")),
        ("megatron", "iteration lines", write_megatron, partial(naive, family="megatron")),
        ("hf", "printed log dicts", write_hf, naive_hf),
        ("torchtitan", "colour console", write_torchtitan, naive_torchtitan),
        ("jsonl", "metrics table", write_jsonl, naive_jsonl),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for family, shape, writer, baseline in shapes:
            path = Path(tmp) / f"{family}.{'jsonl' if family == 'jsonl' else 'log'}"
            writer(path, args.lines)
            ours, table = best_of(args.repeat, partial(read_hf, path))
            pure, pure_table = best_of(args.repeat, partial(read_pure, path))
            base, frame = best_of(args.repeat, partial(baseline, path))
            for read in (table, pure_table):  # every value bit-identical to the naive parse
                assert len(read.frame) == len(frame)  # type: ignore[attr-defined]
                for column in frame.columns:
                    np.testing.assert_array_equal(read.frame[column], frame[column])  # type: ignore[attr-defined]
            size = path.stat().st_size / 1e6
            verdict = "meets" if ours < TARGET_S * args.lines / 1e6 else "misses"
            print(
                f"{family} ({shape}) {args.lines:,} lines, {len(frame):,} steps ({size:.0f} MB): "
                f"read_log {ours:.2f} s (pure path {pure:.2f} s), naive loop {base:.2f} s; "
                f"{base / ours:.1f}x faster than naive, {pure / ours:.1f}x than pure; "
                f"{verdict} the {TARGET_S:g} s per million lines target"
            )
    if args.cluster_steps:
        cluster(args.repeat, args.cluster_steps, args.ranks, args.rank_steps)


if __name__ == "__main__":
    main()
