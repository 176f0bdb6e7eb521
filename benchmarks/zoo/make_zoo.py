"""Generate the diagnosis bug zoo (msprobe dumps of benign and buggy runs) and its truth.json."""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LEVELS = ("L1", "L0", "mix")
PREC = "--acc-allow-precision=bfloat16:float32"

# case -> (class, bug, npu_bf16, bench_bf16, flags, injected site)
# site = (step, module path, api prefix at L1/mix) the bug is injected into.
Site = tuple[int, str, str]
CASES: dict[str, tuple[str, str, bool, bool, list[str], Site | None]] = {
    "rerun": ("benign", "", False, False, [], None),
    "fp32_noise": ("benign", "", False, False, [], None),
    "bf16_noise": ("benign", "", True, True, [], None),
    "bf16_vs_fp32_declared": ("benign", "", True, False, [PREC], None),
    "softmax_fp16": ("precision", "softmax_fp16", False, False, [],
                     (0, "blocks.0.attn", "Functional.softmax.")),
    "linear_bf16_one": ("precision", "linear_bf16_one", False, False, [],
                        (0, "blocks.1.mlp.c_proj", "Functional.linear.")),
    "embedding_fp32_in_bf16": ("precision", "embedding_fp32_in_bf16", True, True, [],
                               (0, "wte", "Functional.embedding.")),
    "ln_eps": ("hyperparameter", "ln_eps", False, False, [],
               (0, "blocks.1.ln_1", "Functional.layer_norm.")),
    "gelu_tanh": ("hyperparameter", "gelu_tanh", False, False, [],
                  (0, "blocks.0.mlp", "Functional.gelu.")),
    "attn_scale": ("hyperparameter", "attn_scale", False, False, [],
                   (0, "blocks.1.attn", "Tensor.__mul__.")),
    "qk_swapped": ("weights", "qk_swapped", False, False, [],
                   (0, "blocks.1.attn.c_attn", "Functional.linear.")),
    "weight_transposed": ("weights", "weight_transposed", False, False, [],
                          (0, "blocks.0.attn.c_proj", "Functional.linear.")),
    "mask_off_by_one": ("logic", "mask_off_by_one", False, False, [],
                        (0, "blocks.0.attn", "Tensor.masked_fill.")),
    "lr_step1": ("optimizer", "lr_step1", False, False, [], (1, "wte", "Functional.embedding.")),
    "wd_on_norms": ("optimizer", "wd_on_norms", False, False, [],
                    (1, "blocks.0.ln_1", "Functional.layer_norm.")),
    "adam_eps": ("optimizer", "adam_eps", False, False, [], (1, "wte", "Functional.embedding.")),
    "betas_step2": ("optimizer", "betas_step2", False, False, [],
                    (2, "wte", "Functional.embedding.")),
    "ln_eps_bf16": ("hyperparameter", "ln_eps_bf16", True, True, [],
                    (0, "blocks.0.ln_2", "Functional.layer_norm.")),
    # the guide's stage 1 (fixed seeds, deterministic kernels: no kernel noise on either side)
    # makes the runs twins, the only setting where a small optimizer difference is separable
    "adam_eps_twin": ("optimizer", "adam_eps", False, False, [],
                      (1, "wte", "Functional.embedding.")),
    "wd_on_norms_twin": ("optimizer", "wd_on_norms", False, False, [],
                         (1, "blocks.0.ln_1", "Functional.layer_norm.")),
    "betas_step2_twin": ("optimizer", "betas_step2", False, False, [],
                         (2, "wte", "Functional.embedding.")),
}
NOISELESS = {"rerun", "adam_eps_twin", "wd_on_norms_twin", "betas_step2_twin"}


def run_forked(dump: Path, job: Callable[[], Any], what: str) -> str:
    """``job()`` in a forked child writing a fresh ``dump`` (torch and msprobe are imported
    once, in the parent); its printed JSON result line, or SystemExit with the child's log."""
    if dump.exists():
        shutil.rmtree(dump)
    dump.mkdir(parents=True)
    log = dump.parent / f".{dump.name}.log"
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            print(json.dumps(job()))
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    text = log.read_text()
    if status != 0:
        raise SystemExit(f"generator run failed ({what}):\n{text[-3000:]}")
    log.unlink()
    return text.strip().splitlines()[-1]


