"""Generate a large msprobe dump pair with the real msprobe, for bench_compare.py --large.

  python benchmarks/make_large_pair.py [--out DIR] [--python MSPROBE_VENV_PYTHON]
                                       [--variants fp32,bug,bf16] [--force]

Runs benchmarks/tinyllama_pt.py with the wide model of the fixtures' scale test (vocab 1000,
hidden 512, 8 heads, FFN 1024, 8 layers, batch 2, seq 128, one step, L1 tensor dump: about
630 MB for fp32 and 470 MB for bf16) under a python that has torch + mindstudio-probe.
Each variant lands in ``OUT/pt_<variant>/step0/proc<PID>/``; a variant whose
``OUT/pt_<variant>/GENERATED.json`` already matches the requested model is not redone.
Default OUT is ``<repo>/.bench/large`` (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GENERATOR = HERE / "tinyllama_pt.py"
DEFAULT_OUT = REPO / ".bench" / "large"

# The fixtures' scale test (fixtures/msprobe_compare_out/scale_test/run_scale.sh).
WIDE_DIMS: dict[str, int] = {
    "vocab": 1000,
    "hidden": 512,
    "heads": 8,
    "ffn": 1024,
    "layers": 8,
    "batch": 2,
    "seq": 128,
}
MSPROBE_VENV_CANDIDATES = (Path("/work/bench/msvenv"), REPO / ".bench" / "msvenv")


def find_msprobe(explicit: str | None = None) -> Path | None:
    """The msprobe executable: ``explicit``, else on PATH, else in a known venv."""
    if explicit:
        path = Path(explicit)
        return path if path.is_file() and os.access(path, os.X_OK) else None
    on_path = shutil.which("msprobe")
    if on_path:
        return Path(on_path)
    for venv in MSPROBE_VENV_CANDIDATES:
        exe = venv / "bin" / "msprobe"
        if exe.is_file():
            return exe
    return None


def python_for(msprobe: Path) -> Path:
    """The interpreter of the venv that holds ``msprobe`` (it has torch and msprobe)."""
    for name in ("python", "python3"):
        candidate = msprobe.parent / name
        if candidate.is_file():
            return candidate
    raise SystemExit(f"no python next to {msprobe}: pass --python")


def dir_size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def step_dir(out: Path, variant: str, step: int = 0) -> Path:
    return out / f"pt_{variant}" / f"step{step}"


def generate(
    out: Path,
    python: Path,
    variants: list[str],
    *,
    dims: dict[str, int] | None = None,
    level: str = "L1",
    task: str = "tensor",
    force: bool = False,
) -> dict[str, Path]:
    """Make (or reuse) ``OUT/pt_<variant>`` for each variant; returns variant -> step0 dir."""
    dims = dict(WIDE_DIMS if dims is None else dims)
    spec = {"dims": dims, "level": level, "task": task, "steps": 1}
    out.mkdir(parents=True, exist_ok=True)
    found: dict[str, Path] = {}
    for variant in variants:
        target = out / f"pt_{variant}"
        marker = target / "GENERATED.json"
        if not force and marker.is_file():
            recorded = json.loads(marker.read_text())
            if recorded.get("spec") == spec and step_dir(out, variant).is_dir():
                print(f"[make_large_pair] reusing {target} ({recorded['size_mb']:.0f} MB)")
                found[variant] = step_dir(out, variant)
                continue
        shutil.rmtree(target, ignore_errors=True)
        cmd = [
            str(python),
            str(GENERATOR),
            "--variant",
            variant,
            "--level",
            level,
            "--task",
            task,
            "--steps",
            "1",
            "--dump-path",
            str(target),
            *(f"--{k}={v}" for k, v in dims.items()),
        ]
        print(f"[make_large_pair] {' '.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out)
        seconds = time.perf_counter() - t0
        (out / f"pt_{variant}.log").write_text(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
            raise SystemExit(f"generator failed for {variant} (exit {proc.returncode}):\n{tail}")
        size = dir_size_mb(target)
        marker.write_text(
            json.dumps({"spec": spec, "size_mb": size, "seconds": seconds}, indent=1) + "\n"
        )
        print(f"[make_large_pair] {target}: {size:.0f} MB in {seconds:.1f} s", flush=True)
        found[variant] = step_dir(out, variant)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description="generate a large msprobe dump pair")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--python", type=Path, help="python with torch + mindstudio-probe")
    ap.add_argument("--msprobe", help="msprobe executable (its venv's python is used)")
    ap.add_argument("--variants", default="fp32,bug,bf16", help="comma-separated: fp32,bug,bf16")
    ap.add_argument("--level", default="L1", choices=["L0", "L1", "mix"])
    ap.add_argument("--task", default="tensor", choices=["tensor", "statistics", "md5"])
    ap.add_argument("--force", action="store_true", help="regenerate even if present")
    for name, value in WIDE_DIMS.items():
        ap.add_argument(f"--{name}", type=int, default=value)
    args = ap.parse_args()
    python = args.python
    if python is None:
        msprobe = find_msprobe(args.msprobe)
        if msprobe is None:
            sys.exit(
                "msprobe not found: install mindstudio-probe==26.2.0 (see benchmarks/README.md)"
            )
        python = python_for(msprobe)
    dims = {name: getattr(args, name) for name in WIDE_DIMS}
    found = generate(
        args.out,
        python,
        args.variants.split(","),
        dims=dims,
        level=args.level,
        task=args.task,
        force=args.force,
    )
    for variant, path in found.items():
        print(f"{variant}\t{path}")


if __name__ == "__main__":
    main()
