"""Time the compare as users run it (pytest end to end) against its floor and ``msprobe compare``.

  .venv/bin/python benchmarks/bench_compare.py --npu NPU_STEP --bench BENCH_STEP [--repeat N]
  .venv/bin/python benchmarks/bench_compare.py --large [--work-dir /work/bench]
  .venv/bin/python benchmarks/bench_compare.py --growth [--work-dir /work/bench]

Every run is its own child process, timed from spawn to exit (start-up and imports count),
with its peak RSS (``os.wait4``) and the sampled peak PSS summed over its process tree
(xdist workers, msprobe's pool). In one run, alternating run by run so that background load
hits all alike, it measures on the same files:

* ours: ``pytest --acc-npu=N --acc-bench=B --acc-json=J --acc-report=R -p no:cacheprovider -q``
  from an empty directory, serial and ``-n 2``, default and ``--acc-inputs=all`` (the full
  table, every tensor pair msprobe compares); and ``ours gate``, the same without the JSON
  document and the report (what a CI gate runs: verdict and terminal summary);
* the floor: ``floor_compare.py`` (read every paired tensor once, one float64 pass of every
  metric's sums, one thread, numpy, 64k chunks) and bare ``pytest --co`` with the plugin;
* ``msprobe compare`` (file mode, ``-tp``/``-gp`` the two dump.json) where msprobe is found.

It checks that ``-n 2`` writes the same JSON document as the serial run. Children run with
bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed, as on a user's machine) after an
untimed warm-up; every file is read once first (warm page cache). ``--growth`` generates
dumps with make_many_nodes.py (1k-50k nodes; 10 MB-1.2 GB of tensors) and times ours on each,
beside the baseline measured in the same run: as many empty parametrized tests, plugin off
(pytest's own cost per item on this machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import bench_measure as bm  # noqa: E402
import make_large_pair  # noqa: E402

_GATE = "--gate-only"  # not a pytest option: pytest_cmd leaves the output options out

MODES = {  # name -> extra pytest arguments
    "ours serial": [],
    # what a CI gate runs: the verdict and the terminal summary, no JSON document or report
    "ours gate": [_GATE],
    "ours -n 2": ["-n", "2"],
    "ours full serial": ["--acc-inputs=all"],
    "ours full -n 2": ["--acc-inputs=all", "-n", "2"],
    # the gate over every tensor pair: what -n 2 is measured on (issue 25)
    "ours full gate": ["--acc-inputs=all", _GATE],
    "ours full gate -n 2": ["--acc-inputs=all", "-n", "2", _GATE],
}


def pytest_cmd(python: Path, npu: Path, bench: Path, out: Path, extra: list[str]) -> list[str]:
    # the development venv has hypothesis, whose pytest plugin imports it in every terminal
    # summary (0.3-0.5 s here, in ours and in `--co` alike): a user without it does not pay it
    outputs = [] if _GATE in extra else [f"--acc-json={out / 'acc.json'}",
                                         f"--acc-report={out / 'report'}"]
    return [str(python), "-m", "pytest", f"--acc-npu={npu}", f"--acc-bench={bench}", *outputs,
            "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-q",
            *(x for x in extra if x != _GATE)]


def run_case(python: Path, npu: Path, bench: Path, repeat: int, msprobe: Path | None,
             work: Path, modes: list[str], env: dict[str, str]) -> dict[str, list[bm.Run]]:
    """Every tool ``repeat`` times, interleaved; the JSON of each ours run kept for checking."""
    runs: dict[str, list[bm.Run]] = {}
    scratch = Path(tempfile.mkdtemp(prefix="bench_", dir=work))
    floor = [str(python), str(HERE / "floor_compare.py"), str(npu), str(bench)]
    tools: dict[str, list[str]] = {
        "floor": floor,
        "pytest --co": pytest_cmd(python, npu, bench, scratch, ["--co"]),
    }
    for mode in modes:
        tools[mode] = pytest_cmd(python, npu, bench, scratch / mode.replace(" ", "_"),
                                 MODES[mode])
    for cmd in tools.values():  # untimed warm-up: .pyc files, shared libraries
        bm.measure(cmd, cwd=scratch, env=env)
    for i in range(repeat):
        for name, cmd in tools.items():
            run = bm.measure(cmd, cwd=scratch, env=env)
            if name.startswith("ours"):
                doc = scratch / name.replace(" ", "_") / "acc.json"
                run.info["json"] = json.loads(doc.read_text()) if doc.is_file() else None
            elif run.rc != 0:
                sys.exit(f"{name} failed (rc {run.rc}): {run.info['stderr'][-2000:]}")
            runs.setdefault(name, []).append(run)
        if msprobe is not None:
            runs.setdefault("msprobe", []).append(bm.run_msprobe(msprobe, npu, bench, work, env))
        print(f"round {i + 1}/{repeat}: " + ", ".join(
            f"{k} {v[-1].wall_s:.2f} s" for k, v in runs.items()), flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return runs


def same_json(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Serial and -n 2 documents agree (paths of their own output folders aside)."""
    if a is None or b is None:
        return False
    return {k: v for k, v in a.items() if k != "inputs"} == \
        {k: v for k, v in b.items() if k != "inputs"}


