"""Hostile dumps: crafted .pt/.npy/dump.json give named errors, never an outside read or crash."""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_accuracy.dumps.jsonfile import read_json
from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.tensors import load_array
from pytest_accuracy.errors import AccuracyInputError
from tests.helpers import dump
from tests.test_tensors import _global, _int, _ints, _str, tensor_pickle, write_pt

NODE = "Tensor.__add__.5.forward"
SECRET = np.arange(6, dtype=np.float32) + 4242.0  # the planted file outside the dump


def _float_pt(path: Path, values: np.ndarray) -> Path:
    pkl = tensor_pickle(size=(values.size,), stride=(1,), numel=values.size)
    return write_pt(path, pkl, {"0": values.astype("<f4").tobytes()})


def _build_after(pkl: bytes, target: bytes, state: bytes) -> bytes:
    """``pkl`` (ending in STOP) with ``target`` BUILT with ``state`` and popped first."""
    return pkl[:2] + target + state + b"b0" + pkl[2:]


def _slot_state(**fields: bytes) -> bytes:
    items = b"".join(_str(k) + v for k, v in fields.items())
    return b"N}(" + items + b"u\x86"  # (None, {slots}): what a slots object's BUILD takes


# --- BUILD on the stand-ins ----------------------------------------------------------------


def test_build_on_the_tensor_after_validation_is_refused(tmp_path: Path) -> None:
    # The stride is overwritten after _rebuild_tensor_v2 validated it: an out-of-bounds read.
    pkl = tensor_pickle(size=(4,), stride=(1,), numel=4)
    attack = pkl[:-1] + _slot_state(stride=_ints((1 << 40,)), offset=_int(1 << 40)) + b"b."
    path = write_pt(tmp_path / "t.pt", attack, {"0": b"\0" * 16})
    with pytest.raises(AccuracyInputError) as err:
        load_array(path)
    assert err.value.problem == (
        "refused BUILD on TensorRef: a tensor file never sets object state"
    )


@pytest.mark.parametrize(
    ("target", "state", "what"),
    [
        (_global("torch.FloatStorage"), _slot_state(dtype=_global("torch.float64")),
         "StorageType"),
        (_global("torch.float32"), _slot_state(dtype=_global("torch.int8")), "DtypeRef"),
        (_global("torch._utils._rebuild_tensor_v2"), b"}" + _str("x") + _int(1) + b"s",
         "Call"),
        (_global("collections.OrderedDict"), b"}" + _str("__defaults__") + b")s", "Call"),
    ],
    ids=["storage-type", "dtype", "rebuild-function", "hooks-function"],
)
def test_build_on_shared_stand_ins_is_refused_and_poisons_nothing(
    tmp_path: Path, target: bytes, state: bytes, what: str
) -> None:
    pkl = tensor_pickle(size=(6,), stride=(1,), numel=6)
    path = write_pt(tmp_path / "bad.pt", _build_after(pkl, target, state), {"0": b"\0" * 24})
    with pytest.raises(AccuracyInputError) as err:
        load_array(path)
    assert err.value.problem == f"refused BUILD on {what}: a tensor file never sets object state"
    # A later, honest file of the same process reads exactly its own values.
    good = _float_pt(tmp_path / "good.pt", SECRET)
    loaded = load_array(good)
    assert loaded.dtype == np.float32 and loaded.tolist() == SECRET.tolist()


def test_stride_and_offset_checked_after_the_pickle_finished(tmp_path: Path) -> None:
    pkl = tensor_pickle(size=(4,), stride=(1,), numel=4, offset=1)
    path = write_pt(tmp_path / "t.pt", pkl, {"0": b"\0" * 16})
    with pytest.raises(AccuracyInputError, match="storage too small: 4 elements of float32, but "
                       r"offset 1, shape \[4\] and stride \[1\] need 5"):
        load_array(path)


# --- containment ---------------------------------------------------------------------------


