"""Generate the third-party-model bug zoo: msprobe dumps of tiny Hugging Face models.

`transformers` Llama / Qwen2 / Qwen2-MoE causal LMs built from config objects (no hub
download, `torch.manual_seed(0)` weights, fixed ids), one fp32 training step (forward +
backward of the model's own labels loss) dumped by the real msprobe at L1, L0 and mix (task
tensor). Both sides are PyTorch runs; the npu side carries the case's bug, the bench is clean.

Truth (per level, by construction): the first node (dump.json order) whose records are not
bit-identical between the npu run and a *twin* run, the npu's configuration without the bug
(`make_zoo.first_diff`). The twin is the bench itself unless the bench's call structure
differs from the npu's for another reason (sdpa vs eager): then it is a separate clean run
with the npu's structure, so benign structure noise does not enter the truth. The node found
is checked against the injected site (`make_zoo.matches`: module path, API prefix).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_zoo import (  # noqa: E402
    LEVELS,
    _files,
    _load,
    _same,
    first_diff,
    matches,
    run_forked,
    same_nodes,
    steps,
)
from subset import export_subset  # noqa: E402

V, D, FF, NLAYER, NH, NKV, B, T = 64, 32, 64, 2, 4, 2, 2, 8  # vocab, hidden, mlp, ..., seq
EPS = 1e-6  # config rms_norm_eps on both sides
EPS_BUG = 1e-5  # rms_eps: layer 1's input_layernorm.variance_epsilon on the npu side
EPS_TINY = 1.001e-6  # rms_eps_tiny: moves that norm's output by ~1e-6 relative (measured)


@dataclass(frozen=True)
class Run:
    """One side's configuration."""

    arch: str = "llama"  # llama | qwen2 | moe
    attn: str = "sdpa"  # attn_implementation
    bug: str = ""
    half: bool = False  # model.half() (fp16 weights and activations)

    def key(self) -> str:
        return f"{self.arch}-{self.attn}-{self.bug or 'clean'}-{'fp16' if self.half else 'fp32'}"


LLAMA, EAGER = Run(), Run(attn="eager")
# case -> (class, npu, bench, injected site (module path, api prefix at L1/mix) or None)
CASES: dict[str, tuple[str, Run, Run, tuple[str, str] | None]] = {
    "rerun": ("benign", LLAMA, LLAMA, None),
    "sdpa_vs_eager": ("benign", EAGER, LLAMA, None),
    "fp16_both": ("benign", Run(half=True), Run(half=True), None),
    "rms_eps": ("hyperparameter", Run(bug="rms_eps"), LLAMA,
                ("model.layers.1.input_layernorm", "Tensor.__add__.")),
    "rms_eps_tiny": ("hyperparameter", Run(bug="rms_eps_tiny"), LLAMA,
                     ("model.layers.1.input_layernorm", "Tensor.__add__.")),
    "residual_dropped": ("logic", Run(bug="residual_dropped"), LLAMA,
                         ("model.layers.1", "Tensor.pow.")),
    "act_gelu": ("module_class", Run(arch="qwen2", bug="act_gelu"), Run(arch="qwen2"),
                 ("model.layers.1.mlp.act_fn", "Functional.gelu.")),
    "wo_transposed": ("weights", Run(bug="wo_transposed"), LLAMA,
                      ("model.layers.1.self_attn.o_proj", "Functional.linear.")),
    "softmax_fp16": ("precision", Run(attn="eager", bug="softmax_fp16"), EAGER,
                     ("model.layers.0.self_attn", "Functional.softmax.")),
    "moe_no_renorm": ("logic", Run(arch="moe", bug="moe_no_renorm"), Run(arch="moe"),
                      ("model.layers.0.mlp.gate", "Tensor.__mul__.")),
    "eager_vs_sdpa_rms_eps": ("hyperparameter", Run(attn="eager", bug="rms_eps"), LLAMA,
                              ("model.layers.1.input_layernorm", "Tensor.__add__.")),
}
# how a bug's error first shows where that is not a call of the injected module itself
NOTES = {
    "residual_dropped": "the missing add leaves no node: the first npu call carrying the "
    "error is the next consumer, Tensor.pow in layers.1.post_attention_layernorm (Tensor.to to "
    "the same dtype is not dumped); the npu has one Tensor.__add__ less, so later "
    "Tensor.__add__ counters shift by one",
    "moe_no_renorm": "the dropped Tensor.sum and in-place division leave no npu node in the "
    "gate (topk's output is identical, Tensor.to is a no-op): at L0/mix the gate module's "
    "output is the first error, at L1 the experts' Tensor.__mul__ by the routing weights "
    "(model.layers.0.mlp.experts); the npu has fewer Tensor.sum calls (counter shift)",
    "rms_eps_tiny": "the norm's output moves ~1.4e-6 relative (max_rel_change_output); at "
    "L1/mix the eps also shows as Tensor.__add__'s scalar argument (1.001e-06 vs 1e-06)",
    "act_gelu": "npu GELUActivation / Functional.gelu where the bench has SiLUActivation / "
    "Functional.silu at the same path: the expected node has no same-named bench node",
    "eager_vs_sdpa_rms_eps": "npu eager vs bench sdpa: Tensor.__add__ counters differ between "
    "the sides (the eager mask add); expected is the npu's name",
}
# case -> levels in the committed subset (tests/data/zoo_tp): one case x level is 2-3.5 MB
# (both sides), so it holds one per class the diagnosis had wrong, and the benign counter shift
SUBSET: dict[str, tuple[str, ...]] = {
    "residual_dropped": ("L0",), "act_gelu": ("L1", "L0"), "rms_eps_tiny": ("L0",),
    "sdpa_vs_eager": ("L1",), "wo_transposed": ("L0",),
}