def report(runs: dict[str, list[bm.Run]]) -> dict[str, Any]:
    """Print the table (medians); return it for --json."""
    med = {k: statistics.median(r.wall_s for r in v) for k, v in runs.items()}
    floor = med["floor"]
    rows = []
    print(f"\n{'tool':<18} {'wall s':>7} {'/floor':>7} {'msprobe/x':>9} {'RSS MB':>7} "
          f"{'tree MB':>8} {'CPU s':>6}  runs")
    for name, value in med.items():
        rs = runs[name]
        rss = statistics.median(r.peak_mb for r in rs)
        tree = statistics.median(r.tree_pss_mb or 0 for r in rs)
        cpu = statistics.median(r.cpu_s for r in rs)
        vs_ms = f"{med['msprobe'] / value:.1f}x" if "msprobe" in med else "-"
        print(f"{name:<18} {value:>7.2f} {value / floor:>7.2f} {vs_ms:>9} {rss:>7.0f} "
              f"{tree:>8.0f} {cpu:>6.2f}  " + " ".join(f"{r.wall_s:.2f}" for r in rs))
        rows.append({"tool": name, "wall_s": value, "ratio_floor": value / floor,
                     "peak_rss_mb": rss, "tree_pss_mb": tree, "cpu_s": cpu,
                     "runs": [r.wall_s for r in rs], "load1": [r.load1 for r in rs]})
    for serial, parallel in (("ours serial", "ours -n 2"), ("ours full serial", "ours full -n 2"),
                             ("ours full gate", "ours full gate -n 2")):
        if serial in runs and parallel in runs:
            speedup = med[serial] / med[parallel]
            print(f"{parallel}: {speedup:.2f}x {serial} (medians)")
            if _GATE not in MODES[serial]:
                ok = all(same_json(a.info.get("json"), b.info.get("json"))
                         for a, b in zip(runs[serial], runs[parallel], strict=True))
                print(f"{parallel} writes the same JSON as {serial}: {'yes' if ok else 'NO'}")
    fd = [r.info.get("json", {}).get("compare", {}).get("first_divergence") for r in
          runs.get("ours serial", [])]
    if fd and fd[0]:
        print(f"first divergence (ours): {fd[0]['npu_name']} {fd[0]['tensor']}")
    if "msprobe" in runs:
        print(f"first error row (msprobe): {runs['msprobe'][0].info.get('first_error_row')}")
    return {"rows": rows}


def growth(python: Path, work: Path, repeat: int, env: dict[str, str],
           max_nodes: int, max_numel: int) -> None:
    """Time ours (serial, default) on generated dumps: node counts, then tensor bytes."""
    # (task, nodes, elements per tensor, share of nodes failing)
    cases = [("statistics", n, 64, 0.0) for n in (1000, 5000, 10000, 25000, 50000)]
    cases += [("statistics", 10000, 64, 0.5)]
    cases += [("tensor", 1000, numel, 0.0) for numel in (640, 6400, 32000, 80000)]
    cases = [c for c in cases if c[1] <= max_nodes and c[2] <= max_numel]
    print(f"\n{'task':<10} {'nodes':>6} {'failing':>7} {'pair MB':>8} {'wall s':>7} "
          f"{'--co s':>7} {'ms/node':>8} {'RSS MB':>7} {'empty ms':>8} {'ratio':>6} "
          f"{'empty MB':>8}")
    empty: dict[int, tuple[float, float]] = {}
    for task, nodes, numel, failing in cases:
        out = work / "growth" / f"{task}_{nodes}_{numel}_{failing}"
        if not (out / "made.json").is_file():
            shutil.rmtree(out, ignore_errors=True)
            proc = bm.measure([str(python), str(HERE / "make_many_nodes.py"), "--out", str(out),
                               "--nodes", str(nodes), "--task", task, "--numel", str(numel),
                               "--fail-from", str(1 - failing)],
                              cwd=REPO, env=env)
            (out / "made.json").write_text(proc.info["stdout"])
        made = json.loads((out / "made.json").read_text())
        npu, bench = out / "npu" / "step0", out / "bench" / "step0"
        bm.prewarm(npu, bench)
        cmd = pytest_cmd(python, npu, bench, out / "run", [])
        wall, base, rss = run_and_collect(cmd, out, repeat, env)
        if nodes not in empty:
            empty[nodes] = empty_items(python, work, nodes, repeat, env)
        per_node = 1000 * (wall - base) / nodes
        print(f"{task:<10} {nodes:>6} {failing:>7.0%} {made['pair_mb']:>8.1f} {wall:>7.2f} "
              f"{base:>7.2f} {per_node:>8.3f} {rss:>7.0f} "
              f"{empty[nodes][0]:>8.3f} {per_node / empty[nodes][0]:>6.2f} "
              f"{empty[nodes][1]:>8.0f}", flush=True)


