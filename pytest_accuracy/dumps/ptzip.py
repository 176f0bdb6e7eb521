"""torch.save's plain zip, read by offset: one open file, a few ``os.pread`` calls.

torch.save writes an uncompressed zip with no archive comment and no zip64 records (below
4 GiB): ``<name>/data.pkl``, ``<name>/byteorder``, ``<name>/data/<key>`` and a few small
members, each STORED, flagged only "sizes in a data descriptor" (bit 3) and "UTF-8 names"
(bit 11). For such a file :func:`read_plain` finds the end-of-central-directory record at
the end, reads the central directory once, and reads each member's local header for its
real data offset (torch pads the local extra field so that storages start 64-byte aligned;
the central directory does not record that). Any other layout (compressed, zip64, a
comment, encryption, data before the archive, duplicate names) returns ``None``: the
caller then reads it with :mod:`zipfile` as before. Inconsistencies inside the plain layout
are bad input: AccuracyInputError naming the file.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pytest_accuracy.dumps.crc import crc32
from pytest_accuracy.dumps.ptpickle import parse_byteorder, parse_tensor_pickle, tensor_from_storage
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit, over
from pytest_accuracy.text import printable

__all__ = ["MMAP_MIN_BYTES", "PlainZip", "check_member_name", "load_plain", "read_plain",
           "record_prefix"]

MMAP_MIN_BYTES = 1 << 20  # below this, one read beats setting up a mapping

# End of central directory: signature, disk, directory disk, entries on this disk, entries,
# directory size, directory offset, comment length (22 bytes).
_EOCD = struct.Struct("<4sHHHHIIH")
_ZIP64_END = struct.Struct("<4sQHHIIQQQQ")  # zip64 end of central directory (56 bytes)
_ZIP64_LOCATOR = struct.Struct("<4sIQI")  # its locator (20 bytes)
_ZIP64_TAIL = _ZIP64_END.size + _ZIP64_LOCATOR.size
_CDIR = struct.Struct("<4sHHHHHHIIIHHHHHII")  # central directory file header (46 bytes)
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # local file header (30 bytes)
_ALLOWED_FLAGS = 0x0008 | 0x0800  # data descriptor, UTF-8 name
_SMALL_FILE = 64 << 10  # files up to this size are read whole, in one call
_CHUNK = 8 << 10  # otherwise the head and tail are read in chunks of this size
_MAX_DIRECTORY = 64 << 10  # a torch.save directory is a few hundred bytes
_MAX_MEMBERS = 256


class _NotPlain(Exception):
    """Not torch.save's plain layout: read the file with zipfile instead."""


class Member(NamedTuple):
    """One central directory entry of a plain archive (a tuple: made 4 times a file)."""

    name: str
    flags: int
    crc: int
    size: int
    header_offset: int


def check_member_name(name: str, path: str | Path) -> None:
    """Refuse member names no torch.save writes: absolute, backslashes, ``..`` components."""
    if (name.startswith("/") or "\\" in name or "\0" in name
            or (".." in name and ".." in name.split("/"))):
        raise AccuracyInputError(
            path, f"archive member name {printable(name, 80)!r} is not a torch.save name")


