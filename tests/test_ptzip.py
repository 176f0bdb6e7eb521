"""The offset reader of torch.save's plain zip (ptzip.py) against the zipfile reader."""

from __future__ import annotations

import os
import random
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_accuracy.dumps import ptzip, tensors
from pytest_accuracy.dumps.tensors import load_array, load_data, resolve_data_path
from pytest_accuracy.errors import AccuracyInputError
from tests.test_tensors import tensor_pickle, write_pt

DUMPS = Path(__file__).resolve().parent.parent / "example_data" / "dumps"
BUNDLED_PT = sorted(DUMPS.glob("pt_*/**/*.pt"))


def _plain(path: Path, use_mmap: bool = True) -> np.ndarray | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        return ptzip.load_plain(fd, os.fstat(fd).st_size, path, use_mmap)
    finally:
        os.close(fd)


def _assert_identical(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    # Bytes of the C-ordered values: bfloat16 and float8 compare as their bit patterns.
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _both(path: Path, use_mmap: bool = True) -> np.ndarray:
    by_offset = _plain(path, use_mmap)
    assert by_offset is not None, f"{path.name}: the plain layout was not recognised"
    _assert_identical(by_offset, tensors._load_pt_zipfile(path, use_mmap))
    return by_offset


# --- real torch.save files ---------------------------------------------------------------


def _torch_values(torch: Any, kind: str) -> Any:
    base = torch.arange(4 * 6 * 5, dtype=torch.float32).reshape(4, 6, 5) / 7
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
              "float64": torch.float64, "int64": torch.int64, "int32": torch.int32,
              "int8": torch.int8, "uint8": torch.uint8, "complex64": torch.complex64}
    if kind in dtypes:
        return (base * 13 - 40).to(dtypes[kind])
    return {
        "bool": base > 1.5,
        "transposed": base.transpose(0, 2),
        "sliced_bf16": base.to(torch.bfloat16)[1:, ::2, 1:4],
        "expanded": torch.tensor([1.0, 2.0]).reshape(2, 1).expand(2, 5),
        "scalar": torch.tensor(3.5, dtype=torch.float16),
        "empty": torch.zeros(0, 3, dtype=torch.int64),
        "parameter": torch.nn.Parameter(torch.ones(3, 2)),
        "big": torch.randn(600, 700),  # > 1 MiB: memory-mapped
        "big_bf16_view": torch.randn(1200, 700).to(torch.bfloat16)[:, ::2],
    }[kind]


TORCH_KINDS = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8",
               "complex64", "bool", "transposed", "sliced_bf16", "expanded", "scalar", "empty",
               "parameter", "big", "big_bf16_view"]


@pytest.mark.parametrize("use_mmap", [True, False])
@pytest.mark.parametrize("kind", TORCH_KINDS)
def test_torch_save_files_read_identically(tmp_path: Path, kind: str, use_mmap: bool) -> None:
    torch = pytest.importorskip("torch")
    values = _torch_values(torch, kind)
    torch.save(values, tmp_path / "t.pt")
    got = _both(tmp_path / "t.pt", use_mmap)
    expected = values.detach().contiguous()
    if expected.dtype == torch.bfloat16:
        assert got.dtype.name == "bfloat16"
        bits = expected.view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(got.view(np.uint16), bits)
    else:
        assert np.array_equal(got, expected.numpy())
    _assert_identical(load_array(tmp_path / "t.pt", mmap=use_mmap), got)


def test_every_bundled_msprobe_pt_reads_identically() -> None:
    assert len(BUNDLED_PT) > 1000  # pt_fp32, pt_bf16, pt_bug, L0 and L1
    for path in BUNDLED_PT:
        _both(path, use_mmap=True)


# --- not the plain layout: zipfile reads it, unchanged -----------------------------------


