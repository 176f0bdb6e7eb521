"""Tests for pytest_accuracy.dumps.tensors: .pt/.npy loading without torch, and path confinement."""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from pytest_accuracy.dumps.tensors import load_array, resolve_data_path
from pytest_accuracy.errors import AccuracyInputError

DUMPS = Path(__file__).resolve().parent.parent / "example_data" / "dumps"
PT_STEPS = {
    "pt_fp32": DUMPS / "pt_fp32" / "L1_tensor" / "step0" / "proc14525",
    "pt_bf16": DUMPS / "pt_bf16" / "L1_tensor" / "step0" / "proc14627",
}
MS_STEP = DUMPS / "ms_fp32" / "L1_tensor" / "step0" / "proc17132"
BF16_DATA = PT_STEPS["pt_bf16"] / "dump_tensor_data"


def _records(dump_dir: Path) -> dict[str, dict[str, Any]]:
    """Every tensor record of a dump.json, keyed by its data_name."""
    found: dict[str, dict[str, Any]] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "data_name" in node:
                found[node["data_name"]] = node
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads((dump_dir / "dump.json").read_text())["data"])
    return found


# --- hand-built .pt files (no torch needed) ------------------------------------------


def _str(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _int(value: int) -> bytes:
    if -(1 << 31) <= value < 1 << 31:
        return b"J" + struct.pack("<i", value)  # BININT
    raw = value.to_bytes(9, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw  # LONG1, for sizes past 32 bits


def _ints(values: tuple[int, ...]) -> bytes:
    return b"(" + b"".join(_int(v) for v in values) + b"t"


def _global(qualified: str) -> bytes:
    module, name = qualified.rsplit(".", 1)
    return f"c{module}\n{name}\n".encode()


def tensor_pickle(
    *,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    numel: int,
    offset: int = 0,
    storage: str = "torch.FloatStorage",
    dtype: str | None = None,
    key: str = "0",
) -> bytes:
    """The data.pkl torch.save writes: _rebuild_tensor_v2, or v3 when ``dtype`` is given."""
    rebuild = "torch._utils._rebuild_tensor_v3" if dtype else "torch._utils._rebuild_tensor_v2"
    return b"".join(
        [
            b"\x80\x02" + _global(rebuild),
            b"(",  # MARK: the rebuild function's argument tuple
            b"(" + _str("storage") + _global(storage) + _str(key) + _str("cpu") + _int(numel),
            b"tQ",  # TUPLE, then BINPERSID: the storage comes from persistent_load
            _int(offset) + _ints(size) + _ints(stride) + b"\x89",  # NEWFALSE: requires_grad
            _global("collections.OrderedDict") + b")R",
            _global(f"torch.{dtype}") if dtype else b"",
            b"tR.",
        ]
    )


def write_pt(
    path: Path,
    pkl: bytes,
    storages: dict[str, bytes] | None = None,
    *,
    byteorder: bytes | None = b"little",
) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", pkl)
        if byteorder is not None:
            archive.writestr("archive/byteorder", byteorder)
        for key, data in (storages or {}).items():
            archive.writestr(f"archive/data/{key}", data)
        archive.writestr("archive/version", b"3\n")
    return path


# --- real msprobe dumps ----------------------------------------------------------------


@pytest.mark.parametrize("dump", sorted(PT_STEPS))
def test_every_pt_file_matches_dump_json(dump: str) -> None:
    dump_dir = PT_STEPS[dump]
    records = _records(dump_dir)
    files = sorted((dump_dir / "dump_tensor_data").glob("*.pt"))
    assert len(files) > 250
    problems = []
    for path in files:
        record = records[path.name]
        array = load_array(path)
        if f"torch.{array.dtype.name}" != record["dtype"] or list(array.shape) != record["shape"]:
            problems.append(f"{path.name}: {array.dtype} {array.shape} vs {record}")
        elif array.size and (array.max().item(), array.min().item()) != (
            record["Max"],
            record["Min"],
        ):
            problems.append(f"{path.name}: max/min {array.max()}/{array.min()} vs {record}")
    assert problems == []


def test_specific_fixture_dtypes() -> None:
    linear = load_array(BF16_DATA / "Functional.linear.0.forward.output.0.pt")
    assert linear.dtype == ml_dtypes.bfloat16
    assert linear.shape == (2, 8, 96)
    ids = load_array(BF16_DATA / "Functional.embedding.0.forward.input.0.pt")
    assert ids.dtype == np.int64
    loss = load_array(BF16_DATA / "Functional.cross_entropy.0.forward.output.0.pt")
    assert loss.shape == ()
    assert loss.ndim == 0


def test_loading_never_imports_torch() -> None:
    code = (
        "import sys; from pathlib import Path; from pytest_accuracy.dumps import tensors; "
        "tensors.load_array(Path(sys.argv[1])); assert 'torch' not in sys.modules"
    )
    repo = DUMPS.parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo)}
    path = BF16_DATA / "Functional.linear.0.forward.output.0.pt"
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, cwd=repo, env=env)


