"""Real msprobe dumps for bench-noise tolerances: a bench run, a second bench run under other
kernels (``--acc-bench-noise``), a benign "NPU" run under a third set of kernels and the same run
with a small bug inside the fixed bf16 tolerance (tests/data/real/bench_noise/README.md).

Model: a tiny transformers Qwen2ForCausalLM (hidden 64, 2 layers, 4 heads, intermediate 128,
vocab 128), bf16 parameters and activations on CPU, attn_implementation="sdpa". Weights are drawn
once (torch.manual_seed(0), HF init with initializer_range 0.02; RMSNorm weights then redrawn
N(1, 0.1) and q/k/v biases N(0, 0.02), as trained ones would be, instead of HF's ones and
zeros), cast to bf16 and saved to ``WORK/weights.pt`` with one batch of 2 x 8 token ids
(seed 1); every run loads that file. Loss = HF's causal-LM cross entropy
(``model(input_ids, labels=input_ids).loss``), one forward + backward (step 0), no optimizer.

Kernel variants (the same calls, so msprobe records the same node names; other rounding):

* A (``bench``): torch's native bf16 linear (one GEMM, fp32 accumulation, bias fused, one
  rounding).
* B (``bench_noise``): 2-way split-K linear (two half-K GEMMs, each rounded to bf16, summed in
  bf16, bias in the first partial).
* C (``npu_clean``): 4-way split-K linear (quarter-K partials rounded to bf16, summed left to
  right in bf16).

All runs use SDPA's CPU FLASH backend. Torch's own CPU bf16 GEMM paths (oneDNN on/off, 1 or 4
threads, matmul/einsum/bmm, fp32 or fp64 upcast) give bit-identical results for these shapes
(checked), hence the split-K linears, installed as ``torch.nn.functional.linear`` before
msprobe wraps it (inner calls use the un-hooked ``torch._C._nn.linear`` and tensor methods, so
msprobe records one ``Functional.linear`` per call, as for the native one). SDPA's MATH backend
was tried for one variant and dropped: msprobe records its backward with one grad output
instead of FLASH's three (q, k, v), so the bench runs' node shapes would not line up.

Bug (``npu_bug`` = variant C + bug): ``model.layers.0.input_layernorm.weight`` is 1.012x the
checkpoint's (a conversion scale left on one tensor; the product rounded to bf16). It makes its
error at layer 0's input RMSNorm, before any linear, where the two bench runs agree exactly:
at L1 ``Tensor.__mul__.4.forward`` (``self.weight * hidden_states``), at L0 and mix
``Module.model.layers.0.input_layernorm.Qwen2RMSNorm.forward.0`` (mix: also its
``Tensor.__mul__.4.forward``). An RMSNorm eps bug (1e-5 for 1e-6) was tried first and dropped:
msprobe records eps as a scalar argument of ``variance + eps``, so the plugin fails it by the
argument whatever the tolerance, and rsqrt's backward amplifies it past 4e-2.

Run (writes OUT/<level>/<run>/ msprobe dump roots and prints the comparisons)::

    .venv/bin/python benchmarks/zoo/make_noise_pair.py --out tests/data/real/bench_noise

``--compare-only`` re-prints the numbers from existing dumps (with the same ``--work``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HID, LAYERS, HEADS, INTER, VOCAB, SEQ, BATCH = 64, 2, 4, 128, 128, 8, 2
EPS, BUG_SCALE = 1e-6, 1.012
NORM_W_STD, BIAS_STD = 0.1, 0.02  # "trained-like" RMSNorm weights and q/k/v biases
LEVELS = ("L1", "mix", "L0")
# msprobe "list" filters (substrings of the API / module names) that keep the whole set under
# ~2.5 MB: a full L1 tensor dump of this model is ~2.5 MB per run, a full L0 one ~1.2 MB.
# L1: the embedding (the first bf16 tensor; without it the first recorded node, an fp32
# rsqrt, has no bf16 ancestry), the RMSNorms' rsqrt, the weight product of layer 0's
# input_layernorm (Tensor.__mul__.4), attention and SiLU.
# mix: the RMSNorm modules with every API inside them, the embedding, attention and SiLU.
# L0: the RMSNorm modules.
LISTS: dict[str, list[str]] = {
    "L1": ["embedding", "rsqrt", "Tensor.__mul__.4.", "scaled_dot_product_attention", "silu"],
    "mix": ["embedding", "norm", "scaled_dot_product_attention", "silu"],
    "L0": ["norm"],
}
VARIANTS = {
    "A": {"linear": 1, "sdpa": "flash"},   # split-K parts (1 = torch's native linear)
    "B": {"linear": 2, "sdpa": "flash"},
    "C": {"linear": 4, "sdpa": "flash"},
}
RUNS = {  # run -> (variant, bug)
    "bench": ("A", ""),
    "bench_noise": ("B", ""),
    "npu_clean": ("C", ""),
    "npu_bug": ("C", "norm_weight_scale"),
}
PAIRS = (("bench_noise", "bench"), ("npu_clean", "bench"), ("npu_bug", "bench"),
         ("npu_clean", "bench_noise"))


# ---------------------------------------------------------------------------------- model

def config() -> Any:
    from transformers import Qwen2Config
    return Qwen2Config(vocab_size=VOCAB, hidden_size=HID, intermediate_size=INTER,
                       num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                       num_key_value_heads=HEADS, max_position_embeddings=SEQ,
                       rms_norm_eps=EPS, tie_word_embeddings=False, attention_dropout=0.0,
                       use_cache=False, attn_implementation="sdpa")


def make_weights(path: Path) -> None:
    import torch
    from transformers import Qwen2ForCausalLM
    torch.manual_seed(0)
    m = Qwen2ForCausalLM(config())
    with torch.no_grad():  # HF inits norms to 1 and biases to 0; draw them as trained ones
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(1.0, NORM_W_STD)
            elif name.endswith(".bias"):
                p.normal_(0.0, BIAS_STD)
    sd = {k: v.detach().to(torch.bfloat16).clone() for k, v in m.state_dict().items()}
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    torch.save({"state_dict": sd, "ids": ids}, path)


def install_split_k_linear(parts: int) -> None:
    """Replace F.linear by a ``parts``-way split-K linear with bf16 partial sums (call before
    msprobe wraps F.linear). Computed on the 2-D [tokens, K] view and viewed back so the
    output's grad_fn matches native linear's."""
    import torch
    import torch.nn.functional as F
    lin, narrow, add = torch._C._nn.linear, torch.Tensor.narrow, torch.Tensor.add
    reshape, view = torch.Tensor.reshape, torch.Tensor.view

    def split_k_linear(input: torch.Tensor, weight: torch.Tensor,
                       bias: torch.Tensor | None = None) -> torch.Tensor:
        k = weight.shape[1]
        x2 = reshape(input, (-1, k))
        step = k // parts
        out = None
        for i in range(parts):
            lo = i * step
            n = k - lo if i == parts - 1 else step
            p = lin(narrow(x2, 1, lo, n), narrow(weight, 1, lo, n), bias if i == 0 else None)
            out = p if out is None else add(out, p)
        return view(out, (*input.shape[:-1], weight.shape[0]))

    F.linear = split_k_linear


def write_cfg(level: str, dump_path: str) -> str:
    lst = LISTS[level]
    if level == "mix":
        cfg: dict[str, Any] = {"task": "statistics", "level": "mix",
                               "statistics": {"scope": [], "list": lst, "data_mode": ["all"],
                                              "summary_mode": "statistics"}}
    else:
        cfg = {"task": "tensor", "level": level,
               "tensor": {"scope": [], "list": lst, "data_mode": ["all"]}}
    cfg.update({"dump_path": dump_path, "rank": [], "step": [], "async_dump": False})
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    return path


def child(run: str, level: str, dump: str, weights: str) -> dict[str, Any]:
    """One dumped forward+backward (step 0) of ``run``; in its own process."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    var, bug = RUNS[run]
    v = VARIANTS[var]
    if v["linear"] > 1:
        install_split_k_linear(v["linear"])
    from msprobe.pytorch import PrecisionDebugger
    from transformers import Qwen2ForCausalLM
    cfg = write_cfg(level, dump) if level else None
    debugger = PrecisionDebugger(config_path=cfg) if cfg else None
    if cfg:
        os.remove(cfg)
    w = torch.load(weights)
    m = Qwen2ForCausalLM(config()).to(torch.bfloat16)
    m.load_state_dict(w["state_dict"])
    m.train()
    if bug == "norm_weight_scale":  # a conversion scale left on one tensor (bf16 product)
        with torch.no_grad():
            nw = m.model.layers[0].input_layernorm.weight
            nw.copy_((nw.float() * BUG_SCALE).to(nw.dtype))
    ids = w["ids"]
    backend = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION}[v["sdpa"]]
    if debugger:
        debugger.start(m)
    with sdpa_kernel(backend):
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
    if debugger:
        debugger.stop()
        debugger.step()
    out = {"loss": float(loss.item())}
    if not level:  # no dump: return logits and grads digests for the variant checks
        with torch.no_grad(), sdpa_kernel(backend):
            logits = m(input_ids=ids).logits.float()
        out["logits"] = logits.flatten().tolist()
    return out