def spawn(level: str, dump: Path, bf16: bool, noise: bool, bug: str) -> None:
    """One run of the zoo's model in a forked child."""
    def job() -> dict[str, Any]:
        import model
        return {"losses": model.run(level, str(dump), bf16, noise, bug)}

    run_forked(dump, job, f"{level} bf16={bf16} noise={noise} bug={bug!r}")


def steps(dump: Path) -> list[Path]:
    """The one proc*/rank* dir of each step, in step order."""
    out = []
    for s in range(100):
        d = dump / f"step{s}"
        if not d.is_dir():
            break
        subs = [Path(p) for p in glob.glob(str(d / "*")) if Path(p, "dump.json").is_file()]
        out.append(subs[0])
    return out


def _strip(rec: Any) -> Any:
    if isinstance(rec, dict):
        return {k: _strip(v) for k, v in rec.items() if k not in ("data_name", "md5")}
    if isinstance(rec, list):
        return [_strip(v) for v in rec]
    return rec


def _files(rec: Any) -> list[str]:
    if isinstance(rec, dict):
        out = [rec["data_name"]] if isinstance(rec.get("data_name"), str) else []
        for k, v in rec.items():
            if k != "data_name":
                out += _files(v)
        return out
    if isinstance(rec, list):
        return [f for v in rec for f in _files(v)]
    return []


def _load(path: Path) -> Any:
    import numpy as np
    import torch
    if path.suffix == ".npy":
        return torch.from_numpy(np.load(path))
    return torch.load(path, map_location="cpu", weights_only=False)


def _maxdiff(a: Any, b: Any) -> float:
    import torch
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return float("inf")
    d = (a.double() - b.double()).abs()
    d = d[torch.isfinite(d)]
    return float(d.max()) if d.numel() else float("inf")


def _same(rec: Any, brec: Any, nd: Path, bd: Path) -> tuple[bool, float]:
    """Whether two (sub-)records are bit-identical, values and tensor files; and the max diff."""
    import torch
    same = _strip(rec) == _strip(brec)
    worst = 0.0 if _files(rec) else float("nan")
    for fa, fb in zip(_files(rec), _files(brec), strict=False):
        ta = _load(nd / "dump_tensor_data" / fa)
        tb = _load(bd / "dump_tensor_data" / fb)
        if not (isinstance(ta, torch.Tensor) and isinstance(tb, torch.Tensor)
                and ta.dtype == tb.dtype and ta.shape == tb.shape and bool(torch.equal(ta, tb))):
            same = False
            worst = max(worst, _maxdiff(ta, tb))
    return same, worst


def first_diff(npu: Path, bench: Path) -> dict[str, Any] | None:
    """First node (steps in order, dump.json order) whose records are not bit-identical.

    dump.json lists a module after its children (completion order). At L0 a module whose
    inputs already differ did not start the divergence: a bug in its parent's own code did
    (an un-dumped op between children), so the parent (construct.json) is named instead.
    """
    for step, (nd, bd) in enumerate(zip(steps(npu), steps(bench), strict=False)):
        nj = json.loads((nd / "dump.json").read_text())["data"]
        bj = json.loads((bd / "dump.json").read_text())["data"]
        if list(nj) != list(bj):
            print(f"WARNING: node lists differ at step {step}: {npu} vs {bench}")
        for name, rec in nj.items():
            brec = bj.get(name)
            if brec is None:
                return {"name": name, "step": step, "max_abs_diff": None}
            same, worst = _same(rec, brec, nd, bd)
            if same:
                continue
            got: dict[str, Any] = {"name": name, "step": step,
                                   "max_abs_diff": None if worst != worst else worst}
            if name.startswith("Module.") and ".forward." in name:
                cons = json.loads((nd / "construct.json").read_text())
                cur = name
                while True:
                    ins = [k for k in ("input_args", "input_kwargs") if k in nj[cur]]
                    same_in, _ = _same({k: nj[cur][k] for k in ins},
                                       {k: bj[cur].get(k) for k in ins}, nd, bd)
                    parent = cons.get(cur)
                    if same_in or not parent or parent not in nj:
                        break
                    cur = parent
                if cur != name:
                    got.update(name=cur, first_differing_record=name)
            return got
    return None