def build(r: Run) -> Any:
    """The model of `r`, seeded weights, bug applied (call in the forked child only)."""
    import types

    import torch
    import transformers as tf
    from transformers.activations import ACT2FN

    common: dict[str, Any] = dict(
        vocab_size=V, hidden_size=D, intermediate_size=FF, num_hidden_layers=NLAYER,
        num_attention_heads=NH, num_key_value_heads=NKV, max_position_embeddings=64,
        rms_norm_eps=EPS, tie_word_embeddings=False, attn_implementation=r.attn)
    if r.arch == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**common))
    elif r.arch == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**common))
    else:
        model = tf.Qwen2MoeForCausalLM(tf.Qwen2MoeConfig(
            **common, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=FF, decoder_sparse_step=1, mlp_only_layers=[],
            norm_topk_prob=r.bug != "moe_no_renorm", output_router_logits=False,
            experts_implementation="eager"))
    assert model.config._attn_implementation == r.attn, model.config._attn_implementation
    layer = model.model.layers[1]
    if r.bug == "rms_eps":
        layer.input_layernorm.variance_epsilon = EPS_BUG
    elif r.bug == "rms_eps_tiny":
        layer.input_layernorm.variance_epsilon = EPS_TINY
    elif r.bug == "residual_dropped":
        def no_residual(self: Any, hidden_states: torch.Tensor, attention_mask: Any = None,
                        position_ids: Any = None, cache: Any = None, use_cache: Any = False,
                        position_embeddings: Any = None, **kw: Any) -> torch.Tensor:
            # LlamaDecoderLayer.forward, same calls in the same order (kwargs order kept)
            h, _ = self.self_attn(
                hidden_states=self.input_layernorm(hidden_states),
                attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                use_cache=use_cache, position_embeddings=position_embeddings, **kw)
            # bug: `h = hidden_states + h` (the residual add after attention) is missing
            return h + self.mlp(self.post_attention_layernorm(h))
        layer.forward = types.MethodType(no_residual, layer)
    elif r.bug == "act_gelu":
        layer.mlp.act_fn = ACT2FN["gelu"]
    elif r.bug == "wo_transposed":
        with torch.no_grad():
            w = layer.self_attn.o_proj.weight
            w.copy_(w.t().clone())
    elif r.bug == "softmax_fp16":
        import transformers.models.llama.modeling_llama as ml
        ml.eager_attention_forward = eager_softmax_fp16
    elif r.bug and r.bug != "moe_no_renorm":
        raise ValueError(f"unknown bug {r.bug!r}")
    return model.half() if r.half else model


def eager_softmax_fp16(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
                       scaling: float, dropout: float = 0.0, **kwargs: Any) -> Any:
    """transformers' Llama `eager_attention_forward` with the softmax computed in fp16."""
    import torch
    from transformers.models.llama.modeling_llama import repeat_kv
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    w = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float16).to(query.dtype)  # bug
    w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
    out = torch.matmul(w, value_states).transpose(1, 2).contiguous()
    return out, w