def _dump_with_data(root: Path, data_name: str) -> Path:
    """A minimal one-node msprobe tensor dump under ``root``; returns its rank dir."""
    rank = root / "step0" / "rank0"
    (rank / "dump_tensor_data").mkdir(parents=True)
    record = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [6],
              "Max": 1.0, "Min": 0.0, "Mean": 0.5, "Norm": 1.0, "data_name": data_name}
    doc = {"task": "tensor", "level": "L1", "framework": "pytorch",
           "data": {NODE: {"input_args": [], "output": [record]}}}
    (rank / "dump.json").write_text(json.dumps(doc))
    return rank


def test_data_root_symlinked_out_of_the_dump_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    _float_pt(outside / "secret.pt", SECRET)
    root = tmp_path / "dump"
    rank = _dump_with_data(root, "secret.pt")
    (rank / "dump_tensor_data").rmdir()
    (rank / "dump_tensor_data").symlink_to(outside)
    record = load_dumps(root).dumps[(0, 0)].calls[0].outputs[0]
    with pytest.raises(AccuracyInputError) as err:
        record.load()  # type: ignore[union-attr]
    assert err.value.problem == (
        f"the tensor data directory resolves to {outside}, outside the dump directory "
        f"{root.resolve()}; data_name 'secret.pt' is not read"
    )


def test_data_root_symlinked_to_the_filesystem_root_is_refused(tmp_path: Path) -> None:
    rank = _dump_with_data(tmp_path / "dump", "etc/passwd")
    (rank / "dump_tensor_data").rmdir()
    (rank / "dump_tensor_data").symlink_to("/")
    record = load_dumps(tmp_path / "dump").dumps[(0, 0)].calls[0].outputs[0]
    with pytest.raises(AccuracyInputError, match="the tensor data directory resolves to /,"):
        record.load()  # type: ignore[union-attr]


def test_overlong_data_name_is_a_named_error(tmp_path: Path) -> None:
    name = "x" * 300 + ".pt"  # past NAME_MAX: ENAMETOOLONG from the file system
    _dump_with_data(tmp_path / "dump", name)
    record = load_dumps(tmp_path / "dump").dumps[(0, 0)].calls[0].outputs[0]
    with pytest.raises(AccuracyInputError, match=r"cannot (open tensor file|resolve data_name)"):
        record.load()  # type: ignore[union-attr]


def test_native_npy_symlinked_outside_is_not_read(tmp_path: Path) -> None:
    np.save(tmp_path / "secret.npy", SECRET)
    it_dir = tmp_path / "native" / "rank_0" / "net" / "0" / "0"
    it_dir.mkdir(parents=True)
    name = "MatMul.Default_MatMul-op1.1.1.100.output.0.DefaultFormat.float32.npy"
    (it_dir / name).symlink_to(tmp_path / "secret.npy")
    with pytest.raises(AccuracyInputError, match="points outside the dump directory"):
        load_dumps(tmp_path / "native")


# --- unbounded resources -------------------------------------------------------------------


def test_compressed_member_past_the_inflate_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACC_MAX_INFLATE_BYTES", str(1 << 20))
    path = tmp_path / "bomb.pt"
    numel = (2 << 20) // 4
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", tensor_pickle(size=(numel,), stride=(1,),
                                                           numel=numel))
        archive.writestr("archive/data/0", b"\0" * (2 << 20))
    with pytest.raises(AccuracyInputError) as err:
        load_array(path)
    assert err.value.problem == (
        "compressed member 'archive/data/0' inflates to 2097152 is over the limit 1048576 "
        "(decompressed bytes of a compressed .pt member; torch.save never compresses; "
        "ACC_MAX_INFLATE_BYTES raises it)"
    )


def test_stride_zero_expansion_is_bounded(tmp_path: Path) -> None:
    pkl = tensor_pickle(size=(800_000_000,), stride=(0,), numel=1)
    path = write_pt(tmp_path / "t.pt", pkl, {"0": b"\0" * 4})
    with pytest.raises(AccuracyInputError) as err:
        load_array(path)
    assert err.value.problem.startswith(
        "the strides [0] expand 4 stored bytes to 3200000000: 3199999996 is over the limit "
    )


def test_tensor_past_the_size_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACC_MAX_TENSOR_BYTES", "64")
    path = _float_pt(tmp_path / "t.pt", np.zeros(32, np.float32))
    with pytest.raises(AccuracyInputError, match=r"tensor of shape \[32\]: 128 is over the limit "
                       "64 .*ACC_MAX_TENSOR_BYTES raises it"):
        load_array(path)


