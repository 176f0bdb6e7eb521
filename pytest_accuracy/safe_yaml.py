"""The one YAML loader for input files: safe tags only, bounded depth, aliases and expanded size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over

__all__ = ["safe_load"]


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses deep nesting, many aliases and alias explosion (billion laughs).

    PyYAML shares an aliased object instead of copying it, so loading a billion-laughs file
    is cheap; walking, merging or printing the result is not.  The expanded node count is
    what every later walk pays, so that is what is bounded.
    """

    def __init__(self, stream: str, source: str) -> None:
        super().__init__(stream)
        self.source = source
        self.depth = 0
        self.aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > limit("yaml_aliases"):
                self._refuse(f"YAML aliases: {over('yaml_aliases', self.aliases)}")
        self.depth += 1
        try:
            if self.depth > limit("yaml_depth"):
                self._refuse(f"YAML nesting depth: {over('yaml_depth', self.depth)}")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        _expanded_size(node, {}, set(), self)
        return node

    def _refuse(self, problem: str) -> None:
        raise AccuracyInputError(self.source, problem)


def _expanded_size(node: Any, sizes: dict[int, int], active: set[int], ld: _BoundedLoader) -> int:
    """Nodes ``node`` stands for once every alias is expanded (memoised: linear in the file)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in active:
        ld._refuse("a YAML alias refers to a node that contains it (recursive structure)")
    total = 1
    if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
        active.add(key)
        children = node.value if isinstance(node, yaml.SequenceNode) else [
            part for pair in node.value for part in pair
        ]
        for child in children:
            total += _expanded_size(child, sizes, active, ld)
            if total > limit("yaml_nodes"):
                ld._refuse(f"YAML nodes after alias expansion: {over('yaml_nodes', total)}")
        active.discard(key)
    sizes[key] = total
    return total


def safe_load(text: str, source: str | Path) -> Any:
    """``yaml.safe_load(text)`` within the YAML limits; ``source`` names the file in errors.

    Raises AccuracyInputError past a limit and yaml.YAMLError for invalid YAML, as
    ``yaml.safe_load`` does, so callers keep their own messages for bad syntax.
    """
    loader = _BoundedLoader(text, str(source))
    try:
        return loader.get_single_data()
    except RecursionError:
        raise AccuracyInputError(str(source), "YAML nests too deep to read") from None
    finally:
        loader.dispose()
