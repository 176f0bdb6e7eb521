"""A pipeline stage seen in a run with fewer stages: the bench's calls the stage makes, renamed
as the stage's own process names them.

An NPU stage holds a contiguous part of the model (Megatron: stage 1 of 2 holds layers L/2..L-1
as ``layers.0..``, its call counters start at 0). A bench rank holding that part and more (fewer
pipeline stages) makes the same calls, in the same order, among its own: its forward calls are
searched for the stage's sequence of operations (collectives and point-to-point transfers left
out: they belong to the layout), and each op's calls in that segment take the stage's names in
order (``Functional.linear.2`` becomes the stage's ``Functional.linear.0``, ``Module.layers.1``
its ``Module.layers.0``); backward and parameter-gradient calls follow their forward. Calls the
stage does not make are left out of the view.
"""

from __future__ import annotations

import re
from dataclasses import replace

from pytest_accuracy.dumps.model import Call, Dump, is_collective
from pytest_accuracy.dumps.msprobe import module_scope, parse_node_name

OpKey = tuple[str, str, str]  # prefix, op, module path without its numbers
_DIGITS = re.compile(r"\d+")


def stage_view(bench: Dump, stage: Dump, place: float = 0.0) -> Dump | None:
    """The calls of ``bench`` that ``stage`` makes, under the stage's names; None where the
    stage's sequence of operations is not a segment of the bench's. ``place``: where the
    stage sits in the bench's model, 0 (first) to 1 (last), for a sequence found twice."""
    mine, theirs = _forwards(stage), _forwards(bench)
    start = _segment(mine, theirs, place)
    if start is None:
        return None
    names = _renamed(mine, theirs[start:start + len(mine)])
    names |= _collectives(stage, bench, theirs, start, len(mine))
    calls = [_named(c, names) for c in bench.calls if _follows(c.name, names) is not None]
    note = (f"pipeline stage of rank {stage.rank}: bench rank {bench.rank}'s forward calls "
            f"{start}..{start + len(mine) - 1} (of {len(theirs)}, collectives left out)")
    return Dump(bench.path, bench.framework, bench.level, bench.mode, bench.step, bench.rank,
                calls, [*bench.notes, note])


def stages_joined(stages: list[Dump], whole: Dump) -> Dump | None:
    """The bench ranks of consecutive pipeline stages (one TP position, first stage first) as
    one process holding them all would name and order its calls, as ``whole`` (an NPU rank
    with fewer stages) does: each stage's forward operations are found in order among the
    whole's and take its names; the forwards come stage by stage, the backwards in reverse
    (the last stage's first). None where a stage is not found after the one before."""
    theirs, start = _forwards(whole), 0
    named: list[dict[str, str]] = []
    for stage in stages:
        mine = _forwards(stage)
        at = _segment(mine, theirs[start:], 0.0)
        if at is None:
            return None
        at += start
        names = _renamed(theirs[at:at + len(mine)], mine)  # the stage's -> whole's
        inside = _collectives(stage, whole, theirs, at, len(mine))  # whole's -> stage's
        named.append(names | {own: its for its, own in inside.items()})
        start = at + len(mine)
    _late_collectives(stages, whole, named)
    forwards: list[Call] = []
    backwards: list[Call] = []
    ranks: dict[str, tuple[int, ...]] = {}
    for stage, names in reversed(list(zip(stages, named, strict=True))):
        calls = [_named(c, names) for c in stage.calls if _follows(c.name, names) is not None]
        ranks.update((c.name, (stage.rank,)) for c in calls)
        back = next((k for k, c in enumerate(calls) if c.direction != "forward"), len(calls))
        forwards[:0] = calls[:back]
        backwards += calls[back:]
    calls = [replace(c, order=k) for k, c in enumerate(forwards + backwards)]
    first = stages[0]
    note = (f"bench ranks {', '.join(str(d.rank) for d in stages)}: pipeline stages joined as "
            f"rank {whole.rank}'s one stage names them")
    return Dump(first.path, first.framework, first.level, first.mode, first.step, first.rank,
                calls, [*first.notes, note], bench_ranks=tuple(d.rank for d in stages),
                call_ranks=ranks)


