"""Writes a next step's msprobe configs (atomically) and says the command."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_accuracy.nextstep.names import safe_name
from pytest_accuracy.nextstep.plans import plan_next_step
from pytest_accuracy.nextstep.situation import NextStep, Situation
from pytest_accuracy.safe_io import write_atomic

MESSAGE_FILE = "next_step.txt"


def next_step_dir(root: str | Path, item_id: str) -> Path:
    """``<root>/next_step/<safe name of the item id>``: one folder per failing item."""
    return Path(root) / "next_step" / safe_name(item_id)


def config_text(config: dict[str, object]) -> str:
    """A config as JSON: names from dumps are data here (quotes, newlines escaped by json)."""
    return json.dumps(config, indent=4, ensure_ascii=True, allow_nan=False) + "\n"


def write_step(step: NextStep) -> list[Path]:
    """Write ``step``'s configs and its message into its folder; the paths written."""
    written = [write_atomic(step.path(f), config_text(f.config)) for f in step.files]
    written.append(write_atomic(step.folder / MESSAGE_FILE, step.message + "\n"))
    return written


def write_next_step(situation: Situation, root: str | Path) -> str:
    """Plan the next step of a failing item, write its configs under ``root`` and return the
    message: "Next: dump step 153 rank 0 ... (about 12 MB): msprobe config written to ...;
    run it with:" and one command a line, the last the one to run."""
    step = plan_next_step(situation, next_step_dir(root, situation.item_id))
    write_step(step)
    return step.message
