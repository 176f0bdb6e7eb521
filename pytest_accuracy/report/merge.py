"""Merge the --acc-json parts of runs sharded by step and rank into one document and verdict."""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.report.document import DOCUMENT_VERSION, build_document
from pytest_accuracy.report.merge_check import check_part, check_shard_count
from pytest_accuracy.text import escape_line

# Node statuses that neither pass nor fail the verdict (pytest skips and xfails). "pass" passes;
# every other status (fail, error, carried, and any status this version does not know) fails.
NEUTRAL = frozenset({"skip", "unmatched", "waived"})
TABLE_HEADER = "step rank  pass  fail other  first failing node"
_COMPARE_KEYS = ("first_divergence", "first_nonfinite", "coverage", "nodes")


@dataclass(frozen=True)
class Part:
    """One part: its file and its document."""

    path: Path
    doc: dict[str, Any]

    @property
    def nodes(self) -> list[dict[str, Any]]:
        compare = self.doc.get("compare") or {}
        nodes: list[dict[str, Any]] = compare.get("nodes") or []
        return nodes

    @property
    def shards(self) -> set[tuple[int, int]]:
        """The (step, rank) pairs this part compared."""
        return {(int(n["step"]), int(n["rank"])) for n in self.nodes}


def load_part(path: str | Path) -> Part:
    """Read one part; a file that is not a document of this version is an error naming it."""
    from pytest_accuracy.dumps.jsonfile import read_json  # size and number limits, as dumps

    file = Path(path)
    doc = read_json(file)
    if not isinstance(doc, dict) or "version" not in doc or "verdict" not in doc:
        raise AccuracyInputError(file, "not a pytest-accuracy --acc-json document "
                                       "(no version or verdict)")
    if doc["version"] != DOCUMENT_VERSION:
        raise AccuracyInputError(file, f"document version {doc['version']!r}; this "
                                       f"pytest-accuracy merges version {DOCUMENT_VERSION}")
    check_part(doc, file)  # types, ranges and depth: named errors, not a traceback later
    return Part(file, doc)


def merge_files(paths: Sequence[str | Path], *, steps: Set[int] | None = None,
                ranks: Set[int] | None = None) -> dict[str, Any]:
    """The merged document of the parts at ``paths`` (see ``merge_parts``)."""
    if not paths:
        raise AccuracyInputError("--acc-merge", "no parts to merge")
    return merge_parts([load_part(p) for p in paths], steps=steps, ranks=ranks)


