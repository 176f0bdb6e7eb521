"""Fuzzing the readers of untrusted files: every input is an array or a named AccuracyInputError.

Mutated opcodes of real ``.pt`` fixture files, generated and mutated ``.npy`` headers, and
mutated ``dump.json`` files.  Derandomized in CI; ``ACC_FUZZ_EXAMPLES=3000 ACC_FUZZ_RANDOM=1``
hunts with fresh examples.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_accuracy.dumps.layout import load_dumps
from pytest_accuracy.dumps.tensors import load_array
from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.limits import limit

FUZZ = settings(
    max_examples=int(os.environ.get("ACC_FUZZ_EXAMPLES", "100")),
    deadline=None,
    derandomize=not os.environ.get("ACC_FUZZ_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
DUMPS = Path(__file__).resolve().parent.parent / "example_data" / "dumps"
_PT_FILES = sorted((DUMPS / "pt_fp32" / "L1_tensor" / "step0").glob("*/dump_tensor_data/*.pt"))[:2]
_PT_FILES += sorted((DUMPS / "pt_bf16" / "L1_tensor" / "step0").glob("*/dump_tensor_data/*.pt"))[:1]


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


PT = [_members(p) for p in _PT_FILES]
# Opcodes that build, call, mutate or reach objects: the ones an attack would splice in.
OPCODES = [bytes([c]) for c in b"bRQ(tsu]}hqgp0.N\x88\x89\x85\x86\x87\x93\x94\x81c)lae"]


def _expect_array_or_named_error(path: Path) -> None:
    try:
        array = load_array(path)
    except AccuracyInputError as exc:
        assert exc.problem and str(path) in str(exc)
        return
    assert isinstance(array, np.ndarray)
    assert array.nbytes <= limit("tensor_bytes")


@st.composite
def _mutated_pickle(draw: st.DrawFn) -> tuple[int, bytes]:
    which = draw(st.integers(0, len(PT) - 1))
    name = next(n for n in PT[which] if n.endswith("data.pkl"))
    data = bytearray(PT[which][name])
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        piece = draw(st.one_of(st.sampled_from(OPCODES), st.binary(min_size=1, max_size=6)))
        action = draw(st.sampled_from(["insert", "replace", "delete"]))
        if action == "insert":
            data[at:at] = piece
        elif action == "replace":
            data[at : at + len(piece)] = piece
        else:
            del data[at : at + draw(st.integers(1, 8))]
    return which, bytes(data)


@FUZZ
@given(case=_mutated_pickle())
def test_mutated_pt_pickles(case: tuple[int, bytes], tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    which, pkl = case
    path = tmp_path_factory.mktemp("pt") / "t.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in PT[which].items():
            archive.writestr(name, pkl if name.endswith("data.pkl") else data)
    _expect_array_or_named_error(path)


_DESCR = st.sampled_from(["<f4", "<f8", ">f2", "|u1", "<i8", "|b1", "<c8", "O", "<U3", "V8",
                          "<f4, <f4", "xyz", "", "<f99999"])
_DIM = st.one_of(st.integers(0, 6), st.integers(-3, 1 << 64))


@st.composite
def _npy_file(draw: st.DrawFn) -> bytes:
    shape = draw(st.lists(_DIM, max_size=4))
    dims = "".join(f"{d}, " for d in shape)
    header = (f"{{'descr': '{draw(_DESCR)}', 'fortran_order': "
              f"{draw(st.sampled_from(['False', 'True', '1', 'None']))}, 'shape': ({dims}), }}")
    raw = bytearray(header.encode("latin-1"))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(raw)))
        raw[at:at] = draw(st.binary(max_size=8))
    version = draw(st.sampled_from([1, 2, 3, 0, 9]))
    size = len(raw) + 1
    length = size.to_bytes(2 if version == 1 else 4, "little")
    if draw(st.booleans()):
        length = draw(st.binary(min_size=len(length), max_size=len(length)))
    body = draw(st.binary(max_size=64))
    return b"\x93NUMPY" + bytes([version, 0]) + length + bytes(raw) + b"\n" + body


@FUZZ
@given(data=_npy_file())
def test_generated_npy_headers(data: bytes, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("npy") / "t.npy"
    path.write_bytes(data)
    _expect_array_or_named_error(path)


_DUMP_JSON = next((DUMPS / "pt_fp32" / "mix_statistics" / "step0").glob("*/dump.json"))
_DUMP_TEXT = _DUMP_JSON.read_bytes()[:20_000]  # the head: dozens of records, kept small


@st.composite
def _mutated_dump_json(draw: st.DrawFn) -> bytes:
    data = bytearray(_DUMP_TEXT)
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(data)))
        piece = draw(st.one_of(
            st.sampled_from([b"[", b"{", b"}", b"]", b'"', b",", b":", b"-1", b"1e400", b"null",
                             b"9" * 80, b'"inf"', b"NaN", b"\\u0000", b"\x1b[2K", b"../"]),
            st.binary(min_size=1, max_size=4),
        ))
        data[at : at + draw(st.integers(0, 3))] = piece
    return bytes(data)


@FUZZ
@given(data=_mutated_dump_json())
def test_mutated_dump_json(data: bytes, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    rank = tmp_path_factory.mktemp("dump") / "step0" / "rank0"
    rank.mkdir(parents=True)
    (rank / "dump.json").write_bytes(data)
    try:
        dumps = load_dumps(rank.parent.parent)
    except AccuracyInputError as exc:
        assert exc.problem
        return
    for dump in dumps.dumps.values():
        for call in dump.calls:
            assert isinstance(call.name, str)


def test_fixtures_are_there() -> None:
    assert len(PT) == 3 and all(any(n.endswith("data.pkl") for n in m) for m in PT)
    assert io.BytesIO(_DUMP_TEXT).read(1) == b"{"
