"""How many threads a compare reads tensors in, and BLAS's one thread under them."""

from __future__ import annotations

import math
import os

from pytest_accuracy.dumps.model import DumpSet

_BLAS_LIMITED: list[object] = []


def one_blas_thread() -> None:
    """Nodes run in our own threads (and xdist workers): BLAS threads on top of them spin
    against each other; on 2 busy cores the float64 replays ran 4x slower (28 s vs 7 s on the
    626 MB pair). Limited once per process, for the rest of it."""
    if not _BLAS_LIMITED:
        from threadpoolctl import threadpool_limits

        _BLAS_LIMITED.append(threadpool_limits(limits=1, user_api="blas"))


# Below this mean size a tensor's compare is mostly Python (the GIL's), not I/O or numpy, and
# reading threads only contend for the GIL. Measured on a 2-core box: 10k nodes of 16 KB
# tensors took 4.3 s in one thread, 8.1-9.0 s in two (warm page cache; 10-11 s both cold);
# ~600 KB tensors 1.55 vs 1.77 s warm, but cold 3.9-4.3 vs 2.8-3.2 s: threads pay there.
_THREADS_FROM_BYTES = 128 * 1024
_ITEM_BYTES = {"float64": 8, "int64": 8, "complex64": 8, "complex128": 16, "float32": 4,
               "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2}


def default_workers(npu: DumpSet, bench: DumpSet) -> int:
    """Threads read tensors ahead where tensors are big enough to wait on; without tensor files
    (statistics, md5) there is nothing to wait on, and handing each node to a thread cost more
    than its compare (2 s of 20k nodes)."""
    if npu.mode != "tensor" and bench.mode != "tensor":
        return 1
    if _mean_tensor_bytes(npu if npu.mode == "tensor" else bench) < _THREADS_FROM_BYTES:
        return 1
    return min(4, os.cpu_count() or 1)


def _mean_tensor_bytes(dumps: DumpSet) -> float:
    """The mean size of the output tensors that have data files, from their shapes."""
    total = count = 0
    for dump in dumps:
        for call in dump.calls:
            for record in call.output_tensors:
                if record.data_name:
                    total += math.prod(record.shape) * _ITEM_BYTES.get(record.dtype, 1)
                    count += 1
    return total / count if count else 0.0