def _layout(rec: Any, dtypes: bool) -> Any:
    """A record's structure without values: tensor shapes (and dtypes)."""
    if isinstance(rec, dict):
        if "shape" in rec or "dtype" in rec:
            return (str(rec.get("shape")), rec.get("dtype") if dtypes else None)
        return {k: _layout(v, dtypes) for k, v in rec.items()}
    if isinstance(rec, list):
        return [_layout(v, dtypes) for v in rec]
    return type(rec).__name__


def same_nodes(npu: Path, bench: Path, dtypes: bool = True) -> bool:
    """Whether both dumps have the same nodes with the same tensor shapes (dtypes), per step."""
    ns, bs = steps(npu), steps(bench)
    if len(ns) != len(bs):
        return False
    for a, b in zip(ns, bs, strict=True):
        da = json.loads((a / "dump.json").read_text())["data"]
        db = json.loads((b / "dump.json").read_text())["data"]
        if list(da) != list(db) or _layout(da, dtypes) != _layout(db, dtypes):
            return False
    return True


def _parents(dump: Path, step: int, name: str) -> list[str]:
    """Module chain of a node from construct.json (mix level)."""
    c = json.loads((steps(dump)[step] / "construct.json").read_text())
    out, cur = [], c.get(name)
    while cur and len(out) < 50:
        out.append(cur)
        cur = c.get(cur)
    return out


def truth_entry(site: Site | None, level: str, got: dict[str, Any], dump: Path
                ) -> dict[str, Any]:
    """A level's truth from the first differing node (``first_diff``) of ``dump``."""
    return {"expected": got["name"], "step": got["step"], "detectable": True,
            "max_abs_diff": got["max_abs_diff"],
            "matches_injection": site is not None and matches(site, level, got, dump)}


def matches(site: Site, level: str, got: dict[str, Any], clean: Path) -> bool:
    step, mod, api = site
    if got["step"] != step:
        return False
    if level == "L0":  # Module.<path>.<Class>.forward.<n>: the innermost dumped module
        return bool(".".join(got["name"].split(".")[1:-3]) == mod)
    if not got["name"].startswith(api):
        return False
    if level == "mix":
        return any(p.startswith(f"Module.{mod}.") for p in _parents(clean, step, got["name"]))
    return True


SUBSET = {"fp32_noise": ("L1",), "softmax_fp16": ("L1",), "ln_eps_bf16": ("L0",),
          "bf16_noise": ("L0",),
          "weight_transposed": ("L1",), "lr_step1": ("L1",), "ln_eps": ("L0", "mix"),
          "mask_off_by_one": ("L0", "mix"), "embedding_fp32_in_bf16": ("mix",)}


