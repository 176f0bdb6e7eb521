"""Start-up cost of the plugin for a project that has it installed but does not use it.

Measures the CPU time (user + system; wall time on a shared box is mostly other people's) of
``python -m pytest -q -p no:cacheprovider test_one.py`` in a scratch project with one trivial
test, with the plugin (as installed) and without it (``-p no:accuracy``), alternating runs so
that background load hits both alike, and reports the median and fastest of each.
Also lists the heavy modules a plain run imports (there must be none).

Run: python benchmarks/bench_startup.py [--runs 21]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HEAVY = ("numpy", "pandas", "yaml", "ml_dtypes", "matplotlib", "pytest_accuracy.compare",
         "pytest_accuracy.dumps.model", "pytest_accuracy.logs")
PROBE = """
import sys
def pytest_unconfigure(config):
    heavy = [m for m in {heavy!r} if m in sys.modules]
    print("heavy modules imported:", ", ".join(heavy) or "none", file=sys.stderr)
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(project: Path, extra: list[str]) -> float:
    """CPU seconds (user + system) of one run: on a shared box, wall time is mostly others'."""
    before = _cpu()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "test_one.py", *extra], cwd=project, check=True, capture_output=True)
    return _cpu() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "test_one.py").write_text("def test_one():\n    assert True\n")
        (project / "pytest.ini").write_text("[pytest]\n")
        times: dict[str, list[float]] = {"with the plugin": [], "without (-p no:accuracy)": []}
        for _ in range(2):  # warm the page cache and the .pyc files
            _run(project, [])
        for _ in range(args.runs):
            times["with the plugin"].append(_run(project, []))
            times["without (-p no:accuracy)"].append(_run(project, ["-p", "no:accuracy"]))
        (project / "conftest.py").write_text(PROBE.format(heavy=HEAVY))
        probe = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "test_one.py"], cwd=project, capture_output=True, text=True)
    for name, values in times.items():
        print(f"{name:26} median {statistics.median(values) * 1000:7.1f} ms, fastest "
              f"{min(values) * 1000:7.1f} ms ({args.runs} runs)")
    with_, without = (statistics.median(v) for v in times.values())
    fastest = min(times["with the plugin"]) - min(times["without (-p no:accuracy)"])
    print(f"plugin cost: median {(with_ - without) * 1000:+.1f} ms, fastest "
          f"{fastest * 1000:+.1f} ms")
    print(next(line for line in probe.stderr.splitlines() if line.startswith("heavy")))


if __name__ == "__main__":
    main()
