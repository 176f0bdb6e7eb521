"""Hostile inputs, each in a capped child: FIFOs and devices, unbounded mappings, logs, parts.

Every case ends in a named error naming the file, a bounded refusal or a skip with the
reason: never a pass, a hang, a traceback or memory past 1 GiB (tests/hostile_child.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.helpers import dump
from tests.hostile_child import run_child, run_command

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")

_READERS = {
    "dump": "from pytest_accuracy.dumps.layout import load_dumps as read",
    "log": "from pytest_accuracy.logs import read_log as read",
    "config": "from pytest_accuracy.configs.readers import read_config as read",
    "mapping": "from pytest_accuracy.pairing.mapfiles import load_mapping_yaml as read",
    "cell_mapping": "from pytest_accuracy.pairing.naming import cell_mapping_pairing "
                    "as read",
    "part": "from pytest_accuracy.report.merge import load_part as read",
    "tensor": "from pytest_accuracy.dumps.tensors import load_array as read",
    "golden": "from pytest_accuracy.logs import read_log\n"
              "def read(path): return read_log(path, 'golden')",
}


def _read_in_child(reader: str, target: str, tmp_path: Path) -> str:
    code = _READERS[reader] + f"""
try:
    read(Path({target!r}))
    done("read")
except AccuracyInputError as exc:
    done(exc)
"""
    return str(run_child(code, tmp_path)["outcome"])


@pytest.mark.parametrize("reader", ["dump", "log", "config", "mapping", "cell_mapping", "part"])
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_fifo_or_device_given_as_the_input_is_refused(tmp_path: Path, reader: str,
                                                        special: str) -> None:
    target = tmp_path / "input.yaml"
    if special == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to(special)
    outcome = _read_in_child(reader, str(target), tmp_path)
    assert outcome.startswith(str(target)) and "not a regular file" in outcome, outcome


@pytest.mark.parametrize("name", ["dump.json", "stack.json", "construct.json"])
def test_a_fifo_planted_in_a_dump_is_refused(tmp_path: Path, copy_dump: object, name: str
                                             ) -> None:
    root = copy_dump("pt_bug", "mix_statistics")  # type: ignore[operator]
    rank = next((root / "step0").iterdir())
    (rank / name).unlink(missing_ok=True)
    os.mkfifo(rank / name)
    outcome = _read_in_child("dump", str(root), tmp_path)
    assert outcome.startswith(str(rank / name)) and "not a regular file (a FIFO)" in outcome


@pytest.mark.parametrize("suffix", [".pt", ".npy"])
def test_a_fifo_as_a_tensor_file_is_refused(tmp_path: Path, suffix: str) -> None:
    os.mkfifo(tmp_path / f"x{suffix}")
    outcome = _read_in_child("tensor", str(tmp_path / f"x{suffix}"), tmp_path)
    assert "not a regular file" in outcome, outcome


def test_a_fifo_as_the_merge_cli_part_exits_2(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "part.json")
    proc = run_command([sys.executable, "-m", "pytest_accuracy.report.merge_cli",
                        str(tmp_path / "part.json")], tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "part.json: not a regular file (a FIFO)" in proc.stderr
    assert "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- bounds


def test_cell_mapping_of_100k_keys_is_refused(tmp_path: Path) -> None:
    lines = [f"k{i}.Dense: v{i}.Linear" for i in range(100_000)]
    (tmp_path / "m.yaml").write_text("\n".join(lines) + "\n")
    outcome = _read_in_child("cell_mapping", str(tmp_path / "m.yaml"), tmp_path)
    assert "100000 is over the limit 10000" in outcome and "ACC_MAX_MAPPING_RULES" in outcome


def test_cell_mapping_whose_renames_grow_is_bounded(tmp_path: Path) -> None:
    # each rule replaces a run of "a" by 1000 of them: chained, the name grows with every rule
    rules = "\n".join(f"'{'a' * (i + 1)}': '{'a' * 1000}'" for i in range(100))
    (tmp_path / "m.yaml").write_text(rules + "\n")
    code = f"""
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.pairing.naming import cell_mapping_pairing
npu = next(iter(load_dumps(Path({str(dump("pt_bug", "mix_statistics"))!r})).dumps.values()))
try:
    pairs = cell_mapping_pairing(here / "m.yaml")(npu, npu)
    done(f"paired {{len(pairs)}}")
except AccuracyInputError as exc:
    done(exc)
