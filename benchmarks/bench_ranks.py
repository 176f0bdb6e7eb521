"""Many ranks at the speed of the data: a multi-rank statistics step, end to end (issue 41).

    python benchmarks/bench_ranks.py --ranks 16 --nodes 20000 [--rounds 3] [--out DIR]

Generates (once) a step of RANKS ranks x NODES statistics nodes a side with
``make_many_nodes.py --ranks`` (nothing failing; the NPU side one ulp off), then times, each
as its own process, round after round (tools alternate, so background load hits all alike):

* the **floor**: ``json.loads`` of both sides' dump.json, each node's tensor statistics
  picked out in one comprehension, and one vectorized compare of every pair (relative error
  of Max, Min, Mean and Norm), rank after rank, in one process;
* **ours serial**: ``pytest --acc-npu=NPU --acc-bench=BENCH -p no:cacheprovider -q`` from an
  empty folder (the gate: no document written);
* **ours -n 2**: the same with ``-n 2``.

Prints the medians, each run's peak RSS (GNU time's %M, the biggest single process: under
xdist that is one worker or the controller), serial over the floor (goal <= 2) and serial over
``-n 2`` (goal >= 1.5).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_measure import Run, measure, prewarm, user_env  # beside this script

HERE = Path(__file__).resolve().parent

FLOOR = """
import json, sys
from pathlib import Path
import numpy as np
npu_root, bench_root = Path(sys.argv[1]), Path(sys.argv[2])
KEYS = ("input_args", "output")
def stats(node):
    return [[t.get("Max"), t.get("Min"), t.get("Mean"), t.get("Norm")]
            for key in KEYS for t in node.get(key, ()) if isinstance(t, dict)]
pairs = 0
for rank_dir in sorted((npu_root / "step0").iterdir()):
    docs = [json.loads((root / "step0" / rank_dir.name / "dump.json").read_bytes())["data"]
            for root in (npu_root, bench_root)]
    rows = [x + y for name, node in docs[0].items() if name in docs[1]
            for x, y in zip(stats(node), stats(docs[1][name]))]
    table = np.array(rows, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        worst = np.nanmax(np.abs(table[:, :4] - table[:, 4:]) / np.abs(table[:, 4:]), axis=1)
    pairs += len(rows)
print(json.dumps({"pairs": pairs}))
"""


def generate(out: Path, ranks: int, nodes: int) -> None:
    if (out / "npu" / "step0" / f"rank{ranks - 1}" / "dump.json").is_file():
        return
    subprocess.run([sys.executable, str(HERE / "make_many_nodes.py"), "--out", str(out),
                    "--nodes", str(nodes), "--fail-from", "1", "--ranks", str(ranks)],
                   check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--nodes", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--python", default=sys.executable, help="python with the plugin")
    args = ap.parse_args()
    out = args.out or Path(tempfile.gettempdir()) / f"acc_ranks_{args.ranks}x{args.nodes}"
    generate(out, args.ranks, args.nodes)
    npu, bench = out / "npu", out / "bench"
    prewarm(npu, bench)
    env = user_env()
    tools = {
        "floor": [args.python, "-c", FLOOR, str(npu), str(bench)],
        "ours serial": [args.python, "-m", "pytest", f"--acc-npu={npu}", f"--acc-bench={bench}",
                        "-p", "no:cacheprovider", "-q"],
        "ours -n 2": [args.python, "-m", "pytest", f"--acc-npu={npu}", f"--acc-bench={bench}",
                      "-p", "no:cacheprovider", "-q", "-n", "2"],
    }
    runs: dict[str, list[Run]] = {name: [] for name in tools}
    with tempfile.TemporaryDirectory() as empty:
        for cmd in tools.values():  # warm-up: bytecode caches written
            measure(cmd, cwd=Path(empty), env=env)
        for _ in range(args.rounds):
            for name, cmd in tools.items():
                run = measure(cmd, cwd=Path(empty), env=env)
                if run.rc != 0:
                    raise SystemExit(f"{name} exited {run.rc}:\n{run.info['stdout'][-2000:]}")
                runs[name].append(run)
    wall = {name: statistics.median(r.wall_s for r in rs) for name, rs in runs.items()}
    print(f"{args.ranks} ranks x {args.nodes} statistics nodes a side, {args.rounds} rounds "
          f"(load {min(r.load1 for rs in runs.values() for r in rs):.1f}-"
          f"{max(r.load1 for rs in runs.values() for r in rs):.1f})")
    print(f"{'run':<12} {'wall s (median, min-max)':>28} {'peak RSS MB (max)':>18}")
    for name, rs in runs.items():
        walls = [r.wall_s for r in rs]
        print(f"{name:<12} {wall[name]:>10.2f} ({min(walls):.2f}-{max(walls):.2f})"
              f"{max(r.peak_mb for r in rs):>24.0f}")
    print(json.dumps({"serial_over_floor": round(wall["ours serial"] / wall["floor"], 2),
                      "serial_over_n2": round(wall["ours serial"] / wall["ours -n 2"], 2)}))


if __name__ == "__main__":
    main()
