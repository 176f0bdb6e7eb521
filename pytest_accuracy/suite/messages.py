"""Lines of a compare failure that lead to the fix: the option that declares a precision change,
the module a failing API runs in, and how many elements are off (as torch.testing words it)."""

from __future__ import annotations

import math
import re

from pytest_accuracy.compare import NodeResult
from pytest_accuracy.compare.results import TensorComparison
from pytest_accuracy.dumps.model import Call

_DTYPES = re.compile(r"npu (\S+) vs bench (\S+?)[ ,;)]")


def precision_hint(result: NodeResult) -> str | None:
    """A precision finding: how to declare the change when it is on purpose."""
    for finding in result.findings:
        if finding.kind != "precision":
            continue
        found = _DTYPES.search(finding.detail + " ")
        pair = f"{found.group(1)}:{found.group(2)}" if found else "bfloat16:float32"
        return (f"If this precision change is on purpose (a {pair.replace(':', ' run against a ')}"
                f" golden), declare it: --acc-allow-precision={pair} (ini acc_allow_precision, "
                f"marker @accuracy(allow_precision={pair!r})); the node is then judged in that "
                "precision's band.")
    return None


def enclosing_line(call: Call) -> str | None:
    """The module an API call runs in: construct.json's parent, else the calling line of the
    stack (an L1 dump records no modules: every RMSNorm shares the innermost frame)."""
    if call.kind == "module" and call.parent is None:
        return None
    if call.parent:
        return f"In module: {call.parent}"
    caller = _caller_frame(call)
    if caller is None:
        return None
    return (f"Called from: {caller} (this dump records no module structure, no construct.json "
            "parent: dump at level mix to name the module)")


def _caller_frame(call: Call) -> str | None:
    """The second stack frame outside the frameworks' files: the line that called the module
    whose code the innermost frame is."""
    own = [f for f in call.stack_frames()
           if "site-packages" not in f and "dist-packages" not in f]
    return " ".join(own[1].split()) if len(own) > 1 else None


def mismatched_line(t: TensorComparison) -> str | None:
    """``Mismatched elements: 12 / 512 (2.3%)``: elements whose relative error is 0.1 % or more
    (msprobe's One Thousandth Err Ratio, turned into a count: the compare criteria judge the
    relative L2 error and the cosine, not each element, so this is what counts elements)."""
    ratio = getattr(t.metrics, "one_thousandth_err_ratio", None)
    if ratio is None or not t.npu.shape:
        return None
    size = math.prod(t.npu.shape)
    if size <= 0:
        return None
    bad = size - round(ratio * size)
    return (f"Mismatched elements: {bad} / {size} ({bad / size:.1%}) with a relative error of "
            "0.1 % or more")
