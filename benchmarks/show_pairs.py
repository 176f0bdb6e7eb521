"""How one (step, rank) of two dumps pairs: each NPU forward call, its bench partner, why."""
from __future__ import annotations

import argparse

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.pairing.anchors import is_identity
from pytest_accuracy.pairing.runs import pair_runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("npu")
    ap.add_argument("bench")
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--all", action="store_true", help="backward calls too")
    args = ap.parse_args()
    key = (args.step, 0)
    npu, bench = load_dumps(args.npu).dumps[key], load_dumps(args.bench).dumps[key]
    res = pair_runs(npu, bench)
    print("why aligned:", res.why_aligned or "-", "| by name:", res.by_name)
    for c in npu.calls:
        if c.direction != "forward" and not args.all:
            continue
        other = res.pairs.get(c.name)
        ev = res.evidence.get(c.name, "")
        mark = "=" if is_identity(c) else " "
        shape = c.output_tensors[0].shape if c.output_tensors else ()
        print(f"{mark} {c.name:50s} {shape!s:16s} -> {other or '-':50s} {ev[:90]}")


if __name__ == "__main__":
    main()
