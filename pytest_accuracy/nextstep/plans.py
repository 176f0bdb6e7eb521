"""The four next steps of the guide's loop: loss -> L0 dump -> L1 inside a module -> precheck."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pytest_accuracy.nextstep import commands as cmd
from pytest_accuracy.nextstep.configs import Level, Task, dump_config
from pytest_accuracy.nextstep.estimate import module_nodes, statistics_dump, tensor_dump
from pytest_accuracy.nextstep.names import (
    api_entry,
    api_label,
    is_module,
    module_entry,
    module_label,
    msprobe_path_ok,
    op_name,
)
from pytest_accuracy.nextstep.situation import (
    ConfigFile,
    Estimate,
    Framework,
    NextStep,
    Side,
    Situation,
)
from pytest_accuracy.text import escape_line


def plan_next_step(situation: Situation, folder: str | Path) -> NextStep:
    """The next step for ``situation``, its files to go into ``folder`` (nothing is written)."""
    planners = {"loss": loss_step, "module": module_step, "api": api_step,
                "overflow": overflow_step}
    return planners[situation.case](situation, folder)


def loss_step(s: Situation, folder: str | Path) -> NextStep:
    """A loss or monitor item at step S, no node known: the guide's cheap coarse pass, L0
    statistics of S and of S-1 (whose backward and optimizer step made S's weights)."""
    out = _absolute(folder)
    steps = [s.step - 1, s.step] if s.step > 0 else [s.step]
    copies = len(steps) * (1 if s.rank is not None else s.ranks_in_run)
    files, sizes = [], []
    for role, side in _sides(s):
        config = dump_config(side.framework, task="statistics", level="L0", steps=steps,
                             rank=_rank_filter(s), dump_path=_dump_path(out, role))
        files.append(_file(s, role, side, config))
        modules = module_nodes(side.shapes)
        sizes.append((role, statistics_dump(side, modules, copies) if modules else
                      statistics_dump(side, len(side.shapes), copies, "at most")))
    head = f"dump {_steps_words(steps)} {_rank_words(s)} at L0 statistics"
    follow = cmd.pytest_compare(*_dump_paths(s, out), steps, s.rank)
    return _finish(s, out, head, files, sizes, [*_run_lines(out, files), follow])


def module_step(s: Situation, folder: str | Path) -> NextStep:
    """An L0 compare failure naming module M: M's APIs and submodules as tensors (level mix,
    ``list`` = M's path: L1 cannot narrow to a module, see ``names.module_entry``)."""
    out = _absolute(folder)
    files, sizes = [], []
    for role, side in _sides(s):
        # the bench's own names, else the NPU's module paths under the bench's prefix
        own = bool(side.names)
        names = side.names if own else s.npu.names
        select = _outermost([_entry(n, None if own else side.framework) for n in names])
        config = dump_config(side.framework, task="tensor", level="mix", steps=[s.step],
                             rank=_rank_filter(s), dump_path=_dump_path(out, role), select=select)
        files.append(_file(s, role, side, config))
        sizes.append((role, tensor_dump(side, side.shapes, leaf_apis=True)))
    inside = ", ".join(_label(n) for n in s.npu.names)
    head = f"dump step {s.step} {_rank_words(s)} as tensors at level mix inside {inside}"
    follow = cmd.pytest_compare(*_dump_paths(s, out), [s.step], s.rank)
    return _finish(s, out, head, files, sizes, [*_run_lines(out, files), follow])


def api_step(s: Situation, folder: str | Path) -> NextStep:
    """An L1 compare failure naming API call A: precheck A on the failing dump; the config
    dumps A's real inputs and outputs (a statistics dump's precheck generates them)."""
    out = _absolute(folder)
    side = s.npu
    if any(is_module(n) for n in side.names):  # L1 cannot narrow to a module: module_step
        raise ValueError("an api next step needs API call names, not a module's")
    ops = [op for op in (op_name(n) for n in side.names) if op]
    config = dump_config(side.framework, task="tensor", level="L1", steps=[s.step],
                         rank=_rank_filter(s), dump_path=_dump_path(out, "NPU"),
                         select=_outermost([api_entry(n) for n in side.names]),
                         acc_check_ops=ops if len(ops) == len(side.names) else [])
    file = ConfigFile(f"config_{side.framework}.json", "NPU", side.framework, config)
    size = tensor_dump(side, side.shapes, leaf_apis=False)
    dump_json = side.dump_json or f"{config['dump_path']}/step{s.step}/rank{s.rank or 0}/dump.json"
    acc_config = out / file.name if side.framework == "pytorch" else None
    lines = _run_lines(out, [file])
    lines.append(cmd.msprobe_acc_check(dump_json, out / "acc_check", acc_config))
    lines.append(cmd.pytest_precheck(side.dump or config["dump_path"], s.step, s.rank,
                                     api_entry(side.names[0])))
    head = f"precheck {', '.join(api_label(n) for n in side.names)} at step {s.step} " \
           f"{_rank_words(s)}"
    return _finish(s, out, head, [file], [("NPU", size)], lines,
                   size_of="a tensor dump of its inputs and outputs: ")


def overflow_step(s: Situation, folder: str | Path) -> NextStep:
    """An overflow item naming node N at step S rank R: inside a module, the APIs as
    statistics (which one first makes NaN/Inf); an API, its real inputs to replay it. On
    PyTorch also msprobe's nan_check (26.2.0 has no overflow_check task): the NPU's
    overflow flag of every API of the step."""
    out = _absolute(folder)
    side, name = s.npu, s.npu.names[0]
    module = is_module(name)
    task: Task = "statistics" if module else "tensor"
    level: Level = "mix" if module else "L1"
    config = dump_config(side.framework, task=task, level=level, steps=[s.step],
                         rank=_rank_filter(s), dump_path=_dump_path(out, "NPU"),
                         select=_outermost([_entry(n, None) for n in side.names]))
    files = [ConfigFile(f"config_{side.framework}.json", "NPU", side.framework, config)]
    if side.framework == "pytorch":
        nan = dump_config("pytorch", task="nan_check", level="L1", steps=[s.step],
                          rank=_rank_filter(s), dump_path=_dump_path(out, "NPU nan_check"))
        files.append(ConfigFile("config_pytorch_nan_check.json", "or, on Ascend, a run of its own",
                                "pytorch", nan))
    lines = _run_lines(out, files)
    dump = config["dump_path"]
    if side.framework == "mindspore":
        lines.insert(0, cmd.INFNAN)
    elif module:
        lines.append(cmd.msprobe_overflow_check(dump, s.step, out / "overflow"))
    if module:
        lines.append(cmd.pytest_compare(dump, None, [s.step], s.rank))
        what = f"inside {module_label(name)} at level mix (statistics): the API that first " \
               "makes NaN/Inf"
    else:
        lines.append(cmd.pytest_precheck(dump, s.step, s.rank, api_entry(name)))
        what = f"the inputs of {api_label(name)} as tensors (L1), to replay it"
    head = f"dump step {s.step} {_rank_words(s)} {what}"
    return _finish(s, out, head, files, [("NPU", _overflow_size(side, module))], lines)


def _overflow_size(side: Side, module: bool) -> Estimate | None:
    if not module:
        return tensor_dump(side, side.shapes, leaf_apis=False)
    whole = tensor_dump(side, side.shapes, leaf_apis=True)  # counts the APIs inside
    return statistics_dump(side, whole.nodes) if whole else None


def _finish(s: Situation, out: Path, head: str, files: list[ConfigFile],
            sizes: list[tuple[str, Estimate | None]], lines: list[str],
            size_of: str = "") -> NextStep:
    """The message: one headline naming the size and the files, then one command a line."""
    written = ", ".join(f"{escape_line(out / f.name)} ({f.role})" for f in files)
    noun = "config" if len(files) == 1 else "configs"
    paths = [str(out / f.name) for f in files] + [str(f.config["dump_path"]) for f in files]
    if not all(msprobe_path_ok(p) for p in paths):
        lines = [f"(msprobe 26.2.0 refuses these paths: a character other than A-Z a-z 0-9 "
                 f"_ . : / - in {escape_line(out)}; write the next step elsewhere)", *lines]
    text = (f"Next: {escape_line(head)} ({size_of}{_size_words(sizes)}): msprobe {noun} "
            f"written to {written}; run it with:\n" + "\n".join(f"  {line}" for line in lines))
    return NextStep(s, out, escape_line(head), tuple(files), tuple(sizes), tuple(lines), text)


def _size_words(sizes: list[tuple[str, Estimate | None]]) -> str:
    known = [(role, e) for role, e in sizes if e is not None]
    if not known:
        return "size unknown: the failing dump recorded none of it"
    if len(known) == 1:
        return known[0][1].text()
    return ", ".join(f"{e.text()} {role}" for role, e in known)


def _run_lines(out: Path, files: list[ConfigFile]) -> list[str]:
    """The PrecisionDebugger line of each config (nan_check's last: NPU-only), then the loop."""
    ordered = sorted(files, key=lambda f: f.config["task"] == "nan_check")
    return [*(cmd.debugger(f.framework, out / f.name, f.role) for f in ordered), cmd.LOOP]


def _sides(s: Situation) -> list[tuple[str, Side]]:
    return [("NPU", s.npu)] + ([("bench", s.bench)] if s.bench is not None else [])


def _file(s: Situation, role: str, side: Side, config: dict[str, Any]) -> ConfigFile:
    """``config_<framework>.json``; ``config_<role>_<framework>.json`` when both runs use
    the same framework (each run writes its own dump_path)."""
    shared = sum(1 for _, other in _sides(s) if other.framework == side.framework) > 1
    name = f"config_{role.lower()}_{side.framework}.json" if shared else \
        f"config_{side.framework}.json"
    return ConfigFile(name, role, side.framework, config)


def _dump_path(out: Path, role: str) -> str:
    return str(out / ("dump_" + role.lower().replace(" ", "_")))


def _dump_paths(s: Situation, out: Path) -> tuple[str, str | None]:
    return _dump_path(out, "NPU"), _dump_path(out, "bench") if s.bench is not None else None


def _absolute(folder: str | Path) -> Path:
    # absolute: the config is read from the training script's directory, not from here
    return Path(os.path.abspath(folder))


def _entry(name: str, framework: Framework | None) -> str:
    return module_entry(name, framework) if is_module(name) else api_entry(name)


def _label(name: str) -> str:
    return module_label(name) if is_module(name) else api_label(name)


def _outermost(entries: list[str]) -> list[str]:
    """The entries not inside another one (msprobe matches substrings: the outer takes all)."""
    unique = sorted(set(entries))
    return [e for e in unique if not any(o != e and e.startswith(o) for o in unique)]


def _steps_words(steps: list[int]) -> str:
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]} and {steps[-1]}"


def _rank_words(s: Situation) -> str:
    if s.rank is not None:
        return f"rank {s.rank}"
    return f"on all {s.ranks_in_run} ranks" if s.ranks_in_run > 1 else "on every rank"


def _rank_filter(s: Situation) -> int | None:
    """The rank a config names: none in a one-process run, where msprobe 26.2.0 knows no rank
    (no torch.distributed / communication init) and a ``rank`` list makes it dump nothing."""
    return s.rank if s.ranks_in_run > 1 else None
