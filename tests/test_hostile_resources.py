"""Small hostile files that used to take GBs or minutes, each run in a child: RSS and wall measured.

Every case must end in a named error or an explained skip (the child prints it), with the
child's peak RSS under 1 GB and its CPU time under 20 s (CPU, not wall: CI machines are
shared, and a loaded box stretches wall time without the work growing; a wall limit of 120 s
still catches a hang).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.test_tensors import tensor_pickle, write_pt

pytestmark = pytest.mark.slow

_MAX_RSS_KB = 1 << 20  # 1 GiB
_MAX_CPU_S = 20.0
# No wall-clock bound: a loaded machine stretches wall time, not the CPU time a case uses.
_WALL_GUARD_S = 600  # only a case blocked without using CPU reaches it
_PRELUDE = """
import json, resource, sys, time
from pathlib import Path
from pytest_accuracy.errors import AccuracyInputError
start = time.perf_counter()
def peak_kb():
    # VmHWM starts afresh at exec; ru_maxrss keeps the forking parent's peak on Linux.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
def done(outcome):
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"outcome": str(outcome), "rss_kb": peak_kb(),
                      "cpu_s": usage.ru_utime + usage.ru_stime,
                      "wall_s": time.perf_counter() - start}))
"""


def _measure(code: str, tmp_path: Path) -> dict[str, object]:
    """Run ``code`` (after the prelude; it calls ``done(outcome)``) in a fresh interpreter."""
    script = tmp_path / "case.py"
    script.write_text(_PRELUDE + textwrap.dedent(code))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=ROOT, timeout=_WALL_GUARD_S, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]  # no crash, no traceback
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rss_kb"] < _MAX_RSS_KB, result
    assert result["cpu_s"] < _MAX_CPU_S, result
    print(result)  # shown with -s: the measurement the README and the issue quote
    return result


_READ = """
from {module} import {reader}
try:
    {reader}(Path(sys.argv[0]).parent / "{name}")
    done("loaded")
except AccuracyInputError as exc:
    done(exc.problem)
"""


def _read(reader: str, name: str) -> str:
    """A child's code: ``reader`` (module.function) on the file or folder ``name`` beside
    it; the outcome is "loaded" or the refusal's problem."""
    module, _, function = reader.rpartition(".")
    return _READ.format(module=module, reader=function, name=name)


_LOAD_ARRAY = "pytest_accuracy.dumps.tensors.load_array"


def test_deflate_bomb_pt(tmp_path: Path) -> None:
    numel = (300 << 20) // 4  # 300 MiB of zeros, deflated to about 300 KB
    with zipfile.ZipFile(tmp_path / "bomb.pt", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", tensor_pickle(size=(numel,), stride=(1,),
                                                           numel=numel))
        with archive.open("archive/data/0", "w") as member:
            for _ in range(300):
                member.write(bytes(1 << 20))
    assert (tmp_path / "bomb.pt").stat().st_size < 2 << 20
    out = _measure(_read(_LOAD_ARRAY, "bomb.pt"), tmp_path)
    assert str(out["outcome"]).startswith(
        "compressed member 'archive/data/0' inflates to 314572800 is over the limit 268435456")


def test_stride_zero_pt_of_3_gb(tmp_path: Path) -> None:
    pkl = tensor_pickle(size=(800_000_000,), stride=(0,), numel=1)
    path = write_pt(tmp_path / "zero.pt", pkl, {"0": b"\0" * 4})
    assert path.stat().st_size < 1000
    out = _measure(_read(_LOAD_ARRAY, "zero.pt"), tmp_path)
    assert str(out["outcome"]).startswith("the strides [0] expand 4 stored bytes to 3200000000")


def test_exponential_repr_in_a_pickle_error(tmp_path: Path) -> None:
    # 40 levels of [x, x] through the memo: a tiny pickle whose repr would have 2**40 parts.
    body = b"]q\x00" + b"".join(b"(h%ch%cl" % (i, i) + b"q%c" % (i + 1) for i in range(40))
    pkl = b"\x80\x02" + body + b"Q."
    with zipfile.ZipFile(tmp_path / "laughs.pt", "w") as archive:
        archive.writestr("archive/data.pkl", pkl)
    out = _measure(_read(_LOAD_ARRAY, "laughs.pt"), tmp_path)
    assert str(out["outcome"]).startswith("unexpected persistent id [[[[")
    assert len(str(out["outcome"])) < 300


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"\x8e" + (1 << 34).to_bytes(8, "little") + b"xx.", "corrupt data.pkl: "),  # BINBYTES8
        (b"N" + b"r" + (1 << 31).to_bytes(4, "little") + b".",  # LONG_BINPUT
         "memo index 2147483648 in data.pkl"),
    ],
    ids=["binbytes8-16GB", "memo-put-2G"],
)
def test_declared_sizes_in_a_pickle(tmp_path: Path, body: bytes, problem: str) -> None:
    with zipfile.ZipFile(tmp_path / "s.pt", "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x04" + body)
    out = _measure(_read(_LOAD_ARRAY, "s.pt"), tmp_path)
    assert str(out["outcome"]).startswith(problem)


