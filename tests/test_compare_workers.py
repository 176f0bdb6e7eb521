"""The compare reads tensors in threads only where tensors are big enough to wait on, and
its threads change no result."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_accuracy.compare import Comparison
from pytest_accuracy.compare import workers as workers_module
from pytest_accuracy.compare.workers import default_workers
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.model import Call, Dump, DumpSet, Stats, TensorRecord
from tests.helpers import dump


def _run(shape: tuple[int, ...], dtype: str, mode: str = "tensor") -> DumpSet:
    out = TensorRecord("output.0", "output", dtype, dtype, shape, Stats(), data_name="a.pt",
                       data_root=Path("/nonexistent"))
    call = Call("Torch.add.0.forward", "api", "forward", 0, outputs=[out])
    one = Dump(path=Path("dump.json"), framework="pytorch", level="L1", mode=mode,  # type: ignore[arg-type]
               step=0, rank=0, calls=[call])
    return DumpSet(root=Path("."), dumps={(0, 0): one})


def test_threads_only_for_big_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers_module.os, "cpu_count", lambda: 8)
    big, small = _run((512, 256), "float32"), _run((256, 256), "bfloat16")  # 512 KB, 128 KB
    assert default_workers(big, big) == 4
    assert default_workers(small, small) == 4  # the threshold itself: 128 KB
    assert default_workers(_run((255, 256), "bfloat16"), big) == 1  # the NPU run's tensors
    assert default_workers(_run((64,), "float32", "statistics"), big) == 4  # the tensor side
    assert default_workers(_run((512, 256), "float32", "statistics"),
                           _run((512, 256), "float32", "md5")) == 1
    monkeypatch.setattr(workers_module.os, "cpu_count", lambda: None)
    assert default_workers(big, big) == 1
    # the bundled tensor dumps are a few KB a tensor: one thread
    pair = load_dumps(dump("pt_bug", "L1_tensor")), load_dumps(dump("pt_fp32", "L1_tensor"))
    assert default_workers(*pair) == 1


@pytest.mark.parametrize(("npu", "config"), [("pt_bug", "L1_tensor"), ("pt_bf16", "L1_tensor"),
                                             ("pt_bug", "L0_tensor")])
def test_threads_change_no_result(npu: str, config: str) -> None:
    def results(workers: int) -> list[str]:
        cmp = Comparison(load_dumps(dump(npu, config)), load_dumps(dump("pt_fp32", config)),
                         workers=workers)
        try:
            return [repr((r.status, r.reason, r.carried_from,
                          [(t.path, t.metrics) for t in (*r.inputs, *r.outputs)]))
                    for r in cmp.results()]
        finally:
            cmp.close()

    one, threaded = results(1), results(3)
    assert threaded == one and any("'fail'" in r for r in one)
