"""Errors raised for unreadable or unsafe inputs (dumps, logs, configs)."""

from __future__ import annotations

from pathlib import Path


class AccuracyInputError(Exception):
    """An input file cannot be used; the message names the file and what is wrong.

    Raised by every reader in the core.  The plugin turns it into a collection
    error (for metadata such as dump.json) or an item error (for tensor data),
    never an INTERNALERROR.
    """

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class MissingExtraError(ImportError):
    """An optional dependency is needed; the message names the extra to install."""


def require(module: str, extra: str) -> object:
    """Import an optional module or raise a one-line error naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{module} is not installed: pip install 'pytest-accuracy[{extra}]'"
        ) from exc