class PlainZip:
    """The members of a plain archive, read from ``fd`` (owned by the caller)."""

    def __init__(self, fd: int, size: int, path: str | Path, members: dict[str, Member],
                 directory_offset: int, tail: tuple[int, bytes]) -> None:
        self.fd, self.size, self.path = fd, size, path
        self.members = members
        self.directory_offset = directory_offset
        self._cached = [tail]  # (offset, bytes) chunks already read

    def data_offset(self, member: Member) -> int:
        """Where ``member``'s bytes start, from its local header (checked against the
        central directory); its bytes must end before the central directory."""
        header = self.pread(member.header_offset, _LOCAL.size)
        sig, _ver, flags, method, _t, _d, crc, csize, usize, name_len, extra_len = (
            _LOCAL.unpack(header))
        name = self.pread(member.header_offset + _LOCAL.size, name_len)
        sizes = (member.crc, member.size, member.size)  # in the header unless in a descriptor
        if (sig != b"PK\x03\x04" or flags != member.flags or method != 0
                or name.decode("utf-8", "replace") != member.name
                or (not flags & 0x0008 and (crc, csize, usize) != sizes)):
            raise AccuracyInputError(
                self.path, f"local header of {printable(member.name, 80)!r} does not match "
                "the central directory")
        start = member.header_offset + _LOCAL.size + name_len + extra_len
        if start + member.size > self.directory_offset:
            raise AccuracyInputError(
                self.path, f"archive truncated inside {printable(member.name, 80)!r}")
        return start

    def pread(self, offset: int, count: int) -> bytes:
        """``count`` bytes at ``offset``, from a chunk already read where possible."""
        for start, chunk in self._cached:
            if start <= offset and offset + count <= start + len(chunk):
                return chunk[offset - start : offset - start + count]
        if offset < 0 or offset + count > self.size:
            raise AccuracyInputError(self.path, "archive truncated: a zip record lies past the end")
        chunk = os.pread(self.fd, max(count, _CHUNK), offset)
        if len(chunk) < count:
            raise AccuracyInputError(self.path, "archive truncated: a zip record lies past the end")
        if count < _CHUNK:
            self._cached.append((offset, chunk))
        return chunk[:count]

    def read(self, member: Member) -> bytes:
        """A small member's bytes, CRC-checked (as zipfile does)."""
        data = self.pread(self.data_offset(member), member.size)
        self.check_crc(member, data)
        return data

    def read_into(self, member: Member, start: int) -> bytearray:
        """A member's bytes from ``start`` into a new (writable) buffer, CRC-checked."""
        buffer = bytearray(member.size)
        got = os.preadv(self.fd, [buffer], start) if member.size else 0
        if got != member.size:
            raise AccuracyInputError(
                self.path, f"archive truncated inside {printable(member.name, 80)!r}")
        self.check_crc(member, buffer)
        return buffer

    def check_crc(self, member: Member, data: bytes | bytearray | memoryview) -> None:
        if crc32(data) != member.crc:
            raise AccuracyInputError(
                self.path, f"corrupt torch .pt archive: Bad CRC-32 for file "
                f"{printable(member.name, 80)!r}")


def read_plain(fd: int, size: int, path: str | Path) -> PlainZip | None:
    """The plain archive in ``fd`` (``size`` bytes), or None when it is not torch's layout."""
    if size < _EOCD.size:
        return None
    tail_start = 0 if size <= _SMALL_FILE else max(0, size - _CHUNK)
    tail = os.pread(fd, size - tail_start, tail_start)
    if len(tail) != size - tail_start:
        return None  # the file changed under us; zipfile reports what it finds
    try:
        directory_offset, entries = _directory(tail, tail_start, size, path)
        members = _members(entries, path)
    except _NotPlain:
        return None
    return PlainZip(fd, size, path, members, directory_offset, (tail_start, tail))


def _directory(tail: bytes, tail_start: int, size: int, path: str | Path) -> tuple[int, bytes]:
    """The central directory's offset and bytes, from the record at the file's end."""
    sig, disk, cd_disk, here, total, cd_size, cd_offset, comment = _EOCD.unpack(
        tail[-_EOCD.size :])
    if sig != b"PK\x05\x06" or comment or disk or cd_disk or here != total:
        raise _NotPlain  # an archive comment, a multi-disk or a non-zip file
    if 0xFFFF in (here, total) or 0xFFFFFFFF in (cd_size, cd_offset):
        raise _NotPlain  # zip64
    end = size - _EOCD.size
    locator = end - _ZIP64_LOCATOR.size - tail_start  # where a zip64 locator would start
    if end - _ZIP64_TAIL >= tail_start and tail[locator : locator + 4] == b"PK\x06\x07":
        # torch (miniz) always writes a zip64 end record and its locator before the classic
        # record; below 4 GiB they repeat its values, which is all that is accepted here.
        _check_zip64_tail(tail[end - _ZIP64_TAIL - tail_start : end - tail_start],
                          end - _ZIP64_TAIL, (total, cd_size, cd_offset))
        end -= _ZIP64_TAIL
    if cd_offset + cd_size > end:
        raise AccuracyInputError(
            path, f"corrupt torch .pt archive: the central directory ({cd_size} bytes at "
            f"offset {cd_offset}) runs past the end of the file ({size} bytes)")
    if cd_offset + cd_size != end or cd_size > _MAX_DIRECTORY or total > _MAX_MEMBERS:
        raise _NotPlain  # data before the archive, zip64 records, or not torch's
    if cd_offset < tail_start:
        raise _NotPlain  # a directory larger than the tail chunk: not torch's
    directory = tail[cd_offset - tail_start : end - tail_start]
    return cd_offset, directory


