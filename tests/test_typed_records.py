"""The msprobe reader's typed lane (a record of the usual shape decoded into msgspec structs)
makes what the dict walk makes of every record: the same calls, records, statistics rows and
sharing, or the same error, on made-up records, hostile ones included."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pytest_accuracy.dumps import msprobe
from pytest_accuracy.dumps.model import TensorRecord
from pytest_accuracy.errors import AccuracyInputError

_NUMBERS = ["1.5", "-0.0", "3", "true", "null", '"inf"', '"x"', "1e400", "12345678901234567890",
            "[]"]
_SHAPES = ["[true]", "[1.0]", "[-1]", "[4611686018427387904]", "null", '"64"', "[[1]]",
           "[" + ",".join(["1"] * 65) + "]"]


def _slot(rng: random.Random, bad: float) -> str:
    def pick(good: str, odd: list[str]) -> str:
        return rng.choice(odd) if rng.random() < bad else good

    keys = [("type", pick('"torch.Tensor"', ['"int"', "null", "5", "[1]", '"numpy.ndarray"'])),
            ("dtype", pick('"torch.float32"', ["null", "3", '"Float16"', '"odd.dtype"'])),
            ("shape", pick(rng.choice(["[2, 3]", "[]", "[64]"]), _SHAPES))]
    keys += [(k, pick("0.25", _NUMBERS)) for k in ("Max", "Min", "Mean", "Norm")]
    keys += [("requires_grad", pick("true", ["1", '"yes"', "null"])),
             ("md5", pick('"ab12"', ["12", "null"])),
             ("data_name", pick('"a.pt"', ['"-1"', '""', "3"]))]
    if rng.random() < bad:
        keys.append(rng.choice([("value", "[1, 2]"), ("extra", '"\u00e9"'), ("extra", "1e400")]))
    keys = [k for k in keys if rng.random() > bad / 2]
    if rng.random() < bad and keys:
        keys.append(rng.choice(keys))  # a key written twice: the last one counts
    rng.shuffle(keys)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in keys) + "}"


def _items(rng: random.Random, bad: float) -> str:
    odd = ["null", '{"type": "int", "value": 3}', '{"type": null, "value": 1}', "[]", "7",
           '{"k": 1}']
    items = [_slot(rng, bad) if rng.random() > bad else rng.choice(odd)
             for _ in range(rng.randint(0, 3))]
    if rng.random() < bad / 2:
        return rng.choice(["null", _slot(rng, bad), "3"])
    return "[" + ", ".join(items) + "]"


def _record(rng: random.Random, bad: float) -> str:
    keys = [(k, _items(rng, bad)) for k in ("input_args", "input", "output") if rng.random() < .8]
    keys += [(k, '{"w": ' + _slot(rng, bad) + "}") for k in ("input_kwargs", "parameters")
             if rng.random() < bad]
    rng.shuffle(keys)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in keys) + "}"


def _snapshot(path: Path) -> str:
    try:
        dump = msprobe.read_dump(path, step=0, rank=0)
    except AccuracyInputError as exc:
        return f"error {exc}"
    except (TypeError, ValueError) as exc:  # what the dict walk lets through, alike
        return f"{type(exc).__name__} {exc}"
    lines, columns = [], None
    for call in dump.calls:
        args = [*call.inputs, *call.outputs, *call.parameters]
        lines.append(repr((call.name, call.kind, call.direction, call.parent, call.op,
                           call.index, call.fixed_signature, [repr(a) for a in args],
                           [getattr(a, "_row", None) for a in args])))
        columns = next((a._source.stats for a in args if isinstance(a, TensorRecord)), columns)
    if columns is not None:
        lines.append(columns._values.tobytes().hex() + repr(sorted(columns._odd.items())))
    return "\n".join(lines)


@pytest.mark.parametrize("seed", range(4))
def test_the_typed_lane_reads_what_the_dict_walk_reads(
        tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    path = tmp_path / "dump.json"
    names = ["Tensor.add.{}.forward", "Tensor.add.{}.backward", "Module.m{}.Linear.forward.0",
             "Module.m{}.Linear.backward.0", "Torch.t{}.forward", "Tensor.x.{}\u00b2.forward"]
    typed = 0
    for _ in range(120):
        bad = rng.choice([0.0, 0.02, 0.1, 0.3])
        data = {rng.choice(names).format(i): _record(rng, bad) for i in range(rng.randint(1, 5))}
        body = ", ".join(f"{json.dumps(n)}: {r}" for n, r in data.items())
        path.write_text(f'{{"task": "statistics", "data": {{{body}}}}}', encoding="utf-8")
        (tmp_path / "construct.json").write_text(json.dumps(dict.fromkeys(data, "Module.m")))
        both = _snapshot(path)
        with monkeypatch.context() as patch:
            patch.setattr(msprobe, "_typed_call", lambda *_: None)
            assert _snapshot(path) == both
        typed += both.count("TensorRecord(") > 0
    assert typed > 20  # the typed lane read many of them


def test_a_record_the_typed_lane_gives_up_keeps_no_statistics_row(tmp_path: Path) -> None:
    """A tensor read, then a slot only the dict walk reads right (a dict with no "type"):
    the row of the first is dropped and made again, so the rows follow the records."""
    tensor = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1.0,
              "Min": 0.0, "Mean": 0.5, "Norm": 1.0}
    data = {"Torch.a.0.forward": {"input_args": [tensor, {"k": None}], "output": [tensor]}}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"task": "statistics", "data": data}))
    call = msprobe.read_dump(path, step=0, rank=0).calls[0]
    rows = [a._row for a in (*call.inputs, *call.outputs) if isinstance(a, TensorRecord)]
    assert rows == [0, 1] and len(call.output_tensors[0]._source.stats) == 2
    assert [a.path for a in call.inputs] == ["input.0", "input.1.k"]


def test_bad_bytes_in_a_key_the_typed_lane_skips_are_refused(tmp_path: Path) -> None:
    """Not the first record with keys: the dump's mode is read from that one, as dicts."""
    path = tmp_path / "dump.json"
    path.write_bytes(b'{"task": "statistics", "data": {"Torch.a.0.forward": {"output": []}, '
                     b'"Torch.a.1.forward": {"output": [{"type": "torch.Tensor", '
                     b'"dtype": "torch.float32", "shape": [1], "note": "\xff"}]}}}')
    with pytest.raises(AccuracyInputError, match="not valid JSON"):
        msprobe.read_dump(path, step=0, rank=0)
