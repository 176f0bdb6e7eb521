"""Generate the MindSpore-vs-PyTorch bug zoo (real msprobe dumps on both sides) and its truth.

The bench is the clean PyTorch tiny Llama (``benchmarks/tinyllama_pt.py``, fp32, one step,
forward + backward); every case's "npu" side is its MindSpore twin
(``benchmarks/zoo/tinyllama_ms.py``) loaded with the same initial weights and token ids, with
at most one bug injected at a known site. Both sides are dumped by the real msprobe
(mindstudio-probe 26.2.0) with ``task: tensor`` at levels L1, mix and L0.

The truth is by construction, not from a bit diff (the two frameworks never agree bit for
bit): each case names the cell and the API of the injected site; the expected node is, per
level, the MindSpore node of that site in the case's own dump, located through the mix
dump's construct.json:

  L1   the first forward API call with the site's API prefix whose cell chain (mix
       construct.json) holds the site's cell; the L1 dump must hold the same API calls in
       the same order as the mix dump (checked), so the counter is the same there;
  mix  the same API node;
  L0   the site's innermost dumped cell ``Cell.<path>.<Class>.forward.0``.

Runs with any Python 3.10+ (stdlib only); the dumps run in two other interpreters::

    python benchmarks/zoo/make_ms_zoo.py --out .bench/zoo_ms \\
        --ms-python .venv-mszoo/bin/python --pt-python .venv-ptzoo/bin/python
    python benchmarks/zoo/make_ms_zoo.py --out .bench/zoo_ms --export tests/data/zoo_ms

``--ms-python``: mindspore==2.10.0, numpy<2, mindstudio-probe==26.2.0 (pandas<3);
``--pt-python``: torch==2.13.0, mindstudio-probe==26.2.0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from subset import export_subset  # beside this script (run as a script, its folder is on sys.path)

HERE = Path(__file__).resolve().parent
PT_SCRIPT = HERE.parent / "tinyllama_pt.py"
MS_SCRIPT = HERE / "tinyllama_ms.py"
LEVELS = ("L1", "mix", "L0")

# The injected site, MindSpore side: api_cell/api = the cell path and API-name prefix of the
# first call that makes the error (L1, mix); l0_cell = the innermost dumped cell holding the
# site (L0). bench = the PyTorch (cell path, API prefix) of the same computation, for reading
# a diagnosis (informational: for a cast, which PyTorch never records, the call it feeds),
# bench_l0 its cell at L0 where that is not bench's cell.
CASES: dict[str, dict[str, Any]] = {
    "ms_clean": {"class": "benign", "bug": "", "flags": [], "site": None},
    "ms_rms_eps": {
        "class": "hyperparameter", "bug": "rms_eps", "flags": [],
        "what": "layers.1.attention_norm eps 1e-5 instead of 1e-6: the positional scalar of "
                "`x.pow(2).mean(-1, keepdim=True) + eps` (Tensor.__add__)",
        "site": {"api_cell": "layers.1.attention_norm", "api": "Tensor.__add__.",
                 "l0_cell": "layers.1.attention_norm",
                 "bench": ("layers.1.n1", "Tensor.__add__.")}},
    "ms_softmax_fp16": {
        "class": "precision", "bug": "softmax_fp16", "flags": [],
        "what": "layers.0.attention computes softmax in float16: "
                "`mint.softmax((s + mask).to(float16), -1).to(float32)`; the first cast "
                "(Tensor.to, recorded by msprobe-MindSpore; msprobe-PyTorch never records "
                "casts) makes the error",
        "site": {"api_cell": "layers.0.attention", "api": "Tensor.to.",
                 "l0_cell": "layers.0.attention",
                 "bench": ("layers.0.attn", "Torch.softmax."),
                 "bench_note": "the cast has no bench counterpart (msprobe-PyTorch never "
                               "records casts); bench_counterpart is the softmax it feeds"}},
    "ms_embedding_fp16": {
        "class": "precision", "bug": "embedding_fp16", "flags": [],
        "what": "tok_embeddings output cast to float16 and kept (`ops.gather(...).to(float16)`): "
                "layer 0's attention_norm runs in float16, the residual stream is promoted "
                "back to float32 by the first residual add",
        "site": {"api_cell": "tok_embeddings", "api": "Tensor.to.", "l0_cell": "tok_embeddings",
                 "bench": ("emb", "Functional.embedding."),
                 "bench_note": "the cast has no bench counterpart (msprobe-PyTorch never "
                               "records casts); bench_counterpart is the embedding it follows"}},
    "ms_residual_dropped": {
        "class": "logic", "bug": "residual_dropped", "flags": [],
        "what": "layers.1 drops the residual add after attention "
                "(`x = attention(attention_norm(x))`): no MindSpore call makes the error, the "
                "first call that reads the wrong value is ffn_norm's x.pow(2)",
        "site": {"api_cell": "layers.1.ffn_norm", "api": "Tensor.pow.", "l0_cell": "layers.1",
                 "bench": ("layers.1.n2", "Tensor.pow."), "bench_l0": "layers.1"}},
    "ms_wo_transposed": {
        "class": "weights", "bug": "wo_transposed", "flags": [],
        "what": "layers.1.attention.wo weight loaded transposed (square, same shape)",
        "site": {"api_cell": "layers.1.attention.wo", "api": "MintFunctional.linear.",
                 "l0_cell": "layers.1.attention.wo",
                 "bench": ("layers.1.attn.o", "Functional.linear.")}},
    "ms_silu_to_gelu": {
        "class": "hyperparameter", "bug": "silu_to_gelu", "flags": [],
        "what": "layers.1.feed_forward uses gelu (ops.gelu: mint's GeluExt has no CPU kernel) "
                "instead of silu",
        "site": {"api_cell": "layers.1.feed_forward", "api": "Functional.gelu.",
                 "l0_cell": "layers.1.feed_forward",
                 "bench": ("layers.1.mlp", "Functional.silu.")}},
    "ms_mask_off_by_one": {
        "class": "logic", "bug": "mask_off_by_one", "flags": [],
        "what": "layers.0.attention causal mask `triu(full(-1e9), 2)` instead of diagonal 1 "
                "(each token also sees the next one)",
        "site": {"api_cell": "layers.0.attention", "api": "Mint.triu.",
                 "l0_cell": "layers.0.attention",
                 "bench": ("layers.0.attn", None),
                 "bench_note": "msprobe-PyTorch dumps neither torch.full nor torch.triu: the "
                               "site has no bench counterpart; the first bench call that reads "
                               "the mask is the `s + mask` Tensor.__add__"}},
}

# committed subset (tests/data/zoo_ms): case -> levels; step 0 only; ~2.6 MB a case x level
SUBSET: dict[str, tuple[str, ...]] = {
    "ms_clean": ("L0",),
    "ms_softmax_fp16": ("L1",),
    "ms_residual_dropped": ("L0",),
    "ms_rms_eps": ("L1",),
    "ms_mask_off_by_one": ("L1",),
}


def step_dir(dump: Path, step: int = 0) -> Path:
    """The one proc*/rank* dir of a step."""
    subs = sorted(p.parent for p in (dump / f"step{step}").glob("*/dump.json"))
    if len(subs) != 1:
        raise SystemExit(f"expected one dump.json under {dump}/step{step}, found {len(subs)}")
    return subs[0]


def _run(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=log.parent)


def run_all(jobs: list[tuple[list[str], Path]], parallel: int) -> None:
    """Run the commands, `parallel` at a time; stop on the first failure with its log."""
    pending = list(jobs)
    running: list[tuple[subprocess.Popen[bytes], Path]] = []
    while pending or running:
        while pending and len(running) < parallel:
            cmd, log = pending.pop(0)
            running.append((_run(cmd, log), log))
        proc, log = running.pop(0)
        if proc.wait() != 0:
            for p, _ in running:
                p.wait()
            raise SystemExit(f"dump run failed ({proc.args!r}):\n{log.read_text()[-3000:]}")


def save_init(pt_python: str, path: Path) -> None:
    """init_weights.npz from benchmarks/tinyllama_pt.py's own init (seed 0; ids seed 1)."""
    code = (
        "import sys, numpy as np, torch\n"
        f"sys.path.insert(0, {str(PT_SCRIPT.parent)!r})\n"
        "import tinyllama_pt as t\n"
        "d = t.DEFAULT_DIMS\n"
        "m = t.LM(d['vocab'], d['hidden'], d['heads'], d['ffn'], d['layers'])\n"
        "t.llama_init(m)\n"
        "ids = torch.randint(0, d['vocab'], (d['batch'], d['seq'] + 1),"
        " generator=torch.Generator().manual_seed(1))\n"
        "a = {k: v.detach().numpy() for k, v in m.state_dict().items()}\n"
        "a['__ids__'] = ids.numpy()\n"
        f"np.savez({str(path)!r}, **a)\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([pt_python, "-c", code], check=True)


def _chain(cons: dict[str, Any], name: str) -> list[str]:
    out: list[str] = []
    cur = cons.get(name)
    while cur and len(out) < 50:
        out.append(cur)
        cur = cons.get(cur)
    return out


def _cell_re(prefix: str, path: str) -> re.Pattern[str]:
    return re.compile(rf"^{prefix}\.{re.escape(path)}\.[A-Za-z_]\w*\.forward\.\d+$")


def api_at(mix: Path, prefix: str, path: str, api: str) -> str | None:
    """First forward API node `api*` whose mix cell chain holds the cell `path`."""
    sd = step_dir(mix)
    data = json.loads((sd / "dump.json").read_text())["data"]
    cons = json.loads((sd / "construct.json").read_text())
    cell = _cell_re(prefix, path)
    for name in data:
        if name.startswith(api) and name.endswith(".forward") and any(
                cell.match(p) for p in _chain(cons, name)):
            return name
    return None


def cell_at(dump: Path, prefix: str, path: str) -> str | None:
    data = json.loads((step_dir(dump) / "dump.json").read_text())["data"]
    cell = _cell_re(prefix, path)
    return next((n for n in data if cell.match(n)), None)


def api_order(dump: Path) -> list[str]:
    data = json.loads((step_dir(dump) / "dump.json").read_text())["data"]
    return [n for n in data if not n.startswith(("Cell.", "Module."))]


def make_truth(out: Path, case: str, levels: list[str]) -> dict[str, Any]:
    spec = CASES[case]
    site = spec["site"]
    truth: dict[str, Any] = {
        "case": case, "class": spec["class"], "benign": not spec["bug"], "flags": spec["flags"],
        "npu_precision": "fp32", "bench_precision": "fp32",
        "npu_framework": "mindspore", "bench_framework": "pytorch",
        "injected": None if site is None else {
            "step": 0, "module": site["api_cell"], "api": site["api"],
            "l0_module": site["l0_cell"], "what": spec["what"],
            **({"bench_note": site["bench_note"]} if "bench_note" in site else {})},
        "levels": {}}
    if site is None:
        for lv in levels:
            truth["levels"][lv] = {"expected": None, "step": None, "detectable": False,
                                   "note": "no bug: MindSpore-vs-PyTorch fp32 kernel noise only"}
        return truth
    npu_mix, bench_mix = out / case / "npu" / "mix", out / case / "bench" / "mix"
    api = api_at(npu_mix, "Cell", site["api_cell"], site["api"])
    if api is None:
        raise SystemExit(f"{case}: no {site['api']}* call inside {site['api_cell']} (mix)")
    bpath, bapi = site["bench"]
    bench_api = api_at(bench_mix, "Module", bpath, bapi) if bapi else None
    for lv in levels:
        dump = out / case / "npu" / lv
        entry: dict[str, Any] = {"step": 0, "detectable": True}
        if lv == "L0":
            entry["expected"] = cell_at(dump, "Cell", site["l0_cell"])
            entry["bench_counterpart"] = cell_at(out / case / "bench" / lv, "Module",
                                                 site.get("bench_l0", bpath))
            entry["derived"] = (f"the innermost dumped cell holding the site: "
                                f"Cell.{site['l0_cell']}.<Class>.forward.0 in this dump")
        else:
            entry["expected"] = api
            entry["bench_counterpart"] = bench_api
            entry["derived"] = (f"the first forward {site['api']}* call whose cell chain "
                                f"(mix construct.json of this case's MindSpore run) holds "
                                f"Cell.{site['api_cell']}")
            if lv == "L1":
                same = api_order(dump) == api_order(npu_mix)
                entry["l1_api_order_equals_mix"] = same
                if not same:
                    raise SystemExit(f"{case}: L1 and mix dumps list different API calls")
            entry["inside"] = f"Cell.{site['api_cell']}"
        if entry["expected"] is None:
            raise SystemExit(f"{case} {lv}: site not found in {dump}")
        truth["levels"][lv] = entry
    return truth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".bench/zoo_ms")
    ap.add_argument("--ms-python", default=".venv-mszoo/bin/python")
    ap.add_argument("--pt-python", default=".venv-ptzoo/bin/python")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--jobs", type=int, default=2, help="dump runs at a time")
    ap.add_argument("--truth-only", action="store_true",
                    help="recompute truth.json from the existing dumps, run nothing")
    ap.add_argument("--export", help="copy the committed subset from --out to this dir")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    # absolute, but not through resolve(): a venv's python is a symlink that must stay one
    args.ms_python, args.pt_python = map(os.path.abspath, (args.ms_python, args.pt_python))
    if args.export:
        export_subset(out, Path(args.export), SUBSET)
        return
    t0 = time.time()
    cases = [c for c in args.cases.split(",") if c]
    levels = [lv for lv in args.levels.split(",") if lv]
    for c in cases:
        if c not in CASES:
            raise SystemExit(f"unknown case {c!r}")
    if "mix" not in levels and any(CASES[c]["site"] for c in cases):
        raise SystemExit("the truth needs the mix level (its construct.json)")
    init = out / "_init" / "init_weights.npz"
    if not args.truth_only:
        save_init(args.pt_python, init)
        jobs: list[tuple[list[str], Path]] = []
        for lv in levels:
            g = out / "_golden" / lv
            if g.exists():
                shutil.rmtree(g)
            jobs.append(([args.pt_python, str(PT_SCRIPT), "--variant", "fp32", "--level", lv,
                          "--task", "tensor", "--steps", "1", "--dump-path", str(g)],
                         out / "_logs" / f"pt_{lv}.log"))
            for c in cases:
                npu = out / c / "npu" / lv
                if npu.exists():
                    shutil.rmtree(npu)
                jobs.append(([args.ms_python, str(MS_SCRIPT), "--init", str(init),
                              "--level", lv, "--task", "tensor", "--bug", CASES[c]["bug"],
                              "--dump-path", str(npu)], out / "_logs" / f"{c}_{lv}.log"))
        run_all(jobs, args.jobs)
        for lv in levels:
            for c in cases:
                bench = out / c / "bench" / lv
                if bench.exists():
                    shutil.rmtree(bench)
                shutil.copytree(out / "_golden" / lv, bench)
    for c in cases:
        truth = make_truth(out, c, levels)
        (out / c / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        for lv, e in truth["levels"].items():
            print(f"{c:22s} {lv:4s} {e['expected']} (bench: {e.get('bench_counterpart')})")
    print(f"generated in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
