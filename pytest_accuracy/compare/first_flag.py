"""The first node before a given one that truly diverges, its metadata flag checked once."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence

from pytest_accuracy.compare.provenance import Provenance
from pytest_accuracy.dumps.model import Call, Dump


class VerifiedFlags:
    """Statistics flag a node as diverging from metadata alone (a Norm summed in another
    order, a Mean near zero): such a flag is a lead, not a divergence. A node whose inputs
    cannot be traced carries the first divergence before it only where that node's outputs,
    compared, do diverge; else the error entered where the dump did not record it. Before a
    node means in an earlier step (any rank), or earlier in its own step and rank: another
    rank's error reaches it within a step only through a collective it records. Each flagged
    node is diagnosed at most once, for all the nodes that ask."""

    def __init__(self, prov: Provenance, diverges: Callable[[int], bool],
                 entries: Sequence[tuple[Dump, Call]]) -> None:
        self._prov = prov
        self._diverges = diverges
        self._entries = entries
        self._flagged = [i for i, flag in enumerate(prov.flagged) if flag]
        self._verdict: dict[int, bool] = {}  # flagged node -> its origin truly diverges
        # re-entered: diagnosing a flagged node asks for the divergence before it
        self._lock = threading.RLock()

    def before(self, index: int) -> int | None:
        """The origin of the first truly diverging node before ``index``, if any."""
        with self._lock:
            first = self._prov.first_flag_before[index]
            if first is None:
                return None
            here = self._entries[index][0]
            k = bisect.bisect_left(self._flagged, first)
            while k < len(self._flagged) and self._flagged[k] < index:
                i = self._flagged[k]
                k += 1
                there = self._entries[i][0]
                if there.step == here.step and there.rank != here.rank:
                    continue
                verdict = self._verdict.get(i)
                if verdict is None:
                    # asked again while it is diagnosed (re-entered): not a divergence yet
                    self._verdict[i] = False
                    verdict = self._verdict[i] = self._diverges(self._prov.origin(i))
                if verdict:
                    return self._prov.origin(i)
        return None
