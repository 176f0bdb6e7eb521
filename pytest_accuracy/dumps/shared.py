"""One object for each distinct value a reader meets again and again."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V", bound=Hashable)


class SharedValues(Generic[V]):
    """One object for each distinct value a reader meets again and again (a dtype signature,
    an API name), so that 100k calls share a few hundred; up to ``bound`` values are kept,
    as a hostile dump could make a new one for every call."""

    def __init__(self, bound: int) -> None:
        self._known: dict[V, V] = {}
        self._bound = bound
        # the kept value, or None: ``shared.known(v) or shared(v)`` spares a hot loop (a
        # reader's 200k calls a side) the method call where the value is kept already
        self.known: Callable[[V], V | None] = self._known.get

    def __call__(self, value: V) -> V:
        known = self._known.get(value)
        if known is not None:
            return known
        if len(self._known) < self._bound:
            self._known[value] = value
        return value

    def __len__(self) -> int:
        return len(self._known)
