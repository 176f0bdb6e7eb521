"""Score the plugin's diagnosis on the bug zoo: first divergence named vs truth.json."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LEVELS = ("L1", "L0", "mix")


def run_plugin(npu: Path, bench: Path, flags: list[str], python: str,
               timeout: float, noise: Path | None = None) -> dict[str, Any]:
    """One plugin run as users run it, in a child process in an empty temp dir.

    noise: a second bench run of the same training under another kernel
    (``<case>/bench_noise/<level>``), given as ``--acc-bench-noise``."""
    with tempfile.TemporaryDirectory(prefix="acc_zoo_") as tmp:
        out = Path(tmp) / "acc.json"
        cmd = [python, "-m", "pytest", f"--acc-npu={npu.resolve()}",
               f"--acc-bench={bench.resolve()}", f"--acc-json={out}", "-q",
               "-p", "no:cacheprovider",
               *([f"--acc-bench-noise={noise.resolve()}"] if noise is not None else []),
               *flags]
        t0 = time.time()
        try:
            r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"verdict": "error", "error": "timeout"}
        except OSError as e:
            return {"verdict": "error", "error": str(e)}
        res: dict[str, Any] = {"rc": r.returncode, "seconds": round(time.time() - t0, 1)}
        if r.returncode == 4:
            res.update(verdict="flag unsupported", error=(r.stderr or r.stdout)[-600:])
            return res
        try:
            doc = json.loads(out.read_text())
        except (OSError, ValueError) as e:
            res.update(verdict="error", error=f"no JSON (rc {r.returncode}): {e}; "
                       + (r.stderr or r.stdout)[-300:])
            return res
    if not isinstance(doc, dict):
        res.update(verdict="error", error="JSON is not an object")
        return res
    comp = doc.get("compare") if isinstance(doc.get("compare"), dict) else {}
    first = comp.get("first_divergence") if isinstance(comp.get("first_divergence"), dict) else {}
    nodes = [n for n in comp.get("nodes") or [] if isinstance(n, dict)]
    res.update(verdict=str(doc.get("verdict")), named=first.get("npu_name"),
               named_step=first.get("step"), through=first.get("through"),
               failed=sum(n.get("status") == "fail" for n in nodes),
               carried=sum(n.get("status") == "carried" for n in nodes))
    return res


def print_by_class(bugs: list[dict[str, Any]], levels: list[str]) -> None:
    """Top-1 per bug class and level ("hits/cases")."""
    classes = sorted({str(r["class"]) for r in bugs})
    print(f"\n{'top-1 by class':16s} " + " ".join(f"{lv:>6s}" for lv in levels))
    for cls in classes:
        cells = []
        for lv in levels:
            mine = [r for r in bugs if r["class"] == cls and r["level"] == lv]
            cells.append(f"{sum(bool(r['top1']) for r in mine)}/{len(mine)}" if mine else "-")
        print(f"{cls:16s} " + " ".join(f"{c:>6s}" for c in cells))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--zoo", default=".bench/zoo", help="generated zoo (or tests/data/zoo)")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--python", default=sys.executable, help="python with the plugin installed")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per plugin run")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    zoo = Path(args.zoo)
    want = {c for c in args.cases.split(",") if c}
    levels = [lv for lv in args.levels.split(",") if lv]
    cases = sorted(p.parent for p in zoo.glob("*/truth.json")
                   if not want or p.parent.name in want)
    if not cases:
        print(f"no cases under {zoo}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    hdr = (f"{'case':24s} {'lvl':4s} {'class':14s} {'expected':42s} {'named':42s} "
           f"{'top1':5s} {'verdict':16s} {'fail':>5s} {'carr':>5s}")
    print(hdr)
    for cdir in cases:
        try:
            truth = json.loads((cdir / "truth.json").read_text())
        except (OSError, ValueError) as e:
            print(f"{cdir.name}: unreadable truth.json: {e}", file=sys.stderr)
            continue
        for level in levels:
            npu, bench = cdir / "npu" / level, cdir / "bench" / level
            noise = cdir / "bench_noise" / level  # optional second bench run (make_mf_zoo)
            lt = (truth.get("levels") or {}).get(level)
            if lt is None or not npu.is_dir() or not bench.is_dir():
                continue
            res = run_plugin(npu, bench, list(truth.get("flags") or []), args.python,
                             args.timeout, noise if noise.is_dir() else None)
            exp, exp_step = lt.get("expected"), lt.get("step")
            named, nstep = res.get("named"), res.get("named_step")
            # a site only the NPU run records (a cast, a mask op msprobe-PyTorch filters) is
            # named as the node that made the difference at the first node both runs record
            hit = exp in (named, res.get("through"))
            top1 = None if not exp else (hit and (nstep is None or nstep == exp_step))
            row = {"case": cdir.name, "level": level, "class": truth.get("class"),
                   "benign": bool(truth.get("benign")), "detectable": bool(lt.get("detectable")),
                   "expected": exp and f"{exp}@{exp_step}", "top1": top1,
                   "bench_noise": noise.is_dir(),
                   **{k: v for k, v in res.items()}}
            row["named"] = named and f"{named}@{nstep}"
            if named and res.get("through"):
                row["named"] += f" (via {res['through']})"
            rows.append(row)
            print(f"{row['case']:24s} {level:4s} {row['class']!s:14s} "
                  f"{row['expected'] or '-'!s:42s} {row['named'] or '-'!s:42s} "
                  f"{'-' if top1 is None else 'yes' if top1 else 'NO':5s} "
                  f"{row['verdict']:16s} {row.get('failed', '-')!s:>5s} "
                  f"{row.get('carried', '-')!s:>5s}", flush=True)
            if "error" in res:
                lines = res["error"].strip().splitlines() or [""]
                print(f"    {next((ln for ln in lines if 'error' in ln), lines[-1])}")
    bugs = [r for r in rows if not r["benign"] and r["detectable"]]
    benign = [r for r in rows if r["benign"]]
    caught = [r for r in bugs if r["verdict"] == "fail"]
    fails = [int(r["failed"]) for r in caught if isinstance(r.get("failed"), int)]
    print()
    print(f"top-1: {sum(bool(r['top1']) for r in bugs)}/{len(bugs)} detectable bug case x level")
    print(f"caught (verdict fail): {len(caught)}/{len(bugs)}")
    print(f"benign passes: {sum(r['verdict'] == 'pass' for r in benign)}/{len(benign)}")
    if fails:
        print(f"failed items per caught bug: median {statistics.median(fails):g}, max {max(fails)}")
    silent = [r for r in rows if r["verdict"] == "fail" and not r.get("named")]
    print(f"runs that fail naming nothing: {len(silent)}")
    errors = [r for r in rows if r["verdict"] in ("error", "flag unsupported")]
    if errors:
        print(f"errors / unsupported flags: {len(errors)}")
    print_by_class(bugs, levels)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