def run_and_collect(cmd: list[str], cwd: Path, repeat: int, env: dict[str, str]
                    ) -> tuple[float, float, float]:
    """Medians of the run's wall time, of ``cmd --co``'s (collection only) and the run's peak
    RSS, after an untimed warm-up run; run and collection alternate."""
    bm.measure(cmd, cwd=cwd, env=env)
    walls, cos, rss = [], [], []
    for _ in range(repeat):
        run = bm.measure(cmd, cwd=cwd, env=env)
        walls.append(run.wall_s)
        rss.append(run.peak_mb)
        cos.append(bm.measure([*cmd, "--co"], cwd=cwd, env=env).wall_s)
    return statistics.median(walls), statistics.median(cos), statistics.median(rss)


def empty_items(python: Path, work: Path, nodes: int, repeat: int, env: dict[str, str]
                ) -> tuple[float, float]:
    """The baseline: pytest's own cost per item, as ms per item after collection (the same
    formula as ours) and peak RSS, for as many empty parametrized tests, plugin disabled."""
    folder = work / "growth" / f"empty_{nodes}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_empty.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('i', range({nodes}))\n"
        "def test_empty(i):\n    pass\n")
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:accuracy",
           "test_empty.py"]
    wall, base, rss = run_and_collect(cmd, folder, repeat, env)
    return 1000 * (wall - base) / nodes, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npu", type=Path, help="NPU step dir (with --bench)")
    ap.add_argument("--bench", type=Path, help="bench step dir")
    ap.add_argument("--large", action="store_true", help="the generated large pair (bug vs fp32)")
    ap.add_argument("--growth", action="store_true", help="the cost-growth table")
    ap.add_argument("--growth-max-nodes", type=int, default=50000,
                    help="--growth: leave out cases with more nodes")
    ap.add_argument("--growth-max-numel", type=int, default=80000,
                    help="--growth: leave out tensor cases with more elements per tensor")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of ours")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--msprobe", help="msprobe executable (default: PATH, known venvs)")
    ap.add_argument("--no-msprobe", action="store_true")
    ap.add_argument("--python", type=Path, default=REPO / ".venv" / "bin" / "python")
    ap.add_argument("--work-dir", type=Path, default=REPO / ".bench")
    ap.add_argument("--json", type=Path, help="write the table here")
    ap.add_argument("--root", type=Path, help="checkout to measure (e.g. a `git archive HEAD` "
                    "with its extensions built in place), put first on the children's path")
    args = ap.parse_args()
    work = args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    python = args.python if args.python.is_file() else Path(sys.executable)
    msprobe = None if args.no_msprobe else make_large_pair.find_msprobe(args.msprobe)
    env = bm.user_env()
    root = args.root.resolve() if args.root else REPO
    if args.root:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    print(f"ours: {bm.describe_checkout(root)}; msprobe: {msprobe}; cpus {os.cpu_count()}; "
          f"load {os.getloadavg()}")
    if args.growth:
        growth(python, work, args.repeat, env, args.growth_max_nodes, args.growth_max_numel)
        return
    if args.large:
        npu = make_large_pair.step_dir(work / "large", "bug")
        bench = make_large_pair.step_dir(work / "large", "fp32")
    elif args.npu and args.bench:
        npu, bench = args.npu, args.bench
    else:
        sys.exit("give --npu and --bench, --large or --growth")
    bm.prewarm(npu, bench)
    runs = run_case(python, npu, bench, args.repeat, msprobe, work, args.modes.split(","), env)
    table = report(runs)
    print(f"load average at the end: {os.getloadavg()}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
