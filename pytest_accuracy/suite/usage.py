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


# (NPU setting, bench setting, what needs both, the NPU side alone is a job of its own)
_PAIRS = (("npu", "bench", "a compare needs both dumps", True),
          ("npu_log", "bench_logs", "the migration standard compares two logs", False),
          ("npu_config", "bench_config", "the config checklist compares two configs", False))


def missing_dump_message(config: pytest.Config) -> str | None:
    """One side of a pair of inputs given without the other: which is missing and how to
    add it. An NPU dump alone is checked for overflow (or prechecked)."""
    for npu_key, bench_key, why, npu_alone in _PAIRS:
        npu, bench = setting(config, npu_key), setting(config, bench_key)
        if bool(npu) == bool(bench):
            continue
        if npu and npu_alone:
            continue
        given, missing = (npu_key, bench_key) if npu else (bench_key, npu_key)
        return (f"{_flag(given)} is given but {_flag(missing)} is missing: {why}; add "
                f"{_flag(missing)}=PATH")
    return None


def _flag(key: str) -> str:
    return "--acc-" + key.replace("_", "-").removesuffix("s")


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


def run_mode(config: pytest.Config) -> str | None:
    """The checks this run makes, and the inputs not given (the header and summary say it:
    an NPU dump without a bench is an overflow check, not a compare that passed)."""
    if setting(config, "merge"):
        return "accuracy: merge of --acc-json parts"
    done, missing = [], []
    npu, bench = setting(config, "npu"), setting(config, "bench")
    if npu:
        from pytest_accuracy.suite.replica_items import wanted

        precheck = setting(config, "precheck")
        parts = ["compare of two dumps" if bench else "" if precheck else "overflow check",
                 "precheck" if precheck else "",
                 "data-parallel replica check" if wanted(config) else ""]
        checks = " and ".join(p for p in parts if p)
        done.append(checks if bench else
                    f"{checks} of the NPU dump only: no --acc-bench, nothing is compared")
    else:
        missing.append("dumps (--acc-npu, --acc-bench)")
    if setting(config, "npu_log") and setting(config, "bench_logs"):
        done.append("migration standard on the logs")
    else:
        missing.append("training logs (--acc-npu-log, --acc-bench-log)")
    if setting(config, "npu_config") and setting(config, "bench_config"):
        done.append("config checklist")
    else:
        missing.append("configs (--acc-npu-config, --acc-bench-config)")
    if not done:
        return None
    return (f"accuracy: {'; '.join(done)}"
            + (f" (not given: {', '.join(missing)})" if missing else ""))
