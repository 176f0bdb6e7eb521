"""A precheck failure says the amounts a person acts on (issue 38)."""

from __future__ import annotations

import numpy as np

from pytest_accuracy.precheck.standards import STANDARDS


def test_an_absolute_miss_says_its_relative_size_and_the_standard_by_dtype() -> None:
    """An fp32 output of magnitude ~100 off by 4.7e-4 misses the default standard's absolute
    bound; the message gives relative error, cosine and magnitude, and the dtype standard
    (which it names) passes it."""
    reference = np.linspace(50.0, 100.0, 4096)
    device = (reference + 4.7e-4).astype(np.float32)
    judged = STANDARDS["default"].judge(device, reference)
    assert not judged.passed
    assert judged.reason.startswith("max abs error 4.7")
    assert "(under 0.0001 allowed); relative L2 error " in judged.reason
    assert "largest |reference| 100:" in judged.reason
    assert "--acc-standard=dtype judges by float32's relative tolerance" in judged.reason
    assert STANDARDS["dtype"].judge(device, reference).passed
