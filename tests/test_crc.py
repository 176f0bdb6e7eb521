"""The CRC-32 of the .pt members (ISA-L's, package isal): zlib.crc32's value, to the bit."""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_accuracy.dumps import crc

FUZZ = settings(max_examples=int(os.environ.get("ACC_FUZZ_EXAMPLES", "300")), deadline=None,
                derandomize=not os.environ.get("ACC_FUZZ_RANDOM"))


def test_isal_is_what_checks_the_crcs() -> None:
    """isal is a core dependency: a run without it would check CRCs at zlib's speed."""
    from isal import isal_zlib

    assert crc.crc32 is isal_zlib.crc32


@FUZZ
@given(data=st.binary(max_size=700), value=st.integers(0, 2**32 - 1), skip=st.integers(0, 15))
def test_zlibs_crc_on_any_buffer(data: bytes, value: int, skip: int) -> None:
    """Any length around the 16- and 64-byte blocks, any start value, unaligned starts."""
    view = memoryview(data)[min(skip, len(data)):]
    assert crc.crc32(view, value) == zlib.crc32(view, value)  # type: ignore[call-arg]


@pytest.mark.parametrize("size", [64, 65, 79, 80, 127, 128, 4095, 4096, 4097, (1 << 20) + 13])
def test_large_and_edge_sizes(size: int) -> None:
    data = bytearray(os.urandom(size))
    assert crc.crc32(data) == zlib.crc32(data)
    data[size // 2] ^= 0x10  # one bit anywhere changes it
    assert crc.crc32(data) == zlib.crc32(data)
    assert crc.crc32(b"\0" * size) == zlib.crc32(b"\0" * size)


def test_known_value() -> None:
    """The check value of CRC-32/ISO-HDLC, independent of zlib."""
    assert crc.crc32(b"123456789") == 0xCBF43926


def test_pure_switch_takes_zlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(crc.PURE_ENV, "1")
    assert crc._choose() is zlib.crc32
    monkeypatch.setenv(crc.PURE_ENV, "0")
    assert crc._choose() is not zlib.crc32