def run(level: str, dump: str, r: Run) -> float:
    """One dumped training step (forward + backward of the labels loss); returns the loss."""
    import tempfile

    import torch
    from msprobe.pytorch import PrecisionDebugger
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
    cfg = {"task": "tensor", "level": level,
           "tensor": {"scope": [], "list": [], "data_mode": ["all"]},
           "dump_path": dump, "rank": [], "step": [], "async_dump": False}
    fd, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cfg, f)
    debugger = PrecisionDebugger(config_path=path)
    os.remove(path)
    torch.manual_seed(0)  # model built after the debugger, as msprobe's docs have it
    model = build(r)
    model.train()
    debugger.start(model)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    debugger.stop()
    debugger.step()
    return float(loss.item())


def spawn(level: str, dump: Path, r: Run) -> float:
    """One run in a forked child (torch, transformers and msprobe imported by the parent)."""
    line = run_forked(dump, lambda: {"loss": run(level, str(dump), r)}, f"{level} {r}")
    return float(json.loads(line)["loss"])


def node_names(dump: Path) -> list[str]:
    return list(json.loads((steps(dump)[0] / "dump.json").read_text())["data"])


def _kind(name: str) -> str:
    """A node name without its call counter: what two runs' calls are aligned on."""
    p = name.split(".")
    return ".".join(p[:-1] if name.startswith("Module.") else p[:-2] + p[-1:])


def aligned_first_diff(npu: Path, ref: Path) -> dict[str, Any] | None:
    """first_diff for node lists that differ: the calls are aligned by kind (difflib on
    the counter-less names, in dump.json order), the first npu node that has no partner or
    whose records differ from its partner's is returned (step 0 only)."""
    import difflib
    nd, rd = steps(npu)[0], steps(ref)[0]
    nj = json.loads((nd / "dump.json").read_text())["data"]
    rj = json.loads((rd / "dump.json").read_text())["data"]
    nn_, rn = list(nj), list(rj)
    sm = difflib.SequenceMatcher(None, [_kind(n) for n in nn_], [_kind(n) for n in rn],
                                 autojunk=False)
    pair: dict[str, str] = {}
    for tag, i1, i2, j1, _ in sm.get_opcodes():
        if tag == "equal":
            pair.update({nn_[i1 + k]: rn[j1 + k] for k in range(i2 - i1)})
    for name in nn_:
        other = pair.get(name)
        if other is None:
            return {"name": name, "step": 0, "max_abs_diff": None, "paired_with": None}
        same, worst = _same(nj[name], rj[other], nd, rd)
        if not same:
            return {"name": name, "step": 0, "paired_with": other,
                    "max_abs_diff": None if worst != worst else worst}
    return None


def rel_change(npu: Path, name: str, ref: Path, ref_name: str) -> float | None:
    """max |a - b| / max |b| over the output tensors of two nodes (step 0), None if none."""
    import torch
    nd, rd = steps(npu)[0], steps(ref)[0]
    na = json.loads((nd / "dump.json").read_text())["data"].get(name, {})
    ra = json.loads((rd / "dump.json").read_text())["data"].get(ref_name, {})
    worst = None
    for fa, fb in zip(_files(na.get("output")), _files(ra.get("output")), strict=False):
        a, b = _load(nd / "dump_tensor_data" / fa), _load(rd / "dump_tensor_data" / fb)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
            den = float(b.double().abs().max()) or 1.0
            r = float((a.double() - b.double()).abs().max()) / den
            worst = r if worst is None else max(worst, r)
    return worst


