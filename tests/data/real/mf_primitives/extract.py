"""Copy a few MindSpore primitive calls (forward and backward, with their tensors) out of the
MindFormers zoo's clean L1 tensor dump: python extract.py SRC_STEP_DIR DEST_DIR."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

NODES = ["Primitive.square.Square.0", "Primitive.mean.ReduceMean.0", "Primitive.add.Add.0",
         "Primitive.rsqrt.Rsqrt.0", "Primitive.mul.Mul.0", "Primitive.matmul.MatMul.0",
         "Primitive.sub.Sub.0", "Primitive.silu.SiLU.0"]


def files(entry: object) -> list[str]:
    if isinstance(entry, dict):
        own = [entry["data_name"]] if isinstance(entry.get("data_name"), str) else []
        return own + [f for v in entry.values() for f in files(v)]
    if isinstance(entry, list):
        return [f for v in entry for f in files(v)]
    return []


def main(src: Path, dest: Path) -> None:
    proc = next(src.glob("proc*"))
    doc = json.loads((proc / "dump.json").read_text())
    data = {f"{n}.{d}": doc["data"][f"{n}.{d}"] for n in NODES for d in ("forward", "backward")}
    out = dest / "step0" / proc.name
    (out / "dump_tensor_data").mkdir(parents=True, exist_ok=True)
    for name in files(data):
        shutil.copy(proc / "dump_tensor_data" / name, out / "dump_tensor_data" / name)
    doc["data"] = data
    doc["dump_data_dir"] = None
    (out / "dump.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
