"""The first node before a given one that truly diverges, its metadata flag checked once."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pytest_accuracy.compare.provenance import Provenance


class VerifiedFlags:
    """Statistics flag a node as diverging from metadata alone (a Norm summed in another
    order, a Mean near zero): such a flag is a lead, not a divergence. A node whose inputs
    cannot be traced carries the first divergence before it only where that node's outputs,
    compared, do diverge; else the error entered where the dump did not record it. Each
    flagged node is diagnosed at most once, in run order, for all the nodes that ask."""

    def __init__(self, prov: Provenance, diverges: Callable[[int], bool]) -> None:
        self._prov = prov
        self._diverges = diverges
        self._next = 0  # every flagged node before this one was checked
        self._found: tuple[int, int] | None = None  # (that node, its origin), once known
        # re-entered: diagnosing a flagged node asks for the divergence before it
        self._lock = threading.RLock()

    def before(self, index: int) -> int | None:
        """The origin of the first truly diverging node before ``index``, if any."""
        with self._lock:
            prov = self._prov
            first = prov.first_flag_before[index]
            if first is None:
                return None
            self._next = max(self._next, first)
            while self._found is None and self._next < index:
                i = self._next
                self._next += 1
                if prov.flagged[i] and self._diverges(prov.origin(i)):
                    self._found = i, prov.origin(i)
            found = self._found
        return found[1] if found is not None and found[0] < index else None