def test_mmap_false_gives_the_same_values() -> None:
    path = BF16_DATA / "Functional.linear.0.forward.output.0.pt"
    mapped, read = load_array(path), load_array(path, mmap=False)
    assert read.flags.writeable
    assert mapped.tobytes() == read.tobytes()


def test_mindspore_npy_files_match_dump_json() -> None:
    records = _records(MS_STEP)
    files = sorted((MS_STEP / "dump_tensor_data").glob("*.npy"))
    assert len(files) > 400
    for path in files:
        record, array = records[path.name], load_array(path)
        assert list(array.shape) == record["shape"], path.name
        assert array.dtype.name == record["dtype"].lower(), path.name
        if array.size:
            assert (float(array.max()), float(array.min())) == (record["Max"], record["Min"])


# --- bit-for-bit against torch -------------------------------------------------------------


def _assert_same_as_torch(path: Path) -> None:
    torch = pytest.importorskip("torch")
    expected = torch.load(path, weights_only=True)
    array = load_array(path)
    assert str(expected.dtype) == f"torch.{array.dtype.name}", path
    assert tuple(expected.shape) == array.shape, path
    expected_bytes = expected.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    assert np.ascontiguousarray(array).tobytes() == expected_bytes, path


@pytest.mark.parametrize("dump", sorted(PT_STEPS))
def test_fixtures_bit_for_bit_with_torch(dump: str) -> None:
    pytest.importorskip("torch")
    for path in sorted((PT_STEPS[dump] / "dump_tensor_data").glob("*.pt")):
        _assert_same_as_torch(path)


