"""Generate the cross-codebase bug zoo: NPU side = another real codebase (cross_<name>.py
adapter, weights converted from HF), bench side = HF transformers LlamaForCausalLM.

Ground truth by construction: a bug case's expected node is make_zoo.first_diff(buggy NPU
run, clean NPU run) -- same codebase, same seeds, no noise, so node names line up.

Layout (as make_zoo): OUT/<case>/{npu,bench}/<level>/step<N>/proc*/dump.json, OUT/<case>/truth.json;
OUT/_golden/hf/<fp32|bf16>/<level> (bench runs), OUT/_clean/<name>/<fp32|bf16>/<level> (clean
NPU-codebase runs), OUT/_clean/<name>/rerun/<level> (determinism check).
"""
from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_zoo import first_diff, run_forked, steps, truth_entry  # noqa: E402

LEVELS = ("L1", "L0", "mix")
V, HID, HEADS, INTER, LAYERS, EPS, B, S, STEPS = 64, 32, 4, 64, 2, 1e-6, 2, 8, 2
LR = 1e-3
EMB_STD = 1.0  # see hf_model()
TOL = 1e-5
ATTN = "eager"  # the bench's attention; make_sdpa_bench.py sets "sdpa" (one fused call)


def hf_model() -> Any:
    """Tiny HF Llama, torch.manual_seed(0) init. The embedding is then re-drawn N(0, 1) from the
    same RNG stream (PyTorch's nn.Embedding default): HF's std 0.02 gives mean(h^2) ~ 4e-4 and an
    eps of 1e-6 is then a 1e-3 relative term, which an eps-free RMSNorm (x-transformers') cannot
    match; with std 1 it is below fp32 resolution."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=V, hidden_size=HID, num_attention_heads=HEADS,
                      num_key_value_heads=HEADS, intermediate_size=INTER,
                      num_hidden_layers=LAYERS, rms_norm_eps=EPS, attention_bias=False,
                      mlp_bias=False, tie_word_embeddings=False, max_position_embeddings=S,
                      attn_implementation=ATTN)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        m.model.embed_tokens.weight.normal_(0.0, EMB_STD)
    return m.float().train()


def token_ids() -> Any:
    import torch
    return torch.randint(0, V, (B, S + 1), generator=torch.Generator().manual_seed(1))


def hf_logits(m: Any, inp: Any) -> Any:
    return m(input_ids=inp).logits


def hf_loss(m: Any, ids: Any) -> Any:
    """HF's way: logits.float() and mean cross entropy over the shifted targets (what
    ForCausalLMLoss computes; called directly so the targets are ids[:, 1:] for all S)."""
    import torch.nn.functional as F
    logits = hf_logits(m, ids[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, V), ids[:, 1:].reshape(-1))


def write_cfg(level: str, dump_path: str) -> str:
    import model  # make_zoo's model.write_cfg: the same configs as the same-code zoo
    return model.write_cfg(level, dump_path)


def train(side: str, adapter: Any, level: str, dump: Path, bf16: bool, bug: str) -> list[float]:
    """One dumped STEPS-step AdamW run of one side (call in a forked child)."""
    import os

    import torch
    from msprobe.pytorch import PrecisionDebugger
    torch.use_deterministic_algorithms(True)
    cfg = write_cfg(level, str(dump))
    debugger = PrecisionDebugger(config_path=cfg)  # before building: adapters bind F.* early
    os.remove(cfg)
    hf = hf_model()
    if side == "bench":
        m, lossfn = hf, hf_loss
    else:
        m, lossfn = adapter.build(hf), adapter.loss
        del hf
        if bug.startswith("twin:"):  # the clean run with the bug's call structure
            adapter.BUGS[bug[5:]][3](m)
        elif bug:
            adapter.BUGS[bug][1](m)
    over = getattr(m, "opt_overrides", {})
    opt = torch.optim.AdamW(m.parameters(), lr=over.get("lr", LR))
    ids = token_ids()
    losses = []
    for _ in range(STEPS):
        debugger.start(m)
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = lossfn(m, ids)
        else:
            loss = lossfn(m, ids)
        loss.backward()
        debugger.stop()
        debugger.step()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.item()))
    return losses


def spawn(side: str, adapter: Any, level: str, dump: Path, bf16: bool,
          bug: str = "") -> list[float]:
    what = f"{side} {getattr(adapter, 'NAME', 'hf')} {level} bf16={bf16} bug={bug!r}"
    line = run_forked(dump, lambda: {"losses": train(side, adapter, level, dump, bf16, bug)},
                      what)
    return json.loads(line)["losses"]


def clean_check(adapter: Any) -> dict[str, Any]:
    """fp32 forward of the clean pair (no dump): logits and loss must agree to TOL."""
    import torch
    hf = hf_model()
    other = adapter.build(hf)
    ids = token_ids()
    with torch.no_grad():
        lh = hf_logits(hf, ids[:, :-1]).float()
        lo = adapter.logits(other, ids[:, :-1]).float()
        a, b = hf_loss(hf, ids), adapter.loss(other, ids)
    return {"logits_max_abs_diff": float((lh - lo).abs().max()),
            "loss_abs_diff": float((a - b).abs()), "loss_bench": float(a), "loss_npu": float(b),
            "logits_max_abs": float(lh.abs().max())}


def node_names(dump: Path, step: int = 0) -> list[str]:
    return list(json.loads((steps(dump)[step] / "dump.json").read_text())["data"])


def structure(out: Path, case: str, levels: list[str]) -> None:
    """Print how the two sides' step-0 node lists of a (clean) case differ, per level: node
    counts, API / module classes only one side calls, and per-name counts that differ."""
    import collections
    import re

    def kind(n: str) -> str:
        return n.split(".")[-3] if n.startswith("Module.") else \
            re.sub(r"\.\d+\.(forward|backward)$", "", n)
    for lv in levels:
        a, b = node_names(out / case / "npu" / lv), node_names(out / case / "bench" / lv)
        ca, cb = collections.Counter(map(kind, a)), collections.Counter(map(kind, b))
        fwd = [sum(".forward" in n for n in x) for x in (a, b)]
        print(f"{lv}: npu {len(a)} nodes ({fwd[0]} forward), bench {len(b)} ({fwd[1]} forward)")
        print("  only npu:", dict(sorted((k, v) for k, v in ca.items() if k not in cb)))
        print("  only bench:", dict(sorted((k, v) for k, v in cb.items() if k not in ca)))
        print("  counts differ (npu/bench):",
              {k: f"{ca[k]}/{cb[k]}" for k in sorted(ca) if k in cb and ca[k] != cb[k]})


def versions(adapter: Any) -> dict[str, str]:
    """Installed versions of the packages the zoo depends on (an adapter may name its own
    distribution in PACKAGE)."""
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for p in ("torch", "transformers", "mindstudio-probe", getattr(adapter, "PACKAGE", None)):
        try:
            if p:
                out[p] = version(p)
        except PackageNotFoundError:
            out[p] = "missing"
    return out


def copy(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="/work/bench/cross")
    ap.add_argument("--codebases", default="",
                    help="comma-separated adapter names (cross_<name>.py); default: all found")
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--truth-only", action="store_true",
                    help="recompute truth.json from the existing dumps, run nothing")
    ap.add_argument("--structure", metavar="CASE",
                    help="only print the two sides' node-list differences of CASE, run nothing")
    args = ap.parse_args()
    if args.structure:
        structure(Path(args.out), args.structure, [lv for lv in args.levels.split(",") if lv])
        return
    t0 = time.time()
    import torch  # noqa: F401 - imported once here, inherited by the forked runs
    from msprobe.pytorch import PrecisionDebugger  # noqa: F401
    names = [n for n in args.codebases.split(",") if n] or sorted(
        p.stem[len("cross_"):] for p in HERE.glob("cross_*.py"))
    out = Path(args.out)
    levels = [lv for lv in args.levels.split(",") if lv]
    want = {c for c in args.cases.split(",") if c}
    golden: dict[tuple[bool, str], Path] = {}
    for name in names:
        ad = importlib.import_module(f"cross_{name}")
        vers = versions(ad)
        # in a forked child: torch compute in the parent would start its thread pool, which
        # a forked child then deadlocks on
        cc = json.loads(run_forked(out / "_clean" / ad.NAME / "check", partial(clean_check, ad),
                                   f"clean check {ad.NAME}"))
        print(f"clean check {ad.NAME}: logits max|diff| {cc['logits_max_abs_diff']:.3g}, "
              f"loss |diff| {cc['loss_abs_diff']:.3g} (loss {cc['loss_bench']:.6f})", flush=True)
        if not (cc["logits_max_abs_diff"] < TOL and cc["loss_abs_diff"] < TOL):
            raise SystemExit(f"clean pair {ad.NAME} vs hf disagrees beyond {TOL}: {cc}")
        cases: dict[str, tuple[str, str, bool]] = {
            f"{ad.NAME}_clean": ("benign", "", False), f"{ad.NAME}_bf16": ("benign", "", True)}
        cases.update({f"{ad.NAME}_{b}": (k, b, False) for b, (k, *_r) in ad.BUGS.items()})
        cases = {c: v for c, v in cases.items() if not want or c in want}
        for level in levels:
            for bf16 in sorted({v[2] for v in cases.values()}):
                prec = "bf16" if bf16 else "fp32"
                g = out / "_golden" / "hf" / prec / level
                if (bf16, level) not in golden and not args.truth_only:
                    t1 = time.time()
                    ls = spawn("bench", None, level, g, bf16)
                    print(f"golden hf {prec} {level} losses {ls} ({time.time() - t1:.0f}s)",
                          flush=True)
                golden[(bf16, level)] = g
                c = out / "_clean" / ad.NAME / prec / level
                if not args.truth_only:
                    ls = spawn("npu", ad, level, c, bf16)
                    print(f"clean {ad.NAME} {prec} {level} losses {ls}", flush=True)
            if not args.truth_only:  # the truth needs bit-reproducible NPU runs
                r = out / "_clean" / ad.NAME / "rerun" / level
                spawn("npu", ad, level, r, False)
                if first_diff(r, out / "_clean" / ad.NAME / "fp32" / level) is not None:
                    raise SystemExit(f"{ad.NAME} {level}: two clean runs differ")
        for c, (klass, bug, bf16) in cases.items():
            prec = "bf16" if bf16 else "fp32"
            site = ad.BUGS[bug][2] if bug and len(ad.BUGS[bug]) > 2 else None
            truth: dict[str, Any] = {
                "case": c, "class": klass, "benign": not bug, "flags": [],
                "npu_precision": prec, "bench_precision": prec,
                "codebases": {"npu": ad.NAME, "bench": "hf"}, "versions": vers,
                "clean_check": cc,
                "injected": None if site is None else
                {"step": site[0], "module": site[1], "api": site[2]},
                "levels": {}}
            tpath = out / c / "truth.json"
            if tpath.is_file():
                truth["levels"].update(json.loads(tpath.read_text()).get("levels", {}))
            for level in levels:
                t1 = time.time()
                clean = out / "_clean" / ad.NAME / prec / level
                npu, bench = out / c / "npu" / level, out / c / "bench" / level
                if not args.truth_only:
                    copy(golden[(bf16, level)], bench)
                    if bug:
                        spawn("npu", ad, level, npu, bf16, bug)
                    else:
                        copy(clean, npu)
                entry: dict[str, Any] = {"expected": None, "step": None, "detectable": False}
                if bug and len(ad.BUGS[bug]) > 3:
                    # a bug that changes the calls (a norm without eps given one) is compared
                    # with a clean run of the same calls: its first differing node is the
                    # call whose argument the bug changed, not the first new call
                    clean = out / "_clean" / ad.NAME / f"twin_{bug}" / prec / level
                    if not args.truth_only:
                        spawn("npu", ad, level, clean, bf16, f"twin:{bug}")
                if bug:
                    # names from the buggy run: the dump the plugin is given as --acc-npu
                    got = first_diff(npu, clean)
                    if got is None:
                        print(f"WARNING: {c} {level}: bug leaves the dump bit-identical")
                        entry["note"] = "bug invisible at this level"
                    else:
                        entry.update(truth_entry(site, level, got, npu))
                        if "first_differing_record" in got:
                            entry["first_differing_record"] = got["first_differing_record"]
                        if not entry["matches_injection"]:
                            print(f"WARNING: {c} {level}: first diff {got} is not the "
                                  f"injected site {site}")
                else:
                    nn_, bn = node_names(npu), node_names(bench)
                    entry["nodes_step0"] = {"npu": len(nn_), "bench": len(bn)}
                truth["levels"][level] = entry
                print(f"{c:24s} {level:4s} {entry.get('expected')} step={entry.get('step')} "
                      f"({time.time() - t1:.0f}s)", flush=True)
            tpath.parent.mkdir(parents=True, exist_ok=True)
            tpath.write_text(json.dumps(truth, indent=1) + "\n")
    print(f"generated in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
