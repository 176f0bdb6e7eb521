"""MindSpore primitives (MindFormers calls ``ops`` primitives) replayed through the one
canonical MS -> PT table: the forward of those whose recorded inputs bind in PyTorch's order,
never a primitive whose dump leaves out attributes, never a primitive's backward."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pytest_accuracy.compare.local import replayer
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.precheck.registry import resolve
from pytest_accuracy.precheck.runner import PRIMITIVE_GRADS, plan, run_case

# Real msprobe 26.2.0 dump of MindFormers' GLM on MindSpore 2.10 CPU (extract.py, README.md).
DUMP = Path(__file__).resolve().parent / "data" / "real" / "mf_primitives"
REPLAYED = ["Square", "Add", "Rsqrt", "Mul", "Sub", "SiLU"]


def _results(path: Path) -> dict[str, tuple[str, str]]:
    return {r.name: (r.status, r.reason) for r in map(run_case, plan(load_dumps(path)))}


def test_clean_primitives_forward_replayed_and_pass() -> None:
    results = _results(DUMP)
    forward = {n.split(".")[2]: v for n, v in results.items() if n.endswith("forward")}
    assert {cls for cls, (status, _) in forward.items() if status == "pass"} == set(REPLAYED)
    for cls in ("ReduceMean", "MatMul"):  # axis / keep_dims, transpose_b: not recorded
        status, message = forward[cls]
        assert status == "skip" and "attributes that change its math" in message
    backward = {n.split(".")[2]: v for n, v in results.items() if n.endswith("backward")}
    assert {cls for cls, v in backward.items() if v == ("skip", PRIMITIVE_GRADS)} == set(REPLAYED)
    assert all(backward[cls][0] == "skip" for cls in ("ReduceMean", "MatMul"))


def test_a_wrong_primitive_output_fails_that_primitive(tmp_path: Path) -> None:
    root = tmp_path / "dump"
    shutil.copytree(DUMP, root)
    proc = next((root / "step0").glob("proc*"))
    doc = json.loads((proc / "dump.json").read_text())
    name = doc["data"]["Primitive.rsqrt.Rsqrt.0.forward"]["output"][0]["data_name"]
    out = proc / "dump_tensor_data" / name
    np.save(out, np.load(out) * np.float32(1.001))
    results = _results(root)
    failed = sorted(n for n, (status, _) in results.items() if status == "fail")
    assert failed == ["Primitive.rsqrt.Rsqrt.0.forward"]


@pytest.mark.parametrize(
    ("name", "op"),
    [("Primitive.add.Add", "add"), ("Primitive.div2.RealDiv", "div"),
     ("Primitive.silu.SiLU", "silu"), ("Primitive.matmul.MatMul", None),
     ("Primitive.softmax.Softmax", None), ("Primitive.gather.Gather", None)],
)  # fmt: skip
def test_primitives_resolve_through_the_canonical_table(name: str, op: str | None) -> None:
    spec = resolve("mindspore", name)
    assert (spec.op if spec else None) == op
    assert resolve("pytorch", name) is None  # a PyTorch dump has no primitives


def test_compare_replays_a_primitive_for_its_own_error() -> None:
    dump = next(iter(load_dumps(DUMP)))
    assert replayer(dump.get("Primitive.mul.Mul.0.forward"), "mindspore") is not None
    assert replayer(dump.get("Primitive.matmul.MatMul.0.forward"), "mindspore") is None
