"""The compiled log scanner: the pure path's tables, Python's floats, and no crash on any bytes."""

from __future__ import annotations

import itertools
import os
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_accuracy.errors import AccuracyInputError
from pytest_accuracy.logs import LogTable, read_log, records, speedups
from pytest_accuracy.logs.fields import SEP

SAMPLES = Path(__file__).parent / "data" / "log_samples"
EXAMPLES = Path(__file__).parent.parent / "example_data" / "logs"
REQUIRE_ENV = "PYTEST_ACCURACY_REQUIRE_COMPILED"
# CI gates merges: the same examples every run (derandomize).  To hunt for new cases, run
# e.g. ACC_FUZZ_EXAMPLES=3000 ACC_FUZZ_RANDOM=1 pytest tests/test_log_scanner.py -n 2.
EXAMPLES_N = int(os.environ.get("ACC_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES_N,
    deadline=None,
    derandomize=not os.environ.get("ACC_FUZZ_RANDOM"),
    suppress_health_check=[HealthCheck.too_slow],
)

scan = speedups.scanner()
needs_scanner = pytest.mark.skipif(scan is None, reason="the compiled log scanner is not built")


def test_scanner_is_built_where_the_install_must_have_it() -> None:
    """CI sets PYTEST_ACCURACY_REQUIRE_COMPILED: a silently failed C build must not pass."""
    if not os.environ.get(REQUIRE_ENV):
        pytest.skip(f"{REQUIRE_ENV} not set")
    assert speedups._compiled is not None, "pytest_accuracy.logs._scan was not built"


# --- same table as the pure path ------------------------------------------------------------


def read_both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    """read_log with the scanner, then with the pure path (a table, or the error's text)."""
    out: list[object] = []
    for pure in ("", "1"):
        monkeypatch.setenv(speedups.PURE_ENV, pure)
        try:
            out.append(read_log(path))
        except AccuracyInputError as exc:
            out.append(str(exc))
    monkeypatch.delenv(speedups.PURE_ENV)
    return out[0], out[1]


def assert_same(fast: object, pure: object) -> None:
    """Same values to the bit, same notes; only which lines were read one by one may differ."""
    if not isinstance(fast, LogTable) or not isinstance(pure, LogTable):
        assert fast == pure
        return
    pd.testing.assert_frame_equal(fast.frame, pure.frame, check_exact=True)
    assert fast.format == pure.format

    def notes(t: LogTable) -> list[str]:
        return [n for n in t.notes if "one by one" not in n]

    assert notes(fast) == notes(pure)


@needs_scanner
@pytest.mark.parametrize(
    "path",
    sorted(SAMPLES.glob("*.txt")) + sorted(EXAMPLES.glob("*.log")),
    ids=lambda p: p.name,
)
def test_real_logs_read_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_same(*read_both(path, monkeypatch))


@needs_scanner
def test_a_key_added_mid_run_gets_its_own_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 lines in one layout, then 100 with an extra loss: both read, none one by one."""
    mtp = "| mtp_1 loss: 0.5 | loss scale"
    lines = [MEGATRON.format(step=i, value="2.5") for i in range(1, 101)]
    lines += [
        MEGATRON.format(step=i, value="2.5").replace("| loss scale", mtp)
        for i in range(101, 201)
    ]
    path = tmp_path / "megatron.log"
    path.write_text("".join(lines))
    fast, pure = read_both(path, monkeypatch)
    assert_same(fast, pure)
    assert isinstance(fast, LogTable)
    assert fast.frame["mtp_1 loss"].isna().sum() == 100 and (fast.frame["loss"] == 2.5).all()
    assert not any("one by one" in n for n in fast.notes)


# --- fuzz: real line shapes, mutated ---------------------------------------------------------

MEGATRON = (
    " [2025-10-22 16:59:16] iteration {step:8d}/ 1000 | consumed samples: 64 | "
    "learning rate: 1.000000E-05 | global batch size:     8 | lm loss: {value} | "
    "loss scale: 1.0 | grad norm: 2.345 | number of skipped iterations:   0 | "
    "number of nan iterations:   0 |\n"
)
TEMPLATES = {
    "megatron": MEGATRON,
    "mindformers": (
        "2025-04-07 15:34:27,308 - INFO - {{ Epoch:[  1/  1], step:[{step:5d}/ 1000], "
        "loss: {value}, per_step_time: 1758ms, lr: 1e-05, overflow cond: False, "
        "loss_scale: 1.0, global_norm: [2.345], train_throughput_per_npu: 170.173T\n"
    ),
    "pynative": (
        "2026-03-01 10:00:00,000 - INFO - {{ step:[{step:5d}/ 1000], loss: {value}, "
        "lr: 1e-05, global_norm: [2.345], overflow cond: False }}\n"
    ),
    "hf": "{{'loss': {value}, 'grad_norm': 2.345, 'learning_rate': 1e-05, 'epoch': {step}}}\n",
    "jsonl": '{{"step": {step}, "loss": {value}, "grad_norm": 2.345, "lr": 1e-05}}\n',
    "torchtitan": (
        "[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - step: {step}  loss:  {value}  "
        "grad_norm:  2.345  memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%\n"
    ),
    "titan_colour": (
        "[rank0]:[titan] 2026-05-18 16:04:46,338 - root - INFO - \x1b[31mstep: {step:2}  "
        "\x1b[32mloss: {value}  \x1b[33mgrad_norm:  2.345  \x1b[34mmemory:  9.46GiB(64.99%)  "
        "\x1b[35mmfu: 0.17%\x1b[39m\n"
    ),
    "titan_2025": (
        "[rank0]:[titan] 2025-06-16 22:30:50,322 - root - INFO - step: {step}  loss:  {value}  "
        "memory: 49.66GiB(52.28%)  tps: 5,856  tflops: 339.16  mfu: 34.29%\n"
    ),
}
VALUES = [
    "2.5", "1.234567E+00", "0.1", "-0.0", "1e-05", "12", "3.141592653589793", "inf", "-inf",
    "nan", "NaN", "-nan", "N/A", "None", "null", "", "-", "1.2.3", "abc", "1e400", "1e-400",
    "0x10", "1_000", "\t5", "+.5", "5.", ".", "True", "[3.5]", "9" * 30, "1" * 70,
]  # fmt: skip
NOISE = [*":|/,[]{}'\" \r\t\x00\x1f\x1bx", "iteration ", "Epoch:[", "{'loss': ", "{", "}",
         "step: 3  loss: 1.5", "\x1b[32m", "  "]


@st.composite
def mutated_log(draw: st.DrawFn) -> tuple[str, bytes]:
    fmt = draw(st.sampled_from(sorted(TEMPLATES)))
    n = draw(st.integers(1, 90))
    lines = [
        TEMPLATES[fmt].format(step=i + 1, value=draw(st.sampled_from(VALUES[:7])))
        for i in range(n)
    ]
    for _ in range(draw(st.integers(0, 6))):
        i = draw(st.integers(0, n - 1))
        line = lines[i]
        kind = draw(st.sampled_from(["value", "noise", "cut", "swap", "drop", "crlf", "dup"]))
        at = draw(st.integers(0, len(line) - 1))
        if kind == "value":
            line = line.replace("2.345", draw(st.sampled_from(VALUES)), 1)
        elif kind == "noise":
            line = line[:at] + draw(st.sampled_from(NOISE)) + line[at:]
        elif kind == "cut":
            line = line[:at] + "\n"
        elif kind == "swap":
            sep = draw(st.sampled_from(["|", ",", "  "]))
            parts = line.rstrip("\n").split(sep)
            if len(parts) > 3:
                j = draw(st.integers(1, len(parts) - 2))
                parts[j], parts[j + 1] = parts[j + 1], parts[j]
            line = sep.join(parts) + "\n"
        elif kind == "drop":
            sep = "|" if fmt == "megatron" else "  " if "titan" in fmt else ","
            parts = line.split(sep)
            if len(parts) > 3:
                del parts[draw(st.integers(1, len(parts) - 2))]
            line = sep.join(parts)
        elif kind == "crlf":
            line = line.rstrip("\n") + "\r\n"
        else:
            line = line.rstrip("\n") + " " + line
        lines[i] = line
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, n)), "some other line of the run\n")
    tail = draw(st.sampled_from(["", lines[-1][: len(lines[-1]) // 2]]))
    return fmt, ("".join(lines) + tail).encode("latin-1")


@needs_scanner
@FUZZ
@given(case=mutated_log())
def test_mutated_logs_read_the_same(case: tuple[str, bytes], tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    fmt, data = case
    path = tmp_path_factory.mktemp(fmt) / ("m.jsonl" if fmt == "jsonl" else "worker_0.log")
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert_same(*read_both(path, monkeypatch))


# --- the scanner itself ----------------------------------------------------------------------

TABLE = bytes.maketrans(b"|", SEP)
NA, TRUTH = records._NA, records._TRUTH


def scan_numbers(texts: list[bytes]) -> dict[int, float]:
    """Each text as the only field of a record: line number -> value, for the lines read."""
    assert scan is not None
    data = b"".join(b"@" + t + b"\n" for t in texts)
    values, starts, odd, junk = scan.scan(
        data, 0, len(data), b"@", 0, 0, TABLE, b"", b"\x02", (b"",), NA, TRUTH
    )
    assert not odd  # every line fits the one-field layout; some values are left to Python
    read = np.frombuffer(values, dtype=np.float64)
    line_starts = np.cumsum([0] + [len(t) + 2 for t in texts])
    lines = np.searchsorted(line_starts, np.frombuffer(starts, dtype=np.int64) - 1)
    assert len(read) == len(lines) and len(lines) + len(junk) // 16 == len(texts)
    return dict(zip(lines.tolist(), read.tolist(), strict=True))


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


DECIMAL = rb"[+-]?([0-9]{1,25}(\.[0-9]{0,25})?|\.[0-9]{1,25})([eE][+-]?[0-9]{1,4})?"


@needs_scanner
@FUZZ
@given(
    xs=st.lists(st.floats(allow_nan=False), min_size=1, max_size=50),
    spec=st.sampled_from(["{!r}", "{:.6E}", "{:.17g}", "{:.3f}", "{:.20e}", "{:.0f}", "{:g}"]),
    texts=st.lists(st.from_regex(DECIMAL, fullmatch=True), max_size=50),
)
def test_numbers_are_pythons_floats_to_the_bit(
    xs: list[float], spec: str, texts: list[bytes]
) -> None:
    """Every plain decimal of up to 64 characters is read, exactly as float() reads it."""
    texts = [spec.format(x).encode() for x in xs] + texts
    texts = [t for t in texts if len(t) <= 64]
    got = scan_numbers(texts)
    assert sorted(got) == list(range(len(texts)))  # none left to the slow path
    for i, text in enumerate(texts):
        assert bits(got[i]) == bits(float(text)), text


@needs_scanner
def test_words_missing_markers_and_junk() -> None:
    texts = [b"inf", b"-Infinity", b"nan", b"N/A", b"None", b"", b"  7  ", b"1_0", b"\t5", b"1.2.3",
             b"0x10", b"True", b"1e", b"e5", b"--1", b"9" * 65, b"1e400", b"-1e-400"]  # fmt: skip
    got = scan_numbers(texts)
    assert got[0] == float("inf") and got[1] == float("-inf") and got[6] == 7.0
    assert all(np.isnan(got[i]) for i in (2, 3, 4, 5))
    assert got[16] == float("inf") and bits(got[17]) == bits(-0.0)
    assert sorted(set(range(len(texts))) - set(got)) == list(range(7, 16))  # left to Python


@needs_scanner
@FUZZ
@given(data=st.binary(max_size=3000), marker=st.sampled_from([b"{", b"a", b"\r", b"||"]))
def test_any_bytes_give_rows_or_odd_lines(data: bytes, marker: bytes) -> None:
    """Arbitrary bytes never crash the scanner; each marker line is a row or an odd line."""
    assert scan is not None
    table = bytes.maketrans(b"|:", SEP * 2)
    for close, flags in itertools.product((0, 1, 2), (0, 15)):
        values, starts, odd, junk = scan.scan(
            data, 0, len(data), marker, close, flags, table, b":|", b"\x01\x02\x03",
            (b"k", b"", b""), NA, TRUTH,
        )  # fmt: skip
        n = len(starts) // 8
        assert len(values) == 16 * n and len(odd) % 16 == 0 and len(junk) % 16 == 0
        spans = np.frombuffer(odd + junk, dtype=np.int64).reshape(-1, 2)
        assert ((spans[:, 0] >= 0) & (spans[:, 0] < spans[:, 1]) & (spans[:, 1] <= len(data))).all()


@needs_scanner
def test_count_lines_matches_bytes_count() -> None:
    assert scan is not None
    for data in (b"", b"a", b"a\n", b"\n\n", b"a\nb", b"x" * 100_000 + b"\n" * 7):
        whole = data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))
        assert scan.count_lines(data) == whole


@needs_scanner
@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"table": b"x" * 255}, "inconsistent layout"),
        ({"keys": (b"", b"")}, "inconsistent layout"),
        ({"seps": b"||"}, "inconsistent layout"),
        ({"end": 99}, "bad range, marker or close"),
        ({"marker": b""}, "bad range, marker or close"),
        ({"marker": b"\n"}, "bad range, marker or close"),  # read out of bounds before
        ({"marker": b"a\nb"}, "bad range, marker or close"),
        ({"close": 3}, "bad range, marker or close"),
        ({"table": bytes.maketrans(SEP, b" ")}, "the table maps no byte to the separator"),
        ({"kinds": b"\x09"}, "keys must be bytes, kinds 0-4"),
        ({"na": (b"x",) * 65}, "too many texts"),
    ],
)
def test_bad_arguments_are_errors_not_crashes(change: dict[str, object], error: str) -> None:
    assert scan is not None
    args: dict[str, object] = {
        "data": b"@1\n", "start": 0, "end": 3, "marker": b"@", "close": 0, "flags": 0,
        "table": TABLE, "seps": b"", "kinds": b"\x02", "keys": (b"",), "na": NA, "truth": TRUTH,
    }  # fmt: skip
    args.update(change)
    with pytest.raises((ValueError, TypeError), match=error):
        scan.scan(*args.values())  # type: ignore[arg-type]
