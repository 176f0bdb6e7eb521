"""Hostile or broken logs and configs: NaN fails, junk is an error, detection is linear time."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from pytest_accuracy.logs import read_log
from pytest_accuracy.logs.detect import sniff
from tests.helpers import ROOT

LOGS = ROOT / "example_data" / "logs"
BENCH = LOGS / "megatron_bench_a.log"
CONFIGS = ROOT / "example_data" / "configs"
_LOSS = re.compile(r"lm loss: \S+")


def _rewrite_loss(path: Path, value: str, from_step: int) -> Path:
    """BENCH with the loss of every iteration from ``from_step`` on replaced by ``value``."""
    lines = BENCH.read_text().splitlines(keepends=True)
    out = []
    for line in lines:
        m = re.search(r"iteration +(\d+)/", line)
        if m and int(m.group(1)) >= from_step:
            line = _LOSS.sub(f"lm loss: {value}", line)
        out.append(line)
    path.write_text("".join(out))
    return path


def _run(pytester: pytest.Pytester, npu: Path) -> pytest.RunResult:
    result = pytester.runpytest(f"--acc-npu-log={npu}", f"--acc-bench-log={BENCH}",
                                "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    return result


def test_loss_turning_nan_fails_naming_the_step(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = _run(pytester, _rewrite_loss(tmp_path / "npu.log", "nan", 101))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "NPU loss is nan at step 101 (and on 199 later step(s)) where the bench is finite *"])


def test_loss_nan_everywhere_fails(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = _run(pytester, _rewrite_loss(tmp_path / "npu.log", "nan", 1))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["NPU loss is nan at step 1 (and on 299 later step(s)) *"])


def test_mostly_unparseable_loss_is_an_error(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = _run(pytester, _rewrite_loss(tmp_path / "npu.log", "1.0O9E+01", 21))
    assert result.ret not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    result.stdout.fnmatch_lines(["*280 unparseable values in 300 megatron step records*"])


@pytest.mark.parametrize("blank", [40, 5000])
def test_leading_blank_lines_detect_in_linear_time(blank: int) -> None:
    start = time.perf_counter()
    assert sniff(Path("x.log"), b"\n" * blank + b"hello\n") is None
    assert sniff(Path("x.log"), b"\n" * blank + b"1 2.5\n2 2.4\n") == "torchtitan-losses"
    assert time.perf_counter() - start < 1.0


def test_megatron_log_with_its_first_iteration_past_64k(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(b"\n" * 30 + b"arguments ...\n" * 6000 + b"\n" * 30 + BENCH.read_bytes())
    start = time.perf_counter()
    table = read_log(path)
    assert table.format == "megatron" and len(table) == 300
    assert time.perf_counter() - start < 10.0


def test_control_characters_from_a_config_are_escaped(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    text = (CONFIGS / "mindformers_llama2_7b_misaligned.yaml").read_text()
    npu = tmp_path / "npu.yaml"
    npu.write_text(text.replace("rms_norm_eps: 1.0e-6", 'rms_norm_eps: "\\e[2K\\e[1A1e-6"'))
    assert npu.read_text() != text
    result = pytester.runpytest(f"--acc-npu-config={npu}",
                                f"--acc-bench-config={CONFIGS / 'megatron_llama2_7b.sh'}",
                                "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "\x1b[2K" not in out and "\x1b[1A" not in out
    assert "\\x1b[2K\\x1b[1A1e-6" in out