def spawn(run: str, level: str, dump: Path | None, weights: Path) -> dict[str, Any]:
    if dump is not None:
        if dump.exists():
            shutil.rmtree(dump)
        dump.mkdir(parents=True)
    cmd = [sys.executable, __file__, "--child", run, "--level", level,
           "--dump", str(dump or ""), "--weights", str(weights)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"run {run} {level} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- compare

def step_dir(root: Path) -> Path:
    ds = sorted(root.glob("step0/*/dump.json"))
    if len(ds) != 1:
        raise SystemExit(f"{root}: expected one step0/*/dump.json, found {ds}")
    return ds[0].parent


def load_nodes(root: Path) -> dict[str, list[Any]]:
    """node name -> list of its output tensors (tensor dumps) or output Norms (statistics).
    Outputs: a forward node's ``output``; a backward node's ``output`` (grads of its inputs);
    a parameters_grad node's grads."""
    import torch
    d = step_dir(root)
    data = json.loads((d / "dump.json").read_text())["data"]
    out: dict[str, list[Any]] = {}

    def leaves(x: Any) -> list[dict[str, Any]]:
        if isinstance(x, dict):
            if "type" in x and x.get("type") == "torch.Tensor":
                return [x]
            return [t for v in x.values() for t in leaves(v)]
        if isinstance(x, (list, tuple)):
            return [t for v in x for t in leaves(v)]
        return []

    for name, rec in data.items():
        vals = []
        # parameters_grad nodes (L0/mix) hold the parameters' grads at the top level
        for t in leaves(rec.get("output", rec if "parameters_grad" in name else [])):
            if not str(t.get("dtype", "")).startswith(("torch.float", "torch.bfloat")):
                vals.append(None)
                continue
            if "data_name" in t:
                vals.append(torch.load(d / "dump_tensor_data" / t["data_name"],
                                       weights_only=False).double())
            else:
                vals.append(t.get("Norm"))
        out[name] = vals
    return out


def rel_errors(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> dict[str, float]:
    """Per node, the largest relative L2 error (tensors) or relative Norm difference
    (statistics) over its float outputs, ``a`` against reference ``b``."""
    import torch
    res = {}
    for name, bv in b.items():
        av = a.get(name)
        if av is None or len(av) != len(bv):
            continue
        worst, seen = 0.0, False
        for x, y in zip(av, bv, strict=False):
            if x is None or y is None:
                continue
            seen = True
            if isinstance(y, torch.Tensor):
                if x.shape != y.shape:
                    worst = float("inf")
                    continue
                den = float(y.norm())
                num = float((x - y).norm())
            else:
                den, num = abs(float(y)), abs(float(x) - float(y))
            worst = max(worst, num / den if den else (0.0 if num == 0 else float("inf")))
        if seen:
            res[name] = worst
    return res


def compare(out: Path, levels: list[str], losses: dict[str, float]) -> dict[str, Any]:
    report: dict[str, Any] = {"losses": losses, "levels": {}}
    for lv in levels:
        nodes = {r: load_nodes(out / lv / r) for r in RUNS}
        names = {r: list(n) for r, n in nodes.items()}
        same = all(names[r] == names["bench"] for r in RUNS)
        errs = {f"{a}~{b}": rel_errors(nodes[a], nodes[b]) for a, b in PAIRS}
        spread = errs["bench_noise~bench"]
        clean, bugged = errs["npu_clean~bench"], errs["npu_bug~bench"]
        # bug node: first node (call order) where npu_bug differs from npu_clean
        bug_vs_clean = rel_errors(nodes["npu_bug"], nodes["npu_clean"])
        order = names["bench"]
        first_bug = next((n for n in order if bug_vs_clean.get(n, 0) > 0), None)
        lvrep: dict[str, Any] = {"nodes": len(order), "same_node_names": same,
                                 "bug_node": first_bug, "pairs": {}}
        print(f"\n===== {lv}: {len(order)} nodes, identical node lists across runs: {same}")
        for key, e in errs.items():
            nz = sum(1 for v in e.values() if v > 0)
            mx = max(e.items(), key=lambda kv: kv[1])
            lvrep["pairs"][key] = {"max": mx[1], "max_node": mx[0], "nonzero_nodes": nz}
            print(f"{key:24s} max rel err {mx[1]:.3e} at {mx[0]}; {nz}/{len(e)} nodes differ")
        print("\nfirst 15 nodes (call order): spread=bench_noise~bench, clean=npu_clean~bench, "
              "bug=npu_bug~bench")
        first = []
        for n in order[:15]:
            row = {"node": n, "spread": spread.get(n), "clean": clean.get(n),
                   "bug": bugged.get(n)}
            first.append(row)
            print(f"  {n:60s} " + " ".join("   n/a   " if row[k] is None else f"{row[k]:.3e}"
                                            for k in ("spread", "clean", "bug")))
        lvrep["first_nodes"] = first
        # clean vs spread ratio over nodes where the spread is nonzero
        ratios = sorted((clean[n] / spread[n], n) for n in order
                        if spread.get(n, 0) > 0 and n in clean)
        zero_spread_clean = [n for n in order if spread.get(n, 0) == 0 and clean.get(n, 0) > 0]
        if ratios:
            med = ratios[len(ratios) // 2][0]
            lvrep["clean_over_spread"] = {"min": ratios[0][0], "median": med,
                                          "max": ratios[-1][0], "max_node": ratios[-1][1],
                                          "nodes": len(ratios)}
            print(f"\nnpu_clean/spread over {len(ratios)} nodes with spread>0: min "
                  f"{ratios[0][0]:.2f} median {med:.2f} max {ratios[-1][0]:.2f} "
                  f"({ratios[-1][1]})")
            top = ratios[-5:][::-1]
            print("  largest ratios: " + ", ".join(
                f"{n} {r:.2f} (clean {clean[n]:.2e}, spread {spread[n]:.2e})" for r, n in top))
        lvrep["clean_nonzero_where_spread_zero"] = zero_spread_clean
        print(f"nodes where spread==0 but npu_clean differs: {len(zero_spread_clean)} "
              f"{zero_spread_clean[:5]}")
        if first_bug:
            b, s, c = bugged[first_bug], spread.get(first_bug, 0.0), clean.get(first_bug, 0.0)
            lvrep["bug"] = {"node": first_bug, "bug_err": b, "spread": s, "clean_err": c}
            print(f"bug node {first_bug}: npu_bug~bench {b:.3e}, spread {s:.3e}, "
                  f"npu_clean~bench {c:.3e}")
            # where the bug error is largest relative to the spread, and nodes the bug exceeds
            over = [(bugged[n], n) for n in order
                    if bugged.get(n, 0) > max(7.8e-3, 5 * spread.get(n, 0))]
            lvrep["bug_over_floor_and_5x_spread"] = [n for _, n in over]
            print(f"nodes where npu_bug~bench > max(7.8e-3, 5*spread): {len(over)}: "
                  + ", ".join(f"{n} {v:.2e}" for v, n in over[:12]))
        report["levels"][lv] = lvrep
    print("\nlosses: " + ", ".join(f"{r} {v:.8f}" for r, v in losses.items()))
    for a, b in PAIRS:
        print(f"loss {a} - {b}: {losses[a] - losses[b]:+.3e}")
    return report


def versions() -> dict[str, str]:
    from importlib.metadata import version
    return {p: version(p) for p in ("torch", "transformers", "mindstudio-probe")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("tests/data/real/bench_noise"))
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench_noise_work")
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--compare-only", action="store_true")
    ap.add_argument("--child")
    ap.add_argument("--level", default="")
    ap.add_argument("--dump", default="")
    ap.add_argument("--weights", default="")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.level, args.dump, args.weights)))
        return
    levels = [lv for lv in args.levels.split(",") if lv]
    args.work.mkdir(parents=True, exist_ok=True)
    weights = args.work / "weights.pt"
    summary = args.work / "losses.json"
    t0 = time.time()
    if not args.compare_only:
        if not weights.exists():
            make_weights(weights)
        # variant checks without a dump: distinct, close, deterministic
        plain = {r: spawn(r, "", None, weights) for r in RUNS}
        again = spawn("bench", "", None, weights)
        import math
        if again["logits"] != plain["bench"]["logits"]:
            raise SystemExit("bench is not bit-reproducible")
        for a, b in PAIRS:
            la, lb = plain[a]["logits"], plain[b]["logits"]
            num = math.sqrt(sum((x - y) ** 2 for x, y in zip(la, lb, strict=False)))
            den = math.sqrt(sum(y * y for y in lb))
            ndiff = sum(x != y for x, y in zip(la, lb, strict=False))
            print(f"no-dump logits {a} vs {b}: rel L2 {num / den:.3e}, {ndiff}/{len(la)} differ; "
                  f"loss diff {plain[a]['loss'] - plain[b]['loss']:+.3e}")
            if a != "npu_bug" and ndiff == 0:
                raise SystemExit(f"{a} and {b} are bit-identical: the variants do nothing")
        losses: dict[str, float] = {}
        for lv in levels:
            for r in RUNS:
                res = spawn(r, lv, args.out / lv / r, weights)
                if r in losses and res["loss"] != losses[r]:
                    raise SystemExit(f"{r}: loss differs between levels ({res['loss']} vs "
                                     f"{losses[r]})")
                losses[r] = res["loss"]
                if res["loss"] != plain[r]["loss"]:
                    print(f"WARNING: {r} {lv}: dumped loss {res['loss']} != plain "
                          f"{plain[r]['loss']}")
            print(f"dumped {lv} ({time.time() - t0:.0f}s)", flush=True)
        summary.write_text(json.dumps(losses))
    losses = json.loads(summary.read_text())
    rep = compare(args.out, levels, losses)
    rep["versions"] = versions()
    (args.work / "report.json").write_text(json.dumps(rep, indent=1))
    print(f"\nversions {rep['versions']}; report {args.work / 'report.json'}; "
          f"{time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