def _torch_file(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A bundled msprobe .pt copied to tmp_path, and its values."""
    source = next(p for p in BUNDLED_PT if p.stat().st_size > 4096)
    path = tmp_path / "t.pt"
    path.write_bytes(source.read_bytes())
    return path, load_array(source)


def _rewrite(source: Path, target: Path, compression: int, comment: bytes = b"") -> None:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", compression) as new:
        for info in old.infolist():
            new.writestr(info.filename, old.read(info))
        new.comment = comment


def _zip64_classic_record(data: bytes) -> bytes:
    """The same archive with the classic end record deferring to its zip64 record."""
    end = len(data) - 22
    return data[:end + 8] + b"\xff\xff\xff\xff" + data[end + 12 :]  # entry counts 0xFFFF


@pytest.mark.parametrize("variant", ["deflated", "comment", "zip64", "prefixed"])
def test_other_layouts_fall_back_to_zipfile(
    tmp_path: Path, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original, expected = _torch_file(tmp_path)
    path = tmp_path / "other.pt"
    if variant == "deflated":
        _rewrite(original, path, zipfile.ZIP_DEFLATED)
    elif variant == "comment":
        _rewrite(original, path, zipfile.ZIP_STORED, comment=b"written by hand")
    elif variant == "zip64":
        path.write_bytes(_zip64_classic_record(original.read_bytes()))
    else:  # data before the archive (a self-extractor's stub): zipfile allows it
        path.write_bytes(b"#!stub\n" * 10 + original.read_bytes())
    assert _plain(path) is None
    calls: list[Path] = []
    real = tensors._load_pt_zipfile

    def spy(p: Path, use_mmap: bool) -> np.ndarray:
        calls.append(p)
        return real(p, use_mmap)

    monkeypatch.setattr(tensors, "_load_pt_zipfile", spy)
    _assert_identical(load_array(path), expected)
    assert calls == [path]


def test_plain_layout_does_not_use_zipfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, expected = _torch_file(tmp_path)

    def refuse(*_args: object) -> None:
        raise AssertionError("zipfile path taken for a plain archive")

    monkeypatch.setattr(tensors, "_load_pt_zipfile", refuse)
    monkeypatch.setattr(zipfile, "ZipFile", refuse)
    _assert_identical(load_array(path), expected)


# --- hostile archives: AccuracyInputError naming the file -------------------------------


def _member_offsets(data: bytes, suffix: str) -> tuple[int, int]:
    """(central directory entry offset, local header offset) of the member ending in suffix."""
    end = len(data) - 22
    cd_offset = struct.unpack_from("<I", data, end + 16)[0]
    pos = cd_offset
    while data[pos : pos + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, pos + 28)
        name = data[pos + 46 : pos + 46 + name_len].decode()
        if name.endswith(suffix):
            return pos, struct.unpack_from("<I", data, pos + 42)[0]
        pos += 46 + name_len + extra_len + comment_len
    raise AssertionError(suffix)


def _past_eof(data: bytes) -> bytes:
    """Both end records (torch writes a zip64 one too) put the directory at the file's end."""
    end = len(data) - 22
    data = data[: end + 16] + struct.pack("<I", len(data)) + data[end + 20 :]
    zip64 = end - 76
    assert data[zip64 : zip64 + 4] == b"PK\x06\x06"
    return data[: zip64 + 48] + struct.pack("<Q", len(data)) + data[zip64 + 56 :]


def _local_name(data: bytes) -> bytes:
    _, local = _member_offsets(data, "/data/0")
    name_at = local + 30 + struct.unpack_from("<H", data, local + 26)[0] - 1
    return data[:name_at] + b"9" + data[name_at + 1 :]  # .../data/0 -> .../data/9


def _local_method(data: bytes) -> bytes:
    _, local = _member_offsets(data, "/data/0")
    return data[: local + 8] + b"\x08\x00" + data[local + 10 :]  # says deflated


def _local_offset_past_eof(data: bytes) -> bytes:
    entry, _ = _member_offsets(data, "/data/0")
    return data[: entry + 42] + struct.pack("<I", len(data) + 100) + data[entry + 46 :]


def _storage_overlaps_directory(data: bytes) -> bytes:
    entry, _ = _member_offsets(data, "/data/0")
    size = struct.unpack_from("<I", data, entry + 24)[0]
    grown = struct.pack("<II", size + 100000, size + 100000)
    return data[: entry + 20] + grown + data[entry + 28 :]


def _flip_storage_byte(data: bytes) -> bytes:
    _, local = _member_offsets(data, "/data/0")
    name_len, extra_len = struct.unpack_from("<HH", data, local + 26)
    at = local + 30 + name_len + extra_len
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


HOSTILE: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "directory past EOF": (_past_eof, "runs past the end of the file"),
    "local header name": (_local_name, "does not match the central directory"),
    "local header method": (_local_method, "does not match the central directory"),
    "local header past EOF": (_local_offset_past_eof, "past the end"),
    "storage into the directory": (_storage_overlaps_directory, "archive truncated inside"),
    "storage bytes changed": (_flip_storage_byte, "Bad CRC-32"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_plain_archives_name_the_file(tmp_path: Path, case: str) -> None:
    original, _ = _torch_file(tmp_path)
    mutate, problem = HOSTILE[case]
    path = tmp_path / "bad.pt"
    path.write_bytes(mutate(original.read_bytes()))
    with pytest.raises(AccuracyInputError, match=problem) as info:
        load_array(path)
    assert info.value.path == str(path)


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_truncated_torch_file(tmp_path: Path, keep: float) -> None:
    original, _ = _torch_file(tmp_path)
    data = original.read_bytes()
    path = tmp_path / "cut.pt"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(AccuracyInputError) as info:
        load_array(path)
    assert info.value.path == str(path)


def test_storage_smaller_than_declared(tmp_path: Path) -> None:
    pkl = tensor_pickle(size=(10,), stride=(1,), numel=10)
    path = write_pt(tmp_path / "t.pt", pkl, {"0": b"\0" * 8})
    fd = os.open(path, os.O_RDONLY)
    try:
        assert ptzip.read_plain(fd, path.stat().st_size, path) is not None
    finally:
        os.close(fd)
    with pytest.raises(AccuracyInputError, match="storage too small") as info:
        load_array(path)
    assert info.value.path == str(path)


@pytest.mark.parametrize("prefix", ["..", "archive/..", "/archive"])
def test_member_names_with_dotdot_are_refused(tmp_path: Path, prefix: str) -> None:
    pkl = tensor_pickle(size=(2,), stride=(1,), numel=2)
    path = tmp_path / "t.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(f"{prefix}/data.pkl", pkl)
        archive.writestr(f"{prefix}/data/0", b"\0" * 8)
    with pytest.raises(AccuracyInputError, match=r"not a torch\.save name") as info:
        load_array(path)
    assert info.value.path == str(path)


def test_dotdot_member_beside_a_good_archive_is_refused_by_both_readers(tmp_path: Path) -> None:
    pkl = tensor_pickle(size=(2,), stride=(1,), numel=2)
    for compression in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        path = tmp_path / f"t{compression}.pt"
        with zipfile.ZipFile(path, "w", compression) as archive:
            archive.writestr("archive/data.pkl", pkl)
            archive.writestr("archive/data/0", b"\0" * 8)
            archive.writestr("archive/../../etc/passwd", b"x")
        with pytest.raises(AccuracyInputError, match=r"not a torch\.save name"):
            load_array(path)


def test_random_damage_is_always_an_input_error(tmp_path: Path) -> None:
    original, _ = _torch_file(tmp_path)
    data = original.read_bytes()
    rng = random.Random(14)
    path = tmp_path / "fuzz.pt"
    for _ in range(300):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            # Mostly the records: local headers at the start, the directory at the end.
            at = rng.choice([rng.randrange(0, 800), rng.randrange(len(data) - 900, len(data))])
            damaged[at] = rng.randrange(256)
        path.write_bytes(bytes(damaged))
        try:
            load_array(path, mmap=rng.random() < 0.5)
        except AccuracyInputError as exc:
            assert exc.path == str(path)


# --- data paths: the directory resolved once, plain names without resolve() ------------


def test_data_directory_resolved_once_per_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "dump_tensor_data"
    root.mkdir()
    for i in range(20):
        (root / f"t{i}.pt").write_bytes(b"")
    calls: list[Path] = []
    real = Path.resolve

    def counting(self: Path, strict: bool = False) -> Path:
        calls.append(self)
        return real(self, strict)

    monkeypatch.setattr(Path, "resolve", counting)
    got = [resolve_data_path(root, f"t{i}.pt", tmp_path) for i in range(20)]
    assert got == [real(root) / f"t{i}.pt" for i in range(20)]
    assert len(calls) == 2  # the dump directory and the data directory, once


def test_plain_name_that_is_a_symlink_is_still_confined(tmp_path: Path) -> None:
    root = tmp_path / "dump" / "dump_tensor_data"
    root.mkdir(parents=True)
    (root / "real.pt").write_bytes(b"")
    (tmp_path / "secret.pt").write_bytes(b"")
    (root / "inside.pt").symlink_to(root / "real.pt")
    (root / "outside.pt").symlink_to(tmp_path / "secret.pt")
    assert resolve_data_path(root, "inside.pt") == (root / "real.pt").resolve()
    with pytest.raises(AccuracyInputError, match="points outside the dump directory"):
        resolve_data_path(root, "outside.pt")
    with pytest.raises(AccuracyInputError, match="points outside the dump directory"):
        resolve_data_path(root, "..")


def test_load_data_reads_what_load_array_reads_with_the_same_checks(tmp_path: Path) -> None:
    """The records' loader joins plain names as text: the same array, the same cache entry,
    and every refusal of resolve_data_path (links out, odd names, missing files)."""
    dump = tmp_path / "dump"
    root = dump / "dump_tensor_data"
    (root / "sub").mkdir(parents=True)
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    pkl = tensor_pickle(size=(3, 4), stride=(4, 1), numel=12)
    for path in (root / "t.pt", root / "sub" / "u.pt", tmp_path / "secret.pt"):
        write_pt(path, pkl, {"0": values.tobytes()})
    (root / "inside.pt").symlink_to(root / "t.pt")
    (root / "outside.pt").symlink_to(tmp_path / "secret.pt")
    tensors.RECENT.clear()
    got = load_data(root, "t.pt", dump)
    _assert_identical(got, values)
    assert not got.flags.writeable
    assert load_array(resolve_data_path(root, "t.pt", dump)) is got  # one file, one entry
    _assert_identical(load_data(root, "inside.pt", dump), values)
    _assert_identical(load_data(root, "sub/u.pt", dump), values)
    refusals = {"outside.pt": "points outside the dump directory", "..": "points outside",
                "": "invalid data_name", "/etc/passwd": "is absolute",
                "missing.pt": "tensor file not found", "a\0b.pt": "invalid data_name"}
    for name, problem in refusals.items():
        with pytest.raises(AccuracyInputError, match=problem) as info:
            load_data(root, name, dump)
        assert str(root.resolve()) in str(info.value) or str(root) in str(info.value)


def test_data_directory_symlinked_out_of_the_dump_is_refused_every_time(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.pt").write_bytes(b"")
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "dump_tensor_data").symlink_to(tmp_path / "elsewhere")
    for _ in range(2):
        with pytest.raises(AccuracyInputError, match="outside the dump directory"):
            resolve_data_path(dump / "dump_tensor_data", "x.pt", dump)


@pytest.mark.parametrize("reader", ["plain", "zipfile"])
def test_a_mapped_storage_is_crc_checked_too(tmp_path: Path, reader: str) -> None:
    """Storages of 1 MiB and more are mapped, not read: their CRC is checked all the same,
    so a changed byte in a large tensor is an error, not a value compared."""
    values = np.arange(300_000, dtype=np.float32)  # 1.2 MB: over MMAP_MIN_BYTES
    assert values.nbytes >= ptzip.MMAP_MIN_BYTES
    pkl = tensor_pickle(size=(values.size,), stride=(1,), numel=values.size)
    good = write_pt(tmp_path / "good.pt", pkl, {"0": values.tobytes()})
    np.testing.assert_array_equal(load_array(good), values)
    if reader == "zipfile":  # an archive comment: not torch's layout, zipfile reads it
        _rewrite(good, tmp_path / "commented.pt", zipfile.ZIP_STORED, comment=b"by hand")
        good = tmp_path / "commented.pt"
        assert _plain(good) is None
    data = bytearray(good.read_bytes())
    data[data.find(values[1000:1016].tobytes())] ^= 0x01  # one bit of value 1000
    path = tmp_path / "bad.pt"
    path.write_bytes(data)
    with pytest.raises(zipfile.BadZipFile):  # what zipfile's own read of it says
        zipfile.ZipFile(path).read("archive/data/0")
    with pytest.raises(AccuracyInputError, match="Bad CRC-32 for file 'archive/data/0'") as info:
        load_array(path)
    assert info.value.path == str(path)
