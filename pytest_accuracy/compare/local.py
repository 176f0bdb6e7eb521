"""Local error: each side's outputs against a float64 replay of that side's own inputs.

A node whose NPU local error clearly exceeds the bench's *makes* an error, even inside the
value band; a node whose inputs differ while its local error matches the bench's only
carries one.  APIs replay through the precheck allow-list (its float64 references);
modules through the standard layers whose inputs msprobe records in full (Linear,
Embedding, activations) and the norm layers, replayed with the eps that reproduces the bench
(norms.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pytest_accuracy.compare.criteria import less_precise
from pytest_accuracy.compare.fold import fold
from pytest_accuracy.compare.norms import fit_pair, norm_kind
from pytest_accuracy.dumps.model import FLOAT_EPS, Call, TensorRecord
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.precheck.args import Unsupported
from pytest_accuracy.precheck.registry import resolve

if TYPE_CHECKING:
    from pytest_accuracy.compare import replay

# Replays cost a float64 pass over the node; past this many elements per side the node
# keeps the value rule alone (and says so), so a huge dump's compare stays bounded.
MAX_REPLAY_ELEMENTS = 1 << 24
# NPU local error must exceed RATIO x the bench's, and a floor in units of its dtype's
# rounding: FLOOR_EPS at least, BAND_SHARE of the node's tolerance where that is more, but
# never past CEIL_EPS. Kernels that sum in another order or accumulate a bf16 matmul in fp32
# stay under it (benign pairs of the zoos, transformers and MindSpore twins included: 3.2 eps
# at most, MindSpore's fp32 cross_entropy); an fp32 norm whose eps moved its output 1e-6
# (9.4 eps; 0.1 % of the value band, which the band share of 10 % hid) does not.
RATIO = 4.0
FLOOR_EPS = 2.0
CEIL_EPS = 8.0
BAND_SHARE = 0.1


@dataclass(frozen=True)
class LocalError:
    """Relative L2 error of each side's output vs the float64 replay of its own inputs."""

    npu: float
    bench: float
    tensor: str
    dtype: str
    band: float  # the node's relative-error tolerance
    detail: str = ""  # how the reference was made, where it needs saying (a fitted eps)

    @property
    def floor(self) -> float:
        eps = FLOAT_EPS.get(self.dtype, FLOAT_EPS["float32"])
        return max(FLOOR_EPS * eps, min(CEIL_EPS * eps, BAND_SHARE * self.band))

    @property
    def npu_makes_error(self) -> bool:
        return self.npu > max(RATIO * self.bench, self.floor)

    def as_dict(self) -> dict[str, float | str]:
        return {"npu": self.npu, "bench": self.bench, "tensor": self.tensor}

    def sentence(self) -> str:
        return (f"local error {self.npu:.3g} vs bench {self.bench:.3g} "
                f"({self.tensor}{self.detail})")



def local_error(
    npu: Call, bench: Call, npu_fw: str, bench_fw: str, band: float
) -> LocalError | str:
    """Both sides' local errors, or why they cannot be measured here."""
    kind = _norm_pair(npu, bench)
    if kind is None and not (_replayable(npu, npu_fw) and _replayable(bench, bench_fw)):
        return f"no float64 reference for {npu.prefix}.{npu.op}"
    # the outputs first: a statistics or md5 dump's first output already says (has_data reads
    # only the record, so the order changes nothing but the time)
    if not (_first_has_data(npu.output_tensors) and _first_has_data(bench.output_tensors)
            and all(r.has_data for r in _records(npu) + _records(bench))):
        return "no tensor data (statistics or md5 dump)"
    if max(_elements(npu), _elements(bench)) > MAX_REPLAY_ELEMENTS:
        return f"over {MAX_REPLAY_ELEMENTS} elements, not replayed"
    if kind is not None:
        return _norm_error(npu, bench, kind, band)
    replay_npu, replay_bench = replayer(npu, npu_fw), replayer(bench, bench_fw)
    assert replay_npu is not None and replay_bench is not None
    try:
        ours = _side_error(npu, replay_npu(npu))
        theirs = _side_error(bench, replay_bench(bench))
    except (Unsupported, ValueError, IndexError, TypeError, ArithmeticError) as exc:
        return f"replay not possible: {exc}"
    except AccuracyInputError as exc:
        return f"replay not possible: {exc}"
    if ours is None or theirs is None:
        return "no float output to measure"
    return LocalError(ours[0], theirs[0], ours[1], ours[2], band)


