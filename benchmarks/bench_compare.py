"""Time pytest_accuracy's compare against ``msprobe compare`` on the same dump pairs.

  .venv/bin/python benchmarks/bench_compare.py [--msprobe PATH] [--large] [--repeat N]

Each run of each tool is a separate child process, timed from spawn to exit (interpreter
start-up and imports included, as msprobe's CLI pays them), with the peak RSS that the
kernel reports for that child (``os.wait4`` rusage, the same number as ``/usr/bin/time -v``:
the largest single process of the child's tree). msprobe forks a one-worker pool for tensor
compares, so the tree's summed PSS is also sampled (20 Hz) and shown in a second table.

Both tools see exactly the same pair: ours gets the two step dirs, msprobe gets the
``dump.json`` of the single proc/rank dir in each (file mode, ``-tp NPU -gp BENCH``).
msprobe's first divergence is the node of the first CSV row whose Result is ``error``;
ours is ``find_first_divergence``.

Cases: the bundled tiny pairs (``example_data/dumps/pt_bug`` vs ``pt_fp32``, step0, for
L1_tensor, L0_tensor and mix_statistics) and, with ``--large``, an L1 tensor dump pair of
a wider model generated with msprobe by make_large_pair.py (~630 MB per fp32 side).
Without msprobe, ours is still measured and msprobe's numbers come from a REFERENCE table
recorded when the fixtures were made (another machine, other load: not measured here).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import make_large_pair  # noqa: E402

DUMPS = REPO / "example_data" / "dumps"
TINY_CONFIGS = ("L1_tensor", "L0_tensor", "mix_statistics")


@dataclass(frozen=True)
class Reference:
    """msprobe compare as recorded with the fixtures (NOT measured by this script)."""

    wall_s: float
    peak_mb: float
    rows: int
    first_error_node: str | None
    source: str


# fixtures/msprobe_compare_out/TIMINGS.tsv and scale_test/ (/usr/bin/time -v, 2-core box,
# torch 2.13.0+cpu, mindstudio-probe 26.2.0, numpy 2.4.6, pandas 3.1.1), 2026-11-22.
REFERENCE: dict[str, Reference] = {
    "tiny/L1_tensor bug": Reference(
        9.48, 372, 344, "Tensor.__add__.5.forward", "TIMINGS.tsv ii_bug_vs_fp32_L1_tensor"
    ),
    "tiny/L0_tensor bug": Reference(
        8.67,
        370,
        125,
        "Module.layers.1.n1.RMSNorm.forward.0",
        "TIMINGS.tsv ii_bug_vs_fp32_L0_tensor",
    ),
    "tiny/mix_statistics bug": Reference(
        8.24, 371, 469, "Tensor.__add__.5.forward", "TIMINGS.tsv ii_bug_vs_fp32_mix_statistics"
    ),
    "tiny/L1_tensor bf16": Reference(
        8.10, 372, 344, "Functional.linear.0.forward", "TIMINGS.tsv i_bf16_vs_fp32_L1_tensor"
    ),
    "tiny/L0_tensor bf16": Reference(7.49, 371, 125, None, "TIMINGS.tsv i_bf16_vs_fp32_L0_tensor"),
    "large/L1_tensor bf16": Reference(27.46, 387, 1214, None, "scale_test/cmp.time"),
}


@dataclass
class Case:
    name: str
    npu: Path  # step dir
    bench: Path  # step dir
    size_mb: float = 0.0


@dataclass
class Run:
    wall_s: float
    cpu_s: float
    peak_mb: float  # ru_maxrss of the child (largest single process of its tree)
    tree_pss_mb: float | None  # sampled peak of the summed PSS of the child's process tree
    rc: int
    load1: float  # 1-minute load average when the run started
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class CaseResult:
    case: Case
    ours: list[Run] = field(default_factory=list)
    msprobe: list[Run] = field(default_factory=list)
    reference: Reference | None = None


# --------------------------------------------------------------------------- measuring


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


def measure(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> Run:
    """Run ``cmd`` to completion; wall time, CPU time and peak memory of that child alone."""
    load1 = os.getloadavg()[0]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
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
    return Run(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        peak_mb=usage.ru_maxrss / 1024,
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


# --------------------------------------------------------------------------- the tools


def single_rank_dir(step_dir: Path) -> Path:
    found = sorted(p for p in step_dir.iterdir() if (p / "dump.json").is_file())
    if len(found) != 1:
        raise SystemExit(f"{step_dir}: expected exactly one proc/rank dir, found {len(found)}")
    return found[0]


def run_ours(
    python: Path,
    case: Case,
    profile: Path | None = None,
    env: dict[str, str] | None = None,
    root: Path = REPO,
    inputs: str | None = None,
) -> Run:
    cmd = [str(python), str(HERE / "run_ours.py"), str(case.npu), str(case.bench)]
    if root != REPO:
        cmd += ["--root", str(root)]
    if inputs:
        cmd += ["--inputs", inputs]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    run = measure(cmd, cwd=REPO, env=env)
    if run.rc == 0:
        run.info.update(json.loads(run.info["stdout"].strip().splitlines()[-1]))
    run.info["cmd"] = " ".join(cmd)
    return run


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
    msprobe: Path, case: Case, out_root: Path, env: dict[str, str] | None = None
) -> Run:
    npu_json = single_rank_dir(case.npu) / "dump.json"
    bench_json = single_rank_dir(case.bench) / "dump.json"
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


# --------------------------------------------------------------------------- cases


def tiny_cases(configs: list[str], variants: list[str]) -> list[Case]:
    cases = []
    for variant in variants:
        for cfg in configs:
            npu = DUMPS / f"pt_{variant}" / cfg / "step0"
            bench = DUMPS / "pt_fp32" / cfg / "step0"
            cases.append(Case(f"tiny/{cfg} {variant}", npu, bench, _size_mb(npu, bench)))
    return cases


def large_cases(
    work: Path, msprobe: Path | None, python: Path | None, variants: list[str], force: bool
) -> list[Case]:
    out = work / "large"
    if python is None and msprobe is not None:
        python = make_large_pair.python_for(msprobe)
    if python is None:
        ready = all((out / f"pt_{v}" / "GENERATED.json").is_file() for v in ["fp32", *variants])
        if not ready:
            raise SystemExit(
                "--large needs msprobe (mindstudio-probe) to generate the pair: "
                "pass --msprobe or --gen-python"
            )
        dirs = {v: make_large_pair.step_dir(out, v) for v in ["fp32", *variants]}
    else:
        dirs = make_large_pair.generate(out, python, ["fp32", *variants], force=force)
    return [
        Case(f"large/L1_tensor {v}", dirs[v], dirs["fp32"], _size_mb(dirs[v], dirs["fp32"]))
        for v in variants
    ]


def _size_mb(*dirs: Path) -> float:
    return sum(make_large_pair.dir_size_mb(d) for d in dirs)


# --------------------------------------------------------------------------- report


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a != a or b != b or b == 0:
        return "-"
    return f"{a / b:.1f}x"


def _first(runs: list[Run], key: str) -> Any:
    for r in runs:
        if key in r.info:
            return r.info[key]
    return None


def print_report(results: list[CaseResult], measured_msprobe: bool) -> list[str]:
    """Print the tables; return the target verdicts."""
    head = (
        f"{'case':<24} {'pair MB':>7} {'rows/nodes':>11} {'ours s':>7} {'msprobe s':>9} "
        f"{'ratio':>6} {'ours MB':>8} {'msprobe MB':>10} {'ratio':>6}  same first divergence"
    )
    label = "msprobe" if measured_msprobe else "msprobe = REFERENCE (recorded, NOT measured)"
    print(f"\nWall time and peak RSS, median of runs ({label}; ratio = msprobe / ours)")
    print(head)
    print("-" * len(head))
    verdicts: list[str] = []
    for res in results:
        o_wall = _median([r.wall_s for r in res.ours])
        o_mem = _median([r.peak_mb for r in res.ours])
        if measured_msprobe:
            m_wall: float | None = _median([r.wall_s for r in res.msprobe])
            m_mem: float | None = _median([r.peak_mb for r in res.msprobe])
            rows = _first(res.msprobe, "rows")
            m_fd = _first(res.msprobe, "first_divergence")
        elif res.reference is not None:
            m_wall, m_mem = res.reference.wall_s, res.reference.peak_mb
            rows, m_fd = res.reference.rows, res.reference.first_error_node
        else:
            m_wall = m_mem = rows = m_fd = None
        o_fd = _first(res.ours, "first_divergence")
        nodes = _first(res.ours, "nodes")
        same = "yes" if m_fd == o_fd else "NO"
        if m_fd is None and not measured_msprobe:
            same = "n/a"
        rows_nodes = f"{rows or '-'}/{nodes}"
        print(
            f"{res.case.name:<24} {res.case.size_mb:>7.1f} {rows_nodes:>11} "
            f"{_fmt(o_wall):>7} {_fmt(m_wall):>9} {_ratio(m_wall, o_wall):>6} "
            f"{_fmt(o_mem, 0):>8} {_fmt(m_mem, 0):>10} {_ratio(m_mem, o_mem):>6}  {same}"
        )
        if m_wall is not None:
            ok = m_wall >= 5 * o_wall
            verdicts.append(
                f"{res.case.name}: wall {m_wall / o_wall:.1f}x faster "
                f"-> target >=5x {'MET' if ok else 'MISSED'}"
            )
        if res.case.name.startswith("large/") and m_mem is not None:
            ok = o_mem < m_mem
            verdicts.append(
                f"{res.case.name}: peak RSS {o_mem:.0f} MB vs {m_mem:.0f} MB "
                f"-> target lower {'MET' if ok else 'MISSED'}"
            )

    print("\nFirst divergence (ours: find_first_divergence; msprobe: first row with Result error)")
    for res in results:
        o_fd = _first(res.ours, "first_divergence")
        o_t = _first(res.ours, "first_divergence_tensor")
        if measured_msprobe:
            m_row = _first(res.msprobe, "first_error_row")
            counts = _first(res.msprobe, "result_counts")
        else:
            m_row = res.reference.first_error_node if res.reference else None
            counts = "REFERENCE"
        print(f"  {res.case.name:<24} ours: {o_fd} [{o_t}]")
        print(f"  {'':<24} msprobe: {m_row}  (Result counts {counts})")
        print(f"  {'':<24} ours statuses {_first(res.ours, 'status')}")

    print(
        "\nDetail (medians): CPU s = user+sys of the child tree; tree = sampled peak PSS sum "
        "(MB); tensors = tensor pairs ours compared; ours phases in-process"
    )
    print(
        f"{'case':<24} {'ours cpu':>8} {'ms cpu':>7} {'ours tree':>9} {'ms tree':>8} "
        f"{'load1':>6} {'tensors':>7}  ours phases (import/load/results/fd s)"
    )
    for res in results:
        phases = [r.info.get("seconds", {}) for r in res.ours]
        ph = "/".join(
            _fmt(_median([p.get(k, float("nan")) for p in phases]), 2)
            for k in ("import", "load_dumps", "results", "first_divergence")
        )
        loads = [r.load1 for r in res.ours + res.msprobe]
        print(
            f"{res.case.name:<24} {_fmt(_median([r.cpu_s for r in res.ours])):>8} "
            f"{_fmt(_median([r.cpu_s for r in res.msprobe])):>7} "
            f"{_fmt(_median([r.tree_pss_mb or 0 for r in res.ours]), 0):>9} "
            f"{_fmt(_median([r.tree_pss_mb or 0 for r in res.msprobe]), 0):>8} "
            f"{_fmt(_median(loads)):>6} {_first(res.ours, 'tensors') or '-':>7}  {ph}"
        )
    if not measured_msprobe:
        print("\nREFERENCE sources (recorded with the fixtures, not measured now):")
        for name, ref in REFERENCE.items():
            print(f"  {name:<24} {ref.wall_s:6.2f} s {ref.peak_mb:5.0f} MB  {ref.source}")
    print("\nTargets:")
    for v in verdicts:
        print(f"  {v}")
    return verdicts


def print_profile(path: Path, top: int) -> None:
    stats = pstats.Stats(str(path))
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description="pytest_accuracy compare vs msprobe compare")
    ap.add_argument("--msprobe", help="msprobe executable (default: PATH, /work/bench/msvenv)")
    ap.add_argument("--no-msprobe", action="store_true", help="measure ours only (REFERENCE)")
    ap.add_argument(
        "--python",
        type=Path,
        default=REPO / ".venv" / "bin" / "python",
        help="interpreter for our compare (default: the repo's .venv)",
    )
    ap.add_argument(
        "--ours-root",
        type=Path,
        default=REPO,
        help="checkout whose pytest_accuracy is measured (default: this working tree); "
        "e.g. a `git worktree add /tmp/snap HEAD` to time a commit while others edit",
    )
    ap.add_argument(
        "--ours-inputs",
        choices=["all", "failing"],
        help="Comparison(inputs=...): 'all' compares every input tensor too, as msprobe's "
        "full table does (default: the API's default)",
    )
    ap.add_argument("--large", action="store_true", help="also the generated large pair")
    ap.add_argument("--large-only", action="store_true", help="skip the tiny fixture pairs")
    ap.add_argument("--large-variants", default="bug,bf16", help="NPU variants vs fp32")
    ap.add_argument("--tiny-variants", default="bug", help="bug and/or bf16 (vs pt_fp32)")
    ap.add_argument("--gen-python", type=Path, help="python with torch+msprobe for generating")
    ap.add_argument("--regenerate", action="store_true", help="regenerate the large pair")
    ap.add_argument(
        "--work-dir",
        type=Path,
        default=REPO / ".bench",
        help="large pair and msprobe outputs (default: <repo>/.bench, git-ignored)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per tool, tiny pairs")
    ap.add_argument("--large-repeat", type=int, default=1, help="timed runs per tool, large")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed first runs")
    ap.add_argument("--profile", action="store_true", help="cProfile ours on every case")
    ap.add_argument("--profile-top", type=int, default=20)
    ap.add_argument("--json", type=Path, help="write every run's numbers here")
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for BOTH tools' children, e.g. OPENBLAS_NUM_THREADS=1",
    )
    args = ap.parse_args()
    env = dict(os.environ)
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"--env {item!r}: expected KEY=VALUE")
        env[key] = value

    python = args.python if args.python.is_file() else Path(sys.executable)
    msprobe = None if args.no_msprobe else make_large_pair.find_msprobe(args.msprobe)
    if args.msprobe and msprobe is None:
        sys.exit(f"--msprobe {args.msprobe}: not an executable file")
    if msprobe is None:
        print(
            "msprobe not found: measuring ours only; msprobe columns show the REFERENCE "
            "timings recorded with the fixtures (another run, NOT measured now)"
        )
    work = args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)

    cases: list[tuple[Case, int]] = []
    if not args.large_only:
        tiny = tiny_cases(list(TINY_CONFIGS), args.tiny_variants.split(","))
        cases += [(c, args.repeat) for c in tiny]
    if args.large or args.large_only:
        large = large_cases(
            work, msprobe, args.gen_python, args.large_variants.split(","), args.regenerate
        )
        cases += [(c, args.large_repeat) for c in large]

    root = args.ours_root.resolve()
    print(f"ours: {python} {HERE / 'run_ours.py'} ({describe_checkout(root)})")
    print(f"msprobe: {msprobe or '(REFERENCE)'}  ours inputs mode: {args.ours_inputs or 'default'}")
    print(f"cpus: {os.cpu_count()}  load average: {os.getloadavg()}  extra env: {args.env}")
    if not args.no_warmup and cases:
        # First runs pay for cold .pyc / shared-library page cache: keep them out.
        # A tiny pair is enough for that, whatever the cases are.
        print("warm-up (untimed) ...", flush=True)
        warm = tiny_cases(["L1_tensor"], ["bug"])[0]
        run_ours(python, warm, env=env, root=root, inputs=args.ours_inputs)
        if msprobe is not None:
            run_msprobe(msprobe, warm, work, env=env)

    results: list[CaseResult] = []
    for case, repeat in cases:
        prewarm(case.npu, case.bench)
        res = CaseResult(case, reference=REFERENCE.get(case.name))
        for i in range(repeat):
            o = run_ours(python, case, env=env, root=root, inputs=args.ours_inputs)
            if o.rc != 0:
                sys.exit(f"ours failed on {case.name}:\n{o.info['stderr'][-3000:]}")
            res.ours.append(o)
            line = f"{case.name} run {i + 1}/{repeat}: ours {o.wall_s:.2f} s {o.peak_mb:.0f} MB"
            if msprobe is not None:
                m = run_msprobe(msprobe, case, work, env=env)
                if m.rc != 0 or "rows" not in m.info:
                    tail = m.info["stderr"][-3000:]
                    sys.exit(f"msprobe failed on {case.name} (rc {m.rc}): {tail}")
                res.msprobe.append(m)
                line += f"; msprobe {m.wall_s:.2f} s {m.peak_mb:.0f} MB"
            print(line, flush=True)
        results.append(res)

    print_report(results, msprobe is not None)
    print("\nCommands:")
    for res in results:
        print(f"  ours:    {_first(res.ours, 'cmd')}")
        if res.msprobe:
            print(f"  msprobe: {_first(res.msprobe, 'cmd')}")

    if args.profile:
        for case, _ in cases:
            prof = work / f"profile_{case.name.replace('/', '_').replace(' ', '_')}.prof"
            run_ours(python, case, profile=prof, env=env, root=root, inputs=args.ours_inputs)
            print(f"\n===== cProfile of ours, {case.name} ({prof}) =====")
            print_profile(prof, args.profile_top)

    if args.json:
        doc = []
        for res in results:
            item: dict[str, Any] = {"case": asdict(res.case), "reference": None}
            if res.reference:
                item["reference"] = asdict(res.reference)
            for tool in ("ours", "msprobe"):
                runs = []
                for r in getattr(res, tool):
                    d = asdict(r)
                    d["info"] = {k: v for k, v in r.info.items() if k not in ("stdout", "stderr")}
                    runs.append(d)
                item[tool] = runs
            doc.append(item)
        meta = {
            "ours": describe_checkout(root),
            "msprobe": str(msprobe) if msprobe else None,
            "extra_env": args.env,
            "ours_inputs": args.ours_inputs,
            "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        text = json.dumps({"meta": meta, "cases": doc}, indent=1, default=str)
        args.json.write_text(text + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
