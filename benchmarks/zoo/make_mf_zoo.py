"""Generate the MindFormers-vs-transformers bug zoo (GLM-4 family, real msprobe dumps).

A migration is two codebases *and* two frameworks: every case's "npu" side is MindFormers'
``ChatGLM2ForConditionalGeneration`` (mindformers 2.1.0 on MindSpore 2.10, CPU, PyNative),
its bench side is transformers' ``GlmForCausalLM`` (PyTorch), with the HF weights converted
(``mf_glm.py``: model, conversion, CPU workarounds, bugs). Only the MindFormers side carries a
bug. Both sides are dumped by msprobe 26.2.0, task tensor, levels L1 / mix / L0, steps 0 and 1
(forward + backward of each; an AdamW step between them). See MF.md.

The truth is by construction, as in ``make_ms_zoo.py`` (whose helpers are reused): each case
names the cell and the API prefix of its injected site; per level the expected node is the
first forward API with that prefix whose cell chain (mix construct.json of the case's own
MindSpore run) holds the site's cell (L1 and mix; the L1 dump must list the same API calls in
the same order as mix), or the site's innermost cell ``Cell.<path>.<Class>.forward.0`` (L0).
All sites are step 0.

fp16 cases also get a second bench run, the *noise* run (``<case>/bench_noise/<level>``): the
same transformers training (weights, ids, steps, fp16 autocast) under another attention kernel
(``mf_glm.py pt --attn sdpa``: torch's scaled_dot_product_attention, where the bench is eager).
The two bench runs' spread per node is the bench's own fp16 noise (plugin flag
``--acc-bench-noise``). ``--noise-only`` makes just these runs for an existing zoo.

Runs with any Python 3.10+ (stdlib only)::

    python benchmarks/zoo/make_mf_zoo.py --out /work/bench/mf/zoo \\
        --ms-python /work/bench/mfvenv/bin/python --pt-python .venv/bin/python
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
from typing import Any

from make_ms_zoo import api_at, api_order, cell_at, run_all  # beside this script

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "mf_glm.py"
LEVELS = ("L1", "mix", "L0")
MF = "transformer.encoder.layers"
HF = "model.layers"

# precision (default fp32): both sides' precision (mf_glm.py --precision); the clean check
# and the bench (golden) runs are per precision: OUT/_clean_check[/<prec>],
# OUT/_golden[_<prec>]/<level> (fp32 keeps the unsuffixed paths).
# site: api_cell/api = MindFormers cell path + API prefix of the first call that makes the
# error; l0_cell = innermost dumped cell holding it; bench = (HF module path, API prefix) of
# the same computation on the PyTorch side (informational).
CASES: dict[str, dict[str, Any]] = {
    "mf_clean": {"class": "benign", "bug": "", "flags": [], "site": None},
    # both sides in low precision, no bug. bf16 was asked for, but MindSpore 2.10 CPU has no
    # bf16 MatMul/BatchMatMul/Softmax/Sigmoid kernel: fp16 is the low-precision pair (MF.md)
    "mf_fp16": {"class": "benign", "bug": "", "flags": [], "site": None, "precision": "fp16"},
    "mf_norm_eps": {
        "class": "hyperparameter", "bug": "norm_eps", "flags": [],
        "what": "layers.1.input_layernorm eps 1e-5 instead of 1e-6 (ChatGLM2RMSNorm._self_norm: "
                "`self.add(mean(square(x)), self.eps)`, the `add` primitive)",
        "site": {"api_cell": f"{MF}.1.input_layernorm", "api": "Primitive.add.Add.",
                 "l0_cell": f"{MF}.1.input_layernorm",
                 "bench": (f"{HF}.1.input_layernorm", "Tensor.__add__.")}},
    "mf_silu_to_gelu": {
        "class": "activation", "bug": "silu_to_gelu", "flags": [],
        "what": "layers.1.mlp.activation_func.silu.silu = P.GeLU() (SwiGLU becomes GeGLU)",
        "site": {"api_cell": f"{MF}.1.mlp.activation_func.silu", "api": "Primitive.silu.GeLU.",
                 "l0_cell": f"{MF}.1.mlp.activation_func.silu",
                 "bench": (f"{HF}.1.mlp.activation_fn", "Functional.silu.")}},
    "mf_dense_transposed": {
        "class": "weights", "bug": "dense_transposed", "flags": [],
        "what": "layers.1.self_attention.dense (o_proj) weight loaded transposed (square)",
        "site": {"api_cell": f"{MF}.1.self_attention.dense", "api": "Primitive.matmul.MatMul.",
                 "l0_cell": f"{MF}.1.self_attention.dense",
                 "bench": (f"{HF}.1.self_attn.o_proj", "Functional.linear.")}},
    "mf_softmax_fp16": {
        "class": "precision", "bug": "softmax_fp16", "flags": [],
        "what": "layers.0.self_attention.core_attention.softmax replaced by a cell computing "
                "`ops.softmax(x.astype(float16), -1).astype(float32)` (msprobe records astype "
                "as Tensor.to); the first cast makes the error (msprobe-PyTorch never records "
                "casts)",
        "site": {"api_cell": f"{MF}.0.self_attention.core_attention.softmax",
                 "api": "Tensor.to.",
                 "l0_cell": f"{MF}.0.self_attention.core_attention.softmax",
                 "bench": (f"{HF}.0.self_attn", "Functional.softmax."),
                 "bench_l0": f"{HF}.0.self_attn"}},
    "mf_attn_scale": {
        "class": "hyperparameter", "bug": "attn_scale", "flags": [],
        "what": "layers.1.self_attention.core_attention.norm_factor = head_dim (8) instead of "
                "sqrt(head_dim): `query_layer / self.norm_factor` (Tensor.__truediv__)",
        "site": {"api_cell": f"{MF}.1.self_attention.core_attention",
                 "api": "Tensor.__truediv__.",
                 "l0_cell": f"{MF}.1.self_attention.core_attention",
                 "bench": (f"{HF}.1.self_attn", "Torch.matmul."),
                 "bench_l0": f"{HF}.1.self_attn"}},
    "mf_mask_shift": {
        "class": "logic", "bug": "mask_shift", "flags": [],
        "what": "the causal attention_mask given to the model is `triu(ones, 2)` instead of "
                "diagonal 1 (each token also sees the next one); made outside the model, the "
                "first call that reads it is layer 0's CoreAttention `self.mul_mask(mask, "
                "-10000)`",
        "site": {"api_cell": f"{MF}.0.self_attention.core_attention",
                 "api": "Primitive.mul_mask.Mul.",
                 "l0_cell": f"{MF}.0.self_attention.core_attention",
                 "bench": (f"{HF}.0.self_attn", None),
                 "bench_l0": f"{HF}.0.self_attn"}},  # HF builds its mask outside the layers
}


# clean pair tolerance on logits and losses (max |logit| 0.36: one fp16 ulp there is 2.4e-4,
# one bf16 ulp 2e-3)
CLEAN_TOL = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 2e-2}

# precision -> mf_glm.py pt arguments of the noise bench run: the bench's own training under
# another kernel (bench: eager attention). Only fp16 has one; fp32/bf16 cases are unchanged.
# --noise-attn replaces the attention list (e.g. sdpa,eager: sdpa at step 0 only).
NOISE: dict[str, list[str]] = {"fp16": ["--attn", "sdpa"]}


def noise_dir(out: Path, prec: str) -> Path:
    """OUT/_golden_<prec>_noise (the noise bench runs, per level)."""
    return out / ("_golden_noise" if prec == "fp32" else f"_golden_{prec}_noise")


def prec_of(case: str) -> str:
    return str(CASES[case].get("precision", "fp32"))


def prec_dir(out: Path, what: str, prec: str) -> Path:
    """OUT/_clean_check, OUT/_golden for fp32 (as before); OUT/_clean_check/<prec>,
    OUT/_golden_<prec> otherwise."""
    if prec == "fp32":
        return out / what
    return out / what / prec if what == "_clean_check" else out / f"{what}_{prec}"


def make_truth(out: Path, case: str, levels: list[str], clean: dict[str, Any],
               versions: dict[str, str]) -> dict[str, Any]:
    spec = CASES[case]
    site = spec["site"]
    prec = prec_of(case)
    truth: dict[str, Any] = {
        "case": case, "class": spec["class"], "benign": not spec["bug"], "flags": spec["flags"],
        "npu_precision": prec, "bench_precision": prec,
        "npu_framework": "mindspore", "bench_framework": "pytorch",
        "codebases": {"npu": "mindformers ChatGLM2ForConditionalGeneration",
                      "bench": "transformers GlmForCausalLM"},
        "versions": versions, "clean_check": clean,
        **({"bench_noise": noise} if (noise := noise_info(out, prec)) else {}),
        "injected": None if site is None else {
            "step": 0, "module": site["api_cell"], "api": site["api"],
            "l0_module": site["l0_cell"], "what": spec["what"]},
        "levels": {}}
    if site is None:
        for lv in levels:
            truth["levels"][lv] = {"expected": None, "step": None, "detectable": False,
                                   "matches_injection": None,
                                   "note": f"no bug: MindSpore-vs-PyTorch {prec} noise only"}
        return truth
    npu_mix, bench_mix = out / case / "npu" / "mix", out / case / "bench" / "mix"
    api = api_at(npu_mix, "Cell", site["api_cell"], site["api"])
    if api is None:
        raise SystemExit(f"{case}: no {site['api']}* call inside {site['api_cell']} (mix)")
    bpath, bapi = site["bench"]
    bench_api = api_at(bench_mix, "Module", bpath, bapi) if bapi else None
    for lv in levels:
        dump = out / case / "npu" / lv
        entry: dict[str, Any] = {"step": 0, "detectable": True, "matches_injection": True}
        if lv == "L0":
            entry["expected"] = cell_at(dump, "Cell", site["l0_cell"])
            entry["bench_counterpart"] = cell_at(out / case / "bench" / lv, "Module",
                                                 site.get("bench_l0", bpath))
        else:
            entry["expected"] = api
            entry["bench_counterpart"] = bench_api
            entry["inside"] = f"Cell.{site['api_cell']}"
            # forward calls only: msprobe-MindSpore's L1 dump lacks two backward nodes of
            # the loss (Primitive.add2.Add.0.backward, Primitive.sum2.ReduceSum.1.backward)
            # that its mix dump has
            fwd = [n for n in api_order(dump) if n.endswith(".forward")]
            if lv == "L1" and fwd != [n for n in api_order(npu_mix) if n.endswith(".forward")]:
                raise SystemExit(f"{case}: L1 and mix dumps list different forward API calls")
        if entry["expected"] is None:
            raise SystemExit(f"{case} {lv}: site not found in {dump}")
        truth["levels"][lv] = entry
    return truth


def noise_info(out: Path, prec: str) -> dict[str, Any] | None:
    """truth.json's ``bench_noise`` entry for a precision with a noise run."""
    if prec not in NOISE:
        return None
    f = prec_dir(out, "_clean_check", prec) / "noise_check.json"
    check = json.loads(f.read_text()) if f.exists() else None
    pt_args = check["pt_args"] if check else NOISE[prec]  # what the runs were made with
    return {"dir": "bench_noise", "golden": noise_dir(out, prec).name,
            "what": "the bench's own training (transformers, same weights, ids, steps, "
                    f"{prec}) run again with mf_glm.py pt {' '.join(pt_args)} (bench: "
                    "--attn eager): its spread against bench is the bench's own noise",
            "pt_args": pt_args, "check": check}