def export(out: Path, dest: Path, cases: list[str], nsteps: int) -> None:
    """Copy the committed subset (both sides, first `nsteps` steps, its truth) to `dest`."""
    for c in cases:
        truth = json.loads((out / c / "truth.json").read_text())
        truth["levels"] = {lv: t for lv, t in truth["levels"].items() if lv in SUBSET[c]}
        for lv in SUBSET[c]:
            for side in ("npu", "bench"):
                dst = dest / c / side / lv
                if dst.exists():
                    shutil.rmtree(dst)
                for s in range(nsteps):
                    shutil.copytree(out / c / side / lv / f"step{s}", dst / f"step{s}")
        (dest / c / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=".bench/zoo")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--npu-only", action="store_true",
                    help="keep an existing truth entry, redo only the npu side")
    ap.add_argument("--truth-only", action="store_true",
                    help="recompute truth.json from the existing dumps, run nothing")
    ap.add_argument("--export", help="copy the committed subset from --out to this dir")
    ap.add_argument("--export-cases", default=",".join(SUBSET))
    ap.add_argument("--export-steps", type=int, default=3)
    args = ap.parse_args()
    if args.export:
        export(Path(args.out), Path(args.export), args.export_cases.split(","), args.export_steps)
        return
    t0 = time.time()
    sys.path.insert(0, str(HERE))
    import model
    import torch  # noqa: F401 - imported once here, inherited by the forked runs
    from msprobe.pytorch import PrecisionDebugger  # noqa: F401
    if not model.INIT.exists():
        model.save_init()
    out = Path(args.out)
    cases = [c for c in args.cases.split(",") if c]
    levels = [lv for lv in args.levels.split(",") if lv]
    for c in cases:
        if c not in CASES:
            raise SystemExit(f"unknown case {c!r}")
    golden: dict[tuple[bool, str], Path] = {}
    for level in levels:
        for bf16 in sorted({CASES[c][3] for c in cases} | {CASES[c][2] for c in cases
                                                          if CASES[c][1]}):
            g = out / "_golden" / ("bf16" if bf16 else "fp32") / level
            if not steps(g):
                print(f"golden {'bf16' if bf16 else 'fp32'} {level}", flush=True)
                spawn(level, g, bf16, False, "")
            golden[(bf16, level)] = g
    for c in cases:
        klass, bug, npu_bf16, bench_bf16, flags, site = CASES[c]
        truth: dict[str, Any] = {"case": c, "class": klass, "benign": not bug, "flags": flags,
                                 "npu_precision": "bf16" if npu_bf16 else "fp32",
                                 "bench_precision": "bf16" if bench_bf16 else "fp32",
                                 "injected": None if site is None else
                                 {"step": site[0], "module": site[1], "api": site[2]},
                                 "levels": {}}
        tpath = out / c / "truth.json"
        if tpath.is_file():
            old = json.loads(tpath.read_text())
            truth["levels"].update(old.get("levels", {}))
        for level in levels:
            t1 = time.time()
            bench = out / c / "bench" / level
            if not args.truth_only:
                if bench.exists():
                    shutil.rmtree(bench)
                shutil.copytree(golden[(bench_bf16, level)], bench)
            npu = out / c / "npu" / level
            if not args.truth_only:
                spawn(level, npu, npu_bf16, c not in NOISELESS, bug)
            entry: dict[str, Any] = {"expected": None, "step": None, "detectable": False}
            old_entry = truth["levels"].get(level)
            if bug and args.npu_only and old_entry and "matches_injection" in old_entry:
                entry = old_entry  # truth runs have no noise: only the npu side is redone
            elif bug:
                clean = out / "_clean" / c / level
                if not args.truth_only:
                    spawn(level, clean, npu_bf16, False, bug)
                got = first_diff(clean, golden[(npu_bf16, level)])
                if got is None:
                    print(f"WARNING: {c} {level}: bug leaves the dump bit-identical")
                    entry["note"] = "bug invisible at this level"
                else:
                    entry.update(truth_entry(site, level, got, clean))
                    if not entry["matches_injection"]:
                        print(f"WARNING: {c} {level}: first diff {got} is not the injected "
                              f"site {site}")
            else:
                entry["same_nodes"] = same_nodes(npu, bench, npu_bf16 == bench_bf16)
                if not entry["same_nodes"]:
                    print(f"WARNING: {c} {level}: npu and bench node lists differ")
                if c == "rerun":
                    entry["bit_identical"] = first_diff(npu, bench) is None
            truth["levels"][level] = entry
            print(f"{c:24s} {level:4s} {entry.get('expected')} step={entry.get('step')} "
                  f"({time.time() - t1:.0f}s)", flush=True)
        tpath.write_text(json.dumps(truth, indent=1) + "\n")
    print(f"generated in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
