"""Resource limits for reading untrusted inputs: one place, each overridable by an env var."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from pytest_accuracy.errors import AccuracyInputError

__all__ = ["CONFIG_ROOT_ENV", "LIMITS", "Limit", "LimitError", "TensorBudget", "check_limits",
           "limit"]

#: A MindFormers `base_config` must lie under the config's own directory, or under this one.
CONFIG_ROOT_ENV = "ACC_CONFIG_ROOT"


@dataclass(frozen=True)
class Limit:
    """A named limit: its environment variable, built-in default and what it bounds."""

    env: str
    default: int
    bounds: str


# Every limit the readers enforce.  Past one, the reader raises AccuracyInputError naming
# the file, the limit and its variable (or, in precheck, skips the item with that reason).
LIMITS: dict[str, Limit] = {
    "tensor_bytes": Limit(
        "ACC_MAX_TENSOR_BYTES", 4 << 30, "bytes of one tensor or of its storage"
    ),
    "run_tensor_bytes": Limit(
        "ACC_MAX_RUN_TENSOR_BYTES", 256 << 30, "tensor bytes loaded by one process in total"
    ),
    "inflate_bytes": Limit(
        "ACC_MAX_INFLATE_BYTES", 256 << 20,
        "decompressed bytes of a compressed .pt member; torch.save never compresses",
    ),
    "expand_bytes": Limit(
        "ACC_MAX_EXPAND_BYTES", 64 << 20,
        "bytes a strided view (stride 0, overlaps) may add beyond its storage",
    ),
    "npy_header_bytes": Limit("ACC_MAX_NPY_HEADER_BYTES", 64 << 10, "bytes of a .npy header"),
    "json_number_chars": Limit("ACC_MAX_JSON_NUMBER_CHARS", 64, "characters of a JSON number"),
    "json_bytes": Limit("ACC_MAX_JSON_BYTES", 2 << 30, "bytes of a dump.json"),
    "dump_nodes": Limit(
        "ACC_MAX_DUMP_NODES", 1_000_000, "nodes (records under 'data') of one dump.json"
    ),
    "construct_depth": Limit(
        "ACC_MAX_CONSTRUCT_DEPTH", 1000, "depth of the module tree in construct.json"
    ),
    "yaml_depth": Limit("ACC_MAX_YAML_DEPTH", 64, "nesting depth of a YAML document"),
    "yaml_nodes": Limit(
        "ACC_MAX_YAML_NODES", 1_000_000, "YAML nodes after expanding every alias"
    ),
    "yaml_aliases": Limit("ACC_MAX_YAML_ALIASES", 10_000, "alias references in a YAML file"),
    "message_chars": Limit(
        "ACC_MAX_MESSAGE_CHARS", 2000, "characters of input text quoted in one error message"
    ),
    "precheck_bytes": Limit(
        "ACC_MAX_PRECHECK_BYTES", 2 << 30,
        "bytes one precheck replay may allocate: inputs, reference and torch run",
    ),
    "pickle_bytes": Limit("ACC_MAX_PICKLE_BYTES", 1 << 20, "bytes of a .pt file's data.pkl"),
    "log_line_bytes": Limit(
        "ACC_MAX_LOG_LINE_BYTES", 1 << 20, "bytes of one line of a training log"
    ),
    "document_depth": Limit(
        "ACC_MAX_DOCUMENT_DEPTH", 64, "nesting depth of a merged --acc-json part"
    ),
    "merge_shards": Limit(
        "ACC_MAX_MERGE_SHARDS", 1_000_000, "steps x ranks a merge checks for missing shards"
    ),
    "mapping_rules": Limit(
        "ACC_MAX_MAPPING_RULES", 10_000, "entries of a mapping YAML file"
    ),
    "mapping_name_chars": Limit(
        "ACC_MAX_MAPPING_NAME_CHARS", 4096, "characters of a node name after renaming rules"
    ),
    "csv_bytes": Limit(
        "ACC_MAX_CSV_BYTES", 512 << 20, "bytes of an msprobe acc_check result or details CSV"
    ),
}


class LimitError(ValueError):
    """A limit's environment variable holds no positive integer."""


def limit(name: str) -> int:
    """The current value of limit ``name``: its env var when set, else the default.

    Read on every call so that a test or a CI job can change it without re-importing. A value
    that is no positive integer (``1e3``, ``-1``) raises LimitError naming the variable: a
    limit silently replaced by its default is not the one the user set.
    """
    spec = LIMITS[name]
    raw = os.environ.get(spec.env, "").strip()
    if not raw:
        return spec.default
    digits = raw.replace("_", "")
    if not (digits.isascii() and digits.isdigit()) or int(digits) <= 0:
        raise LimitError(f"{spec.env}={raw[:40]!r} is not a positive integer ({spec.bounds}; "
                         f"the default is {spec.default}): set a whole number, or unset it")
    return int(digits)


def check_limits() -> None:
    """Every limit's variable read once: the first bad one raises LimitError."""
    for name in LIMITS:
        limit(name)


def over(name: str, value: int) -> str:
    """The sentence for ``value`` past limit ``name`` (for error messages and skip reasons)."""
    spec = LIMITS[name]
    return f"{value} is over the limit {limit(name)} ({spec.bounds}; {spec.env} raises it)"


class TensorBudget:
    """Counts the tensor bytes this process has loaded, against ``run_tensor_bytes``."""

    def __init__(self) -> None:
        self._used = 0
        self._lock = threading.Lock()

    def take(self, path: str | Path, nbytes: int) -> None:
        """Book ``nbytes`` for ``path`` or raise when the run's total would pass the limit."""
        with self._lock:
            total = self._used + nbytes
            if total > limit("run_tensor_bytes"):
                raise AccuracyInputError(
                    path, f"tensor bytes loaded in this run: {over('run_tensor_bytes', total)}"
                )
            self._used = total

    def reset(self) -> None:
        with self._lock:
            self._used = 0


RUN_BUDGET = TensorBudget()
