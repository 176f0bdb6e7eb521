"""msprobe's overflow outputs as gate inputs: overflow_check's anomaly files and nan_check dumps."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_accuracy.dumps.anomaly import anomaly_files, read_anomaly
from pytest_accuracy.errors import AccuracyInputError
from tests.helpers import DUMPS, ROOT

REAL = ROOT / "tests" / "data" / "real" / "msprobe"
TINY = REAL / "overflow_check_tiny" / "anomaly_analyze_1795631234977858802.json"
LLAMA = REAL / "overflow_check_tinyllama" / "anomaly_analyze.json"  # renamed: found by content
EXAMPLE = DUMPS / "pt_overflow"


def _block(text: str, key: str) -> list[str]:
    """The strings of the first ``"key": [...]`` list in the raw text."""
    m = re.search(rf'"{key}": \[(.*?)\]', text, re.S)
    assert m is not None
    return re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))


@pytest.mark.parametrize("path", [TINY, LLAMA], ids=["tiny", "tinyllama"])
def test_real_anomaly_file_reads_as_msprobe_wrote_it(path: Path) -> None:
    text = path.read_text()
    found = read_anomaly(path)
    (rank,) = found.ranks
    assert rank == int(re.findall(r'"rank_(\d+)"', text)[0])
    node = found.ranks[rank][0]
    assert node.op_name == re.findall(r'"op_name": "([^"]+)"', text)[0] == "Tensor.pow.2.forward"
    assert node.modules == tuple(_block(text, "construct_info")[:-1])
    output = text[text.index('"output"'):]
    assert re.search(r'"Max": Infinity', output) and (node.tensor, node.value) == ("output.0",
                                                                                  "Max inf")
    assert node.stack[0].startswith(_block(text, "stack_info")[0][:40])


def test_real_files_pinned_values() -> None:
    llama = read_anomaly(LLAMA).ranks[0][0]
    assert llama.modules == ("Module.layers.1.Block.forward.0",
                             "Module.layers.1.n1.RMSNorm.forward.0")
    assert llama.stack_line() is not None and llama.stack_line().startswith(
        "File /data/b_work/overflow/tinyllama_ovf.py, line 5, in forward,")
    assert read_anomaly(TINY).ranks[0][0].modules == ("Module.norm.RMSNorm.forward.0",)
    assert anomaly_files(LLAMA) == [LLAMA] and anomaly_files(TINY.parent) == [TINY]


@pytest.mark.parametrize(("content", "problem"), [
    ('{"rank_0": [', "JSON"),
    ('[1, 2]', "expected an object mapping rank_<N>"),
    ('{"rank_x": []}', "key 'rank_x'"),
    ('{"rank_0": [{"data_info": {}}]}', "rank_0[0]: expected an object with a string 'op_name'"),
    ('{"rank_0": [{"op_name": "A.b.0.forward", "stack_info": [1]}]}', "'stack_info' must be"),
])
def test_bad_anomaly_file_is_a_named_error(tmp_path: Path, content: str, problem: str) -> None:
    bad = tmp_path / "anomaly_analyze_1.json"
    bad.write_text(content)
    with pytest.raises(AccuracyInputError, match=re.escape(problem)) as info:
        read_anomaly(bad)
    assert str(bad) in str(info.value)


def test_anomaly_items_name_msprobe_node_with_module_chain(pytester: pytest.Pytester) -> None:
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={LLAMA}", f"--acc-json={out}",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*accuracy::overflow::anomaly_analyze/0*",
        "First NaN/Inf on the NPU: Tensor.pow.2.forward (rank 0), output.0 has Max inf while "
        "every input's Max/Min is finite: msprobe overflow_check names it*",
        "In module: Module.layers.1.Block.forward.0 > Module.layers.1.n1.RMSNorm.forward.0",
        "At File /data/b_work/overflow/tinyllama_ovf.py, line 5, in forward,*",
    ])
    doc = json.loads(out.read_text())
    assert doc["overflow"]["keys"][0]["node"] == "Tensor.pow.2.forward"


def test_a_rank_listed_empty_is_no_evidence(pytester: pytest.Pytester) -> None:
    text = TINY.read_text().replace('"rank_0"', '"rank_0": [], "rank_3"', 1)
    (pytester.path / "anomaly_analyze_7.json").write_text(text)
    result = pytester.runpytest(f"--acc-npu={pytester.path}", "-rs", "-p", "no:cacheprovider")
    assert result.parseoutcomes() == {"failed": 1, "skipped": 1}
    result.stdout.fnmatch_lines(["*nothing checked: anomaly_analyze_7.json lists no anomaly node "
                                 "for rank 0*no evidence that rank 0's outputs are finite*"])


def test_an_empty_result_file_never_passes(pytester: pytest.Pytester) -> None:
    (pytester.path / "anomaly_analyze_8.json").write_text("{}")
    result = pytester.runpytest(f"--acc-npu={pytester.path}", "-rs", "-p", "no:cacheprovider")
    assert result.ret != pytest.ExitCode.OK
    assert result.parseoutcomes().get("passed") is None
    result.stdout.fnmatch_lines(["Nothing was checked: all 1 overflow items were skipped*",
                                 "*lists no anomaly node for any rank*"])


def test_bundled_overflow_run_names_its_first_nan_node(pytester: pytest.Pytester) -> None:
    """example_data/dumps/pt_overflow (make_overflow.py): the dump and msprobe's verdict on it
    name the same node, x.pow(2) of the RMSNorm after the scaled MLP."""
    for given in (EXAMPLE / "mix_statistics", EXAMPLE / "overflow_check"):
        result = pytester.runpytest(f"--acc-npu={given}", "-p", "no:cacheprovider")
        assert result.parseoutcomes() == {"failed": 1}
        result.stdout.fnmatch_lines(["First NaN/Inf on the NPU: Tensor.pow.2.forward (*rank 0), "
                                     "output.0 has Max inf while every input*"])
    result.stdout.fnmatch_lines(["In module: Module.norm.RMSNorm.forward.0"])


def test_bundled_dump_names_where_values_grew_huge(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(f"--acc-npu={EXAMPLE / 'mix_statistics'}", "-p",
                                "no:cacheprovider")
    result.stdout.fnmatch_lines(["*near the dtype's range) at Tensor.__mul__.5.forward*"])


def _nan_check_dump(root: Path, flags: list[int | None]) -> Path:
    """A dump.json as msprobe's nan_check task writes it (documented layout: L1, tensor
    metadata without statistics, an ``is_nan`` 0/1 per API record)."""
    names = ["Torch.matmul.0.forward", "Tensor.__add__.0.forward", "Torch.matmul.0.backward"]
    tensor = {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [2, 2],
              "requires_grad": True}
    data = {name: {"input_args": [tensor], "input_kwargs": {}, "output": [tensor],
                   "is_nan": flag} for name, flag in zip(names, flags, strict=True)}
    rank = root / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(json.dumps({"task": "nan_check", "level": "L1",
                                                "framework": "pytorch", "dump_data_dir": None,
                                                "data": data}))
    return root


@pytest.mark.parametrize(("flags", "outcome", "line"), [
    ([0, 1, 1], {"failed": 1}, "First NaN/Inf on the NPU: Tensor.__add__.0.forward (step 0, "
                               "rank 0) raised the NPU's overflow flag (msprobe nan_check is_nan "
                               "1; 2 of 3 calls flagged)*"),
    ([0, 0, 0], {"passed": 1}, "*1 passed*"),
    ([None, None, None], {"skipped": 1, "failed": 1},  # the run checked nothing: it fails
     "*nothing checked in step 0, rank 0: msprobe's nan_check read no call's overflow flag "
     "(3 is_nan null)*"),
], ids=["flagged", "clean", "unread"])
def test_nan_check_dump(pytester: pytest.Pytester, flags: list[int | None],
                        outcome: dict[str, int], line: str) -> None:
    root = _nan_check_dump(pytester.path / "nan", flags)
    out = pytester.path / "acc.json"
    result = pytester.runpytest(f"--acc-npu={root}", f"--acc-json={out}", "-rs",
                                "-p", "no:cacheprovider")
    assert result.parseoutcomes() == outcome
    result.stdout.fnmatch_lines([line])
    if outcome == {"passed": 1}:  # the evidence: every flag read
        assert json.loads(out.read_text())["overflow"]["keys"][0]["checked"] == 3
