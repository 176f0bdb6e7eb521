"""Copy a zoo's committed subset (both sides, step 0, the chosen levels, truth) to tests/data."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path


def export_subset(out: Path, dest: Path, subset: Mapping[str, Sequence[str]]) -> None:
    """``subset``: case -> levels. Truth keeps only those levels; step 0 of each side."""
    for case, levels in subset.items():
        truth = json.loads((out / case / "truth.json").read_text())
        truth["levels"] = {lv: t for lv, t in truth["levels"].items() if lv in levels}
        for lv in levels:
            for side in ("npu", "bench"):
                dst = dest / case / side / lv
                if dst.exists():
                    shutil.rmtree(dst)
                shutil.copytree(out / case / side / lv / "step0", dst / "step0")
        (dest / case / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
