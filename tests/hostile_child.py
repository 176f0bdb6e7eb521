"""Run a hostile case in a child interpreter with memory and time caps; measure it.

The child gets RLIMIT_AS of 2 GiB (numpy and pandas map ~0.6 GiB of address space before any
work) and 120 s of CPU time (RLIMIT_CPU): a blow-up in time or memory ends the child, never the
suite, whatever else keeps the machine busy (a wall-clock bound failed cases on a loaded box).
A wall-clock timeout of 600 s is left only for a child blocked without using CPU.  The case
prints one JSON line through ``done(outcome)``; peak RSS (VmHWM) and wall come with it.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.helpers import ROOT

AS_LIMIT = 2 << 30
CPU_S = 120  # CPU seconds: load on the machine does not count against it
TIMEOUT_S = 600  # wall: only a child blocked without using CPU reaches it
MAX_RSS_KB = 1 << 20  # 1 GiB of resident memory at most

PRELUDE = """
import json, os, sys, time
from pathlib import Path
from pytest_accuracy.errors import AccuracyInputError
start = time.perf_counter()
def peak_kb():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0
def done(outcome):
    print(json.dumps({"outcome": str(outcome), "rss_kb": peak_kb(),
                      "wall_s": round(time.perf_counter() - start, 3)}))
here = Path(sys.argv[1])
"""


def _caps() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_S, CPU_S))


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    env.update(extra)
    return env


def run_child(code: str, workdir: Path, **env: str) -> dict[str, Any]:
    """Run ``code`` (after the prelude; ``here`` is ``workdir``) and return its JSON line."""
    script = workdir / "case.py"
    script.write_text(PRELUDE + textwrap.dedent(code))
    proc = subprocess.run([sys.executable, str(script), str(workdir)], capture_output=True,
                          text=True, cwd=ROOT, timeout=TIMEOUT_S, check=False,
                          preexec_fn=_caps, env=child_env(**env))
    assert proc.returncode == 0, proc.stderr[-3000:]  # no crash, no traceback
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rss_kb"] < MAX_RSS_KB, result
    print(result)  # pytest -s shows the measurement
    return result


def run_command(args: list[str], workdir: Path) -> subprocess.CompletedProcess[str]:
    """A console command under the same caps (the merge CLI, pytest)."""
    return subprocess.run(args, capture_output=True, text=True, cwd=workdir,
                          timeout=TIMEOUT_S, check=False, preexec_fn=_caps,
                          env=child_env())
