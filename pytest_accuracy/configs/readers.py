"""Config readers: MindFormers yaml, Megatron arguments (yaml/json), launch scripts, arg dumps."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

import yaml

from pytest_accuracy.configs.keys import config_flavour, megatron_name
from pytest_accuracy.configs.shell import expand
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import CONFIG_ROOT_ENV
from pytest_accuracy.safe_io import read_input_text
from pytest_accuracy.safe_yaml import safe_load
from pytest_accuracy.text import printable

# Megatron prints `  num_layers ........................ 32` between these markers.
_DUMP_LINE = re.compile(r"(?:^|\s)([A-Za-z_]\w*) \.{3,} (.*?)\s*$")
_DUMP_START = re.compile(r"-+ arguments -+")
_DUMP_END = re.compile(r"-+ end of arguments -+")
_PUNCTUATION = "();<>|&\n"
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=(.*)$", re.DOTALL)
# `$ARGS`-style expansions carry whole argument lists, never one flag's value.
_ARG_LIST_VAR = re.compile(r"^\$\{?\w*(ARGS|OPTS|OPTIONS|PARAMS)\w*(\[@\])?\}?$|\[@\]\}?$", re.I)
_NEGATIVE_NUMBER = re.compile(r"^-\.?\d")
# Megatron `--no-xxx` flags mostly store False into `xxx`; these keep their own dest or rename it.
_NO_FLAG_LITERAL = frozenset(
    {"no_load_optim", "no_load_rng", "no_save_optim", "no_save_rng", "no_persist_layer_norm"}
)
_FLAG_RENAMES: dict[str, tuple[str, bool]] = {
    "disable_bias_linear": ("add_bias_linear", False),
    "no_rope_fusion": ("apply_rope_fusion", False),
    "no_position_embedding": ("add_position_embedding", False),
    "no_initialization": ("perform_initialization", False),
}
_MAX_BASE_DEPTH = 8


def read_config(path: str | Path) -> dict[str, object]:
    """Read one training config: a MindFormers yaml, or Megatron arguments as yaml, json, a launch
    command line / script, or the `arguments` block Megatron prints in its log.

    MindFormers configs come back nested as written (`base_config` files merged in); Megatron
    argument sets come back flat, keyed by argparse dest (`num_layers`).  Raises
    AccuracyInputError naming the file when it cannot be read or is neither kind.
    """
    file = Path(path)
    text = _read_text(file)
    kind = _sniff(file, text)
    if kind == "dump":
        cfg: dict[str, object] = parse_args_dump(text)
    elif kind == "command":
        try:
            cfg = parse_command_line(text)
        except ValueError as exc:
            raise AccuracyInputError(file, f"cannot split the command line: {exc}") from exc
    else:
        cfg = _functional_test_args(_load_mapping(file, text, kind))
    _refuse_dotted_arguments(file, cfg)
    flavour = config_flavour(cfg)
    if flavour is None:
        raise AccuracyInputError(
            file, "neither a MindFormers config nor Megatron arguments (no known key found)"
        )
    if flavour == "mindformers":
        return _merge_base_configs(file, cfg, 0, _base_root(file))
    return _flatten_megatron(cfg)


def _refuse_dotted_arguments(file: Path, cfg: Mapping[str, object]) -> None:
    """`--parallel.fsdp_size` / `trainer.devices` override a config tree, not Megatron argparse.

    MindSpeed-LLM's FSDP2 launchers and NeMo recipes take the model from a companion yaml or
    checkpoint; checked as Megatron arguments every model key would fail as missing.
    """
    dotted = [str(k) for k in cfg if "." in str(k) and not isinstance(cfg[k], Mapping)]
    if dotted and len(dotted) > len(cfg) - len(dotted):
        raise AccuracyInputError(
            file, f"dotted arguments ({', '.join(dotted[:2])}, ...) override a config tree "
            "(MindSpeed-LLM FSDP2 or NeMo style), not Megatron arguments; pass the config they "
            "override"
        )


def _read_text(file: Path) -> str:
    try:
        return read_input_text(file)  # a FIFO or device is refused, never read
    except UnicodeDecodeError as exc:
        raise AccuracyInputError(file, f"not a UTF-8 text file ({exc.reason})") from exc
    except OSError as exc:
        raise AccuracyInputError(file, f"cannot read config: {exc.strerror or exc}") from exc


def _sniff(file: Path, text: str) -> str:
    suffix = file.suffix.lower()
    if suffix == ".json":
        return "json"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    if sum(1 for line in text.splitlines() if _DUMP_LINE.search(line)) >= 3:
        return "dump"
    if re.search(r"(^|\s)--[A-Za-z]", text):
        return "command"
    return "yaml"


def _load_mapping(file: Path, text: str, kind: str) -> dict[str, object]:
    try:
        # safe_load only: configs come from other machines; !!python/object tags are refused.
        data = json.loads(text) if kind == "json" else safe_load(text, file)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        what = "JSON" if kind == "json" else "YAML (python tags are refused)"
        raise AccuracyInputError(file, f"not valid {what}: {_one_line(exc)}") from exc
    except RecursionError:
        raise AccuracyInputError(file, f"{kind.upper()} nests too deep to read") from None
    if not isinstance(data, dict):
        raise AccuracyInputError(file, f"expected a mapping at the top, got {type(data).__name__}")
    return {str(k): v for k, v in data.items()}


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def _merge_base_configs(
    file: Path, cfg: dict[str, object], depth: int, root: Path
) -> dict[str, object]:
    """Apply MindFormers `base_config` inheritance: bases first, this file's values on top."""
    bases = cfg.pop("base_config", None)
    if not bases:
        return cfg
    if depth >= _MAX_BASE_DEPTH:
        raise AccuracyInputError(file, "base_config nests too deep (a cycle?)")
    merged: dict[str, object] = {}
    for base in [bases] if isinstance(bases, str) else list(bases):  # type: ignore[call-overload]
        base_file = _confined_base(file, str(base), root)
        base_cfg = _load_mapping(base_file, _read_text(base_file), "yaml")
        merged = _deep_merge(merged, _merge_base_configs(base_file, base_cfg, depth + 1, root))
    return _deep_merge(merged, cfg)