TORCH_DTYPES = [
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
    "complex64",
    "float8_e4m3fn",
    "float8_e5m2",
    "uint16",
]


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_torch_dtypes_bit_for_bit(tmp_path: Path, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    values = (torch.randn(5, 7) * 20).to(getattr(torch, dtype))
    torch.save(values, tmp_path / "t.pt")
    _assert_same_as_torch(tmp_path / "t.pt")


def _layouts(torch: Any) -> dict[str, Any]:
    base = torch.arange(4 * 6 * 5, dtype=torch.float32).reshape(4, 6, 5)
    return {
        "sliced": base[1:, ::2, 1:4],
        "transposed": base.transpose(0, 2),
        "expanded": torch.tensor([1.0, 2.0]).reshape(2, 1).expand(2, 5),
        "unsqueezed": base[0, 0].unsqueeze(0).unsqueeze(-1),
        "scalar": torch.tensor(3.5, dtype=torch.bfloat16),
        "empty": torch.zeros(0, 3),
        "parameter": torch.nn.Parameter(torch.ones(3, 2)),
        "requires_grad": torch.ones(4, requires_grad=True),
        "big": torch.randn(600, 700),  # > 1 MiB: the memory-mapped path
    }


@pytest.mark.parametrize(
    "layout",
    [
        "sliced",
        "transposed",
        "expanded",
        "unsqueezed",
        "scalar",
        "empty",
        "parameter",
        "requires_grad",
        "big",
    ],
)
def test_torch_layouts_bit_for_bit(tmp_path: Path, layout: str) -> None:
    torch = pytest.importorskip("torch")
    torch.save(_layouts(torch)[layout], tmp_path / "t.pt")
    _assert_same_as_torch(tmp_path / "t.pt")


def test_large_storage_is_memory_mapped_read_only(tmp_path: Path) -> None:
    data = np.arange(512 * 1024, dtype=np.float32)  # 2 MiB
    pkl = tensor_pickle(size=(512, 1024), stride=(1024, 1), numel=data.size)
    path = write_pt(tmp_path / "big.pt", pkl, {"0": data.tobytes()})
    mapped = load_array(path)
    assert not mapped.flags.writeable
    np.testing.assert_array_equal(mapped.ravel(), data)
    assert load_array(path, mmap=False).flags.writeable


# --- hand-built files: formats torch writes, without torch --------------------------------


def test_hand_built_strided_view(tmp_path: Path) -> None:
    storage = np.arange(12, dtype=np.float32)
    pkl = tensor_pickle(size=(3, 2), stride=(1, 4), offset=1, numel=12)
    path = write_pt(tmp_path / "t.pt", pkl, {"0": storage.tobytes()})
    expected = np.lib.stride_tricks.as_strided(storage[1:], (3, 2), (4, 16))
    np.testing.assert_array_equal(load_array(path), expected)


def test_hand_built_untyped_storage_float8(tmp_path: Path) -> None:
    values = np.array([0.5, -2.0, 448.0, 0.0], dtype=ml_dtypes.float8_e4m3fn)
    pkl = tensor_pickle(
        size=(2, 2),
        stride=(2, 1),
        numel=4,
        storage="torch.storage.UntypedStorage",
        dtype="float8_e4m3fn",
    )
    path = write_pt(tmp_path / "t.pt", pkl, {"0": values.tobytes()})
    array = load_array(path)
    assert array.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(array.ravel(), values)


@pytest.mark.parametrize("byteorder", [b"big", None])
def test_byteorder_member(tmp_path: Path, byteorder: bytes | None) -> None:
    values = np.array([1.5, -3.25, 1e30], dtype=np.float32)
    stored = values.astype(">f4") if byteorder == b"big" else values
    pkl = tensor_pickle(size=(3,), stride=(1,), numel=3)
    path = write_pt(tmp_path / "t.pt", pkl, {"0": stored.tobytes()}, byteorder=byteorder)
    np.testing.assert_array_equal(load_array(path), values)


# --- hostile and broken inputs ------------------------------------------------------------


class _SystemCall:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (self.command,))


def test_pickle_with_os_system_is_refused_and_not_run(tmp_path: Path) -> None:
    control, marker = tmp_path / "control", tmp_path / "pwned"
    # The same payload through plain pickle really runs: proves the test is not vacuous.
    pickle.loads(pickle.dumps(_SystemCall(f"touch '{control}'"), protocol=2))
    assert control.exists()
    payload = pickle.dumps(_SystemCall(f"touch '{marker}'"), protocol=2)
    path = write_pt(tmp_path / "evil.pt", payload)
    with pytest.raises(AccuracyInputError, match="refused to unpickle") as info:
        load_array(path)
    assert f"'{os.system.__module__}.system'" in str(info.value)  # posix.system on Linux
    assert info.value.path == str(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("global_name", "protocol_bytes"),
    [
        ("os.system", b"cos\nsystem\n" + _str("true") + b"\x85R."),
        ("builtins.eval", b"\x80\x04" + _str("builtins") + _str("eval") + b"\x93."),
        ("torch.load", b"ctorch\nload\n."),
    ],
)
def test_any_other_global_is_refused(
    tmp_path: Path, global_name: str, protocol_bytes: bytes
) -> None:
    path = write_pt(tmp_path / "evil.pt", protocol_bytes)
    with pytest.raises(AccuracyInputError, match=f"refused to unpickle '{global_name}'"):
        load_array(path)


def test_evil_global_inside_the_storage_id_is_refused(tmp_path: Path) -> None:
    pkl = tensor_pickle(size=(1,), stride=(1,), numel=1, storage="subprocess.Popen")
    path = write_pt(tmp_path / "evil.pt", pkl, {"0": b"\0" * 4})
    with pytest.raises(AccuracyInputError, match=r"refused to unpickle 'subprocess\.Popen'"):
        load_array(path)


def test_storage_too_small_for_shape(tmp_path: Path) -> None:
    pkl = tensor_pickle(size=(4, 4), stride=(4, 1), numel=16)
    path = write_pt(tmp_path / "t.pt", pkl, {"0": b"\0" * 40})
    with pytest.raises(AccuracyInputError, match="storage too small"):
        load_array(path)


