"""Per-parameter local norms from training logs, worst relative difference first."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs.table import LogTable


def compare_local_norms(
    npu: pd.DataFrame | LogTable,
    bench: pd.DataFrame | LogTable,
    step: int,
    name_map: Mapping[str, str] | Callable[[str], str] | None = None,
    top: int = 10,
) -> pd.DataFrame:
    """Per-parameter local norms at ``step``, worst relative difference first.

    ``npu``/``bench`` are long frames (``step``, ``param``, ``norm``) or tables
    with ``local_norm``.  ``name_map`` maps NPU parameter names to bench names
    (dict or callable; unmapped names are kept).  Columns: ``param``,
    ``bench_param``, ``npu``, ``bench``, ``abs_diff``, ``rel_diff``; parameters
    found on one side only are listed in ``attrs["npu_only"]`` / ``attrs["bench_only"]``.
    """
    a, b = (_local_at(x, step) for x in (npu, bench))
    if isinstance(name_map, Mapping):
        mapping = dict(name_map)
        rename: Callable[[str], str] = lambda name: mapping.get(name, name)  # noqa: E731
    else:
        rename = name_map or (lambda name: name)
    a = a.assign(bench_param=[rename(str(n)) for n in a["param"]])
    merged = a.merge(b, left_on="bench_param", right_on="param", suffixes=("", "_b"))
    out = pd.DataFrame(
        {
            "param": merged["param"],
            "bench_param": merged["bench_param"],
            "npu": merged["norm"],
            "bench": merged["norm_b"],
        }
    )
    out["abs_diff"] = (out["npu"] - out["bench"]).abs()
    out["rel_diff"] = out["abs_diff"] / out["bench"].abs().replace(0.0, np.nan)
    out = out.sort_values("rel_diff", ascending=False, na_position="first", kind="stable")
    out = out.head(top).reset_index(drop=True)
    out.attrs["npu_only"] = sorted(set(a["param"]) - set(merged["param"]))
    out.attrs["bench_only"] = sorted(set(b["param"]) - set(merged["bench_param"]))
    return out


def _local_at(source: pd.DataFrame | LogTable, step: int) -> pd.DataFrame:
    if isinstance(source, LogTable):
        if source.local_norm is None:
            raise AccuracyInputError(source.path, "no per-parameter local norm lines in this log")
        frame = source.local_norm
    else:
        frame = source
    rows = frame[frame["step"] == step]
    # A parameter logged twice at one step (re-run) keeps its last value.
    return rows.drop_duplicates("param", keep="last")[["param", "norm"]]
