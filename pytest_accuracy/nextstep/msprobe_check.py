"""msprobe's own checks of a config.json, as its PrecisionDebugger runs them (nothing dumped)."""

from __future__ import annotations

import json
import sys
from typing import Any

# Only the standard library until a check runs: the file also runs as a script under another
# interpreter (MindSpore's venv), ``python msprobe_check.py mindspore a.json b.json``.


def check_config(path: str, framework: str, *, assume_npu: bool = False) -> str:
    """What msprobe 26.2.0 reads from ``path`` ("<task> <level>"); raises what it raises.

    The steps of ``PrecisionDebugger(config_path=path)`` up to the dump itself: the file
    checks, CommonConfig, the task's section, DebuggerConfig and the scope/list parser.
    ``assume_npu``: PyTorch's nan_check refuses a machine without torch_npu; say it has one.
    """
    from msprobe.core.common.file_utils import load_json
    from msprobe.core.dump.common_config import CommonConfig
    from msprobe.core.dump.data_dump.scope import ScopeFactory
    from msprobe.core.dump.debugger.precision_debugger import BasePrecisionDebugger

    BasePrecisionDebugger._check_input_params(path, None, None, None)
    config: Any
    if framework == "pytorch":
        from msprobe.pytorch.dump.debugger import debugger_config
        from msprobe.pytorch.dump.pt_config import parse_json_config

        common, task = parse_json_config(path, None)
        if assume_npu:
            debugger_config._is_torch_npu_importable = lambda: True
        config = debugger_config.DebuggerConfig(common, task, None, None, None)
    elif framework == "mindspore":
        from msprobe.mindspore.dump.debugger.debugger_config import DebuggerConfig
        from msprobe.mindspore.dump.ms_config import parse_task_config

        json_config = load_json(path)
        common = CommonConfig(json_config)
        config = DebuggerConfig(common, parse_task_config(common.task, json_config))
        config.level = config.level_ori  # msprobe's service scopes by the level as written
    else:
        raise ValueError(f"framework must be pytorch or mindspore, not {framework!r}")
    ScopeFactory(config).build_scope()
    return f"{config.task} {config.level}"


def check_acc_check(path: str) -> list[str]:
    """The white_list ``msprobe acc_check -config path`` reads (PyTorch; it checks the ops)."""
    from msprobe.pytorch.dump.pt_config import parse_json_config

    _, task = parse_json_config(path, "acc_check")
    return list(task.white_list)


def main(argv: list[str]) -> int:
    """``<framework> PATH... [--assume-npu PATH...] [--acc-check PATH...]``: a flag applies to
    the paths after it (one process: importing msprobe takes seconds). Prints one line,
    ``MSPROBE_CHECK {path (and its flag): "ok: <task> <level>" or "refused: <msprobe's words>"}``.
    """
    framework, mode, verdicts = argv[0], "", {}
    for arg in argv[1:]:
        if arg in ("--assume-npu", "--acc-check"):
            mode = arg
            continue
        key = f"{arg} {mode}" if mode else arg
        try:
            if mode == "--acc-check":
                verdicts[key] = f"ok: white_list {check_acc_check(arg)}"
            else:
                verdicts[key] = "ok: " + check_config(arg, framework,
                                                      assume_npu=mode == "--assume-npu")
        except Exception as exc:  # msprobe raises bare Exceptions for refusals
            verdicts[key] = f"refused: {type(exc).__name__}: {exc}"
    print("MSPROBE_CHECK " + json.dumps(verdicts))  # msprobe logs to stdout too
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