def _check_zip64_tail(record: bytes, offset: int, classic: tuple[int, int, int]) -> None:
    """The zip64 end record + locator at ``offset`` must restate the classic record."""
    if len(record) != _ZIP64_TAIL:
        raise _NotPlain
    sig, rest, _made, _need, disk, cd_disk, here, total, cd_size, cd_offset = (
        _ZIP64_END.unpack_from(record))
    lsig, ldisk, where, disks = _ZIP64_LOCATOR.unpack_from(record, _ZIP64_END.size)
    if (sig, rest, disk, cd_disk, lsig, ldisk, where, disks) != (
            b"PK\x06\x06", _ZIP64_END.size - 12, 0, 0, b"PK\x06\x07", 0, offset, 1):
        raise _NotPlain
    if here != total or (total, cd_size, cd_offset) != classic:
        raise _NotPlain  # zipfile believes the zip64 values; let it read this one


def _members(directory: bytes, path: str | Path) -> dict[str, Member]:
    members: dict[str, Member] = {}
    pos = 0
    while pos < len(directory):
        if pos + _CDIR.size > len(directory):
            raise AccuracyInputError(path, "corrupt torch .pt archive: truncated central directory")
        fields = _CDIR.unpack_from(directory, pos)
        (sig, _made, _need, flags, method, _t, _d, crc, csize, usize,
         name_len, extra_len, comment_len, disk, _ia, _ea, offset) = fields
        if sig != b"PK\x01\x02":
            raise AccuracyInputError(path, "corrupt torch .pt archive: bad central directory entry")
        raw_name = directory[pos + _CDIR.size : pos + _CDIR.size + name_len]
        pos += _CDIR.size + name_len + extra_len + comment_len
        if (method != 0 or flags & ~_ALLOWED_FLAGS or csize != usize or disk
                or 0xFFFFFFFF in (csize, offset) or len(raw_name) != name_len):
            raise _NotPlain  # compressed, encrypted, zip64 or odd: zipfile's business
        try:
            name = raw_name.decode("utf-8" if flags & 0x0800 else "ascii")
        except UnicodeDecodeError:
            raise _NotPlain from None
        check_member_name(name, path)
        if name in members:
            raise _NotPlain  # zipfile picks the last of duplicates; keep that behaviour
        members[name] = Member(name, flags, crc, usize, offset)
    if pos != len(directory):
        raise AccuracyInputError(path, "corrupt torch .pt archive: truncated central directory")
    return members


def record_prefix(names: Iterable[str], path: str | Path, *, checked: bool = False) -> str:
    """``<name>/`` of the archive's one ``<name>/data.pkl``; every member name checked
    (unless ``checked``: read_plain has done it)."""
    pickles = []
    for name in names:
        if not checked:
            check_member_name(name, path)
        if name.endswith("/data.pkl") and name.count("/") == 1:
            pickles.append(name)
    if len(pickles) != 1:
        raise AccuracyInputError(
            path, f"expected one <name>/data.pkl in the .pt archive, found {len(pickles)}"
        )
    return pickles[0][: -len("data.pkl")]


def load_plain(fd: int, size: int, path: str | Path, use_mmap: bool) -> np.ndarray | None:
    """The tensor in a plain archive (None: not torch's plain layout, use zipfile).

    The same checks, limits and messages as the zipfile reader, in the same order.
    """
    archive = read_plain(fd, size, path)
    if archive is None:
        return None
    members = archive.members
    prefix = record_prefix(members, path, checked=True)
    pickled = members[f"{prefix}data.pkl"]
    if pickled.size > limit("pickle_bytes"):  # a single-tensor data.pkl is ~200 bytes
        raise AccuracyInputError(path, f"data.pkl size: {over('pickle_bytes', pickled.size)}")
    ref = parse_tensor_pickle(archive.read(pickled), path)
    byteorder = "little"  # archives written before torch recorded byte order
    order = members.get(f"{prefix}byteorder")
    if order is not None:
        if order.size > 16:
            raise AccuracyInputError(path, f"byteorder member is {order.size} bytes, not a word")
        byteorder = parse_byteorder(archive.read(order), path)
    name = f"{prefix}data/{ref.storage.key}"
    storage = members.get(name)
    if storage is None:
        raise AccuracyInputError(path, f"storage member {name!r} is missing")
    if storage.size > limit("tensor_bytes"):
        raise AccuracyInputError(
            path, f"storage {printable(name, 80)!r}: {over('tensor_bytes', storage.size)}")
    start = archive.data_offset(storage)
    if storage.size < MMAP_MIN_BYTES or not use_mmap:
        raw = np.frombuffer(archive.read_into(storage, start), dtype=np.uint8)
    else:
        # The array keeps the mapping alive; it is unmapped when the last view goes away.
        mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        with memoryview(mapping) as whole, whole[start : start + storage.size] as data:
            archive.check_crc(storage, data)  # a mapped tensor is checked like a read one
        raw = np.frombuffer(mapping, dtype=np.uint8, count=storage.size, offset=start)
    return tensor_from_storage(raw, ref, byteorder, path)
