"""Bad dumps give clear errors naming the file, never an INTERNALERROR, never exit 0."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import dump

NODE = "Tensor.__add__.5.forward"


def run(pytester: pytest.Pytester, npu: Path, bench: Path) -> pytest.RunResult:
    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", "-p",
                                "no:cacheprovider", "-k", NODE)
    assert "INTERNALERROR" not in result.stdout.str()
    assert result.ret != 0
    return result


def _step0(root: Path) -> Path:
    return next((root / "step0").iterdir())


def test_truncated_dump_json_is_a_collection_error(pytester: pytest.Pytester,
                                                   copy_dump: Any) -> None:
    npu = copy_dump("pt_bug", "L1_tensor")
    target = _step0(npu) / "dump.json"
    text = target.read_text()
    target.write_text(text[: len(text) // 2])
    result = run(pytester, npu, dump("pt_fp32", "L1_tensor"))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([
        "*ERROR collecting accuracy*",
        f"unreadable input: {target}: not valid JSON: * the file looks truncated",
    ])


def test_missing_data_file_fails_the_item_naming_it(pytester: pytest.Pytester,
                                                    copy_dump: Any) -> None:
    npu = copy_dump("pt_bug", "L1_tensor")
    missing = _step0(npu) / "dump_tensor_data" / f"{NODE}.output.0.pt"
    missing.unlink()
    result = run(pytester, npu, dump("pt_fp32", "L1_tensor"))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"{NODE}: {missing}: *"])


def test_data_name_outside_the_dump_is_refused(pytester: pytest.Pytester,
                                               copy_dump: Any) -> None:
    npu = copy_dump("pt_bug", "L1_tensor")
    dump_json = _step0(npu) / "dump.json"
    doc = json.loads(dump_json.read_text())
    doc["data"][NODE]["output"][0]["data_name"] = "../../../../../../etc/passwd"
    dump_json.write_text(json.dumps(doc))
    result = run(pytester, npu, dump("pt_fp32", "L1_tensor"))
    result.stdout.fnmatch_lines(["*points outside the dump directory*"])


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, (f"touch {self.marker}",))


def test_pickle_payload_in_pt_is_refused_and_not_executed(pytester: pytest.Pytester,
                                                          copy_dump: Any, tmp_path: Path) -> None:
    npu = copy_dump("pt_bug", "L1_tensor")
    marker = tmp_path / "pwned"
    target = _step0(npu) / "dump_tensor_data" / f"{NODE}.output.0.pt"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps(_Payload(marker), protocol=2))
        archive.writestr("archive/version", "3\n")
    target.write_bytes(buf.getvalue())
    result = run(pytester, npu, dump("pt_fp32", "L1_tensor"))
    result.stdout.fnmatch_lines(["*refused to unpickle*system*"])
    assert not marker.exists()


def test_missing_dump_directory(pytester: pytest.Pytester, tmp_path: Path) -> None:
    result = run(pytester, tmp_path / "nope", dump("pt_fp32", "L1_tensor"))
    missing = tmp_path / "nope"
    result.stdout.fnmatch_lines([f"unreadable input: {missing}: no such file or directory"])


def test_unknown_marker_key_fails_at_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.accuracy(mean_rell=0.01)
        def test_x():
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_x: @accuracy got unknown key(s) mean_rell (did you mean "
                                 "mean_rel?); valid keys: *"])


def test_accuracy_alias_rejects_unknown_keys_immediately() -> None:
    from pytest_accuracy import accuracy

    with pytest.raises(TypeError, match=r"^@accuracy got unknown key\(s\) mean_rell \(did you "
                       r"mean mean_rel\?\); valid keys: allow_precision, band_f"):
        accuracy(mean_rell=0.01)
    assert accuracy(mean_rel=0.01).mark.kwargs == {"mean_rel": 0.01}
