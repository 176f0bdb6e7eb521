"""Effective dtypes: per node, the least precise float dtype its step and rank went through."""

from __future__ import annotations

from collections.abc import Callable

from pytest_accuracy.compare.criteria import less_precise
from pytest_accuracy.compare.judge import records_of
from pytest_accuracy.dumps.model import Call, DtypeSignature, Dump


def effective_dtypes(entries: list[tuple[Dump, Call]],
                     bench_call: Callable[[int], Call | None]) -> list[str]:
    """Per node, in run order, the least precise float dtype of the nodes both runs record,
    so far in its step and rank (``Comparison.effective_dtypes`` says why)."""
    running, where = "float64", (-1, -1)
    out = []
    least = _LeastPrecise()
    # both calls' least precise dtype, once per pair of signatures: less_precise keeps the
    # first of its arguments that is least precise, so folding (running, npu, bench) in one
    # order or another's grouping gives the same dtype
    pairs: dict[tuple[DtypeSignature, DtypeSignature], str] = {}
    last: Dump | None = None
    for i, (dump, call) in enumerate(entries):
        if dump is not last and (dump.step, dump.rank) != where:
            running, where = "float64", (dump.step, dump.rank)
        last = dump
        bench = bench_call(i)
        if bench is not None:
            key = (call.dtype_signature, bench.dtype_signature)
            both = pairs.get(key)
            if both is None:
                both = pairs[key] = less_precise(least(call), least(bench))
            running = less_precise(running, both)
        out.append(running)
    return out


class _LeastPrecise:
    """The least precise dtype of a call's records (float64 if none is float), once per
    dtype signature: less_precise picks the larger epsilon, so folding calls is folding
    their records."""

    def __init__(self) -> None:
        self._known: dict[DtypeSignature, str] = {}

    def __call__(self, call: Call) -> str:
        sig = call.dtype_signature
        known = self._known.get(sig)
        if known is None:
            known = "float64"
            for rec in records_of(call):
                known = less_precise(known, rec.dtype)
            self._known[sig] = known
        return known
