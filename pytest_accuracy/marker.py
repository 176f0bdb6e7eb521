"""The ``accuracy`` marker: its keys, validation, and the ``accuracy(...)`` alias."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

# key -> one-line meaning; the registered marker help and error messages list these.
MARKER_KEYS: Mapping[str, str] = {
    "npu": "NPU (device under test) dump path",
    "bench": "bench dump path",
    "bench_noise": "compare: a second bench dump (another kernel, seed or device); each node "
                   "is held to the two bench runs' spread",
    "npu_log": "NPU training log",
    "bench_logs": "bench training log(s): a path or a list; the first is the bench",
    "rel_err": "compare: relative L2 error allowed for every dtype",
    "min_cosine": "compare: minimum cosine for every dtype",
    "min_matched": "compare: minimum share of NPU nodes that must find a bench counterpart",
    "dtype_aware": "compare: judge each tensor by its least precise upstream dtype",
    "allow_precision": "compare: NPU:BENCH dtype pairs compared on purpose ('bfloat16:float32')",
    "first_loss_abs": "loss: first-step absolute error allowed (0.005)",
    "first_loss_rel": "loss: first-step relative error allowed (0.005)",
    "mean_abs": "loss: mean absolute error allowed (0.01)",
    "mean_rel": "loss: mean relative error allowed (0.01)",
    "gnorm_rel": "loss: grad-norm mean relative error allowed (0.10)",
    "steps": "loss: (start, end) inclusive step window",
    "relax_to_bench_noise": "loss: widen thresholds to the bench runs' own spread",
    "band_factor": "loss: band width in multiples of the bench runs' spread",
}

MARKER_HELP = (
    "accuracy(*, npu=None, bench=None, bench_noise=None, npu_log=None, bench_logs=None, "
    "rel_err=None, min_cosine=None, min_matched=None, allow_precision=None, first_loss_abs=0.005, "
    "first_loss_rel=0.005, "
    "mean_abs=0.01, mean_rel=0.01, gnorm_rel=0.10, steps=None, relax_to_bench_noise=False): "
    "accuracy criteria and inputs for this test; the marker alone is an assertion when the "
    "test uses the acc_npu_log and acc_bench_logs fixtures. "
    "Example: @accuracy(first_loss_abs=0.005, mean_rel=0.01, gnorm_rel=0.10)"
)


# keys whose values are paths: a relative one is read from the test file's directory
PATH_KEYS = ("npu", "bench", "bench_noise", "npu_log", "bench_logs")


def marker_kwargs(node: pytest.Item) -> dict[str, Any]:
    """The merged ``@accuracy`` keys of ``node`` (the closest marker wins), relative paths
    resolved against the test file's directory, not the directory pytest was started from."""
    kwargs: dict[str, Any] = {}
    for mark in reversed(list(node.iter_markers("accuracy"))):
        kwargs.update(mark.kwargs)
    base = Path(node.path).parent
    for key in PATH_KEYS:
        value = kwargs.get(key)
        if isinstance(value, (list, tuple)):
            kwargs[key] = [_resolved(v, base) for v in value]
        elif value is not None:
            kwargs[key] = _resolved(value, base)
    return kwargs


def _resolved(value: Any, base: Path) -> str:
    path = Path(str(value))
    return str(path if path.is_absolute() else base / path)


def unknown_keys(keys: Iterable[str]) -> list[str]:
    return sorted(set(keys) - set(MARKER_KEYS))


def unknown_keys_message(where: str, bad: list[str]) -> str:
    """Each unknown key with the closest valid one, as an unknown --acc-* option is told."""
    import difflib

    told = []
    for key in bad:
        close = difflib.get_close_matches(key, sorted(MARKER_KEYS), n=1, cutoff=0.6)
        told.append(f"{key} (did you mean {close[0]}?)" if close else key)
    return (f"{where} got unknown key(s) {', '.join(told)}; valid keys: "
            f"{', '.join(sorted(MARKER_KEYS))}")


def accuracy(*args: Any, **kwargs: Any) -> pytest.MarkDecorator:
    """``@accuracy(first_loss_abs=0.005, ...)``: the ``pytest.mark.accuracy`` marker, checked."""
    if args:
        raise TypeError("accuracy() takes keyword arguments only, e.g. accuracy(mean_rel=0.01)")
    bad = unknown_keys(kwargs)
    if bad:
        raise TypeError(unknown_keys_message("@accuracy", bad))
    return pytest.mark.accuracy(**kwargs)
