"""The floor of a compare: read every paired tensor once, one float64 pass of every metric's sums.

  python benchmarks/floor_compare.py NPU_STEP_DIR BENCH_STEP_DIR

What no compare of these two dumps can avoid, done as plainly as numpy allows: parse both
dump.json files, pair every tensor record by (node, position) as msprobe's full table does,
compare the statistics of records without a data file in one vectorized pass, read each
paired ``.pt`` file once (its storage member found from the zip's local headers,
no zipfile object), and fold each pair in 64k-element float64 chunks into the four sums
n.n, b.b, n.b, d.d (one BLAS thread). Prints one JSON line: pairs, bytes, seconds.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # "one thread": no BLAS threads

import json
import struct
import sys
import time
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

CHUNK = 1 << 16
EOCD = struct.Struct("<4s6xHIIH")  # end of central directory: entries, size, offset, comment
CENTRAL = struct.Struct("<4s16xIIHHH8xI")  # sizes, name/extra/comment lengths, local offset
LOCAL = struct.Struct("<26xHH")  # name and extra lengths of a local header
DTYPES = {"torch.float32": np.float32, "torch.float16": np.float16, "torch.float64": np.float64,
          "torch.bfloat16": ml_dtypes.bfloat16, "torch.int64": np.int64, "torch.int32": np.int32,
          "torch.bool": np.bool_, "torch.uint8": np.uint8, "torch.int8": np.int8}


def records(node: Any, path: str, out: dict[str, dict[str, Any]]) -> None:
    """Every tensor record under a node's JSON, keyed by its position."""
    if isinstance(node, dict):
        if "dtype" in node and ("data_name" in node or "Max" in node):
            out[path] = node
            return
        for key, value in node.items():
            records(value, f"{path}.{key}", out)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            records(value, f"{path}.{i}", out)


def dump_dir(step_dir: Path) -> Path:
    return next(p for p in sorted(step_dir.iterdir()) if (p / "dump.json").is_file())


def storage(path: Path, dtype: Any) -> np.ndarray:
    """The .pt file's data/0 member, found from the zip's central directory (no comment)."""
    data = path.read_bytes()
    _, entries, _, at, _ = EOCD.unpack_from(data, len(data) - EOCD.size)
    for _ in range(entries):
        _, _, size, name_len, extra_len, comment_len, local = CENTRAL.unpack_from(data, at)
        name = data[at + CENTRAL.size : at + CENTRAL.size + name_len]
        at += CENTRAL.size + name_len + extra_len + comment_len
        if name.endswith(b"/data/0"):
            skip = sum(LOCAL.unpack_from(data, local))
            start = local + 30 + skip
            count = size // np.dtype(dtype).itemsize
            return np.frombuffer(data, dtype=dtype, count=count, offset=start)
    raise SystemExit(f"{path}: no data/0 member")


def fold(n: np.ndarray, b: np.ndarray) -> list[float]:
    sums = [0.0, 0.0, 0.0, 0.0]
    for s in range(0, min(n.size, b.size), CHUNK):
        x = n[s : s + CHUNK].astype(np.float64)
        y = b[s : s + CHUNK].astype(np.float64)
        d = x - y
        sums[0] += float(np.dot(x, x))
        sums[1] += float(np.dot(y, y))
        sums[2] += float(np.dot(x, y))
        sums[3] += float(np.dot(d, d))
    return sums


STATS = ("Max", "Min", "Mean", "Norm")


def compare_stats(rows: list[list[Any]]) -> np.ndarray:
    """One vectorized pass over every statistics pair: each statistic's relative error
    (NPU minus bench over the bench's magnitude), the worst per pair."""
    table = np.array(rows, dtype=np.float64)  # None -> NaN
    npu, bench = table[:, :4], table[:, 4:]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(npu - bench) / np.abs(bench)
    return np.nanmax(rel, axis=1)


def main() -> None:
    t0 = time.perf_counter()
    sides = [dump_dir(Path(a)) for a in sys.argv[1:3]]
    docs = [json.loads((d / "dump.json").read_text())["data"] for d in sides]
    pairs = nbytes = 0
    stats: list[list[Any]] = []
    for name, node in docs[0].items():
        other = docs[1].get(name)
        if other is None:
            continue
        mine: dict[str, dict[str, Any]] = {}
        theirs: dict[str, dict[str, Any]] = {}
        records(node, name, mine)
        records(other, name, theirs)
        for key, rec in mine.items():
            if key not in theirs:
                continue
            if "data_name" not in rec:  # a statistics record: compared below, all at once
                stats.append([rec.get(k) for k in STATS] + [theirs[key].get(k) for k in STATS])
                continue
            arrays = [storage(side / "dump_tensor_data" / r["data_name"], DTYPES[r["dtype"]])
                      for side, r in zip(sides, (rec, theirs[key]), strict=True)]
            fold(arrays[0], arrays[1])
            pairs += 1
            nbytes += arrays[0].nbytes + arrays[1].nbytes
    if stats:
        compare_stats(stats)
        pairs += len(stats)
    print(json.dumps({"pairs": pairs, "mb": round(nbytes / 2**20, 1),
                      "seconds": round(time.perf_counter() - t0, 3)}))


if __name__ == "__main__":
    main()
