"""Value coercion and formatting for config checks: one canonical form per type, lenient readers."""

from __future__ import annotations

import math
from collections.abc import Mapping

_DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
    "float64": "float64",
    "fp64": "float64",
    "double": "float64",
}
# Framework prefixes seen in configs and argument dumps: mstype.float16, torch.bfloat16, ...
_DTYPE_PREFIXES = ("mindspore.", "mstype.", "ms.", "torch.", "numpy.", "np.")
_TRUE = frozenset({"true", "on", "yes", "1"})
_FALSE = frozenset({"false", "off", "no", "0", "none", ""})


def is_shell_variable(value: object) -> bool:
    """A `$VAR` / `${VAR}` left unexpanded by the command-line reader."""
    return isinstance(value, str) and value.strip().startswith("$")


def to_float(value: object) -> float:
    # YAML 1.1 reads 1e-5 (no dot) as a string, so numeric strings count as numbers.
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is a boolean, not a number")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return float(value.strip())
    raise ValueError(f"{value!r} is not a number")


def to_int(value: object) -> int:
    number = to_float(value)
    if not number.is_integer():
        raise ValueError(f"{value!r} is not an integer")
    return int(number)


def to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"{value!r} is not a boolean")


def to_dtype(value: object) -> str:
    text = str(value).strip().lower()
    for prefix in _DTYPE_PREFIXES:
        text = text.removeprefix(prefix)
    if text not in _DTYPES:
        raise ValueError(f"{value!r} is not a dtype name")
    return _DTYPES[text]


def canonical(value: object, kind: str, values: Mapping[str, str]) -> object:
    """The canonical form of `value` for a key of type `kind`; ValueError when it cannot be read."""
    if isinstance(value, str) and value.strip().lower() in values:
        value = values[value.strip().lower()]
    if kind == "float":
        return to_float(value)
    if kind == "int":
        return to_int(value)
    if kind == "bool":
        return to_bool(value)
    if kind == "dtype":
        return to_dtype(value)
    return str(value).strip().lower()


def same(a: object, b: object, kind: str, tolerance: float) -> bool:
    """Canonical values agree; floats within a relative tolerance."""
    if kind == "float" and isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=tolerance, abs_tol=0.0)
    return a == b


def number(value: object) -> float | None:
    """Lenient: the number in `value`, or None (absent, variable, text)."""
    try:
        return to_float(value)
    except ValueError:
        return None


def integer(value: object) -> int | None:
    try:
        return to_int(value)
    except ValueError:
        return None


def truthy(value: object) -> bool:
    """Lenient truth of a flag: booleans, 'true'/'false', numbers, per-stage lists like [2, 2]."""
    if isinstance(value, list | tuple):
        return any(truthy(v) for v in value)
    try:
        return to_bool(value)
    except ValueError:
        return value is not None and number(value) != 0


def fmt(value: object) -> str:
    """How a value reads in a message: repr for numbers (1e-05), plain text for strings."""
    return value if isinstance(value, str) else repr(value)
