"""PNG plots of a loss comparison: loss, difference with the bench band, grad norm, local norms."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_accuracy.curves import (
    DEFAULT,
    LossCriteria,
    bench_band,
    compare_local_norms,
    effective_criteria,
    find_divergence_step,
    pair,
)
from pytest_accuracy.errors import AccuracyInputError, require
from pytest_accuracy.logs.table import LogTable


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display on CI), or a one-line install hint."""
    matplotlib: Any = require("matplotlib", "plot")
    matplotlib.use("Agg", force=True)
    return require("matplotlib.pyplot", "plot")


def plot_loss_report(
    npu: LogTable,
    benches: Sequence[LogTable],
    out_dir: str | Path,
    criteria: LossCriteria = DEFAULT,
    divergence_step: int | None = None,
) -> list[Path]:
    """Write the PNGs for ``npu`` vs ``benches`` into ``out_dir`` and return their paths.

    Always ``loss.png`` and ``loss_diff.png``; ``grad_norm.png`` when both runs
    logged a grad norm; ``local_norm.png`` when both have per-parameter norms.
    ``loss_diff.png`` marks the step the curves diverge from: ``divergence_step``, or where
    not given the step the ``divergence`` check finds (the one the report names).
    """
    if not benches:
        raise ValueError("plot_loss_report needs at least one bench run")
    if divergence_step is None:
        divergence_step = find_divergence_step(npu, benches, effective_criteria(benches, criteria))
    plt = _pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [
        _loss_overlay(plt, npu, benches, out / "loss.png", criteria),
        _loss_diff(plt, npu, benches, out / "loss_diff.png", criteria, divergence_step),
    ]
    if all(np.isfinite(t.frame["grad_norm"].to_numpy(np.float64)).any() for t in (npu, benches[0])):
        written.append(_grad_norm(plt, npu, benches, out / "grad_norm.png"))
    if npu.local_norm is not None and benches[0].local_norm is not None:
        path = _local_norms(plt, npu, benches[0], out / "local_norm.png")
        if path is not None:
            written.append(path)
    return written


def _label(table: LogTable, role: str) -> str:
    return f"{role}: {table.path.name} ({table.format})"


def _save(plt: Any, fig: Any, path: Path) -> Path:
    from pytest_accuracy.safe_io import atomic_open

    fig.tight_layout()
    try:
        with atomic_open(path, "wb") as handle:  # never through a symlink planted at path
            fig.savefig(handle, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path


def _loss_overlay(
    plt: Any, npu: LogTable, benches: Sequence[LogTable], path: Path, criteria: LossCriteria
) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    column = criteria.loss_column
    for i, bench in enumerate(benches):
        frame = bench.frame[~bench.frame["skipped"]]
        ax.plot(frame.index, frame[column], lw=1, alpha=0.8, label=_label(bench, f"bench {i}"))
    frame = npu.frame[~npu.frame["skipped"]]
    ax.plot(frame.index, frame[column], lw=1.2, color="C3", label=_label(npu, "npu"))
    ax.set(xlabel="step", ylabel=column, title="Loss")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _loss_diff(
    plt: Any,
    npu: LogTable,
    benches: Sequence[LogTable],
    path: Path,
    criteria: LossCriteria,
    divergence_step: int | None = None,
) -> Path:
    """npu - bench0 per step, the bench runs' own differences and the widened band around 0."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    p = pair(npu, benches[0], criteria.loss_column, criteria)
    if len(benches) >= 2:
        band = bench_band(npu, benches, criteria)
        ref = band.runs[0]
        ax.fill_between(
            band.steps, band.lower - ref, band.upper - ref, color="0.85", label="bench band"
        )
        for j in range(1, len(band.runs)):
            ax.plot(
                band.steps, band.runs[j] - ref, lw=0.8, color="0.4", label=f"bench {j} - bench 0"
            )
    ax.plot(p.steps, p.d, lw=1.1, color="C3", label="npu - bench 0")
    tol = np.maximum(criteria.mean_abs, criteria.mean_rel * np.abs(p.bench))
    ax.plot(p.steps, tol, ls="--", lw=0.8, color="C1", label="per-step tolerance")
    ax.plot(p.steps, -tol, ls="--", lw=0.8, color="C1")
    ax.axhline(0.0, color="k", lw=0.6)
    if divergence_step is not None:
        mark_divergence(ax, divergence_step)
    ax.set(xlabel="step", ylabel="loss difference", title="Loss difference (NPU - bench)")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def mark_divergence(ax: Any, step: int) -> Any:
    """A dashed vertical line at ``step``, in the legend as "diverges from step N"."""
    return ax.axvline(step, color="#6a1b9a", ls="--", lw=1.2, label=f"diverges from step {step}")


def _grad_norm(plt: Any, npu: LogTable, benches: Sequence[LogTable], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, table in enumerate([*benches, npu]):
        frame = table.frame
        role = "npu" if table is npu else f"bench {i}"
        ax.plot(frame.index, frame["grad_norm"], lw=1, label=_label(table, role))
    ax.set(xlabel="step", ylabel="grad norm", title="Global gradient norm", yscale="log")
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _local_norms(plt: Any, npu: LogTable, bench: LogTable, path: Path) -> Path | None:
    """Relative local-norm difference per parameter at the first step both logged."""
    assert npu.local_norm is not None and bench.local_norm is not None
    common = np.intersect1d(npu.local_norm["step"], bench.local_norm["step"])
    if not len(common):
        return None
    step = int(common[0])
    try:
        table = compare_local_norms(npu, bench, step, top=30)
    except AccuracyInputError:
        return None
    if table.empty:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.3 * len(table) + 1.5))
    ax.barh(table["param"][::-1], table["rel_diff"][::-1] * 100.0, color="C3")
    ax.set(xlabel="relative difference (%)", title=f"Local norm, step {step} (worst first)")
    ax.tick_params(axis="y", labelsize=7)
    return _save(plt, fig, path)