def test_run_budget_refuses_loads_past_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_accuracy.limits import RUN_BUDGET

    path = _float_pt(tmp_path / "t.pt", np.zeros(32, np.float32))
    other = _float_pt(tmp_path / "u.pt", np.ones(32, np.float32))
    RUN_BUDGET.reset()
    monkeypatch.setenv("ACC_MAX_RUN_TENSOR_BYTES", "200")
    load_array(path)
    load_array(path)  # asked again: served from the recent arrays, nothing read or counted
    with pytest.raises(AccuracyInputError, match="tensor bytes loaded in this run: 256 is over"):
        load_array(other)
    RUN_BUDGET.reset()


def test_recent_arrays_are_shared_read_only_and_a_rewritten_file_is_read_again(
    tmp_path: Path,
) -> None:
    path = _float_pt(tmp_path / "t.pt", np.arange(8, dtype=np.float32))
    first = load_array(path)
    assert load_array(path) is first and not first.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        first[0] = 5.0
    _float_pt(tmp_path / "t.pt", np.arange(9, dtype=np.float32))  # rewritten in place
    again = load_array(path)
    assert again is not first and again.tolist() == list(range(9))


def test_huge_npy_header_is_refused_before_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "h.npy"
    with path.open("wb") as fh:
        fh.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", 50_000_000))
        fh.truncate(50_000_100)
    with pytest.raises(AccuracyInputError, match="header of 50000000 bytes, over the limit 65536"):
        load_array(path)


def test_huge_repr_in_a_pickle_error_is_bounded(tmp_path: Path) -> None:
    # A persistent id that is a 4 MB string: its repr is cut before it is built.
    big = b"X" + struct.pack("<I", 900_000) + b"a" * 900_000
    pkl = b"\x80\x02" + big + b"Q."
    with zipfile.ZipFile(tmp_path / "t.pt", "w") as archive:
        archive.writestr("archive/data.pkl", pkl)
    with pytest.raises(AccuracyInputError) as err:
        load_array(tmp_path / "t.pt")
    assert err.value.problem.startswith("unexpected persistent id 'aaaa")
    assert len(err.value.problem) < 300


# --- dump.json -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "JSON nests too deep to read"),
        ('{"a": ' + "9" * 5000 + "}", "a number of 5000 is over the limit 64 (characters of a "
         "JSON number; ACC_MAX_JSON_NUMBER_CHARS raises it): 99999999999999999999..."),
    ],
    ids=["deep", "long-int"],
)
def test_hostile_json_is_a_named_error(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "dump.json"
    path.write_text(text)
    with pytest.raises(AccuracyInputError) as err:
        read_json(path)
    assert err.value.problem == problem


def test_overflowing_statistic_reads_as_inf(tmp_path: Path) -> None:
    rank = _dump_with_data(tmp_path / "dump", "x.pt")
    (rank / "dump.json").write_text((rank / "dump.json").read_text().replace(
        '"Max": 1.0', '"Max": 1e400'))
    record = load_dumps(tmp_path / "dump").dumps[(0, 0)].calls[0].outputs[0]
    assert record.stats.max == float("inf")  # type: ignore[union-attr]


def test_plugin_reports_a_symlinked_data_root_without_a_traceback(
    pytester: pytest.Pytester, copy_dump: Any, tmp_path: Path
) -> None:
    npu = copy_dump("pt_bug", "L1_tensor")
    rank = next((npu / "step0").iterdir())
    outside = tmp_path / "planted"
    os.rename(rank / "dump_tensor_data", outside)
    (rank / "dump_tensor_data").symlink_to(outside)
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={dump('pt_fp32', 'L1_tensor')}",
                                "-p", "no:cacheprovider", "-k", NODE)
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "the tensor data directory resolves to" in out