def test_npy_header_of_50_mb(tmp_path: Path) -> None:
    with (tmp_path / "h.npy").open("wb") as fh:
        fh.write(b"\x93NUMPY\x02\x00" + (50_000_000).to_bytes(4, "little"))
        fh.write(b"{'descr': '<f4', 'fortran_order': False, 'shape': (" + b" " * 49_999_000)
    out = _measure(_read(_LOAD_ARRAY, "h.npy"), tmp_path)
    (tmp_path / "h.npy").unlink()  # 50 MB: pytest keeps the last three runs' tmp_path
    assert "header of 50000000 bytes, over the limit 65536" in str(out["outcome"])


def _full_record(side: int, as_keywords: bool) -> dict[str, object]:
    """A ``torch.full`` record of side x side float32 ones, its size given positionally or as
    the ``size=`` keyword."""
    size = [{"type": "int", "value": side}] * 2
    fill = {"type": "float", "value": 1.0}
    big = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [side, side],
           "Max": 1.0, "Min": 1.0, "Mean": 1.0, "Norm": float(side), "requires_grad": False}
    if as_keywords:
        return {"input_args": [], "input_kwargs": {"size": size, "fill_value": fill},
                "output": [big]}
    return {"input_args": [size, fill], "input_kwargs": {}, "output": [big]}


@pytest.mark.parametrize(("side", "as_keywords", "needs"), [
    (20000, False, 12_800_000_000),
    (40000, True, 51_200_000_000),  # the form: size=(40000, 40000) as a keyword
])
def test_precheck_full_of_a_huge_size_skips_with_the_budget(
        tmp_path: Path, side: int, as_keywords: bool, needs: int) -> None:
    """No allocation until the address-space cap: the replay is skipped by its estimate."""
    rank = tmp_path / "d" / "step0" / "rank0"
    rank.mkdir(parents=True)
    data = {"Torch.full.0.forward": _full_record(side, as_keywords)}
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1",
                                                "framework": "pytorch", "data": data}))
    code = """
    from pytest_accuracy.dumps.layout import load_dumps
    from pytest_accuracy.precheck.runner import plan, run_case
    [case] = plan(load_dumps(Path(sys.argv[0]).parent / "d"))
    result = run_case(case)
    done(f"{result.status}: {result.reason}")
    """
    out = _measure(code, tmp_path)
    assert str(out["outcome"]).startswith(f"skip: replay needs about {needs} bytes")


def test_billion_laughs_waivers(tmp_path: Path) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]"
              for i in range(9)]
    (tmp_path / "w.yaml").write_text("\n".join(lines) + "\n")
    out = _measure(_read("pytest_accuracy.compare.criteria.load_waivers", "w.yaml"), tmp_path)
    assert str(out["outcome"]).startswith("YAML nodes after alias expansion: ")


def test_construct_json_parent_chain_of_100k(tmp_path: Path) -> None:
    rank = tmp_path / "d" / "step0" / "rank0"
    rank.mkdir(parents=True)
    chain = {f"Module.m{i}.M.forward.0": f"Module.m{i - 1}.M.forward.0" if i else None
             for i in range(100_000)}
    (rank / "construct.json").write_text(json.dumps(chain))
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "data": {}}))
    out = _measure(_read("pytest_accuracy.dumps.layout.load_dumps", "d"), tmp_path)
    assert str(out["outcome"]).startswith("parent chain of 'Module.m1001.M.forward.0': 1001 is "
                                          "over the limit 1000")


def test_dump_json_of_100k_entries_loads_within_bounds(tmp_path: Path) -> None:
    rank = tmp_path / "d" / "step0" / "rank0"
    rank.mkdir(parents=True)
    t = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 4], "Max": 1.0,
         "Min": 0.0, "Mean": 0.5, "Norm": 1.0, "requires_grad": False}
    data = {f"Torch.add.{i}.forward": {"input_args": [t], "input_kwargs": {}, "output": [t]}
            for i in range(100_000)}
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "data": data}))
    code = """
    from pytest_accuracy.dumps.layout import load_dumps
    dumps = load_dumps(Path(sys.argv[0]).parent / "d")
    done(len(dumps.dumps[(0, 0)].calls))
    """
    out = _measure(code, tmp_path)
    (rank / "dump.json").unlink()  # 35 MB: pytest keeps the last three runs' tmp_path
    assert out["outcome"] == "100000"


def test_dump_json_of_2m_nodes_is_refused_by_the_node_limit_within_bounds(tmp_path: Path) -> None:
    """Two million small records (63 MB) took 1.1-1.4 GB and 20-30 s of CPU to read; past
    ACC_MAX_DUMP_NODES (1M) they are refused once counted, before any call is built."""
    rank = tmp_path / "d" / "step0" / "rank0"
    rank.mkdir(parents=True)
    with (rank / "dump.json").open("w") as out:
        out.write('{"task": "statistics", "data": {')
        out.write(",".join(f'"Torch.add.{i}.forward": {{}}' for i in range(2_000_000)))
        out.write("}}")
    out = _measure(_read("pytest_accuracy.dumps.layout.load_dumps", "d"), tmp_path)
    (rank / "dump.json").unlink()  # pytest keeps the last three runs' tmp_path
    assert out["outcome"] == ("nodes: 2000000 is over the limit 1000000 (nodes (records under "
                              "'data') of one dump.json; ACC_MAX_DUMP_NODES raises it)")

