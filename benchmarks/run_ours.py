"""One timed run of pytest_accuracy's compare, as a child process of bench_compare.py.

  python benchmarks/run_ours.py NPU_DIR BENCH_DIR [--profile OUT.prof] [--root CHECKOUT]
                                [--no-local-error]

Does what a user of the plugin pays for: import, read both dumps (metadata), compute every
node (``Comparison.results()``, tensors loaded lazily) and ``find_first_divergence``. Prints
one JSON line: node count, status counts, the first divergence and per-phase seconds. The
parent measures wall time and peak RSS of this whole process, start-up included.
"""

from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


def _root_from_argv() -> Path:
    """--root PATH (a checkout holding pytest_accuracy/), default: this repo."""
    if "--root" in sys.argv[:-1]:
        return Path(sys.argv[sys.argv.index("--root") + 1]).resolve()
    return Path(__file__).resolve().parent.parent


# Ahead of any installed (editable) pytest_accuracy, so the checkout under test is imported.
sys.path.insert(0, str(_root_from_argv()))


def _without_local_error() -> None:
    """Every node's float64 replay skipped (as if no reference existed): what the diagnosis'
    replays cost, by difference. Verdicts may change; for timing only."""
    from pytest_accuracy.compare import engine

    engine.local_error = lambda *args, **kwargs: "not replayed (--no-local-error)"


def compare(npu: str, bench: str, inputs: str | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    from pytest_accuracy.compare import Comparison
    from pytest_accuracy.compare.divergence import find_first_divergence
    from pytest_accuracy.dumps.layout import load_dumps

    t1 = time.perf_counter()
    # inputs="all" = every tensor compared, like msprobe's full table (newer API only)
    kwargs: dict[str, Any] = {"inputs": inputs} if inputs else {}
    cmp = Comparison(load_dumps(npu), load_dumps(bench), **kwargs)
    t2 = time.perf_counter()
    results = cmp.results()
    t3 = time.perf_counter()
    fd = find_first_divergence(cmp)
    t4 = time.perf_counter()
    return {
        "nodes": len(results),
        "tensors": sum(len(r.inputs) + len(r.outputs) for r in results),
        "status": dict(Counter(r.status for r in results)),
        "first_divergence": fd.npu_name if fd else None,
        "first_divergence_tensor": fd.tensor if fd else None,
        "seconds": {
            "import": round(t1 - t0, 4),
            "load_dumps": round(t2 - t1, 4),
            "results": round(t3 - t2, 4),
            "first_divergence": round(t4 - t3, 4),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description="one run of pytest_accuracy's compare")
    ap.add_argument("npu")
    ap.add_argument("bench")
    ap.add_argument("--profile", help="write a cProfile of the compare (not of start-up) here")
    ap.add_argument("--inputs", help="Comparison(inputs=...): all | failing (default: API's)")
    ap.add_argument("--root", help="checkout whose pytest_accuracy to import (default: this repo)")
    ap.add_argument("--no-local-error", action="store_true",
                    help="skip the diagnosis' float64 replays (timing their share only)")
    args = ap.parse_args()
    if args.no_local_error:
        _without_local_error()
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        out = prof.runcall(compare, args.npu, args.bench, args.inputs)
        prof.dump_stats(args.profile)
    else:
        out = compare(args.npu, args.bench, args.inputs)
    import pytest_accuracy

    out["package"] = str(Path(pytest_accuracy.__file__).parent)
    out["seconds"]["in_process_total"] = round(time.perf_counter() - T_START, 4)
    out["self_maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