def noise_check(out: Path, init: Path, pt_python: str, prec: str) -> dict[str, Any]:
    """Undumped noise run against the undumped bench run of the clean check (its
    pt_logits.npy and loss_bench): step-0 logits and the two step losses."""
    d = prec_dir(out, "_clean_check", prec)
    r = subprocess.run([pt_python, str(SCRIPT), "pt", "--init", str(init), "--steps", "2",
                        "--save-logits", str(d / "pt_noise_logits.npy"), *prec_args(prec),
                        *NOISE[prec]], capture_output=True, text=True, cwd=d)
    if r.returncode:
        raise SystemExit(f"noise check failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
    losses = json.loads(r.stdout.strip().splitlines()[-1])["losses"]
    bench = json.loads((d / "clean_check.json").read_text())["loss_bench"]
    code = ("import numpy as np, json, sys\n"
            "a, b = np.load(sys.argv[1]), np.load(sys.argv[2])\n"
            "print(json.dumps([float(np.abs(a - b).max()), int((a != b).sum()), a.size]))")
    diff, ndiff, size = json.loads(subprocess.run(
        [pt_python, "-c", code, str(d / "pt_logits.npy"), str(d / "pt_noise_logits.npy")],
        check=True, capture_output=True, text=True).stdout)
    return {"pt_args": NOISE[prec], "logits_max_abs_diff": diff,
            "logits_differing": f"{ndiff}/{size}", "loss_bench": bench, "loss_noise": losses,
            "loss_abs_diff": [abs(a - b) for a, b in zip(bench, losses, strict=True)]}


def versions(ms_python: str, pt_python: str) -> dict[str, str]:
    def ver(py: str, pkgs: list[str]) -> dict[str, str]:
        code = ("import importlib.metadata as m, json, sys\n"
                "print(json.dumps({p: m.version(p) for p in sys.argv[1:]}))")
        return json.loads(subprocess.run([py, "-c", code, *pkgs], check=True,
                                         capture_output=True, text=True).stdout)
    return {**{f"bench:{k}": v for k, v in ver(pt_python, ["torch", "transformers",
                                                          "mindstudio-probe"]).items()},
            **{f"npu:{k}": v for k, v in ver(ms_python, ["mindspore", "mindformers",
                                                        "mindstudio-probe"]).items()}}


def prec_args(prec: str) -> list[str]:
    return [] if prec == "fp32" else ["--precision", prec]


def clean_check(out: Path, init: Path, ms_python: str, pt_python: str,
                prec: str = "fp32") -> dict[str, Any]:
    """Undumped clean pair: logits (step 0) and the two step losses."""
    d = prec_dir(out, "_clean_check", prec)
    d.mkdir(parents=True, exist_ok=True)
    res = {}
    for side, py in (("pt", pt_python), ("ms", ms_python)):
        r = subprocess.run([py, str(SCRIPT), side, "--init", str(init), "--steps", "2",
                            "--save-logits", str(d / f"{side}_logits.npy"), *prec_args(prec)],
                           capture_output=True, text=True, cwd=d)
        if r.returncode:
            raise SystemExit(f"clean check {side} failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")
        res[side] = json.loads(r.stdout.strip().splitlines()[-1])["losses"]
    code = ("import numpy as np, json, sys\n"
            "a, b = np.load(sys.argv[1]), np.load(sys.argv[2])\n"
            "print(json.dumps([float(np.abs(a - b).max()), float(np.abs(a).max())]))")
    diff, amax = json.loads(subprocess.run(
        [pt_python, "-c", code, str(d / "pt_logits.npy"), str(d / "ms_logits.npy")],
        check=True, capture_output=True, text=True).stdout)
    return {"logits_max_abs_diff": diff, "logits_max_abs": amax,
            "loss_bench": res["pt"], "loss_npu": res["ms"],
            "loss_abs_diff": [abs(a - b) for a, b in zip(res["pt"], res["ms"], strict=True)]}


def make_noise(out: Path, init: Path, args: argparse.Namespace, levels: list[str],
               cases: list[str], precs: list[str]) -> None:
    """The noise bench runs: check (undumped), dumps OUT/_golden_<prec>_noise/<level>,
    copied into every case of that precision as <case>/bench_noise/<level>."""
    jobs: list[tuple[list[str], Path]] = []
    for prec in precs:
        chk = noise_check(out, init, args.pt_python, prec)
        (prec_dir(out, "_clean_check", prec) / "noise_check.json").write_text(
            json.dumps(chk, indent=1))
        print(f"noise check {prec}:", json.dumps(chk))
        if chk["logits_max_abs_diff"] > CLEAN_TOL[prec] or \
                max(chk["loss_abs_diff"]) > CLEAN_TOL[prec]:
            raise SystemExit(f"the {prec} noise run does not agree with the bench to "
                             f"{CLEAN_TOL[prec]}")
        for lv in levels:
            g = noise_dir(out, prec) / lv
            if g.exists():
                shutil.rmtree(g)
            jobs.append(([args.pt_python, str(SCRIPT), "pt", "--init", str(init), "--task",
                          "tensor", "--steps", str(args.steps), "--level", lv, "--dump-path",
                          str(g), *prec_args(prec), *NOISE[prec]],
                         out / "_logs" / f"pt_{prec}_noise_{lv}.log"))
    (out / "_logs").mkdir(parents=True, exist_ok=True)
    run_all(jobs, args.jobs)
    for lv in levels:
        for c in cases:
            if prec_of(c) in precs:
                dst = out / c / "bench_noise" / lv
                if dst.exists():
                    shutil.rmtree(dst)
                shutil.copytree(noise_dir(out, prec_of(c)) / lv, dst)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/work/bench/mf/zoo")
    ap.add_argument("--ms-python", default="/work/bench/mfvenv/bin/python")
    ap.add_argument("--pt-python", default=".venv/bin/python")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=1, help="dump runs at a time")
    ap.add_argument("--truth-only", action="store_true")
    ap.add_argument("--noise-only", action="store_true",
                    help="only the noise bench runs (+ their check, copies into the cases and "
                         "truth.json) for an existing zoo: no clean check, bench or MindSpore run")
    ap.add_argument("--noise-attn", default="sdpa",
                    help="mf_glm.py pt --attn of the noise runs (bench: eager); a comma list "
                         "is one per step, e.g. sdpa,eager")
    args = ap.parse_args()
    for prec in NOISE:
        NOISE[prec] = ["--attn", args.noise_attn]
    out = Path(args.out).resolve()
    args.ms_python, args.pt_python = map(os.path.abspath, (args.ms_python, args.pt_python))
    t0 = time.time()
    cases = [c for c in args.cases.split(",") if c]
    levels = [lv for lv in args.levels.split(",") if lv]
    for c in cases:
        if c not in CASES:
            raise SystemExit(f"unknown case {c!r}")
    if "mix" not in levels and any(CASES[c]["site"] for c in cases):
        raise SystemExit("the truth needs the mix level (its construct.json)")
    init = out / "_init" / "init_weights.npz"
    precs = [p for p in ("fp32", "fp16", "bf16") if any(prec_of(c) == p for c in cases)]
    if args.noise_only and not args.truth_only:
        if not init.exists():
            raise SystemExit(f"--noise-only needs an existing zoo ({init} missing)")
        make_noise(out, init, args, levels, cases, [p for p in precs if p in NOISE])
    elif not args.truth_only:
        init.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([args.pt_python, str(SCRIPT), "init", "--out", str(init)], check=True)
        for prec in precs:
            clean = clean_check(out, init, args.ms_python, args.pt_python, prec)
            (prec_dir(out, "_clean_check", prec) / "clean_check.json").write_text(
                json.dumps(clean, indent=1))
            print(f"clean check{'' if prec == 'fp32' else ' ' + prec}:", json.dumps(clean))
            tol = CLEAN_TOL[prec]
            if clean["logits_max_abs_diff"] > tol or max(clean["loss_abs_diff"]) > tol:
                raise SystemExit(f"the clean {prec} pair does not agree to {tol}: fix the "
                                 "conversion first")
        jobs: list[tuple[list[str], Path]] = []
        common = ["--init", str(init), "--task", "tensor", "--steps", str(args.steps)]
        for lv in levels:
            for prec in precs:
                g = prec_dir(out, "_golden", prec) / lv
                if g.exists():
                    shutil.rmtree(g)
                log = f"pt_{lv}.log" if prec == "fp32" else f"pt_{prec}_{lv}.log"
                jobs.append(([args.pt_python, str(SCRIPT), "pt", *common, "--level", lv,
                              "--dump-path", str(g), *prec_args(prec)], out / "_logs" / log))
            for c in cases:
                npu = out / c / "npu" / lv
                if npu.exists():
                    shutil.rmtree(npu)
                jobs.append(([args.ms_python, str(SCRIPT), "ms", *common, "--level", lv,
                              "--bug", CASES[c]["bug"], "--dump-path", str(npu),
                              *prec_args(prec_of(c))], out / "_logs" / f"{c}_{lv}.log"))
        run_all(jobs, args.jobs)
        for lv in levels:
            for c in cases:
                bench = out / c / "bench" / lv
                if bench.exists():
                    shutil.rmtree(bench)
                shutil.copytree(prec_dir(out, "_golden", prec_of(c)) / lv, bench)
        make_noise(out, init, args, levels, cases, [p for p in precs if p in NOISE])
    vers = versions(args.ms_python, args.pt_python)
    for c in cases:
        clean = json.loads((prec_dir(out, "_clean_check", prec_of(c)) / "clean_check.json")
                           .read_text())
        truth = make_truth(out, c, levels, clean, vers)
        (out / c / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        for lv, e in truth["levels"].items():
            print(f"{c:22s} {lv:4s} {e['expected']} (bench: {e.get('bench_counterpart')})")
    print(f"generated in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
