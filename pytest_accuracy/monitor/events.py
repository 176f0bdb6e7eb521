"""msprobe monitor statistics as TensorBoard events (``msprobe csv2tb``'s by-step layout)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from pytest_accuracy.errors import AccuracyInputError, require
from pytest_accuracy.monitor.model import METRICS, RankRecords, Stat
from pytest_accuracy.safe_io import check_regular

# csv2tb: rank<r>/<metric>/events.out.tfevents.*, tags 'vp<vpp>:<name>[:micro<m>]/<op>'
_TAG = re.compile(r"vp(\d+):(.+?)(?::micro(\d+))?/(norm|max|min|mean|zeros|nans)")


def read_events(folder: Path, metric: str, into: RankRecords) -> None:
    """Every event file of one metric folder into ``into``."""
    module: Any = require("tensorboard.backend.event_processing.event_accumulator",
                          "tensorboard")
    values: dict[tuple[int, int, str], dict[str, float]] = {}
    for path in sorted(folder.glob("events.out.tfevents*")):
        check_regular(path)
        acc = module.EventAccumulator(str(path), size_guidance={module.SCALARS: 0})
        try:
            acc.Reload()
        except Exception as exc:  # the package raises many types for corrupt files
            raise AccuracyInputError(path, f"unreadable TensorBoard events: {exc}") from exc
        for tag in acc.Tags().get("scalars", []):
            found = _TAG.fullmatch(tag)
            if found is None:
                continue
            micro = int(found.group(3) or 0)
            for event in acc.Scalars(tag):
                key = (int(event.step), micro, found.group(2))
                values.setdefault(key, {})[found.group(4)] = float(event.value)
    quantum = _quantum([v for ops in values.values() for v in ops.values()])
    for (step, micro, name), ops in values.items():
        into.add(Stat(metric, step, micro, name, ops, quantum, "float32", str(folder)))
    if not values and metric in METRICS:
        raise AccuracyInputError(folder, "no 'vp<stage>:<name>/<op>' scalars: not msprobe "
                                 "monitor events")


def _quantum(values: list[float]) -> float:
    """The CSV rounding the values went through: the fewest decimals that give back every
    value to float32 precision (csv2tb converts CSVs written with ``ndigits`` decimals)."""
    places = 0
    for value in values:
        if not math.isfinite(value) or value == 0:
            continue
        for d in range(places, 13):
            if abs(round(value, d) - value) <= 1.2e-7 * abs(value):
                places = d
                break
        else:
            places = 12
    return 10.0 ** -places
