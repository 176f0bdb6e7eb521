"""Generate an msprobe-layout dump pair with many nodes (a 7B-class L1 step), without torch.

  python benchmarks/make_many_nodes.py --out DIR [--nodes 50000] [--task statistics|tensor]
                                       [--numel 64] [--fail-from 0.5] [--ranks 1]

Writes ``DIR/npu/step0/rank<r>/`` and ``DIR/bench/step0/rank<r>/`` (dump.json, stack.json,
construct.json; with ``--task tensor`` one float32 ``.pt`` file per tensor in
``dump_tensor_data/``, written as torch.save writes a single tensor: a stored zip holding
data.pkl, byteorder and data/0). Node names follow a Llama-style decoder layer's PyTorch API
calls (forward, then backward in reverse), repeated over layers and micro-batches until
``--nodes`` is reached. From the node at ``--fail-from`` (a fraction) on, the NPU side's
values are scaled by 1.02, so that every later node fails: the run then has thousands of
failed items. Statistics and tensors agree with each other on each side.
"""

from __future__ import annotations

import argparse
import io
import json
import struct
import zipfile
from pathlib import Path

import numpy as np

LAYER_FORWARD = (
    "Tensor.pow", "Tensor.mean", "Tensor.__add__", "Torch.rsqrt", "Tensor.__mul__",
    "Tensor.__mul__", "Functional.linear", "Functional.linear", "Functional.linear",
    "Tensor.view", "Tensor.view", "Tensor.view", "Tensor.transpose", "Tensor.transpose",
    "Tensor.transpose", "Tensor.__mul__", "Tensor.__mul__", "Torch.cat", "Tensor.__add__",
    "Tensor.__mul__", "Tensor.__mul__", "Torch.cat", "Tensor.__add__",
    "Functional.scaled_dot_product_attention", "Tensor.transpose", "Tensor.reshape",
    "Functional.linear", "Tensor.__add__", "Tensor.pow", "Tensor.mean", "Tensor.__add__",
    "Torch.rsqrt", "Tensor.__mul__", "Tensor.__mul__", "Functional.linear",
    "Functional.linear", "Functional.silu", "Tensor.__mul__", "Functional.linear",
    "Tensor.__add__",
)


def node_names(count: int) -> list[str]:
    """``count`` node names in execution order, each API numbered by its call count."""
    calls: dict[str, int] = {}
    names: list[str] = []
    while len(names) < count:  # one micro-batch of 32 layers per round
        forward: list[str] = []
        for _layer in range(32):
            for api in LAYER_FORWARD:
                forward.append(f"{api}.{calls.get(api, 0)}")
                calls[api] = calls.get(api, 0) + 1
        names += [f"{n}.forward" for n in forward]
        names += [f"{n}.backward" for n in reversed(forward)]
    return names[:count]


def pt_bytes(values: np.ndarray, name: str) -> bytes:
    """A torch.save file of one contiguous float32 tensor (what torch 2.x writes for it)."""
    shape = values.shape
    pkl = b"".join([
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00((X\x07\x00\x00\x00storageq\x01",
        b"ctorch\nFloatStorage\nq\x02X\x01\x00\x00\x000q\x03X\x03\x00\x00\x00cpuq\x04",
        b"J" + struct.pack("<i", values.size), b"tq\x05QK\x00(",
        b"".join(b"J" + struct.pack("<i", d) for d in shape), b"t(",
        b"".join(b"J" + struct.pack("<i", s // 4) for s in values.strides), b"t",
        b"\x89ccollections\nOrderedDict\n)Rtq\x06Rq\x07.",
    ])
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{name}/data.pkl", pkl)
        archive.writestr(f"{name}/byteorder", "little")
        archive.writestr(f"{name}/data/0", values.astype("<f4").tobytes())
        archive.writestr(f"{name}/version", "3\n")
    return out.getvalue()


def tensor_entry(values: np.ndarray, data_name: str | None) -> dict[str, object]:
    v = values.astype(np.float64)
    entry: dict[str, object] = {
        "type": "torch.Tensor", "dtype": "torch.float32", "shape": list(values.shape),
        "Max": float(v.max()), "Min": float(v.min()), "Mean": float(v.mean()),
        "Norm": float(np.sqrt((v * v).sum())), "requires_grad": True,
    }
    if data_name:
        entry["data_name"] = data_name
    return entry


def write_side(root: Path, names: list[str], args: argparse.Namespace, scale_from: int,
               scale: float, rank_id: int = 0) -> None:
    rank = root / "step0" / f"rank{rank_id}"
    data_dir = rank / "dump_tensor_data"
    data_dir.mkdir(parents=True, exist_ok=True)
    # the same values on both sides, before scaling; each rank its own (data parallelism)
    rng = np.random.default_rng(1234 + rank_id)
    tensor = args.task == "tensor"
    data: dict[str, object] = {}
    for i, name in enumerate(names):
        record: dict[str, object] = {}
        for role, key in (("input", "input_args"), ("output", "output")):
            values = rng.standard_normal(args.numel).astype(np.float32)
            if (i >= scale_from and role == "output") or i > scale_from:
                values = values * np.float32(scale)
            if scale != 1.0:  # the NPU run: one ulp off, as another kernel rounds (a pair
                # of bit-identical files is one run given twice, which the gate refuses)
                values = np.nextafter(values, np.float32(np.inf))
            file = f"{name}.{role}.0.pt" if tensor else None
            if file:
                (data_dir / file).write_bytes(pt_bytes(values, file[:-3]))
            record[key] = [tensor_entry(values, file)]
        data[name] = record
    doc = {"task": args.task, "level": "L1", "framework": "pytorch",
           "dump_data_dir": str(data_dir) if tensor else None, "data": data}
    (rank / "dump.json").write_text(json.dumps(doc))
    stack = {str(i): [[n], [f"File model.py, line {10 + i % 40}, in forward"]]
             for i, n in enumerate(names)}
    (rank / "stack.json").write_text(json.dumps(stack))
    (rank / "construct.json").write_text(json.dumps(dict.fromkeys(names)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--nodes", type=int, default=50_000)
    ap.add_argument("--task", choices=["statistics", "tensor"], default="statistics")
    ap.add_argument("--numel", type=int, default=64, help="elements per tensor (float32)")
    ap.add_argument("--fail-from", type=float, default=0.5, help="fraction; 1 = no failure")
    ap.add_argument("--ranks", type=int, default=1, help="ranks of one step, values apart")
    args = ap.parse_args()
    names = node_names(args.nodes)
    scale_from = int(args.fail_from * args.nodes)
    for rank_id in range(args.ranks):
        write_side(args.out / "bench", names, args, len(names) + 1, 1.0, rank_id)
        write_side(args.out / "npu", names, args, scale_from, 1.02, rank_id)
    pair_mb = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file()) / 2**20
    print(json.dumps({"nodes": len(names), "task": args.task, "pair_mb": round(pair_mb, 1),
                      "npu": str(args.out / "npu"), "bench": str(args.out / "bench")}))


if __name__ == "__main__":
    main()