def _base_root(file: Path) -> Path:
    """The tree base_config files may come from: ACC_CONFIG_ROOT, else the config's directory."""
    allowed = os.environ.get(CONFIG_ROOT_ENV)
    return Path(allowed).resolve() if allowed else file.resolve().parent


def _confined_base(file: Path, base: str, root: Path) -> Path:
    """``file``'s base_config ``base``, refused when it resolves outside ``root``.

    A config is input from another machine: `base_config: /etc/passwd` or `../../x` must not
    make us read (and echo keys or YAML errors of) files outside the config's own tree.
    """
    shown = printable(base, 200)
    try:
        base_file = (file.parent / base).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise AccuracyInputError(file, f"base_config {shown!r} cannot be resolved: {exc}") from None
    if not base_file.is_relative_to(root):
        raise AccuracyInputError(
            file,
            f"base_config {shown!r} is outside the config's directory {root} "
            f"(set {CONFIG_ROOT_ENV} to a directory that holds both to allow it)",
        )
    if not base_file.is_file():
        raise AccuracyInputError(file, f"base_config {shown!r} not found at {base_file}")
    return base_file


def _deep_merge(base: Mapping[str, object], top: Mapping[str, object]) -> dict[str, object]:
    out = dict(base)
    for key, value in top.items():
        below = out.get(key)
        both = isinstance(below, Mapping) and isinstance(value, Mapping)
        out[key] = _deep_merge(below, value) if both else value  # type: ignore[arg-type]
    return out


def _flatten_megatron(cfg: Mapping[str, object]) -> dict[str, object]:
    """Normalise names; hoist nested sections (Megatron's --yaml-cfg groups arguments)."""
    out: dict[str, object] = {}
    for key, value in cfg.items():
        if isinstance(value, Mapping):
            for name, inner in _flatten_megatron(value).items():
                out.setdefault(name, inner)
        else:
            out[megatron_name(str(key))] = value
    return out


