"""Time pytest_accuracy's precheck (plan + run) on an L1 dump and compare with msprobe's checker.

Usage::

    python benchmarks/bench_precheck.py [--dump DIR] [--devices dump,cpu] [--repeat 3]
                                        [--msprobe-python /tmp/msprobe-venv/bin/python]
    # throughput per executor on one MindSpore dump (numpy replay, torch CPU, MindSpore CPU)
    python benchmarks/bench_precheck.py --dump example_data/dumps/ms_fp32/L1_tensor \
        --devices dump,torch:cpu,mindspore:cpu --mindspore-python /path/to/ms-venv/bin/python \
        --no-msprobe

Each measurement runs in a fresh process, so import time counts, as it does for
msprobe's CLI.  msprobe's PyTorch ``acc_check`` cannot run on a machine without an
NPU or CUDA, so it is run through the two monkeypatches the spec describes
(``torch.cuda.set_device`` a no-op, ``current_device = "cpu"``): CPU in the dumped
dtype against CPU upcast, i.e. the same work as our ``device="cpu"``.  Without
``--msprobe-python`` (or when that run fails) the ratio uses msprobe's timing recorded
in the spec, and the output says so.

``--mindspore-python`` runs the ``mindspore:`` devices with another interpreter (MindSpore
2.10 needs numpy<2, so it lives in a venv of its own).  For each device the output has the
throughput of a second run of every case in the same process (cases and APIs per second:
frameworks imported and executors built by the first, which the wall time includes).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DUMP = REPO / "example_data" / "dumps" / "pt_fp32" / "L1_tensor" / "step0"
# spec msprobe_precheck.md, section 4, run 3: acc_check through the CPU shim on the same
# tiny-Llama L1 tensor dump (one step, 61 APIs, forward + backward), 2-core CPU machine.
SPEC_WALL_S, SPEC_APIS = 62.5, 61
SPEC_SOURCE = "spec msprobe_precheck.md section 4, run 3 (2-core CPU machine)"

_OURS = """
import json, sys, time
t0 = time.perf_counter()
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.precheck.runner import plan, run_case
t1 = time.perf_counter()
cases = plan(load_dumps(sys.argv[1]), device=sys.argv[2])
t2 = time.perf_counter()
results = [run_case(c) for c in cases]
t3 = time.perf_counter()
again = [run_case(c) for c in cases]  # steady state: frameworks imported, executors built
t4 = time.perf_counter()
status = {}
for r in results:
    key = r.direction + ":" + r.status
    status[key] = status.get(key, 0) + 1
apis = len({r.api for r in results})
print(json.dumps({"import_s": t1 - t0, "plan_s": t2 - t1, "run_s": t3 - t2, "rerun_s": t4 - t3,
                  "cases": len(results), "apis": apis, "status": status}))
"""

_SHIM = """
import sys, torch
torch.cuda.set_device = lambda *a, **k: None
from msprobe.pytorch.api_accuracy_checker.acc_check import acc_check as ac, acc_check_utils as au
ac.current_device = "cpu"
au.current_device = "cpu"
ac._acc_check()
"""


@dataclass
class Timing:
    """One measured (or recorded) run."""

    wall_s: float
    apis: int
    status: dict[str, int] = field(default_factory=dict)
    detail: str = ""


def time_ours(dump: Path, device: str, python: str = sys.executable) -> Timing:
    start = time.perf_counter()
    proc = subprocess.run(
        [python, "-c", _OURS, str(dump), device],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    wall = time.perf_counter() - start
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    rerun_s = max(float(out["rerun_s"]), 1e-9)
    detail = (
        f"{out['cases']} cases; import {out['import_s']:.2f} s, plan {out['plan_s']:.3f} s, "
        f"run {out['run_s']:.2f} s (framework import included), again {rerun_s:.2f} s = "
        f"{out['cases'] / rerun_s:.0f} cases/s, {out['apis'] / rerun_s:.1f} APIs/s"
    )
    return Timing(wall, int(out["apis"]), dict(out["status"]), detail)


def time_msprobe(python: str, dump: Path, timeout: int) -> Timing | None:
    dump_json = next(dump.glob("**/dump.json"))
    with tempfile.TemporaryDirectory() as tmp:
        shim = Path(tmp) / "acc_check_cpu.py"
        shim.write_text(_SHIM, encoding="utf-8")
        out_dir = Path(tmp) / "out"
        command = [python, str(shim), "-api_info", str(dump_json), "-o", str(out_dir)]
        start = time.perf_counter()
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=tmp)
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"msprobe run failed: {exc}")
            return None
        wall = time.perf_counter() - start
        results = sorted(out_dir.glob("accuracy_checking_result_*.csv"))
        if proc.returncode != 0 or not results:
            print(f"msprobe run failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
            return None
        with results[0].open(encoding="utf-8-sig") as handle:
            rows = list(csv.reader(handle))[1:]
    status: dict[str, int] = {}
    for row in rows:
        key = f"{row[1]}/{row[2] if len(row) > 2 else ''}"
        status[key] = status.get(key, 0) + 1
    return Timing(wall, len(rows), status, "measured here, same machine")


def main() -> None:
    parser = argparse.ArgumentParser(description="Time precheck plan+run against msprobe.")
    parser.add_argument("--dump", type=Path, default=DEFAULT_DUMP)
    parser.add_argument("--devices", default="dump,cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--msprobe-python", help="python of a venv with mindstudio-probe 26.2.0")
    parser.add_argument("--msprobe-timeout", type=int, default=900)
    parser.add_argument("--mindspore-python", default=sys.executable,
                        help="python of a venv with mindspore 2.10 and numpy<2")
    parser.add_argument("--no-msprobe", action="store_true", help="time ours only")
    args = parser.parse_args()

    print(f"dump: {args.dump}")
    ours: dict[str, Timing] = {}
    for device in args.devices.split(","):
        python = args.mindspore_python if device.startswith("mindspore") else sys.executable
        best = min((time_ours(args.dump, device, python) for _ in range(args.repeat)), key=_wall)
        ours[device] = best
        print(
            f"pytest_accuracy device={device}: {best.apis} APIs, wall {best.wall_s:.2f} s "
            f"(best of {args.repeat}; {best.detail}) {best.status}"
        )
    if args.no_msprobe:
        return
    measured = None
    if args.msprobe_python:
        measured = time_msprobe(args.msprobe_python, args.dump, args.msprobe_timeout)
    reference = measured or Timing(SPEC_WALL_S, SPEC_APIS, {}, SPEC_SOURCE)
    if measured is None:
        print(f"msprobe: not run here; using the timing recorded in the {SPEC_SOURCE}")
    print(
        f"msprobe acc_check (CPU shim): {reference.apis} APIs, wall {reference.wall_s:.1f} s "
        f"({reference.detail}) {reference.status}"
    )
    ref_per_api = reference.wall_s / max(reference.apis, 1)
    for device, timing in ours.items():
        per_api = timing.wall_s / max(timing.apis, 1)
        print(
            f"ratio msprobe / pytest_accuracy[device={device}]: "
            f"{reference.wall_s / timing.wall_s:.1f}x wall, {ref_per_api / per_api:.1f}x per API "
            f"({per_api * 1000:.0f} ms vs {ref_per_api * 1000:.0f} ms per API)"
        )


def _wall(timing: Timing) -> float:
    return timing.wall_s


if __name__ == "__main__":
    main()
