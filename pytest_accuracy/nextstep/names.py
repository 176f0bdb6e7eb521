"""msprobe node names turned into config list entries, folder names and -k patterns."""

from __future__ import annotations

import hashlib
import os
import re

from pytest_accuracy.dumps.msprobe import module_scope, parse_node_name
from pytest_accuracy.nextstep.situation import Framework

MODULE_PREFIX: dict[Framework, str] = {"pytorch": "Module", "mindspore": "Cell"}
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
# what pytest's -k grammar takes in one identifier (pytest >= 7); anything else splits it
_K_IDENT = re.compile(r"[\w:+\-.\[\]\\/]+")
_K_KEYWORDS = {"and", "or", "not", "true", "false", "none"}
# msprobe 26.2.0 (FileCheckConst.FILE_VALID_PATTERN) refuses a config path or dump_path, after
# realpath, with any other character: a space in a folder's name stops PrecisionDebugger
_MSPROBE_PATH = re.compile(r"^[a-zA-Z0-9_.:/-]+$")


def is_module(name: str) -> bool:
    """A module/cell call or a parameters_grad node (both name a module path)."""
    return parse_node_name(name)[0] in ("module", "params_grad")


def module_path(name: str) -> str:
    """The module path of a module or parameters_grad node: ``layers.1.mlp``.

    ``module_scope`` keeps the class of a parameters_grad node (``layers.1.mlp.up.Linear``
    from ``Module.layers.1.mlp.up.Linear.parameters_grad.0``); the path here drops it.
    """
    if parse_node_name(name)[0] == "params_grad":
        return ".".join(name.split(".")[1:-3])
    return module_scope(name)


def module_entry(name: str, framework: Framework | None = None) -> str:
    """The msprobe ``list`` entry that selects a module and everything inside it at level mix.

    msprobe's mix scope opens a module's list window when an entry is a substring of the
    module's name and keeps it open for every API and submodule until the module ends, so
    ``Module.layers.1.mlp.`` dumps layers.1.mlp (forward, backward) and all inside it; the
    trailing dot keeps ``layers.1.mlp_gate`` and ``layers.11.mlp`` out. ``framework`` swaps
    the prefix (a MindSpore ``Cell.`` name asked of a PyTorch run).
    """
    prefix = name.split(".", 1)[0]
    if framework is not None:
        prefix = MODULE_PREFIX[framework]
    scope = module_path(name)
    return f"{prefix}.{scope}." if scope else f"{prefix}."


def api_entry(name: str) -> str:
    """The msprobe ``list`` entry that selects one API call, forward and backward, at L1.

    At L1 an entry selects every API whose name contains it: ``Functional.linear.3.`` takes
    ``Functional.linear.3.forward`` and ``.backward`` but not ``Functional.linear.30.forward``.
    """
    kind, _, prefix, op, index = parse_node_name(name)
    if kind != "api" or not op or not name.endswith((".forward", ".backward")):
        return name  # not msprobe's API naming: the name itself, matched as a substring
    return f"{prefix}.{op}.{index}."


def api_label(name: str) -> str:
    """An API call without its direction, for messages: ``Functional.linear.3``."""
    entry = api_entry(name)
    return entry[:-1] if entry.endswith(".") and entry != name else name


def module_label(name: str) -> str:
    """A module path with its prefix, for messages: ``Module.layers.1.mlp``."""
    return module_entry(name)[:-1]


def op_name(name: str) -> str:
    """The API's op as msprobe's acc_check white_list spells it: ``linear``."""
    kind, _, _, op, _ = parse_node_name(name)
    return op.rsplit(".", 1)[-1] if kind == "api" else ""


def safe_name(item_id: str, max_chars: int = 60) -> str:
    """A folder name for an item id: safe characters only, unique by a hash of the whole id."""
    digest = hashlib.sha1(item_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    stem = _SAFE.sub("_", item_id).strip("._-")[:max_chars].rstrip("._-")
    return f"{stem}-{digest}" if stem else f"item-{digest}"


def k_expression(text: str) -> str:
    """A pytest ``-k`` expression matching item names that contain ``text``.

    ``-k`` parses its argument: characters outside an identifier split ``text`` into pieces
    that must all match (``and``); a piece that is a keyword of the grammar is dropped.
    """
    pieces = [p for p in _K_IDENT.findall(text) if p.lower() not in _K_KEYWORDS]
    return " and ".join(pieces) if pieces else "precheck"


def msprobe_path_ok(path: str) -> bool:
    """Whether msprobe 26.2.0 takes ``path`` as a config path or dump_path (its characters)."""
    return bool(_MSPROBE_PATH.match(os.path.realpath(path)))