def parse_args_dump(text: str) -> dict[str, object]:
    """Parse the `arguments` block Megatron prints at start-up (first block when several)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if _DUMP_START.search(line)), None)
    if start is not None:
        end = next((i for i in range(start, len(lines)) if _DUMP_END.search(lines[i])), len(lines))
        lines = lines[start + 1 : end]
    args: dict[str, object] = {}
    for line in lines:
        match = _DUMP_LINE.search(line)
        if match:
            args.setdefault(match.group(1), _dump_value(match.group(2)))
    return args


def _dump_value(text: str) -> object:
    if text[:1] in "[{(":
        try:
            return safe_load(text.replace("(", "[").replace(")", "]"), "arguments")
        except (yaml.YAMLError, AccuracyInputError):
            return text
    return _scalar(text)


def _scalar(text: str) -> object:
    """Command-line / dump token to a Python value: None, bools, ints, floats, else the text."""
    special = {"None": None, "True": True, "False": False, "true": True, "false": False}
    if text in special:
        return special[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_command_line(text: str) -> dict[str, object]:
    """Collect `--flag value` pairs from a launch command line or shell script.

    Handles `\\` continuations, comments, `--flag=value`, value-less flags (True), Megatron's
    `--no-xxx` flags (xxx = False), arguments kept in variables (`GPT_ARGS="--num-layers 32 ..."`)
    and bash arrays.  Variables the script assigns (`TP=1`, `${TP}`, `${TP:-1}`) are expanded;
    others stay `$VAR` strings.  Later flags win, as in argparse.
    """
    args: dict[str, object] = {}
    for flag, values in _flag_values(_tokens(text)):
        value: object = True if not values else values[0] if len(values) == 1 else values
        _store(args, flag, value)
    return args


def _store(args: dict[str, object], flag: str, value: object) -> None:
    """Store one flag under its argparse dest, as Megatron would (`--no-xxx` sets xxx False)."""
    name = megatron_name(flag)
    if name in _FLAG_RENAMES and value is True:
        name, value = _FLAG_RENAMES[name]
    elif name.startswith("no_") and name not in _NO_FLAG_LITERAL and value is True:
        name, value = name[3:], False
    args[name] = value


def _functional_test_args(cfg: dict[str, object]) -> dict[str, object]:
    """Megatron's functional-test `model_config.yaml`: the arguments are `MODEL_ARGS`.

    Its runner turns `--flag: true` into a bare flag and drops `--flag: false`; `${VAR}`
    values come from the CI environment and stay unexpanded.
    """
    model_args = cfg.get("MODEL_ARGS")
    if not isinstance(model_args, Mapping):
        return cfg
    args: dict[str, object] = {}
    if not any(str(flag).startswith("--") for flag in model_args):
        return {str(k): v for k, v in model_args.items()}  # NeMo overrides: refused as dotted
    for flag, value in model_args.items():
        if value is not False:
            _store(args, str(flag), value)
    return args


def _tokens(text: str) -> list[str]:
    text = _strip_comments(re.sub(r"\\\r?\n", " ", text))
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_PUNCTUATION)
    lexer.whitespace = " \t\r"  # newlines end a command: keep them as tokens
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def _strip_comments(text: str) -> str:
    """Drop `#` comments outside quotes (shlex would also eat the newline that ends a command)."""
    out: list[str] = []
    quote, i = "", 0
    while i < len(text):
        char = text[i]
        if char == "\\" and quote != "'":
            out.append(text[i : i + 2])  # an escaped character never opens, closes or comments
            i += 2
            continue
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or text[i - 1] in " \t\n"):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _flag_values(
    tokens: list[str], env: dict[str, str] | None = None
) -> list[tuple[str, list[object]]]:
    """Pair every `--flag` with the plain tokens after it, up to a command boundary.

    `env` collects the script's own `VAR=value` assignments in order; values expand them.
    """
    env = {} if env is None else env
    pairs: list[tuple[str, list[object]]] = []
    current: list[object] | None = None
    for i, token in enumerate(tokens):
        if set(token) <= set(_PUNCTUATION):  # ; | && > newline ...: the command ends here
            current = None
        elif token.startswith("--") and len(token) > 2:
            flag, eq, value = token.partition("=")
            current = [_scalar(expand(value, env))] if eq else []
            pairs.append((flag, current))
            current = None if eq else current
        elif _ASSIGNMENT.match(token) and current is None:
            name, _, value = token.partition("=")
            env[name] = value = expand(value, env)
            # VAR="--num-layers 32 ..." holds arguments for later use: read them too.
            pairs.extend(_flag_values(_tokens(value), env))
        elif token.startswith("-") and not _NEGATIVE_NUMBER.match(token):
            current = None  # a short option (-m, -p) of some other program
        elif current is None or token.endswith(".py"):
            current = None  # the program and its script: `torchrun ... pretrain_gpt.py`
        elif _ARG_LIST_VAR.search(token) or (current and token.startswith("$")):
            current = None  # "${GPT_ARGS[@]}" splices another argument list in
        elif token.isdigit() and i + 1 < len(tokens) and tokens[i + 1].startswith(("<", ">")):
            current = None  # `2>&1`: a file descriptor, not a value
        else:
            current.append(_scalar(expand(token, env)))
    return pairs
