"""A per-model regression suite on the bundled tiny-Llama dumps, using the plugin's fixtures.

Run: pytest example_suites/tiny_llama
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_accuracy import accuracy

DUMPS = Path(__file__).resolve().parents[2] / "example_data" / "dumps"


@accuracy(npu=str(DUMPS / "pt_bf16" / "L1_tensor"), bench=str(DUMPS / "pt_fp32" / "L1_tensor"),
          allow_precision="bfloat16:float32")  # a bf16 run against an fp32 golden, on purpose
def test_bf16_autocast_stays_within_bf16_noise(acc_compare) -> None:  # type: ignore[no-untyped-def]
    acc_compare.assert_close()
    # every NPU node found its counterpart: a silently shrinking match would hide regressions
    assert all(bench is not None for _, bench in acc_compare.pairs)


@accuracy(npu=str(DUMPS / "pt_bug" / "L0_tensor"), bench=str(DUMPS / "pt_fp32" / "L0_tensor"))
def test_known_eps_bug_is_localised_to_layer1_attention_norm(acc_compare) -> None:  # type: ignore[no-untyped-def]
    first = acc_compare.first_divergence
    assert first is not None and first.npu_name == "Module.layers.1.n1.RMSNorm.forward.0"
    with pytest.raises(AssertionError, match=r"First divergence: Module\.layers\.1\.n1\.RMSNorm"):
        acc_compare.assert_close()


@accuracy(npu=str(DUMPS / "pt_bug" / "L1_tensor"), bench=str(DUMPS / "pt_fp32" / "L1_tensor"))
def test_metrics_table_has_msprobe_columns(acc_compare) -> None:  # type: ignore[no-untyped-def]
    table = acc_compare.table
    row = table[table["NPU Name"] == "Tensor.__add__.5.forward.output.0"].iloc[0]
    assert row["Result"] == "fail" and row["RelL2Err"] > 0.01
    assert acc_compare.first_divergence.npu_name == "Tensor.__add__.5.forward"


@accuracy(npu=str(DUMPS / "ms_fp32" / "L1_tensor"))
def test_dump_fixture_gives_ordered_calls(acc_npu_dump) -> None:  # type: ignore[no-untyped-def]
    assert acc_npu_dump.keys() == [(0, 0), (1, 0)]
    first_call = next(iter(acc_npu_dump)).calls[0]
    assert first_call.name == "Functional.gather.0.forward"