def test_many_distinct_dtype_strings_are_read_and_not_all_cached(tmp_path: Path) -> None:
    """The reader caches each raw dtype's canonical name (a dump has a handful); a dump with
    thousands of distinct dtype strings reads them all right, and the cache stays bounded."""
    from pytest_accuracy.dumps import msprobe

    tensor = {"type": "torch.Tensor", "shape": [2], "Max": 1.0, "Min": 0.0, "Mean": 0.5,
              "Norm": 1.0}
    data = {f"Torch.add.{i}.forward": {"input_args": [], "output": [
        {**tensor, "dtype": f"torch.Float{i}"}]} for i in range(1000)}
    rank = tmp_path / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1",
                                                "framework": "pytorch", "data": data}))
    calls = load_dumps(tmp_path).dumps[(0, 0)].calls
    assert [c.outputs[0].dtype for c in calls] == [f"float{i}" for i in range(1000)]
    assert [c.outputs[0].raw_dtype for c in calls] == [f"torch.Float{i}" for i in range(1000)]
    assert len(msprobe._DTYPES) <= 256


# JSON texts each parse path must read alike: msgspec where it gives json's tree, json.loads
# for the rest (NaN literals, invalid text and its message)
_SAME_TREE = [
    '{"a": [1.5, -0.0, 1E5, 0.000123456789012345678, 9223372036854775807, null, true]}',
    '{"Max": NaN, "Min": -Infinity, "Norm": Infinity}',
    '{"shape": [12345678901234567890123], "n": -9223372036854775809}',
    '{"name": "\\ud800 lone", "x": "caf\\u00e9"}',
    '{"a": 1e400, "b": 1, "a": 2}',
]