def truth_entry(case: str, level: str, out: Path, cached: dict[Run, Path]) -> dict[str, Any]:
    _, npu_run, bench_run, site = CASES[case]
    npu, bench = out / case / "npu" / level, out / case / "bench" / level
    nn_, bn = node_names(npu), node_names(bench)
    entry: dict[str, Any] = {"expected": None, "step": None, "detectable": False,
                             "same_nodes": same_nodes(npu, bench)}
    if nn_ != bn:
        entry["npu_only_nodes"] = len(set(nn_) - set(bn))
        entry["bench_only_nodes"] = len(set(bn) - set(nn_))
        entry["npu_only_sample"] = [n for n in nn_ if n not in set(bn)][:8]
        entry["bench_only_sample"] = [n for n in bn if n not in set(nn_)][:8]
    if site is None:
        entry["bit_identical"] = first_diff(npu, bench) is None
        return entry
    twin_run = replace(npu_run, bug="")
    if twin_run == bench_run:
        twin, how = bench, "first_diff(npu, bench): bench = the npu's configuration without the bug"
    else:
        twin = cached[twin_run]
        how = (f"first_diff(npu, twin run {twin_run.key()}): the bench's call structure differs "
               f"for another reason, so the truth is taken against a clean run with the npu's "
               f"structure (same node names as the npu), then checked against the injected site")
    if node_names(twin) == nn_:
        got = first_diff(npu, twin)
    else:
        got = aligned_first_diff(npu, twin)
        how += ("; node lists differ (the bug itself changes the calls): calls aligned by "
                "kind (counter-less names, difflib), first npu node without a partner or "
                "whose records differ from its partner's")
    if got is None:
        entry["note"] = "bug invisible at this level"
        return entry
    if got["name"].startswith("Module."):  # a module node at mix: the site module itself
        ok = ".".join(got["name"].split(".")[1:-3]) == site[0]
    else:
        ok = matches((0, site[0], site[1]), level, got, npu)
    if case in NOTES:
        entry["note"] = NOTES[case]
    entry.update(expected=got["name"], step=got["step"], detectable=True,
                 max_abs_diff=got["max_abs_diff"], matches_injection=ok, derived=how)
    entry.update({k: got[k] for k in ("first_differing_record", "paired_with") if got.get(k)})
    rec = got.get("first_differing_record", got["name"])
    rc = rel_change(npu, rec, twin, got.get("paired_with") or rec)
    if rc is not None:
        entry["max_rel_change_output"] = rc
    if got["name"] not in bn:
        entry["expected_in_bench"] = False
    if not ok:
        print(f"WARNING: {case} {level}: first diff {got} is not the injected site {site}")
    return entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".bench/zoo_tp")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--levels", default=",".join(LEVELS))
    ap.add_argument("--truth-only", action="store_true",
                    help="recompute truth.json from the existing dumps, run nothing")
    ap.add_argument("--export", help="copy the committed subset from --out to this dir")
    ap.add_argument("--export-cases", default=",".join(SUBSET))
    args = ap.parse_args()
    out = Path(args.out)
    if args.export:
        cases = [c for c in args.export_cases.split(",") if c]
        export_subset(out, Path(args.export), {c: SUBSET[c] for c in cases})
        return
    t0 = time.time()
    import torch
    import transformers  # imported once here, inherited by the forked runs
    from msprobe.pytorch import PrecisionDebugger  # noqa: F401
    cases = [c for c in args.cases.split(",") if c]
    levels = [lv for lv in args.levels.split(",") if lv]
    for c in cases:
        if c not in CASES:
            raise SystemExit(f"unknown case {c!r}")
    losses: dict[str, float] = {}
    for level in levels:
        cached: dict[Run, Path] = {}
        need = {CASES[c][2] for c in cases} | {replace(CASES[c][1], bug="") for c in cases
                                               if CASES[c][3] is not None}
        for r in sorted(need, key=Run.key):
            g = out / "_runs" / r.key() / level
            if args.truth_only and steps(g):
                cached[r] = g
                continue
            losses[f"{r.key()}/{level}"] = spawn(level, g, r)
            cached[r] = g
        for c in cases:
            klass, npu_run, bench_run, site = CASES[c]
            t1 = time.time()
            npu, bench = out / c / "npu" / level, out / c / "bench" / level
            if not args.truth_only:
                if bench.exists():
                    shutil.rmtree(bench)
                shutil.copytree(cached[bench_run], bench)
                losses[f"{c}/npu/{level}"] = spawn(level, npu, npu_run)
            tpath = out / c / "truth.json"
            truth: dict[str, Any] = {
                "case": c, "class": klass, "benign": site is None, "flags": [],
                "npu_precision": "fp16" if npu_run.half else "fp32",
                "bench_precision": "fp16" if bench_run.half else "fp32",
                "injected": None if site is None else
                {"step": 0, "module": site[0], "api": site[1]},
                "npu_run": asdict(npu_run), "bench_run": asdict(bench_run),
                "versions": {"torch": torch.__version__,
                             "transformers": transformers.__version__,
                             "mindstudio-probe": version("mindstudio-probe")},
                "levels": {}}
            if tpath.is_file():
                truth["levels"].update(json.loads(tpath.read_text()).get("levels", {}))
            entry = truth_entry(c, level, out, cached)
            truth["levels"][level] = entry
            tpath.write_text(json.dumps(truth, indent=1) + "\n")
            print(f"{c:24s} {level:4s} {entry.get('expected')} "
                  f"match={entry.get('matches_injection')} ({time.time() - t1:.0f}s)", flush=True)
    if losses:
        (out / "losses.json").write_text(json.dumps(losses, indent=1) + "\n")
    print(f"generated in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
