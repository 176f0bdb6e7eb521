"""The module of one layer whose class differs from its counterparts in the run's other layers."""

from __future__ import annotations

import re

from pytest_accuracy.dumps.model import Call, Dump

_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.|$)")
_MIN_PEERS = 1  # asked only where an error entered: one other layer is evidence


def odd_one_inside(dump: Dump, module: Call) -> tuple[Call, str] | None:
    """The one module call inside ``module`` (itself included) running another class than
    the same place in every other layer of this run (layer 0's softmax is ``Fp16Softmax``
    where layers 1..n hold ``Softmax``), with that class; None when there is not exactly
    one. The run is compared with itself: names of the other codebase play no part."""
    if module.kind != "module" or not module.scope:
        return None
    classes: dict[str, dict[str, str]] = {}  # place (layer indices blanked) -> scope -> class
    for call in dump.calls:
        if call.kind == "module" and call.direction == "forward" and call.scope:
            classes.setdefault(_INDEX.sub("#", call.scope), {})[call.scope] = call.op
    inside = (module.scope, f"{module.scope}.")
    found: list[tuple[Call, str]] = []
    seen: set[str] = set()
    for call in dump.calls:
        if (call.kind != "module" or call.direction != "forward" or call.scope in seen
                or not (call.scope == inside[0] or call.scope.startswith(inside[1]))):
            continue
        seen.add(call.scope)
        peers = {s: c for s, c in classes.get(_INDEX.sub("#", call.scope), {}).items()
                 if s != call.scope}
        others = set(peers.values())
        if len(peers) >= _MIN_PEERS and len(others) == 1 and call.op not in others:
            found.append((call, others.pop()))
    return found[0] if len(found) == 1 else None
