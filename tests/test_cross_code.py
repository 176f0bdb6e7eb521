"""Two codebases, one math (issue 36): value anchors, pass-throughs, layouts of equal values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_accuracy.compare.criteria import CompareCriteria
from pytest_accuracy.compare.judge import compare_tensor
from pytest_accuracy.dumps.model import Call, Dump, Stats, TensorRecord
from pytest_accuracy.pairing.anchors import anchor, is_identity
from pytest_accuracy.pairing.runs import other_code, pair_runs


def _stats(a: np.ndarray) -> Stats:
    x = a.astype(np.float64)
    return Stats(float(x.max()), float(x.min()), float(x.mean()), float(np.sqrt((x * x).sum())))


def _rec(a: np.ndarray, path: str = "output.0", where: Path | None = None,
         name: str = "") -> TensorRecord:
    role = "output" if path.startswith("output") else "input"
    if where is not None:
        np.save(where / f"{name}.npy", a)
    return TensorRecord(path, role, "float32", "torch.float32", tuple(a.shape), _stats(a),
                        data_root=where, data_name=f"{name}.npy" if where else None,
                        confine=where)


def _call(name: str, out: np.ndarray, *ins: np.ndarray, order: int = 0) -> Call:
    prefix, op, index, direction = name.split(".")[0], name.split(".")[-3], 0, "forward"
    return Call(name, "api", direction, order, inputs=[_rec(x, f"input.{k}")
                                                       for k, x in enumerate(ins)],
                outputs=[_rec(out)], prefix=prefix, op=op, index=index)


RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 8, 32)).astype(np.float32)
W = RNG.standard_normal((32, 32)).astype(np.float32)
Y = (X @ W.T).astype(np.float32)
Z = (Y * 1.5).astype(np.float32)


def test_calls_of_other_names_anchor_on_their_values() -> None:
    """One codebase squares with x*x and reshapes; the other calls pow and matmul: the calls
    that make the same value pair, whatever their names; the reshape makes nothing."""
    a = [_call("Tensor.__mul__.0.forward", X * X, X, X),
         _call("Tensor.reshape.0.forward", Y.reshape(16, 32), Y),
         _call("Functional.linear.0.forward", Y, X),
         _call("Tensor.__mul__.1.forward", Z, Y)]
    b = [_call("Tensor.pow.0.forward", X * X, X),
         _call("Torch.matmul.0.forward", Y, X),
         _call("Tensor.__mul__.0.forward", Z, Y)]
    assert is_identity(a[1]) and not is_identity(a[0])
    assert anchor(a, b) == ([(0, 0), (2, 1), (3, 2)], [])


def test_a_value_made_twice_on_one_side_anchors_nothing() -> None:
    a = [_call("Functional.linear.0.forward", Y, X)]
    b = [_call("Functional.linear.0.forward", Y, X), _call("Torch.matmul.0.forward", Y, X)]
    assert anchor(a, b) == ([(0, 0)], [])  # the repeat is no new value: b's first maker anchors
    c = [_call("Functional.linear.0.forward", Y, X), _call("Tensor.__add__.0.forward", Z, X)]
    d = [_call("Tensor.__add__.0.forward", Z, X), _call("Functional.linear.0.forward", Y, X)]
    assert [len(x) for x in anchor(c, d)] == [1, 1]  # crossing: one bounds the alignment


def test_a_value_made_again_from_other_inputs_anchors_nothing() -> None:
    """Near-uniform softmaxes of two layers hold one value from other scores: neither maker is
    evidence of place (paired by value, layer 1's found the bench's layer 0)."""
    uniform = np.full((2, 8), 0.125, np.float32)
    s0, s1 = X[0, :2, :8], X[1, :2, :8]
    a = [_call("Functional.softmax.0.forward", uniform, s0, order=0),
         _call("Functional.softmax.1.forward", uniform, s1, order=1)]
    b = [_call("Primitive.softmax.Softmax.0.forward", uniform, s1)]
    assert anchor(a, b) == ([], [])
    # made again from the same inputs (one norm applied for q, k and v): the first anchors
    a[1] = _call("Functional.softmax.1.forward", uniform, s0, order=1)
    assert anchor(a, b) == ([(0, 0)], [])


def test_a_mask_of_minus_1e9_does_not_hide_the_scores() -> None:
    """Two masked score tensors share Norm (the mask's) and Min: their Max tells them apart."""
    mask = np.triu(np.full((8, 8), -1e9, np.float32), 1)
    s1 = (RNG.standard_normal((2, 4, 8, 8)) * 0.1).astype(np.float32) + mask
    s2 = (RNG.standard_normal((2, 4, 8, 8)) * 0.1).astype(np.float32) + mask
    a = [_call("Tensor.__add__.6.forward", s2, s2)]
    b = [_call("Tensor.__add__.1.forward", s1, s1)]
    assert anchor(a, b) == ([], [])


def _dump(calls: list[Call], framework: str = "pytorch") -> Dump:
    for k, c in enumerate(calls):
        c.order = k
    return Dump(Path("d"), framework, "L1", "tensor", 0, 0, calls)


def test_one_framework_two_codebases_is_aligned_not_paired_by_name() -> None:
    """Tensor.__mul__.0 is x*x in one codebase and the scaling in the other: same counts, other
    order. Names would pair the square with the scaling; values pair each with its own."""
    npu = _dump([_call("Tensor.__mul__.0.forward", X * X, X, X),
                 _call("Functional.linear.0.forward", Y, X),
                 _call("Tensor.__mul__.1.forward", Z, Y)])
    bench = _dump([_call("Functional.linear.0.forward", Y, X),
                   _call("Tensor.__mul__.0.forward", Z, Y),
                   _call("Tensor.__mul__.1.forward", X * X, X, X)])
    assert "different order" in other_code(npu, bench, {})
    result = pair_runs(npu, bench)
    assert not result.by_name
    assert result.pairs == {"Tensor.__mul__.0.forward": "Tensor.__mul__.1.forward",
                            "Functional.linear.0.forward": "Functional.linear.0.forward",
                            "Tensor.__mul__.1.forward": "Tensor.__mul__.0.forward"}
    assert result.evidence["Tensor.__mul__.0.forward"].startswith("same value (")
    same = _dump([_call("Functional.linear.0.forward", Y, X)])
    assert other_code(same, _dump([_call("Functional.linear.0.forward", Y, X)]), {}) == ""


def _judge(npu: np.ndarray, bench: np.ndarray, tmp: Path) -> tuple[bool, str]:
    t = compare_tensor(_rec(npu, where=tmp, name="n"), _rec(bench, where=tmp, name="b"),
                       "float32", CompareCriteria())
    return t.ok, t.judgement.detail


@pytest.mark.parametrize(("what", "arrange", "words"), [
    ("rotary rows permuted by a weight conversion",
     lambda y: y[..., np.argsort(np.arange(32) % 2, kind="stable")], "last dimension permuted"),
    ("heads transposed", lambda y: y.reshape(2, 8, 4, 8).transpose(0, 2, 1, 3).copy(),
     "transposed [0, 2, 1, 3]"),
    ("a flat view", lambda y: y.reshape(16, 32), "reshaped"),
])
def test_equal_values_in_another_layout_pass_and_say_so(tmp_path: Path, what: str, arrange,  # type: ignore[no-untyped-def]
                                                         words: str) -> None:
    bench = Y.reshape(2, 8, 4, 8).transpose(0, 2, 1, 3).copy() if "heads" in what else Y
    npu = arrange(Y) if "heads" not in what else Y.reshape(2, 8, 4, 8)
    ok, detail = _judge(np.ascontiguousarray(npu), bench, tmp_path)
    assert ok, (what, detail)
    assert words in detail and "another codebase" in detail


def test_a_shuffle_or_other_values_still_fail(tmp_path: Path) -> None:
    """Values in an order no layout explains (every row shuffled its own way), or values that
    differ, are no structural difference: they fail as before."""
    shuffled = np.array([RNG.permutation(row) for row in Y.reshape(-1, 32)]).reshape(Y.shape)
    ok, detail = _judge(shuffled.astype(np.float32), Y, tmp_path)
    assert not ok and "relative error" in detail
    ok, detail = _judge((Y * 1.01).astype(np.float32), Y, tmp_path)
    assert not ok and "relative error" in detail


def test_a_mask_written_as_minus_inf_against_finfo_min_compares_the_rest(tmp_path: Path) -> None:
    """TransformerLens masks with -inf, transformers with finfo(float32).min: the same mask;
    a position masked on one side only is still a difference."""
    scores = (RNG.standard_normal((2, 4, 8, 8)) * 0.1).astype(np.float32)
    upper = np.triu(np.ones((8, 8), bool), 1)
    npu = np.where(upper, -np.inf, scores).astype(np.float32)
    bench = np.where(upper, np.finfo(np.float32).min, scores).astype(np.float32)
    t = compare_tensor(_rec(npu, where=tmp_path, name="n"), _rec(bench, where=tmp_path, name="b"),
                       "float32", CompareCriteria())
    assert t.ok and "a mask written as -inf" in t.judgement.detail
    shifted = np.where(np.triu(np.ones((8, 8), bool), 2), -np.inf, scores).astype(np.float32)
    ok, _ = _judge(shifted, bench, tmp_path)
    assert not ok


def test_statistics_of_two_masks_are_not_checked_rather_than_failed() -> None:
    from pytest_accuracy.compare.criteria import judge_stats
    from pytest_accuracy.compare.metrics import stats_metrics

    tol = CompareCriteria().tolerance("float32")
    minus_inf = Stats(0.5, -np.inf, -np.inf, np.inf)
    finfo = Stats(0.5, -3.4e38, -1.7e38, 1.2e39)
    judged = judge_stats(stats_metrics(minus_inf, finfo), "float32", tol)
    assert judged.ok and not judged.checked and "mask" in judged.detail
    overflow = Stats(0.5, -np.inf, -np.inf, np.inf)
    finite = Stats(0.5, -0.4, 0.0, 3.0)
    assert not judge_stats(stats_metrics(overflow, finite), "float32", tol).ok


def test_a_region_equal_up_to_its_sign_passes_and_says_so(tmp_path: Path) -> None:
    """TransformerLens' loss is -mean(log p): the dump records mean(log p), the bench
    cross_entropy. Only a region pair is asked; another value still fails."""
    from pytest_accuracy.compare.judge import negated_region

    loss = np.array(4.150861, np.float32)
    got = negated_region(_rec(-loss, where=tmp_path, name="n"),
                         _rec(loss, where=tmp_path, name="b"), "float32", CompareCriteria())
    assert got is not None and got.ok and "up to its sign" in got.judgement.detail
    assert negated_region(_rec(-loss * 1.01, where=tmp_path, name="n2"),
                          _rec(loss, where=tmp_path, name="b2"), "float32",
                          CompareCriteria()) is None


def _carried(dtype: str, in_err: float, out_err: float) -> str | None:
    """``diagnose._rounding_carried`` of a node whose input and output have these errors."""
    from pytest_accuracy.compare.criteria import Judgement
    from pytest_accuracy.compare.diagnose import _rounding_carried
    from pytest_accuracy.compare.metrics import TensorMetrics
    from pytest_accuracy.compare.results import NodeResult, TensorComparison

    band = CompareCriteria().tolerance(dtype).rel_err
    rec = _rec(X)

    def comparison(path: str, err: float) -> TensorComparison:
        return TensorComparison(path, rec, rec, dtype, Judgement(err <= band, "" if err <= band
                                                                 else "over"),
                                TensorMetrics("ok", rel_l2_err=err))

    call = _call("Tensor.pow.6.backward", X, X)
    return _rounding_carried(NodeResult(
        0, 0, 0, call, call, "fail", inputs=[comparison("input.0", in_err)],
        outputs=[comparison("output.0", out_err)]))


@pytest.mark.parametrize(("dtype", "in_err", "out_err", "passes"), [
    ("bfloat16", 0.0391, 0.0435, True),  # TransformerLens' norm backward in bf16
    ("bfloat16", 0.0391, 0.0900, False),  # more than twice its input's error: its own
    ("bfloat16", 0.0, 0.0435, False),  # identical inputs: the error appears here
    ("float16", 0.004, 0.0055, True),
    ("float32", 9e-5, 1.1e-4, False),  # an fp32 band holds hundreds of ulps: never rounding
])
def test_a_16_bit_node_carries_rounding_no_more_than_twice_its_inputs(
        dtype: str, in_err: float, out_err: float, passes: bool) -> None:
    why = _carried(dtype, in_err, out_err)
    assert (why is not None) == passes, why
    if passes:
        assert why is not None and why.startswith("carries its inputs' rounding")


@pytest.mark.parametrize(("primitive", "pt", "same_as"), [
    ("Primitive.square.Square", "Torch.square", "Tensor.pow"),  # x ** 2 in the bench
    ("Primitive.rsqrt.Rsqrt", "Torch.rsqrt", "Torch.rsqrt"),
    ("Primitive.batch_matmul.BatchMatMul", "Torch.matmul", "Torch.bmm"),
    ("Primitive.matmul.MatMul", "Torch.matmul", "Functional.linear"),
    ("Primitive.mul.Mul", "Torch.mul", "Tensor.__mul__"),
    ("Primitive.real_div.RealDiv", "Torch.div", "Tensor.__truediv__"),
    ("Primitive.reduce_mean.ReduceMean", "Torch.mean", "Tensor.mean"),
    ("Primitive.gather.Gather", "Functional.embedding", "Functional.embedding"),
])
def test_mindformers_primitives_are_the_pytorch_apis_they_compute(primitive: str, pt: str,
                                                                  same_as: str) -> None:
    """MindFormers calls ops primitives (self.square = P.Square()): each is the PyTorch API
    it computes, by name or as a known alternative, for alignment's op evidence."""
    from pytest_accuracy.pairing.align import _same_op
    from pytest_accuracy.pairing.mapfiles import load_api_map

    amap = load_api_map()
    assert amap.to_pt(primitive) == pt
    mine = Call(f"{primitive}.0.forward", "api", "forward", 0,
                prefix="Primitive", op=primitive.split(".", 1)[1])
    theirs = Call(f"{same_as}.0.forward", "api", "forward", 0,
                  prefix=same_as.split(".")[0], op=same_as.split(".")[1])
    assert _same_op(amap, mine, theirs)


def test_a_pass_through_primitive_is_cheap_to_leave_out() -> None:
    """A Cast or Reshape only MindSpore records is a call msprobe-PyTorch never dumps."""
    from pytest_accuracy.pairing.mapfiles import load_api_map

    amap = load_api_map()
    for primitive in ("Primitive.cast.Cast", "Primitive.reshape.Reshape",
                      "Primitive.expand_dims.ExpandDims", "Primitive.transpose.Transpose"):
        assert amap.is_low_risk(amap.to_pt(primitive)), primitive


def test_a_mask_filled_with_minus_10000_against_finfo_min_is_the_same_mask() -> None:
    """MindFormers adds mask * -10000 to the scores, transformers fills finfo.min: the same
    positions masked, the scores compared; another fill at other positions is not a mask."""
    from pytest_accuracy.compare.judge import _mask_written_otherwise

    scores = RNG.standard_normal((2, 4, 8, 8)).astype(np.float32)
    future = np.triu(np.ones((8, 8), dtype=bool), 1)
    mine = scores + np.float32(-10000.0) * future
    theirs = np.where(future, np.finfo(np.float32).min, scores)
    tol = CompareCriteria().tolerance("float32")
    judged = _mask_written_otherwise(mine, theirs, "float32", tol)
    assert judged is not None and judged[0].ok and "at the same 224 positions" in judged[0].detail
    shifted = np.where(np.triu(np.ones((8, 8), dtype=bool), 2), np.finfo(np.float32).min, scores)
    assert _mask_written_otherwise(mine, shifted, "float32", tol) is None


def test_gradients_recorded_in_another_order_pair_by_shape(tmp_path: Path) -> None:
    """msprobe-MindSpore records Mul(x, r)'s input gradients as (dr, dx): each pairs with the
    bench gradient of its shape, where every shape is one gradient's."""
    from pytest_accuracy.compare.judge import compare_all

    dx, dr = RNG.standard_normal((2, 8, 32)), RNG.standard_normal((2, 8, 1))
    npu = Call("Primitive.mul.Mul.0.backward", "api", "backward", 0, prefix="Primitive",
               op="mul.Mul", outputs=[_rec(dr, "output.0", tmp_path, "n0"),
                                      _rec(dx, "output.1", tmp_path, "n1")])
    bench = Call("Tensor.__mul__.0.backward", "api", "backward", 0, prefix="Tensor",
                 op="__mul__", outputs=[_rec(dx, "output.0", tmp_path, "b0"),
                                        _rec(dr, "output.1", tmp_path, "b1")])
    judged = compare_all(npu.output_tensors, bench, "float32", CompareCriteria())
    assert [t.ok for t in judged] == [True, True]
    assert [t.bench.shape for t in judged if t.bench is not None] == [(2, 8, 1), (2, 8, 32)]


def test_a_primitive_keeps_its_own_argument_order() -> None:
    """Gather(weight, ids, axis=0) against embedding(ids, weight, padding_idx=None): the
    positional inputs are not compared (they are in another order), shared keywords are."""
    from pytest_accuracy.compare.findings import same_op
    from pytest_accuracy.dumps.model import ScalarArg

    gather = Call("Primitive.gather.Gather.0.forward", "api", "forward", 0, prefix="Primitive",
                  op="gather.Gather", inputs=[ScalarArg("input.2", "int", 0)])
    embedding = Call("Functional.embedding.0.forward", "api", "forward", 0,
                     prefix="Functional", op="embedding",
                     inputs=[ScalarArg("input.2", "NoneType", None)])
    assert not same_op(gather, embedding)
