"""Config alignment checklist: read MindFormers/Megatron configs and compare them key by key."""

from __future__ import annotations

from pytest_accuracy.configs.check import ConfigFinding, Status, check_configs, unmapped_keys
from pytest_accuracy.configs.keys import (
    CATEGORIES,
    KeySpec,
    KeyTable,
    config_flavour,
    load_key_table,
)
from pytest_accuracy.configs.readers import parse_args_dump, parse_command_line, read_config

__all__ = [
    "CATEGORIES",
    "ConfigFinding",
    "KeySpec",
    "KeyTable",
    "Status",
    "check_configs",
    "config_flavour",
    "load_key_table",
    "parse_args_dump",
    "parse_command_line",
    "read_config",
    "unmapped_keys",
]
