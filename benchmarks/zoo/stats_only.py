"""Copy a tensor dump's JSON files as the statistics dump of the same run (no .npy data).

msprobe writes each tensor's Max, Min, Mean and Norm into dump.json at task ``tensor`` too;
dropping the ``data_name`` keys and naming the task ``statistics`` leaves what the same run
dumped at task ``statistics`` would hold: small enough to ship as test data.

    python benchmarks/zoo/stats_only.py SRC_STEP_DIR DEST_STEP_DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any


def strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "data_name"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def convert(src: Path, dest: Path) -> None:
    for rank in sorted(p for p in src.iterdir() if p.is_dir()):
        out = dest / rank.name
        out.mkdir(parents=True, exist_ok=True)
        dump = json.loads((rank / "dump.json").read_text())
        dump = strip(dump)
        dump["task"], dump["dump_data_dir"] = "statistics", None
        (out / "dump.json").write_text(json.dumps(dump, indent=1))
        if (rank / "construct.json").is_file():  # stack.json left out: only messages use it
            shutil.copyfile(rank / "construct.json", out / "construct.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path, help="a step folder of a tensor dump (holds rank folders)")
    ap.add_argument("dest", type=Path)
    args = ap.parse_args()
    convert(args.src, args.dest)


if __name__ == "__main__":
    main()
