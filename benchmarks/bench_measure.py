"""Measuring for bench_compare.py: one child process's wall time, CPU time and peak memory."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    peak_mb: float  # peak RSS of the command's own process (GNU time's %M where it is there)
    tree_pss_mb: float | None  # sampled peak of the summed PSS of the child's process tree
    rc: int
    load1: float  # 1-minute load average when the run started
    info: dict[str, Any] = field(default_factory=dict)



def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
        except OSError:
            continue
    return out


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree_pss_kb(root: int) -> int:
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _pss_kb(pid)
        todo += _children(pid)
    return total


# GNU time, between us and the command: a child's ru_maxrss starts from the RSS of the process
# that forked it (Linux keeps the pre-exec peak), so with this benchmark holding 100k-node JSON
# documents every tool read ~870 MB; time is small, so the peak it reports is the command's
_GNU_TIME = "/usr/bin/time"


def measure(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> Run:
    """Run ``cmd`` to completion; wall time, CPU time and peak memory of that child alone."""
    load1 = os.getloadavg()[0]
    timed = os.access(_GNU_TIME, os.X_OK)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as peak_file:
        if timed:
            cmd = [_GNU_TIME, "-f", "%M", "-o", peak_file.name, *cmd]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.05):
                peak[0] = max(peak[0], _tree_pss_kb(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
        lines = peak_file.read().split() if timed else []
        peak_kb = int(lines[-1]) if lines and lines[-1].isdigit() else usage.ru_maxrss
    return Run(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        peak_mb=peak_kb / 1024,
        tree_pss_mb=peak[0] / 1024 if peak[0] else None,
        rc=proc.returncode,
        load1=load1,
        info={"stdout": stdout, "stderr": stderr},
    )


def prewarm(*dirs: Path) -> None:
    """Read every file once so both tools start from a warm page cache."""
    for d in dirs:
        for p in d.rglob("*"):
            if p.is_file():
                with p.open("rb") as fh:
                    while fh.read(1 << 22):
                        pass


def user_env() -> dict[str, str]:
    """This environment as a user's shell has it: bytecode caching on."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def single_rank_dir(step_dir: Path) -> Path:
    found = sorted(p for p in step_dir.iterdir() if (p / "dump.json").is_file())
    if len(found) != 1:
        raise SystemExit(f"{step_dir}: expected exactly one proc/rank dir, found {len(found)}")
    return found[0]



def describe_checkout(root: Path) -> str:
    """``<root> @ <commit>[ + N uncommitted files in pytest_accuracy/]``."""

    def git(*argv: str) -> str:
        proc = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "no git"
    dirty = [ln for ln in git("status", "--porcelain", "--", "pytest_accuracy").splitlines() if ln]
    suffix = f" + {len(dirty)} uncommitted files in pytest_accuracy/" if dirty else ""
    return f"{root} @ {commit}{suffix}"


def node_of_row(row: str, nodes: set[str]) -> str:
    """msprobe row name (node + .input.0 / .output.0 / .parameters.x ...) -> node name."""
    parts = row.split(".")
    for k in range(len(parts), 0, -1):
        candidate = ".".join(parts[:k])
        if candidate in nodes:
            return candidate
    return row


def run_msprobe(
    msprobe: Path, npu: Path, bench: Path, out_root: Path, env: dict[str, str] | None = None
) -> Run:
    """``msprobe compare`` in file mode on the dump.json of the one rank dir of each step."""
    npu_json = single_rank_dir(npu) / "dump.json"
    bench_json = single_rank_dir(bench) / "dump.json"
    out = Path(tempfile.mkdtemp(prefix="msprobe_out_", dir=out_root))
    cmd = [str(msprobe), "compare", "-tp", str(npu_json), "-gp", str(bench_json), "-o", str(out)]
    run = measure(cmd, cwd=out_root, env=env)
    run.info["cmd"] = " ".join(cmd)
    csvs = sorted(out.glob("compare_result_*.csv"))
    if run.rc == 0 and csvs:
        csv.field_size_limit(1 << 30)
        with csvs[0].open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        nodes = set(json.loads(npu_json.read_text())["data"])
        results = [r.get("Result", "") for r in rows]
        first = next((r["NPU Name"] for r in rows if r.get("Result") == "error"), None)
        run.info.update(
            rows=len(rows),
            result_counts={k: results.count(k) for k in sorted(set(results))},
            first_error_row=first,
            first_divergence=node_of_row(first, nodes) if first else None,
        )
    elif run.rc == 0:
        run.info["error"] = f"no compare_result_*.csv in {out}"
    shutil.rmtree(out, ignore_errors=True)
    return run