@pytest.mark.parametrize("text", _SAME_TREE, ids=range(len(_SAME_TREE)))
def test_json_reads_the_same_tree_with_and_without_msgspec(
    tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_accuracy.dumps import jsonfile

    path = tmp_path / "dump.json"
    path.write_text(text)
    fast = read_json(path)
    monkeypatch.setattr(jsonfile, "_msgspec", None)
    slow = read_json(path)
    expected = json.loads(text)
    # repr: NaN != NaN, and an int read as a float would compare equal
    assert repr(fast) == repr(slow) == repr(expected)
    assert [type(v) for v in fast.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize("text", ['{"a": [1, 2,]}', '{"a": 1', "\ufeff{}", '{"a": tru}'])
def test_invalid_json_names_the_same_error_with_and_without_msgspec(
    tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_accuracy.dumps import jsonfile

    path = tmp_path / "dump.json"
    path.write_text(text)
    with pytest.raises(AccuracyInputError) as fast:
        read_json(path)
    monkeypatch.setattr(jsonfile, "_msgspec", None)
    with pytest.raises(AccuracyInputError) as slow:
        read_json(path)
    assert fast.value.problem == slow.value.problem
    assert fast.value.problem.startswith("not valid JSON")


@pytest.mark.parametrize("raw", [
    b'{"a": [1, 2,]}', b'{"a": "x\xff"}', b'{"a": NaN, "b": -Infinity}', b"[" * 100_000,
    b'{"a": 1' + b"0" * 200 + b"}", b"", b'{"a": [1, 2]}', b"\xef\xbb\xbf{}",
    b'{"a": "\\ud800"}', b'{"a": 1} x', b'{"a": "\\x"}', b'{"a": [1, 2]'])
def test_checking_json_refuses_what_parsing_it_refuses(tmp_path: Path, raw: bytes) -> None:
    """stack.json is checked at load without building its tree (check_json): the same
    verdict and the same message as parsing it, for each kind of bad text."""
    from pytest_accuracy.dumps.jsonfile import check_json, parse_json

    path = tmp_path / "stack.json"
    outcomes = []
    for read in (parse_json, check_json):
        try:
            read(path, raw)
            outcomes.append("read")
        except AccuracyInputError as exc:
            outcomes.append(exc.problem)
    assert outcomes[0] == outcomes[1]
    expected_ok = raw in (b'{"a": NaN, "b": -Infinity}', b'{"a": [1, 2]}', b'{"a": "\\ud800"}')
    assert (outcomes[0] == "read") == expected_ok


def test_real_dumps_read_alike_with_msgspec_and_json() -> None:
    """Every bundled real msprobe dump.json: msgspec's tree is json.loads' tree, to the bit,
    and so is the tree of the split read (records parsed one at a time, as read_dump does)."""
    from pytest_accuracy.dumps import jsonfile

    files = sorted((Path(__file__).parent / "data" / "real" / "msprobe").rglob("*.json"))
    assert len(files) > 10
    taken = split = 0
    for file in files:
        raw = file.read_bytes()
        expected = repr(json.loads(raw))
        fast = jsonfile._fast_loads(raw)
        if fast is not None:
            taken += 1
            assert repr(fast) == expected, file
        parts = jsonfile._split_records(raw)
        if parts is not None and file.name == "dump.json":
            split += 1
            whole = json.loads(raw)
            data = {k: jsonfile.node_record(v, file) for k, v in parts.pop("data").items()}
            assert repr(data) == repr(whole.pop("data")), file
            assert parts == {k: whole.get(k) for k in ("task", "level", "framework")}, file
    assert taken > 10 and split > 5  # the fast paths are what read them


@pytest.mark.parametrize("extra", ["", ', "nan": NaN'], ids=["msgspec", "json"])
@pytest.mark.parametrize("name", ["Torch.rsqrt.0.forward", "Module.l\u00e4yer.Linear.forward.3"])
def test_a_node_written_twice_is_named_on_either_parse_path(
    tmp_path: Path, extra: str, name: str
) -> None:
    """The duplicate check scans the file's bytes on both paths (msgspec's, and json's for
    NaN literals), and names the node as written, non-ASCII letters included."""
    from pytest_accuracy.dumps.jsonfile import read_dump_json

    path = tmp_path / "dump.json"
    for read in (lambda p: read_json(p, unique_nodes=True), read_dump_json):
        path.write_text(f'{{"data": {{"{name}": {{}}, "{name}": {{}}}}{extra}}}',
                        encoding="utf-8")
        with pytest.raises(AccuracyInputError) as error:
            read(path)
        assert error.value.problem.startswith(f"node '{name}' is written twice in 'data'")
        path.write_text(f'{{"data": {{"{name}": {{}}, "other.0.forward": {{}}}}{extra}}}')
        assert list(read(path)["data"]) == [name, "other.0.forward"]


def test_a_split_record_is_read_as_json_reads_it(tmp_path: Path) -> None:
    """read_dump_json's records, parsed one at a time: msgspec where it reads as json does,
    json for the rest (1e400 is inf), and nesting past the parsers' depth an input error."""
    import msgspec

    from pytest_accuracy.dumps.jsonfile import node_record

    path = tmp_path / "dump.json"
    assert node_record(msgspec.Raw(b'{"Max": 1e400, "n": 123456789012345678901}'), path) == {
        "Max": float("inf"), "n": 123456789012345678901}
    assert node_record({"already": "parsed"}, path) == {"already": "parsed"}
    with pytest.raises(AccuracyInputError) as error:
        node_record(msgspec.Raw(b"[" * 100_000 + b"]" * 100_000), path)
    assert error.value.problem == "JSON nests too deep to read"


@pytest.mark.parametrize("text", [*_SAME_TREE, '[1, 2]', '"text"'],
                         ids=range(len(_SAME_TREE) + 2))
def test_items_read_one_at_a_time_are_what_json_reads(tmp_path: Path, text: str) -> None:
    """stack.json is indexed from its top level's items, each value parsed as it is reached
    (parse_json_items): the same keys in the same order and the same values as json.loads
    gives (NaN literals, a key written twice, long integers); no items where the top level
    is no object."""
    from pytest_accuracy.dumps.jsonfile import parse_json_items

    path = tmp_path / "stack.json"
    expected = json.loads(text)
    items = list(parse_json_items(path, text.encode()))
    assert repr(items) == repr(list(expected.items()) if isinstance(expected, dict) else [])


def test_items_of_bad_text_name_the_error_parsing_names(tmp_path: Path) -> None:
    from pytest_accuracy.dumps.jsonfile import parse_json, parse_json_items

    path = tmp_path / "stack.json"
    for raw in (b'{"a": [1, 2,]}', b'{"a": "x\xff"}', b'{"a": 1' + b"0" * 200 + b"}"):
        with pytest.raises(AccuracyInputError) as whole:
            parse_json(path, raw)
        with pytest.raises(AccuracyInputError) as items:
            list(parse_json_items(path, raw))
        assert items.value.problem == whole.value.problem
