"""What the msprobe reader fixes once per call (tensor inputs and outputs, the dtype signature)
is what the properties compute from scratch, and the shortcuts the compare takes on it decide
as the full functions do: on real dumps of both frameworks, bf16 and fp32."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_accuracy.compare import Comparison
from pytest_accuracy.compare.criteria import CompareCriteria, less_precise
from pytest_accuracy.compare.judge import records_of
from pytest_accuracy.compare.provenance import node_findings
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.model import Call
from pytest_accuracy.pairing.runs import pair_runs
from tests.helpers import dump

_PAIRS = [("pt_bf16", "L1_tensor", "pt_fp32"), ("ms_fp32", "mix_statistics", "pt_fp32"),
          ("pt_bug", "mix_statistics", "pt_fp32")]


def _fresh(call: Call) -> Call:
    """The same call with nothing fixed: every property computed from inputs and outputs."""
    return dataclasses.replace(call, fixed_inputs=None, fixed_outputs=None,
                               fixed_signature=None)


@pytest.mark.parametrize(("npu", "config", "bench"), _PAIRS)
def test_fixed_facts_are_the_computed_ones(npu: str, config: str, bench: str) -> None:
    calls = [c for d in load_dumps(dump(npu, config)) for c in d.calls]
    assert all(c.fixed_signature is not None for c in calls)
    for call in calls:
        fresh = _fresh(call)
        assert call.input_tensors == fresh.input_tensors
        assert call.output_tensors == fresh.output_tensors
        assert call.scalar_inputs == fresh.scalar_inputs
        assert call.dtype_signature == fresh.dtype_signature
    assert any(c.scalar_inputs for c in calls)


def _comparison(npu: str, config: str, bench: str) -> Comparison:
    cross = npu.startswith("ms")  # MindSpore vs PyTorch: paired as the plugin pairs them
    return Comparison(load_dumps(dump(npu, config)), load_dumps(dump(bench, config)),
                      pairing=(lambda n, b: pair_runs(n, b).pairs) if cross else None)


@pytest.mark.parametrize(("npu", "config", "bench"), _PAIRS)
def test_equal_signatures_find_nothing_and_effective_dtypes_fold_alike(
        npu: str, config: str, bench: str) -> None:
    cmp = _comparison(npu, config, bench)
    criteria, skipped = CompareCriteria(), 0
    running, where, expected = "float64", (-1, -1), []
    for i, (d, call) in enumerate(cmp.entries):
        other = cmp.bench_call(i)
        if (d.step, d.rank) != where:
            running, where = "float64", (d.step, d.rank)
        if other is None:
            expected.append(running)
            continue
        for rec in records_of(call) + records_of(other):
            running = less_precise(running, rec.dtype)
        expected.append(running)
        if call.dtype_signature == other.dtype_signature and not call.scalar_inputs:
            skipped += 1
            assert node_findings(_fresh(call), _fresh(other), d.framework == "pytorch",
                                 running, criteria, lambda r: False) == []
    assert cmp.effective_dtypes == expected
    assert skipped > 0


def test_shared_values_are_one_object_each_and_bounded() -> None:
    from pytest_accuracy.dumps.model import SharedValues

    shared: SharedValues[str] = SharedValues(3)
    first = shared("".join(["Tensor", ".add"]))
    assert shared("".join(["Tensor", ".add"])) is first  # an equal value: the kept object
    for i in range(10):
        assert shared(f"api{i}") == f"api{i}"  # past the bound: returned, not kept
    assert len(shared) == 3


def test_stacks_are_read_with_the_dump_and_indexed_when_asked(copy_dump: object) -> None:
    """A call's stack comes from its dump's stack.json, indexed on the first ask; a stack.json
    that is no JSON fails the dump's reading, as before."""
    import json as json_module

    from pytest_accuracy.errors import AccuracyInputError

    root = copy_dump("pt_bug", "mix_statistics")  # type: ignore[operator]
    rank = next((root / "step0").iterdir())
    doc = json_module.loads((rank / "stack.json").read_text())
    expected = {str(n): tuple(e[1]) for e in doc.values() for n in e[0]}
    calls = next(d for d in load_dumps(root) if d.path.parent == rank).calls
    index = calls[0].stacks
    assert index is not None and index._frames is None  # nothing asked yet
    assert all(c.stacks is index and c.stack == () for c in calls)
    assert [c.stack_frames() for c in calls] == [expected.get(c.name, ()) for c in calls]
    assert any(c.stack_frames() for c in calls) and index._load is None  # the bytes let go
    (rank / "stack.json").write_text('{"0": [["a"], ["b"]]')  # truncated
    with pytest.raises(AccuracyInputError, match=r"stack\.json.*not valid JSON"):
        load_dumps(root)


def test_a_stack_json_changed_after_the_dump_was_read_is_refused(copy_dump: object) -> None:
    """The text is read again when a stack is first asked (not kept): a stack.json that
    changed since the dump was read fails the ask, naming the file, rather than giving
    another run's frames."""
    from pytest_accuracy.errors import AccuracyInputError

    root = copy_dump("pt_bug", "mix_statistics")  # type: ignore[operator]
    rank = next((root / "step0").iterdir())
    calls = next(d for d in load_dumps(root) if d.path.parent == rank).calls
    named = next(c for c in calls if c.stacks is not None)
    text = (rank / "stack.json").read_text()
    (rank / "stack.json").write_text(text.replace(".py", ".pyx"))  # valid JSON, other frames
    with pytest.raises(AccuracyInputError, match=r"stack\.json.*changed while the run"):
        named.stack_frames()
    (rank / "stack.json").write_text(text)  # as it was read: its frames
    calls = next(d for d in load_dumps(root) if d.path.parent == rank).calls
    assert any(c.stack_frames() for c in calls)


@pytest.mark.parametrize(("npu", "config", "bench"), [*_PAIRS, ("pt_bug", "L0_tensor", "pt_fp32")])
def test_what_the_reader_shares_stays_shared_and_unchanged(
        npu: str, config: str, bench: str) -> None:
    """The reader shares one empty list among calls without arguments or parameters, one
    source (statistics columns, files) among a dump's records, one tuple per shape; a whole
    compare with its diagnosis changes none of them, and no call sees another's arguments."""
    from pytest_accuracy.compare import provenance
    from pytest_accuracy.dumps import msprobe

    cmp = _comparison(npu, config, bench)
    for result in cmp.results():
        if result.status == "fail":
            cmp.with_inputs(result.index)
    assert msprobe._NONE_GIVEN == [] and provenance._NO_FINDINGS == []
    for d in cmp.npu:
        records = [r for c in d.calls for r in (*c.inputs, *c.parameters, *c.outputs)
                   if hasattr(r, "stats_row")]
        assert len({id(r._source) for r in records}) == 1  # type: ignore[attr-defined]
        assert all((r.data_root is not None) == (r.data_name is not None) for r in records)
        grads = [c for c in d.calls if c.kind == "params_grad"]
        assert len({id(c.outputs) for c in grads}) == len(grads)
        assert all(r.path.startswith("grad.") for c in grads for r in c.outputs)
        empty = [c.parameters for c in d.calls if not c.parameters]
        assert empty and all(p is msprobe._NONE_GIVEN for p in empty)
        shapes: dict[tuple[int, ...], int] = {}
        assert all(shapes.setdefault(r.shape, id(r.shape)) == id(r.shape) for r in records)
