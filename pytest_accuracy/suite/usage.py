"""Set-up mistakes named in one line: a mistyped option, a missing dump, a node id that does not
exist, a marker path that is not there."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

import pytest

from pytest_accuracy.marker import PATH_KEYS, marker_kwargs
from pytest_accuracy.options import OPTIONS
from pytest_accuracy.settings import setting


def unknown_option_message(token: str) -> str:
    """``--acc-bnech=x``: the usage error, with the closest ``--acc-*`` option."""
    name = token.split("=", 1)[0]
    close = difflib.get_close_matches(name, [o.flag for o in OPTIONS], n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else "; see pytest --help, group 'accuracy'"
    return f"unrecognized option {name}{hint}"


def unknown_ini_message(config: pytest.Config) -> str | None:
    """``acc_bnech = x`` in the ini file: the usage error, with the closest ``acc_*`` key (a
    warning would let the run go on as another mode, an NPU-only overflow check that passes)."""
    find = getattr(config, "_get_unknown_ini_keys", None)
    unknown = sorted(k for k in (find() if find is not None else ()) if k.startswith("acc_"))
    if not unknown:
        return None
    keys = [o.dest for o in OPTIONS]
    where = f" in {config.inipath}" if config.inipath else ""
    lines = []
    for key in unknown:
        close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else "; see pytest --help, group 'accuracy'"
        lines.append(f"unknown ini key {key}{where}{hint}")
    return "\n".join(lines)


def missing_dump_message(config: pytest.Config) -> str | None:
    """A bench dump without the NPU dump: what is missing and how to add it."""
    npu, bench = setting(config, "npu"), setting(config, "bench")
    if not bench or npu:  # an NPU dump alone is checked for overflow (or prechecked)
        return None
    return ("--acc-bench is given but --acc-npu is missing: a compare needs both dumps; add "
            "--acc-npu=PATH")


def unknown_node_ids(selected: Iterable[str], items: list[pytest.Item]) -> str | None:
    """``accuracy::...`` arguments that select no generated item, with the closest ids."""
    ids = [i.nodeid for i in items if i.nodeid.startswith("accuracy::")]
    lines = []
    for wanted in selected:
        if wanted == "accuracy" or any(i == wanted or i.startswith(wanted + "::") for i in ids):
            continue
        close = difflib.get_close_matches(wanted, ids, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        lines.append(f"not found: {wanted}{hint}")
    return "\n".join(lines) or None


def marker_path_problem(item: pytest.Item) -> str | None:
    """A path an @accuracy marker names that does not exist (after resolving it against the
    test file's directory)."""
    kwargs = marker_kwargs(item)
    for key in PATH_KEYS:
        value = kwargs.get(key)
        for path in value if isinstance(value, (list, tuple)) else [value]:
            if path is not None and not Path(str(path)).exists():
                return (f"@accuracy({key}=...): {path} does not exist (relative marker paths "
                        f"are read from the test file's directory, {item.path.parent})")
    return None