def test_strides_reaching_past_the_storage(tmp_path: Path) -> None:
    pkl = tensor_pickle(size=(2, 3), stride=(1, 3), numel=6, offset=1)
    path = write_pt(tmp_path / "t.pt", pkl, {"0": b"\0" * 24})
    with pytest.raises(AccuracyInputError, match="storage too small"):
        load_array(path)


@pytest.mark.parametrize(
    ("size", "stride"), [((1 << 60,), (0,)), ((0, 1 << 61, 1 << 61), (1, 1, 1))]
)
def test_absurd_shapes_are_input_errors(
    tmp_path: Path, size: tuple[int, ...], stride: tuple[int, ...]
) -> None:
    path = write_pt(
        tmp_path / "t.pt", tensor_pickle(size=size, stride=stride, numel=1), {"0": b"\0" * 4}
    )
    with pytest.raises(AccuracyInputError, match=r"cannot build a tensor|over the limit"):
        load_array(path)


def test_missing_storage_member(tmp_path: Path) -> None:
    path = write_pt(tmp_path / "t.pt", tensor_pickle(size=(1,), stride=(1,), numel=1))
    with pytest.raises(AccuracyInputError, match="missing"):
        load_array(path)


def test_unsupported_dtype(tmp_path: Path) -> None:
    pkl = tensor_pickle(size=(1,), stride=(1,), numel=1, storage="torch.QInt8Storage")
    path = write_pt(tmp_path / "t.pt", pkl, {"0": b"\0"})
    with pytest.raises(AccuracyInputError, match="unsupported dtype"):
        load_array(path)


def test_pickle_of_something_other_than_a_tensor(tmp_path: Path) -> None:
    path = write_pt(tmp_path / "t.pt", pickle.dumps({"a": [1, 2]}, protocol=2))
    with pytest.raises(AccuracyInputError, match="expected a single saved tensor"):
        load_array(path)


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.99])
def test_truncated_pt(tmp_path: Path, keep: float) -> None:
    original = (BF16_DATA / "Functional.linear.0.forward.output.0.pt").read_bytes()
    path = tmp_path / "cut.pt"
    path.write_bytes(original[: int(len(original) * keep)])
    with pytest.raises(AccuracyInputError, match=r"not a valid torch \.pt zip archive"):
        load_array(path)