def _late_collectives(stages: list[Dump], whole: Dump, named: list[dict[str, str]]) -> None:
    """Collectives called during the backward (a column-parallel input's gradient all-reduced)
    paired op by op in order, the last stage's first as the backward runs; where the counts
    differ, none of that op."""
    def late(dump: Dump) -> list[Call]:
        back = next((c.order for c in dump.calls if c.direction != "forward"), None)
        return [c for c in dump.calls if is_collective(c) and c.direction == "forward"
                and back is not None and c.order > back]

    theirs = late(whole)
    mine = [(k, c) for k in reversed(range(len(stages))) for c in late(stages[k])]
    for op in {c.op for c in theirs}:
        ours = [(k, c) for k, c in mine if c.op == op]
        others = [c for c in theirs if c.op == op]
        if len(ours) == len(others):
            for (k, c), other in zip(ours, others, strict=True):
                named[k][c.name] = other.name


def operations(dump: Dump) -> list[OpKey]:
    """The dump's forward operations in order, the layout's collectives left out."""
    return [_key(c) for c in _forwards(dump)]


def _forwards(dump: Dump) -> list[Call]:
    return [c for c in dump.calls if c.direction == "forward" and c.kind != "params_grad"
            and not is_collective(c)]


def _key(call: Call) -> OpKey:
    """The op, and for a module its path with the layer numbers out (``layers.#.fc1``): a
    stage's ``final_norm`` is not a bench layer's ``norm``."""
    where = _DIGITS.sub("#", call.scope) if call.kind == "module" else ""
    return call.prefix, call.op, where


def _segment(mine: list[Call], theirs: list[Call], place: float) -> int | None:
    """Where the stage's operations sit among the bench's, exactly, in order (found more than
    once, as layers alike make them: the place nearest the stage's own)."""
    ops, found = [_key(c) for c in mine], [_key(c) for c in theirs]
    if not ops or len(ops) > len(found):
        return None
    room = len(found) - len(ops)
    starts = [s for s in range(room + 1)
              if found[s] == ops[0] and found[s:s + len(ops)] == ops]
    return min(starts, key=lambda s: abs(s - place * room)) if starts else None


def _renamed(mine: list[Call], segment: list[Call]) -> dict[str, str]:
    """Bench forward name -> the stage's: position by position (the same op at each)."""
    return {b.name: m.name for m, b in zip(mine, segment, strict=True)}


def _collectives(stage: Dump, bench: Dump, theirs: list[Call], start: int,
                 size: int) -> dict[str, str]:
    """The bench's collectives between the segment's first and last calls, paired in order
    with the stage's own of the same op (a bench at another TP size has others, or none)."""
    first, last = theirs[start].order, theirs[start + size - 1].order
    inside = [c for c in bench.calls if is_collective(c) and c.direction == "forward"
              and first <= c.order <= last]
    own = [c for c in stage.calls if is_collective(c) and c.direction == "forward"]
    names: dict[str, str] = {}
    for op in {c.op for c in inside}:
        pairs = zip([c for c in own if c.op == op], [c for c in inside if c.op == op],
                    strict=False)
        names.update({b.name: m.name for m, b in pairs})
    return names


_KINDS = (".backward", ".parameters_grad")


def _follows(name: str, names: dict[str, str]) -> str | None:
    """The stage's name for a bench call: its own, or its forward's with its kind."""
    if name in names:
        return names[name]
    for kind in _KINDS:
        head, sep, tail = name.rpartition(kind)
        if sep:
            forward = names.get(f"{head}.forward{tail}")
            if forward is not None:
                fhead, _, ftail = forward.rpartition(".forward")
                return f"{fhead}{kind}{ftail}"
    return None


def _named(call: Call, names: dict[str, str]) -> Call:
    new = _follows(call.name, names) or call.name
    parent = _follows(call.parent, names) if call.parent else None
    renamed = replace(call, name=new, parent=parent or call.parent)
    if new == call.name:
        return renamed
    _, _, _, _, index = parse_node_name(new)
    scope = module_scope(new) if call.kind in ("module", "params_grad") else call.scope
    return replace(renamed, index=index, scope=scope)
