"""Limits said are the limits kept (issue 37): a bad variable is a usage error naming it, and
each documented bound holds at its value and refuses one past it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_accuracy.dumps.jsonfile import read_json
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import LIMITS, LimitError, limit
from pytest_accuracy.report.merge_cli import main as merge_main
from tests.helpers import dump

BUG = [f"--acc-npu={dump('pt_bug', 'mix_statistics')}",
       f"--acc-bench={dump('pt_fp32', 'mix_statistics')}"]


@pytest.mark.parametrize("value", ["1e3", "-1", "0", "ten", "1.5"])
def test_a_limit_that_is_no_positive_integer_is_refused_by_name(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("ACC_MAX_JSON_BYTES", value)
    with pytest.raises(LimitError, match="ACC_MAX_JSON_BYTES"):
        limit("json_bytes")
    result = pytester.runpytest("-p", "no:cacheprovider", *BUG)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: ACC_MAX_JSON_BYTES='{value}' is not a positive "
                                 "integer (bytes of a dump.json; the default is 2147483648)*"])
    assert merge_main([str(pytester.path / "none.json")]) == 2


def test_a_limit_given_as_a_whole_number_is_the_one_kept(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    for name, spec in LIMITS.items():
        monkeypatch.setenv(spec.env, "1_000")
        assert limit(name) == 1000, name
        monkeypatch.delenv(spec.env)
        assert limit(name) == spec.default


@pytest.mark.parametrize("chars", [63, 64, 65])
def test_a_json_number_of_64_characters_passes_and_65_do_not(tmp_path: Path,
                                                             chars: int) -> None:
    """The limit counts the whole number (sign, point, exponent), not its longest digit run:
    a 65-character float with a point passed before."""
    number = "-0." + "1" * (chars - 3)
    assert len(number) == chars
    path = tmp_path / "n.json"
    path.write_text(json.dumps({"x": 0}).replace("0", number))
    if chars <= limit("json_number_chars"):
        assert read_json(path) == {"x": float(number)}
    else:
        with pytest.raises(AccuracyInputError, match="a number of 65 is over the limit 64"):
            read_json(path)


@pytest.mark.parametrize("nodes", [3, 4])
def test_a_dump_json_of_as_many_nodes_as_the_limit_loads_and_one_more_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int) -> None:
    from pytest_accuracy.dumps.layout import load_dumps

    rank = tmp_path / "d" / "step0" / "rank0"
    rank.mkdir(parents=True)
    data = {f"Torch.add.{i}.forward": {"input_args": [], "output": []} for i in range(nodes)}
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "data": data}))
    monkeypatch.setenv("ACC_MAX_DUMP_NODES", "3")
    if nodes == 3:
        assert len(next(iter(load_dumps(tmp_path / "d"))).calls) == 3
        return
    with pytest.raises(AccuracyInputError) as info:
        load_dumps(tmp_path / "d")
    assert str(info.value) == (f"{rank / 'dump.json'}: nodes: 4 is over the limit 3 (nodes "
                               "(records under 'data') of one dump.json; ACC_MAX_DUMP_NODES "
                               "raises it)")