"""
    outcome = str(run_child(code, tmp_path)["outcome"])
    # module names hold an "a" (Module.layers...): growth stops at the name limit
    assert outcome.startswith(str(tmp_path / "m.yaml")), outcome
    assert "ACC_MAX_MAPPING_NAME_CHARS" in outcome, outcome


def _precheck_dump(root: Path, api: str, args: list[object]) -> None:
    rank = root / "step0" / "rank0"
    rank.mkdir(parents=True)
    small = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 2], "Max": 1.0,
             "Min": 1.0, "Mean": 1.0, "Norm": 2.0, "requires_grad": False}
    data = {f"{api}.0.forward": {"input_args": args, "input_kwargs": {}, "output": [small]}}
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1",
                                                "framework": "pytorch", "data": data}))


_INT = {"type": "int", "value": 40000}
_SMALL_T = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 2], "Max": 1.0,
            "Min": 1.0, "Mean": 1.0, "Norm": 2.0, "requires_grad": False}


@pytest.mark.parametrize(("api", "args"), [
    ("Torch.full", [[_INT, _INT], {"type": "float", "value": 1.0}]),
    ("Torch.full", [[_INT, _INT], {"type": "int", "value": 7}]),
])
def test_sizes_given_as_arguments_count_against_the_precheck_budget(
        tmp_path: Path, api: str, args: list[object]) -> None:
    _precheck_dump(tmp_path / "d", api, args)
    code = """
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.precheck.runner import plan, run_case
results = [run_case(case) for case in plan(load_dumps(here / "d"))]
done("; ".join(f"{r.status}: {r.reason}" for r in results))
"""
    outcome = str(run_child(code, tmp_path)["outcome"])
    assert outcome.startswith("skip: replay needs about"), outcome
    assert "ACC_MAX_PRECHECK_BYTES" in outcome


def test_a_single_line_log_of_64_mb_is_refused_by_line_length(tmp_path: Path) -> None:
    with (tmp_path / "train.log").open("wb") as fh:
        fh.write(b" iteration        1/      10 | lm loss: 1.0E+00 |\n")
        fh.write(b" iteration        2/      10 | lm loss: 1.0E+00 | " + b"x" * (64 << 20) + b"\n")
    outcome = _read_in_child("log", str(tmp_path / "train.log"), tmp_path)
    (tmp_path / "train.log").unlink()  # 64 MB: pytest keeps the last three runs' tmp_path
    assert outcome.startswith(str(tmp_path / "train.log")) and "line 2: 67108915 is over" in outcome
    assert "ACC_MAX_LOG_LINE_BYTES" in outcome


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(("name", "text"), [
    ("trainer_state.json", '{"log_history": ' + _deep(100_000) + "}"),
    ("golden_values.json", '{"lm loss": ' + _deep(100_000) + "}"),
    ("trainer_state.json", '{"log_history": [{"loss": 1.0, "step": ' + str(10**30) + "}]}"),
    ("golden_values.json", '{"lm loss": {"values": {"' + str(10**30) + '": 1.0}}}'),
    ("config.json", '{"a": ' + _deep(100_000) + "}"),
])
def test_deep_or_out_of_range_json_logs_are_named_errors(tmp_path: Path, name: str,
                                                         text: str) -> None:
    (tmp_path / name).write_text(text)
    reader = {"config.json": "config", "golden_values.json": "golden"}.get(name, "log")
    outcome = _read_in_child(reader, str(tmp_path / name), tmp_path)
    assert outcome.startswith(str(tmp_path / name)), outcome
    assert "too deep" in outcome or "out of range" in outcome, outcome


@pytest.mark.parametrize(("api", "args", "elements"), [
    ("Torch.arange", [10**12], 10**12),
    ("Torch.arange", [5, 10**12 + 5, 2], 5 * 10**11),
    ("Torch.zeros", [40000, 40000], 1_600_000_000),
    ("Tensor.expand", [[40000, 40000]], 1_600_000_000),
    ("Tensor.repeat", [40000, 40000], 4 * 1_600_000_000),  # times the 4-element input
    ("Torch.full", [[3, 3], 10**9], 9),  # the fill value is no size
    ("Torch.add", [40000, 40000], 0),  # not sized by its arguments
])
def test_argument_sizes_are_estimated(api: str, args: list[object], elements: int) -> None:
    from pytest_accuracy.dumps.model import Call, ScalarArg, Stats, TensorRecord
    from pytest_accuracy.precheck.budget import _argument_elements

    def scalars(value: object, path: str) -> list[ScalarArg]:
        if isinstance(value, list):
            return [s for i, v in enumerate(value) for s in scalars(v, f"{path}.{i}")]
        return [ScalarArg(path, type(value).__name__, value)]

    tensor = TensorRecord("input.0", "input", "float32", "torch.float32", (2, 2), Stats())
    inputs = [*([tensor] if api.startswith("Tensor.") else []),
              *(s for i, a in enumerate(args) for s in scalars(a, f"input.{i + 1}"))]
    call = Call(name=f"{api}.0.forward", kind="api", direction="forward", order=0,
                inputs=inputs)  # type: ignore[arg-type]
    assert _argument_elements(api, call) == elements
