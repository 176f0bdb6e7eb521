"""What the bench's noise run and its layout did to the compare, said in the accuracy summary."""

from __future__ import annotations

from typing import Any


def learned_lines(nodes: list[dict[str, Any]], criteria: Any = None) -> list[str]:
    """One sentence where tolerances were learned from two bench runs (--acc-bench-noise):
    at how many nodes, and the widest beyond the run's fixed tolerance of its dtype, so that
    a wide one is seen, not hidden in a pass."""
    from pytest_accuracy.compare.criteria import CompareCriteria

    compared = [n for n in nodes if n.get("tolerance") and n["status"] in ("pass", "fail",
                                                                             "carried")]
    learned = [n for n in compared if "spread" in n["tolerance"]]
    if not learned:
        return []
    fixed = criteria if criteria is not None else CompareCriteria()

    def wider(n: dict[str, Any]) -> bool:
        dtype = str(n.get("effective_dtype") or "float32")
        return float(n["tolerance"]["rel_err"]) > fixed.tolerance(dtype).rel_err

    widened = [n for n in learned if wider(n)]
    kept = len(compared) - len(learned)
    line = (f"Tolerances learned from the two bench runs' spread (--acc-bench-noise) at "
            f"{len(learned)} of {len(compared)} compared nodes")
    line += (f"; {kept} kept the fixed per-dtype tolerance (the noise run has no counterpart "
             "there, or only checksums)" if kept else "")
    if widened:
        top = max(widened, key=lambda n: float(n["tolerance"]["spread"]))
        line += (f"; {len(widened)} allowed more than their dtype's fixed tolerance (widest: "
                 f"{top['npu_name']}, step {top['step']}, rank {top['rank']}: the bench runs "
                 f"differ by {float(top['tolerance']['spread']):.3g} there, up to "
                 f"{float(top['tolerance']['rel_err']):.3g} allowed)")
    return [line + "."]


def layout_lines(state: Any, seen: dict[str, Any] | None = None) -> list[str]:
    """Which bench ranks each NPU rank was compared with, where the layouts differ: this
    process's, or those the process that compared them recorded (``seen``: -n workers); or
    why they were not read, where a part of the ranks was loaded."""
    from pytest_accuracy.pairing.layouts import bench_ranks, parse_layout

    layouts = getattr(state, "layouts", None) if state is not None else None
    inferred = getattr(state, "inferred", None) if layouts else None
    notes = list(getattr(state, "view_notes", None) or (seen or {}).get("notes") or ())
    if not layouts and seen and seen.get("npu"):
        layouts = parse_layout(str(seen["npu"])), parse_layout(str(seen["bench"]))
        inferred = (None, None, seen["inferred"]) if seen.get("inferred") else None
    if not layouts:
        unread = getattr(state, "unread_layouts", None) or (seen or {}).get("unread")
        return [unread] if unread else []
    mine, theirs = layouts
    why = f" ({inferred[2]}; give --acc-npu-layout and --acc-bench-layout to say otherwise)" \
        if inferred and not getattr(state, "given_layouts", None) else ""
    shown = [f"{r} <- {'+'.join(str(b) for b in bench_ranks(mine, theirs, r))}"
             for r in range(min(mine.world, 8))]
    more = f", ... ({mine.world} ranks)" if mine.world > 8 else ""
    said = []
    if mine.tp != theirs.tp:
        said.append("partial sums the bench does not make are compared after their all-reduce")
    if mine.dp != theirs.dp:
        said.append(f"a DP rank reads {_share(mine.dp)} on the NPU, {_share(theirs.dp)} on the "
                    "bench: activations are compared on the part of the batch the NPU rank "
                    "reads, sums over the batch (the loss, parameters' gradients) are not")
    return [f"Layouts differ: NPU {mine} against bench {theirs}{why}. Each NPU rank is compared "
            f"with the slice it holds of its bench ranks' tensors (NPU rank <- bench ranks: "
            f"{', '.join(shown)}{more})" + "".join(f"; {s}" for s in [*said, *notes]) + "."]


def _share(n: int) -> str:
    return "the whole batch" if n == 1 else f"1/{n} of the batch"
