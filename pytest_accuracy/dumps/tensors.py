"""Load dumped tensor files (.npy, torch .pt) as numpy arrays without torch or pickle code.

A .pt file in torch.save's plain layout is read by offset (ptzip.py); any other zip goes
through :mod:`zipfile`. Both use the same restricted unpickler and checks (ptpickle.py).
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
import threading
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path

import numpy as np

from pytest_accuracy.dumps.crc import crc32
from pytest_accuracy.dumps.npy import load_npy
from pytest_accuracy.dumps.ptpickle import (
    LEGACY_TORCH_MAGIC,
    TensorRef,
    parse_byteorder,
    parse_tensor_pickle,
    tensor_from_storage,
)
from pytest_accuracy.dumps.ptzip import MMAP_MIN_BYTES, load_plain, record_prefix
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import RUN_BUDGET, limit, over
from pytest_accuracy.text import brief, printable

__all__ = ["load_array", "load_data", "resolve_data_path"]

_ZIP_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, skipped fields, name len, extra len
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_PREAD = hasattr(os, "pread")
# Each dump's data directory, resolved and checked once: (root, within) -> resolved root.
_DATA_DIRS: dict[tuple[Path, Path | None], tuple[Path, str]] = {}
_MAX_DATA_DIRS = 4096


def resolve_data_path(root: Path, data_name: str, within: Path | None = None) -> Path:
    """``root/data_name`` with symlinks resolved, refused unless it stays inside ``root``.

    dump.json is input like any other: a data_name such as ``../../etc/passwd`` or a
    symlink planted in the dump must not make us read files outside the dump.  ``root``
    itself (``dump_tensor_data``) may be a planted symlink too, so once resolved it must
    lie inside ``within``, the dump directory the user named (default: ``root``'s parent).
    ``root`` is resolved and checked once per process; a plain file name (no separator,
    not ``.``/``..``, not a symlink: one lstat) is then taken as is, inside it.
    """
    if not data_name or "\0" in data_name:
        raise AccuracyInputError(root, f"invalid data_name {brief(data_name)}")
    if len(data_name) > 4096:
        raise AccuracyInputError(root, f"data_name of {len(data_name)} characters")
    if Path(data_name).is_absolute() or data_name.startswith(("/", "\\")):
        raise AccuracyInputError(
            root,
            f"data_name {brief(data_name)} is absolute; it must be relative to the dump directory",
        )
    base = _checked_dir(root, within, data_name)[0]
    if _plain_name(data_name):
        target = base / data_name
        try:
            if not stat.S_ISLNK(os.lstat(target).st_mode):
                return target
        except FileNotFoundError:
            return target  # load_array says it is missing
        except OSError:
            pass  # the full resolution below says what is wrong
    try:
        target = (base / data_name).resolve()
    except (OSError, RuntimeError) as exc:  # symlink loops raise RuntimeError before 3.13
        raise _unresolvable(root, data_name, exc) from None
    if target == base:
        problem = f"data_name {brief(data_name)} names the dump directory itself"
        raise AccuracyInputError(root, problem)
    if not target.is_relative_to(base):
        raise AccuracyInputError(
            target, f"data_name {brief(data_name)} points outside the dump directory {base}"
        )
    return target


def _checked_dir(root: Path, within: Path | None, data_name: str) -> tuple[Path, str]:
    """``root`` resolved, once it is known to lie inside ``within`` (cached per process), and
    as text ending in a separator, for joining a plain file name to it."""
    key = (root, within)
    known = _DATA_DIRS.get(key)
    if known is not None:
        return known
    try:
        outer = Path(within if within is not None else Path(root).absolute().parent).resolve()
        base = Path(root).resolve()
    except (OSError, RuntimeError) as exc:
        raise _unresolvable(root, data_name, exc) from None
    if not base.is_relative_to(outer):
        raise AccuracyInputError(
            root, f"the tensor data directory resolves to {base}, outside the dump directory "
            f"{outer}; data_name {brief(data_name)} is not read")
    if len(_DATA_DIRS) >= _MAX_DATA_DIRS:
        _DATA_DIRS.clear()
    _DATA_DIRS[key] = base, os.path.join(base, "")
    return _DATA_DIRS[key]


def _unresolvable(root: Path, data_name: str, exc: BaseException) -> AccuracyInputError:
    problem = f"cannot resolve data_name {brief(data_name)}: {printable(exc, 300)}"
    return AccuracyInputError(root, problem)


class _RecentArrays:
    """The last tensors loaded, shared read-only between their readers.

    A node's diagnosis reads the same files two or three times (metrics, the float64 replay
    of its inputs, the inputs' compare): 960 of the 3042 loads on a 626 MB L1 pair, 3 % of
    its wall time. Bounded in entries and bytes (mapped arrays count too: their pages stay
    resident while held; 8 MB kept peak RSS under 100 MB there, 32 MB took it to 115 MB).
    """

    def __init__(self, entries: int = 16, nbytes: int = 8 << 20) -> None:
        self.entries, self.nbytes = entries, nbytes
        self._arrays: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(self, key: tuple[object, ...]) -> np.ndarray | None:
        with self._lock:
            array = self._arrays.get(key)
            if array is not None:
                self._arrays.move_to_end(key)
            return array

    def put(self, key: tuple[object, ...], array: np.ndarray) -> None:
        if array.nbytes > self.nbytes // 2:
            return
        with self._lock:
            if key in self._arrays:
                return
            self._arrays[key] = array
            self._held += array.nbytes
            while len(self._arrays) > self.entries or self._held > self.nbytes:
                _, old = self._arrays.popitem(last=False)
                self._held -= old.nbytes

    def clear(self) -> None:
        with self._lock:
            self._arrays.clear()
            self._held = 0


RECENT = _RecentArrays()


def load_array(path: Path, *, mmap: bool = True) -> np.ndarray:
    """The tensor stored in ``path`` (.npy or torch .pt) with its original dtype and shape.

    With ``mmap=True`` (read-only), data of 1 MiB or more is a view of the file (when the
    layout allows it), so comparing a large dump does not need all of it in memory at once;
    smaller data is read, as mapping it costs more than it saves. The last few tensors
    loaded are kept (``RECENT``): a reader asking again gets the same array. ``mmap=False``
    reads a private, writable copy.
    """
    if not mmap:  # a private copy in memory, the caller's to change
        return _read_array(Path(path), mmap)
    try:  # the file's identity too: a file rewritten in place is read again
        info = os.stat(path)
    except (OSError, ValueError):
        return _shared(str(path), None)  # _read_array names the problem
    return _shared(str(path), info)


def load_data(root: Path, data_name: str, within: Path | None = None) -> np.ndarray:
    """``load_array(resolve_data_path(root, data_name, within))``: a dump record's tensor.

    A plain file name (no separator, not ``.``/``..``, not a symlink) is joined as text to
    the checked data directory: no Path objects per file, one ``lstat`` for both the
    confinement and the file's identity (a third of a 4 KB tensor's load went to them).
    Anything else takes ``resolve_data_path``, which says what is wrong with it.
    """
    if not _plain_name(data_name):
        return load_array(resolve_data_path(root, data_name, within))
    target = _checked_dir(root, within, data_name)[1] + data_name
    try:
        info = os.lstat(target)
    except (OSError, ValueError):
        info = None
    if info is None or stat.S_ISLNK(info.st_mode):  # missing, or a link: resolved and checked
        return load_array(resolve_data_path(root, data_name, within))
    return _shared(target, info)


def _plain_name(data_name: str) -> bool:
    return (0 < len(data_name) <= 4096 and "/" not in data_name and "\\" not in data_name
            and "\0" not in data_name and data_name not in (".", ".."))


def _shared(path: str, info: os.stat_result | None) -> np.ndarray:
    """The read-only array in ``path`` (stat'ed as ``info``), from ``RECENT`` if there."""
    key = None if info is None else (path, info.st_ino, info.st_mtime_ns, info.st_size)
    known = RECENT.get(key) if key is not None else None
    if known is not None:
        return known
    array = _read_array(path, True)
    array.flags.writeable = False  # shared: no reader may change what another reads
    if key is not None:
        RECENT.put(key, array)
    return array


def _read_array(path: str | Path, mmap: bool) -> np.ndarray:
    suffix = os.path.splitext(path)[1]
    if suffix.lower() not in (".npy", ".pt"):
        raise AccuracyInputError(path, f"unsupported tensor file type {suffix!r} (.npy, .pt)")
    try:
        if suffix.lower() == ".pt" and _PREAD:
            array = _load_pt(path, mmap)
        else:
            path = Path(path)
            _check_regular(path)
            array = _load_npy(path, mmap) if suffix.lower() == ".npy" else _load_pt_zipfile(
                path, mmap)
    except OSError as exc:  # ENAMETOOLONG, EACCES, ... from the path itself
        raise AccuracyInputError(path, f"cannot open tensor file: {exc.strerror or exc}") from None
    RUN_BUDGET.take(path, array.nbytes)
    return array


def _check_regular(path: Path) -> None:
    if not path.exists():
        raise AccuracyInputError(path, "tensor file not found")
    if not path.is_file():
        raise AccuracyInputError(path, "tensor path is not a regular file")


def _load_pt(path: str | Path, use_mmap: bool) -> np.ndarray:
    """A .pt file through one descriptor: by offset when plain, else with zipfile."""
    try:
        fd = os.open(path, _OPEN_FLAGS)  # non-blocking: a FIFO must not hang the open
    except FileNotFoundError:
        raise AccuracyInputError(path, "tensor file not found") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AccuracyInputError(path, "tensor path is not a regular file")
        try:
            array = load_plain(fd, info.st_size, path, use_mmap)
        except (OSError, ValueError) as exc:  # EIO, a file shrunk under the mapping
            raise AccuracyInputError(path, f"corrupt torch .pt archive: {exc}") from None
    finally:
        os.close(fd)
    return array if array is not None else _load_pt_zipfile(Path(path), use_mmap)


def _load_npy(path: Path, use_mmap: bool) -> np.ndarray:
    try:
        use_mmap = use_mmap and path.stat().st_size >= MMAP_MIN_BYTES
        loaded = load_npy(path, use_mmap, limit("npy_header_bytes"), limit("tensor_bytes"))
    except ValueError as exc:
        # numpy says "Object arrays cannot be loaded when allow_pickle=False" here.
        raise AccuracyInputError(path, f"not a plain numeric .npy array: {exc}") from exc
    except (OSError, EOFError) as exc:
        raise AccuracyInputError(path, f"unreadable .npy file: {exc}") from exc
    if not isinstance(loaded, np.ndarray):  # an .npz archive renamed to .npy
        raise AccuracyInputError(path, "not a single .npy array (an .npz archive?)")
    if loaded.dtype.kind not in "biufc":
        raise AccuracyInputError(path, f"unsupported dtype {loaded.dtype} in .npy file")
    return np.asarray(loaded)


def _load_pt_zipfile(path: Path, use_mmap: bool) -> np.ndarray:
    try:
        with zipfile.ZipFile(path) as archive:
            prefix = record_prefix(archive.namelist(), path)
            ref = _unpickle_tensor(archive, prefix, path)
            byteorder = _byteorder(archive, prefix, path)
            member = f"{prefix}data/{ref.storage.key}"
            try:
                info = archive.getinfo(member)
            except KeyError:
                raise AccuracyInputError(path, f"storage member {member!r} is missing") from None
            raw = _storage_bytes(path, archive, info, use_mmap)
    except zipfile.BadZipFile as exc:
        raise AccuracyInputError(path, _not_a_zip_problem(path, exc)) from exc
    except (OSError, EOFError, zlib.error, NotImplementedError, RuntimeError, ValueError) as exc:
        # zipfile reports corrupt or truncated members with all of these.
        raise AccuracyInputError(path, f"corrupt torch .pt archive: {exc}") from exc
    return tensor_from_storage(raw, ref, byteorder, path)


def _not_a_zip_problem(path: Path, exc: Exception) -> str:
    try:
        with path.open("rb") as fh:
            head = fh.read(len(LEGACY_TORCH_MAGIC))
    except OSError:
        head = b""
    if head == LEGACY_TORCH_MAGIC:
        return "legacy (torch < 1.6, non-zip) .pt format is not supported"
    return f"not a valid torch .pt zip archive: {exc}"


def _unpickle_tensor(archive: zipfile.ZipFile, prefix: str, path: Path) -> TensorRef:
    info = archive.getinfo(f"{prefix}data.pkl")
    if info.file_size > limit("pickle_bytes"):  # a single-tensor data.pkl is ~200 bytes
        raise AccuracyInputError(path, f"data.pkl size: {over('pickle_bytes', info.file_size)}")
    return parse_tensor_pickle(_read_member(archive, info, path), path)


def _byteorder(archive: zipfile.ZipFile, prefix: str, path: Path) -> str:
    # Archives written before torch recorded byte order are little-endian.
    if f"{prefix}byteorder" not in archive.namelist():
        return "little"
    info = archive.getinfo(f"{prefix}byteorder")
    if info.file_size > 16:
        raise AccuracyInputError(path, f"byteorder member is {info.file_size} bytes, not a word")
    return parse_byteorder(_read_member(archive, info, path), path)


def _storage_bytes(
    path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo, use_mmap: bool
) -> np.ndarray:
    """The member's bytes as a uint8 array: a file mapping when stored uncompressed."""
    if info.file_size > limit("tensor_bytes"):
        raise AccuracyInputError(
            path, f"storage {printable(info.filename, 80)!r}: "
            f"{over('tensor_bytes', info.file_size)}")
    small = info.file_size < MMAP_MIN_BYTES  # mapping costs more than reading these
    if small or not use_mmap or info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 1:
        # Reading into a bytearray makes the result writable and independent of the file.
        return np.frombuffer(bytearray(_read_member(archive, info, path)), dtype=np.uint8)
    with path.open("rb") as fh:
        fh.seek(info.header_offset)
        header = fh.read(_ZIP_LOCAL_HEADER.size)
        if len(header) < _ZIP_LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise AccuracyInputError(path, f"bad zip local header for {info.filename!r}")
        _, name_len, extra_len = _ZIP_LOCAL_HEADER.unpack(header)
        # torch pads the local extra field so storages start 64-byte aligned; the
        # central directory does not record that padding, so it must come from here.
        start = info.header_offset + _ZIP_LOCAL_HEADER.size + name_len + extra_len
        if start + info.file_size > os.fstat(fh.fileno()).st_size:
            raise AccuracyInputError(path, f"archive truncated inside {info.filename!r}")
        mapping = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    with memoryview(mapping) as whole, whole[start : start + info.file_size] as data:
        if crc32(data) != info.CRC:  # what zipfile checks when it reads a member
            raise AccuracyInputError(
                path, f"corrupt torch .pt archive: Bad CRC-32 for file "
                f"{printable(info.filename, 80)!r}")
    # The array keeps the mapping alive; it is unmapped when the last view goes away.
    return np.frombuffer(mapping, dtype=np.uint8, count=info.file_size, offset=start)


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> bytes:
    """A member's bytes, refused before reading when inflating it could exhaust memory.

    torch.save stores members uncompressed; a compressed one is at most ``inflate_bytes``
    (the central directory's size bounds what zipfile decompresses), and only deflate.
    """
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise AccuracyInputError(
            path, f"member {printable(info.filename, 80)!r} uses compression {info.compress_type}"
            " (torch.save stores members; only stored or deflated ones are read)")
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > limit("inflate_bytes"):
        raise AccuracyInputError(
            path, f"compressed member {printable(info.filename, 80)!r} inflates to "
            f"{over('inflate_bytes', info.file_size)}")
    return archive.read(info)

