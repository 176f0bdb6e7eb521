"""Paths to the bundled real msprobe dumps (copied from the project's fixtures)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parent.parent
DUMPS = ROOT / "example_data" / "dumps"


def dump(variant: str, config: str) -> Path:
    return DUMPS / variant / config


def rerun(source: Path, where: Path) -> Path:
    """A second run of ``source``'s code that computed the same values, under ``where``: a
    copy whose dump.json files are written anew (a deterministic rerun writes the same records;
    its files differ from the first run's, at least by the folder named in dump_data_dir).
    The same run given twice (one path, a link, a copy) is refused by the plugin."""
    import json
    import shutil

    target = where / f"rerun_{source.parent.name}_{source.name}"
    if not target.exists():
        shutil.copytree(source, target)
        for path in target.rglob("dump.json"):
            doc = json.loads(path.read_text())
            if doc.get("dump_data_dir"):
                doc["dump_data_dir"] = str(path.parent / "dump_tensor_data")
            text = json.dumps(doc, indent=1)
            # a statistics rerun may write the very same bytes: this one is formatted apart
            path.write_text(text if text != path.read_text() else json.dumps(doc, indent=2))
    return target


def compare_pair(pytester: pytest.Pytester, npu: Path, bench: Path, *flags: str
                 ) -> tuple[pytest.RunResult, str]:
    """A compare run in process, and the line that gives its verdict: the first divergence,
    or "No divergence" (else the output's tail, for the assertion's message)."""
    import re

    result = pytester.runpytest(f"--acc-npu={npu}", f"--acc-bench={bench}", "-p",
                                "no:cacheprovider", *flags)
    text = result.stdout.str()
    found = re.search(r"^(First divergence.*|No divergence.*)$", text, re.M)
    return result, found.group(1) if found else text[-2000:]
