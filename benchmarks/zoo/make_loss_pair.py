"""A benign cross-codebase pair whose loss code differs (issue 36, class 6).

The NPU codebase (TransformerLens, as in make_cross_zoo.py) takes the loss over the S-1 real
target positions (logits sliced); the bench (transformers' Llama) over all S positions with
the last target set to ignore_index -100. Same weights, same inputs: the loss and every
gradient agree, while the loss calls' shapes differ. Ground truth: benign.

    /work/bench/tlvenv/bin/python benchmarks/zoo/make_loss_pair.py --out /work/bench/cross_loss
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_cross_zoo as zoo  # noqa: E402


def bench_loss(m: Any, ids: Any) -> Any:
    """transformers' way with a padded last position: ignore_index -100 there."""
    import torch.nn.functional as F
    target = ids[:, 1:].clone()
    target[:, -1] = -100
    logits = zoo.hf_logits(m, ids[:, :-1])
    return F.cross_entropy(logits.float().reshape(-1, zoo.V), target.reshape(-1),
                           ignore_index=-100)


def npu_loss(model: Any, ids: Any) -> Any:
    """TransformerLens' log_softmax/gather/mean over the real positions only (sliced)."""
    import torch.nn.functional as F
    inp, target = ids[:, :-1], ids[:, 1:]
    out = model(inp, return_type="logits")[:, :-1]
    log_probs = F.log_softmax(out, dim=-1)
    return -log_probs.gather(dim=-1, index=target[:, :-1, None])[..., 0].mean()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/work/bench/cross_loss"))
    ap.add_argument("--levels", default=",".join(zoo.LEVELS))
    args = ap.parse_args()
    import cross_tl
    import torch  # noqa: F401 - imported once here, inherited by the forked runs
    from msprobe.pytorch import PrecisionDebugger  # noqa: F401
    adapter = SimpleNamespace(NAME="tl", build=cross_tl.build, loss=npu_loss, BUGS={},
                              logits=cross_tl.logits)
    zoo.hf_loss = bench_loss
    case = args.out / "tl_loss_positions"
    losses = {}
    for level in [lv for lv in args.levels.split(",") if lv]:
        losses[f"bench {level}"] = zoo.spawn("bench", None, level, case / "bench" / level, False)
        losses[f"npu {level}"] = zoo.spawn("npu", adapter, level, case / "npu" / level, False)
        print(level, losses[f"bench {level}"], losses[f"npu {level}"], flush=True)
    truth = {"case": case.name, "class": "benign", "benign": True, "flags": [],
             "npu_precision": "fp32", "bench_precision": "fp32",
             "codebases": {"npu": "tl (loss over the S-1 real positions)",
                           "bench": "hf (loss over S positions, the last ignored)"},
             "losses": losses, "levels": {}}
    (case / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