@pytest.mark.parametrize(
    "content", [b"", b"garbage" * 100, os.urandom(4096), b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P"]
)
def test_garbage_pt(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "junk.pt"
    path.write_bytes(content)
    with pytest.raises(AccuracyInputError) as info:
        load_array(path)
    assert info.value.path == str(path)


def test_legacy_torch_format_is_named(tmp_path: Path) -> None:
    path = tmp_path / "old.pt"
    path.write_bytes(b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19." + b"\0" * 64)
    with pytest.raises(AccuracyInputError, match="legacy"):
        load_array(path)


def test_npy_object_array_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "objects.npy"
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(AccuracyInputError, match="allow_pickle"):
        load_array(path)


@pytest.mark.parametrize("mmap", [True, False])
def test_npy_numeric_round_trip(tmp_path: Path, mmap: bool) -> None:
    values = np.arange(600 * 700, dtype=np.float16).reshape(600, 700)
    np.save(tmp_path / "v.npy", values)
    np.save(tmp_path / "s.npy", np.float64(2.5))
    np.testing.assert_array_equal(load_array(tmp_path / "v.npy", mmap=mmap), values)
    assert load_array(tmp_path / "s.npy", mmap=mmap).shape == ()


def test_npy_string_array_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "s.npy", np.array(["a", "b"]))
    with pytest.raises(AccuracyInputError, match="unsupported dtype"):
        load_array(tmp_path / "s.npy")


def test_garbage_npy(tmp_path: Path) -> None:
    (tmp_path / "junk.npy").write_bytes(b"not numpy at all")
    with pytest.raises(AccuracyInputError):
        load_array(tmp_path / "junk.npy")


def test_missing_file_wrong_suffix_and_directory(tmp_path: Path) -> None:
    with pytest.raises(AccuracyInputError, match="not found"):
        load_array(tmp_path / "absent.pt")
    (tmp_path / "t.txt").write_text("1 2 3")
    with pytest.raises(AccuracyInputError, match="unsupported tensor file type"):
        load_array(tmp_path / "t.txt")
    (tmp_path / "dir.npy").mkdir()
    with pytest.raises(AccuracyInputError, match="not a regular file"):
        load_array(tmp_path / "dir.npy")


# --- resolve_data_path ---------------------------------------------------------------------


def test_resolve_inside_root(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.pt").write_bytes(b"")
    (tmp_path / "link.pt").symlink_to(tmp_path / "sub" / "a.pt")
    assert resolve_data_path(tmp_path, "sub/a.pt") == (tmp_path / "sub" / "a.pt").resolve()
    assert resolve_data_path(tmp_path, "link.pt") == (tmp_path / "sub" / "a.pt").resolve()
    assert resolve_data_path(tmp_path, "not_yet.pt").name == "not_yet.pt"


@pytest.mark.parametrize("name", ["../../etc/passwd", "..", "sub/../../x.pt"])
def test_resolve_refuses_escapes(tmp_path: Path, name: str) -> None:
    root = tmp_path / "dump_tensor_data"
    (root / "sub").mkdir(parents=True)
    with pytest.raises(AccuracyInputError, match="points outside the dump directory"):
        resolve_data_path(root, name)


def test_resolve_refuses_symlink_leaving_root(tmp_path: Path) -> None:
    root = tmp_path / "dump_tensor_data"
    root.mkdir()
    (tmp_path / "secret.pt").write_bytes(b"")
    (root / "x.pt").symlink_to(tmp_path / "secret.pt")
    with pytest.raises(AccuracyInputError, match="points outside the dump directory"):
        resolve_data_path(root, "x.pt")


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("/etc/passwd", "is absolute"),
        (str(DUMPS / "x.pt"), "is absolute"),
        ("", "invalid data_name"),
        ("a\0b.pt", "invalid data_name"),
        (".", "names the dump directory itself"),
        ("sub/..", "names the dump directory itself"),
    ],
)
def test_resolve_refuses_absolute_empty_nul_and_root(
    tmp_path: Path, name: str, problem: str
) -> None:
    (tmp_path / "sub").mkdir()
    with pytest.raises(AccuracyInputError, match=problem):
        resolve_data_path(tmp_path, name)


NPY_CASES = [
    np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    np.asfortranarray(np.arange(12, dtype=np.float64).reshape(3, 4)),
    np.float64(2.5),
    np.zeros((0, 5), dtype=np.int16),
    np.array([True, False]),
    np.arange(6, dtype=">i4"),
    np.array([1 + 2j], dtype=np.complex64),
]


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("case", range(len(NPY_CASES)))
def test_npy_header_is_read_without_ast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: int, mmap: bool
) -> None:
    """np.load's ast.literal_eval races in the compare's threads on CPython 3.11 (SystemError:
    AST constructor recursion depth mismatch): headers numpy writes never reach it."""
    from pytest_accuracy.dumps.npy import load_npy

    expected = NPY_CASES[case]
    np.save(tmp_path / "a.npy", expected)

    def no_ast(*args: object) -> None:
        raise AssertionError("ast.literal_eval called")

    monkeypatch.setattr("ast.literal_eval", no_ast)
    got = load_npy(tmp_path / "a.npy", mmap)
    assert got.dtype == np.asarray(expected).dtype and got.shape == np.shape(expected)
    np.testing.assert_array_equal(got, expected)
    assert got.flags.f_contiguous == np.asarray(expected).flags.f_contiguous


def test_npy_other_headers_and_truncated_files(tmp_path: Path) -> None:
    from pytest_accuracy.dumps.npy import load_npy

    # A header in another key order (another writer): read by np.load, under a lock.
    header = b"{'shape': (3,), 'fortran_order': False, 'descr': '<f8'}"
    header += b" " * (64 - 10 - len(header) - 1) + b"\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header
    (tmp_path / "other.npy").write_bytes(data + np.arange(3.0).tobytes())
    np.testing.assert_array_equal(load_npy(tmp_path / "other.npy", False), np.arange(3.0))
    np.save(tmp_path / "cut.npy", np.arange(100.0))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "cut.npy").read_bytes()[:-8])
    with pytest.raises(AccuracyInputError, match="truncated: 920 bytes, the header describes 928"):
        load_array(tmp_path / "cut.npy")