def _norm_pair(npu: Call, bench: Call) -> str | None:
    """The norm kind when both sides are forward calls of the same kind of norm module."""
    if npu.kind != "module" or bench.kind != "module" or npu.direction != "forward":
        return None
    kind = norm_kind(npu.op)
    return kind if kind is not None and norm_kind(bench.op) == kind else None


def _norm_error(npu: Call, bench: Call, kind: str, band: float) -> LocalError | str:
    try:
        fit = fit_pair(npu, bench, kind)
    except (Unsupported, ValueError, ArithmeticError, AccuracyInputError) as exc:
        return f"replay not possible: {exc}"
    out = npu.output_tensors[0]
    return LocalError(fit.npu_error, fit.bench_error, out.path, out.dtype, band, fit.detail())


def replayer(call: Call, framework: str) -> replay.Replay | None:
    """The float64 replay of ``call``, or None where no reference exists."""
    if call.direction != "forward":
        return None
    # imported where a replay may be made: its precheck modules and ml_dtypes (~0.08 s) are
    # no cost of a run whose nodes have none (a backward, an op without a reference)
    from pytest_accuracy.compare import replay

    if call.kind == "api":
        spec = resolve(framework, f"{call.prefix}.{call.op}")
        return replay.api_replay(spec) if spec is not None else None
    if call.kind == "module":
        return replay.module_replay(call.op)
    return None


def _replayable(call: Call, framework: str) -> bool:
    """``replayer(call, framework) is not None``, without making the replay: an API's is
    made for every reference the registry resolves, so a statistics run (no data to replay)
    never loads the replay modules."""
    if call.direction == "forward" and call.kind == "api":
        return resolve(framework, f"{call.prefix}.{call.op}") is not None
    return replayer(call, framework) is not None


def _first_has_data(records: list[TensorRecord]) -> bool:
    """Whether the first of ``records`` has data (none: True, the rest is asked after)."""
    return not records or records[0].has_data


def _records(call: Call) -> list[TensorRecord]:
    return call.input_tensors + call.parameters + call.output_tensors


def _elements(call: Call) -> int:
    return sum(r.numel for r in _records(call))


def _side_error(call: Call, refs: list[np.ndarray]) -> tuple[float, str, str] | None:
    """The worst relative L2 error over the float outputs the replay produced."""
    worst: tuple[float, str, str] | None = None
    from pytest_accuracy.compare import replay  # loaded: refs came from a replay

    pick = refs.pick if isinstance(refs, replay.Sampled) else None
    for record, ref in zip(call.output_tensors, refs, strict=False):
        if record.dtype not in FLOAT_EPS or ref is None:
            continue
        got = np.asarray(record.load())
        got = np.asarray(pick(got) if pick is not None and got.ndim >= 2 else got)
        want = np.asarray(ref, dtype=np.float64)
        if got.size != want.size:
            raise ValueError(f"replay gives {want.shape}, the dump records {got.shape}")
        err = _rel_l2(got.reshape(-1), want.reshape(-1))
        if worst is None or err > worst[0]:
            worst = (err, record.path, record.dtype)
    return worst


def _rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    """||got - want|| / ||want|| over the elements finite in both (NaN/Inf must match)."""
    folded = fold(got, want)  # one pass in float64, no temporaries; None: NaN/Inf present
    if folded is not None:
        return _ratio(math.sqrt(folded.dd), math.sqrt(folded.bb))
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    finite = np.isfinite(got) & np.isfinite(want)
    if not np.array_equal(np.isfinite(got), np.isfinite(want)):
        return math.inf
    got, want = got[finite], want[finite]
    return _ratio(float(np.linalg.norm(got - want)), float(np.linalg.norm(want)))


def _ratio(diff: float, norm: float) -> float:
    if norm == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / norm


def lower_precision_inputs(npu: Call, bench: Call | None,
                           allowed: frozenset[tuple[str, str]]) -> str | None:
    """``input.0 float16 vs bench float32``: the first input less precise than the bench's by
    an undeclared change (a declared one is judged in its own band)."""
    theirs = {r.path: r.dtype for r in bench.input_tensors} if bench is not None else {}
    for rec in npu.input_tensors:
        other = theirs.get(rec.path)
        if (other is not None and other != rec.dtype and (rec.dtype, other) not in allowed
                and less_precise(rec.dtype, other) == rec.dtype):
            return f"{rec.path} {rec.dtype} vs bench {other}"
    return None
