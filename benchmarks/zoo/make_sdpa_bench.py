"""Re-pair a cross-codebase zoo against a fused-attention bench (issue 36, class 7).

The bench of make_cross_zoo.py runs transformers' eager attention (matmul, mask, softmax,
matmul), as the NPU codebases do. This script dumps the same bench with
``attn_implementation="sdpa"`` (one ``scaled_dot_product_attention`` call) and writes a new
zoo whose cases are the source zoo's NPU dumps and truth (copied: the truth is the NPU
codebase's own first differing node, whatever the bench) against that bench:

    /work/bench/genvenv/bin/python benchmarks/zoo/make_sdpa_bench.py \
        --src /work/bench/cross --out /work/bench/cross_sdpa \
        --cases xt_clean,xt_attn_scale,xt_softmax_fp16,xt_mask_shift,tl_clean,tl_attn_scale,...
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_cross_zoo as zoo  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=Path("/work/bench/cross"))
    ap.add_argument("--out", type=Path, default=Path("/work/bench/cross_sdpa"))
    ap.add_argument("--cases", required=True, help="comma-separated case names of --src")
    ap.add_argument("--levels", default=",".join(zoo.LEVELS))
    args = ap.parse_args()
    import torch  # noqa: F401 - imported once here, inherited by the forked runs
    from msprobe.pytorch import PrecisionDebugger  # noqa: F401

    zoo.ATTN = "sdpa"
    levels = [lv for lv in args.levels.split(",") if lv]
    for level in levels:
        golden = args.out / "_golden" / "hf_sdpa" / "fp32" / level
        losses = zoo.spawn("bench", None, level, golden, False)
        print(f"golden hf sdpa {level} losses {losses}", flush=True)
    for case in [c for c in args.cases.split(",") if c]:
        truth = json.loads((args.src / case / "truth.json").read_text())
        if truth["npu_precision"] != "fp32":
            raise SystemExit(f"{case}: only fp32 cases have an fp32 sdpa bench")
        truth["codebases"]["bench"] = "hf (attn_implementation=sdpa)"
        for level in levels:
            zoo.copy(args.src / case / "npu" / level, args.out / case / "npu" / level)
            zoo.copy(args.out / "_golden" / "hf_sdpa" / "fp32" / level,
                     args.out / case / "bench" / level)
        (args.out / case / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        print(f"{case}: paired with the sdpa bench", flush=True)
    shutil.rmtree(args.out / "_golden" / "hf_sdpa" / "tmp", ignore_errors=True)


if __name__ == "__main__":
    main()