def merge_parts(parts: Sequence[Part], *, steps: Set[int] | None = None,
                ranks: Set[int] | None = None) -> dict[str, Any]:
    """One document: the verdict over all parts, the earliest first divergence, coverage
    summed, every node (in execution order per step and rank) and a per-rank table.

    Parts must come from the same inputs and criteria and hold disjoint (step, rank) shards.
    Every shard of ``steps`` x ``ranks`` (default: every step and rank some part holds)
    must be in a part, or the merge fails: a CI job whose part went missing never passes.
    """
    _check_same(parts, "inputs")
    _check_same(parts, "criteria")
    _check_disjoint(parts)
    compare = _merged_compare(parts)
    missing = _missing_shards(parts, steps, ranks)
    reasons = _fail_reasons(parts, compare)
    if missing:
        shown = ", ".join(f"step {s} rank {r}" for s, r in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        reasons.append(f"no part holds {shown}{more}: a part is missing or its selection "
                       f"matched nothing")
    sections: dict[str, Any] = {"compare": compare}
    for key in sorted({k for p in parts for k in p.doc} - _TOP_KEYS):
        sections[key] = _same_section(parts, key)
    sections["merge"] = {
        "parts": [_part_summary(p) for p in parts],
        "missing": [list(m) for m in missing],
        "fail_reasons": reasons,
    }
    return build_document(verdict="fail" if reasons else "pass", inputs=parts[0].doc["inputs"],
                          criteria=parts[0].doc["criteria"], sections=sections)


_TOP_KEYS = frozenset({"version", "plugin_version", "verdict", "inputs", "criteria", "compare",
                       "merge"})


def _check_same(parts: Sequence[Part], key: str) -> None:
    first = parts[0]
    for part in parts[1:]:
        if part.doc.get(key) != first.doc.get(key):
            diff = _first_difference(first.doc.get(key), part.doc.get(key))
            raise AccuracyInputError(
                part.path, f"its {key} differ from those of {first.path} ({diff}); parts must "
                           f"come from one command line that differs only in --acc-ranks and "
                           f"--acc-steps-select")


def _first_difference(a: Any, b: Any, where: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{where}.{k}" if where else str(k))
    return f"{where or 'value'}: {a!r} vs {b!r}"


def _check_disjoint(parts: Sequence[Part]) -> None:
    owner: dict[tuple[int, int], Path] = {}
    for part in parts:
        for shard in sorted(part.shards):
            if shard in owner:
                raise AccuracyInputError(
                    part.path, f"step {shard[0]} rank {shard[1]} is also in {owner[shard]}: "
                               f"shards must not overlap (give each CI job its own --acc-ranks "
                               f"/ --acc-steps-select)")
            owner[shard] = part.path


def _missing_shards(parts: Sequence[Part], steps: Set[int] | None, ranks: Set[int] | None
                    ) -> list[tuple[int, int]]:
    held = {shard for p in parts for shard in p.shards}
    if not held and steps is None and ranks is None:
        return []  # nothing was sharded (no compare section in any part)
    want_steps = steps if steps is not None else {s for s, _ in held}
    want_ranks = ranks if ranks is not None else {r for _, r in held}
    check_shard_count(want_steps, want_ranks)
    return sorted({(s, r) for s in want_steps for r in want_ranks} - held)


def _merged_compare(parts: Sequence[Part]) -> dict[str, Any] | None:
    compares = [p.doc["compare"] for p in parts if p.doc.get("compare")]
    if not compares:
        return None
    # Each (step, rank) comes from one part, whose node list is in execution order already.
    nodes = sorted((n for c in compares for n in c.get("nodes") or []),
                   key=lambda n: (int(n["step"]), int(n["rank"])))
    first = _earliest(c.get("first_divergence") for c in compares)
    carry_across_shards(nodes)
    for node in nodes:
        # A part flags its own first divergence; only the earliest over all parts stays flagged.
        if "first_divergence" in node:
            node["first_divergence"] = _is(node, first)
    extra = {k: v for c in compares for k, v in c.items() if k not in _COMPARE_KEYS}
    return {**extra,
            "first_divergence": first,
            "first_nonfinite": _earliest(c.get("first_nonfinite") for c in compares),
            "coverage": summed_coverage(c.get("coverage") for c in compares),
            "nodes": nodes,
            "ranks": rank_table(nodes)}


def carry_across_shards(nodes: list[dict[str, Any]]) -> None:
    """A shard cannot see divergence in the shards before it: a node that failed there only
    because its inputs or a parameter differed ("between", "parameter", no finding of its
    own: perhaps updated by the earlier divergence's gradients) or because a parameter
    changed after an identical step (an update, perhaps by the earlier divergence's gradients)
    carries the earlier divergence, as in one run over all shards; so does the same call
    making a local error again in a later step's shard."""
    latest: str | None = None
    made: dict[tuple[Any, Any], dict[str, Any]] = {}  # (rank, name) -> its local-error failure
    for node in nodes:
        if node.get("status") == "carried" and latest is not None:
            node["carried_from"] = latest  # as one run's summary names it
        if node.get("status") != "fail":
            continue
        if node.get("finding") == "local_error":
            earlier = made.setdefault((node.get("rank"), node.get("npu_name")), node)
            if earlier is not node and earlier.get("step", 0) < node.get("step", 0):
                node["status"], node["first_divergence"] = "carried", False
                node["carried_from"] = (f"{earlier.get('npu_name')} (step {earlier.get('step')}, "
                                        f"rank {earlier.get('rank')})")
                continue
        # an update finding, too, holds only when nothing diverged earlier in the whole run
        if latest is not None and (node.get("finding") == "update" or (
                node.get("divergence_kind") in ("between", "parameter")
                and not node.get("finding"))):
            node["status"], node["carried_from"] = "carried", latest
            node["first_divergence"] = False
            node["findings"] = [f for f in node.get("findings") or [] if f.get("kind") != "update"]
            node["finding"] = node["findings"][0]["kind"] if node["findings"] else None
        else:
            latest = node.get("npu_name")


def _earliest(candidates: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Causal order (``divergence.causal_key``); shards never share a (step, rank)."""
    from pytest_accuracy.compare.divergence import causal_key

    found = [c for c in candidates if c]
    return min(found, key=causal_key) if found else None


def _is(node: dict[str, Any], first: dict[str, Any] | None) -> bool:
    return first is not None and (node["step"], node["rank"], node.get("npu_name")) == (
        first["step"], first["rank"], first.get("npu_name"))


def summed_coverage(coverages: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    found = [c for c in coverages if c]
    if not found:
        return None
    matched = sum(int(c["matched"]) for c in found)
    total = sum(int(c["total"]) for c in found)
    summed = {"matched": matched, "total": total,
              "matched_share": matched / total if total else 0.0,
              "min_matched": max(float(c["min_matched"]) for c in found)}
    if all("bench_total" in c for c in found):  # shards of one run cover disjoint ranks/steps
        summed["bench_matched"] = sum(int(c["bench_matched"]) for c in found)
        summed["bench_total"] = sum(int(c["bench_total"]) for c in found)
    return summed


def rank_table(nodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (step, rank): pass / fail / neutral counts and the first node that is not a pass."""
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for node in nodes:
        key = (int(node["step"]), int(node["rank"]))
        row = rows.setdefault(key, {"step": key[0], "rank": key[1], "pass": 0, "fail": 0,
                                    "neutral": 0, "first_failing": None})
        status = str(node["status"])
        if status == "pass":
            row["pass"] += 1
        elif status in NEUTRAL:
            row["neutral"] += 1
        else:
            row["fail"] += 1
            if row["first_failing"] is None:
                row["first_failing"] = node.get("npu_name")
    return [rows[k] for k in sorted(rows)]


def _fail_reasons(parts: Sequence[Part], compare: dict[str, Any] | None) -> list[str]:
    reasons = [f"{p.path} failed" for p in parts if p.doc["verdict"] != "pass"]
    reasons += [f"{p.path} says pass but checked nothing (no compared node, loss, config or "
                "precheck result)" for p in parts
                if p.doc["verdict"] == "pass" and not _checked_something(p.doc)]
    if compare:
        bad = sum(row["fail"] for row in compare["ranks"])
        if bad:
            reasons.append(f"{bad} compared nodes did not pass")
        cov = compare["coverage"]
        if cov and (cov["matched"] == 0 or cov["matched_share"] < cov["min_matched"]):
            reasons.append(f"matched {cov['matched']} of {cov['total']} NPU nodes over all "
                           f"parts (at least {cov['min_matched']:.0%} required)")
    return reasons


def _checked_something(doc: dict[str, Any]) -> bool:
    """Evidence in a part: a node compared, or a loss, config or precheck section."""
    if any(doc.get(key) for key in ("loss", "config", "precheck")):
        return True
    compare = doc.get("compare") or {}
    nodes = compare.get("nodes") if isinstance(compare, dict) else None
    return any(isinstance(n, dict) and n.get("status") in ("pass", "fail", "carried", "waived")
               for n in nodes or [])


def _same_section(parts: Sequence[Part], key: str) -> Any:
    """Loss, config and precheck sections are not sharded: every part that has one agrees."""
    having = [p for p in parts if p.doc.get(key) is not None]
    for part in having[1:]:
        if part.doc[key] != having[0].doc[key]:
            raise AccuracyInputError(part.path, f"its {key} section differs from that of "
                                                f"{having[0].path}; only compare is sharded")
    return having[0].doc[key] if having else None


def _part_summary(part: Part) -> dict[str, Any]:
    shards = part.shards
    return {"file": str(part.path), "verdict": part.doc["verdict"],
            "plugin_version": part.doc.get("plugin_version"),
            "steps": sorted({s for s, _ in shards}), "ranks": sorted({r for _, r in shards}),
            "nodes": len(part.nodes)}


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The terminal summary of a merged document: verdict, first divergence, coverage, ranks."""
    merge = doc.get("merge") or {}
    parts = merge.get("parts") or []
    lines = [f"Merged {len(parts)} part{'' if len(parts) == 1 else 's'}: verdict {doc['verdict']}."]
    lines += [f"  {r}" for r in merge.get("fail_reasons") or []]
    compare = doc.get("compare") or {}
    first = compare.get("first_divergence")
    if first:
        lines.append(first_sentence(first))
    elif any(row["fail"] for row in compare.get("ranks") or []):
        lines.append("Compare failed; no part names its first divergence.")
    cov = compare.get("coverage")
    if cov:
        lines.append(f"Matched {cov['matched']} of {cov['total']} NPU nodes "
                     f"({cov['matched_share']:.1%}; at least {cov['min_matched']:.0%} required).")
    if (compare.get("compared_on") or {}).get("note"):
        lines.append(str(compare["compared_on"]["note"]))
    if compare.get("ranks"):
        lines.append(TABLE_HEADER)
        lines += [f"{r['step']:>4} {r['rank']:>4} {r['pass']:>5} {r['fail']:>5} "
                  f"{r['neutral']:>5}  {r['first_failing'] or '-'}" for r in compare["ranks"]]
    return [escape_line(line) for line in lines]  # names and paths come from the parts


def first_sentence(first: dict[str, Any]) -> str:
    """The first divergence in words, as the single-run summary puts it."""
    from pytest_accuracy.compare.divergence import divergence_sentence

    return divergence_sentence(first)
