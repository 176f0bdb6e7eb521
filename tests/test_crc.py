"""The compiled CRC-32 (dumps/_crc.c): zlib.crc32's value, to the bit, on any buffer."""

from __future__ import annotations

import os
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_accuracy.dumps import crc

try:
    from pytest_accuracy.dumps import _crc
except ImportError:  # pragma: no cover - depends on the install
    _crc = None  # type: ignore[assignment]

REQUIRE_ENV = "PYTEST_ACCURACY_REQUIRE_COMPILED"
needs_crc = pytest.mark.skipif(_crc is None, reason="the compiled CRC is not built")
FUZZ = settings(max_examples=int(os.environ.get("ACC_FUZZ_EXAMPLES", "300")), deadline=None,
                derandomize=not os.environ.get("ACC_FUZZ_RANDOM"))


def test_crc_is_built_where_the_install_must_have_it() -> None:
    """CI sets PYTEST_ACCURACY_REQUIRE_COMPILED: a silently failed C build must not pass."""
    if not os.environ.get(REQUIRE_ENV):
        pytest.skip(f"{REQUIRE_ENV} not set")
    assert _crc is not None, "pytest_accuracy.dumps._crc was not built"


@needs_crc
@FUZZ
@given(data=st.binary(max_size=700), value=st.integers(0, 2**32 - 1), skip=st.integers(0, 15))
def test_both_paths_give_zlibs_crc(data: bytes, value: int, skip: int) -> None:
    """Any length around the 16- and 64-byte blocks, any start value, unaligned starts."""
    view = memoryview(data)[min(skip, len(data)):]
    want = zlib.crc32(view, value)
    assert _crc.crc32(view, value) == want
    assert _crc.crc32(view, value, baseline=True) == want


@needs_crc
@pytest.mark.parametrize("size", [64, 65, 79, 80, 127, 128, 4095, 4096, 4097, (1 << 20) + 13])
def test_large_and_edge_sizes(size: int) -> None:
    data = bytearray(os.urandom(size))
    assert _crc.crc32(data) == zlib.crc32(data)
    data[size // 2] ^= 0x10  # one bit anywhere changes it
    assert _crc.crc32(data) == zlib.crc32(data)
    assert _crc.crc32(b"\0" * size) == zlib.crc32(b"\0" * size)


@needs_crc
def test_known_value() -> None:
    """The check value of CRC-32/ISO-HDLC, independent of zlib."""
    assert _crc.crc32(b"123456789") == 0xCBF43926
    assert _crc.crc32(b"123456789" * 8) == zlib.crc32(b"123456789" * 8)


def test_pure_switch_takes_zlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(crc.PURE_ENV, "1")
    assert crc._choose() is zlib.crc32
    monkeypatch.setenv(crc.PURE_ENV, "0")
    chosen = crc._choose()
    if _crc is not None and _crc.accelerated():
        assert chosen is _crc.crc32
    else:
        assert chosen is zlib.crc32
