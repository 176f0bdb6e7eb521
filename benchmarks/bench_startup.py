"""Start-up cost of the plugin for a project that has it installed but does not use it.

Measures the CPU time (user + system; wall time on a shared box is mostly other people's) of
``python -m pytest -q -p no:cacheprovider test_one.py`` in a scratch project with one trivial
test, with the plugin (as installed) and without it (``-p no:accuracy``), alternating runs so
that background load hits both alike. Reported: the median of each, the median of the paired
differences (run i with minus run i without: what the plugin costs), and the fastest of each.

The children run as on a user's machine: bytecode caching on (``PYTHONDONTWRITEBYTECODE``
removed; untimed warm-up runs write the ``.pyc`` files first). Other installed pytest plugins
(xdist, hypothesis, ...) are blocked in both runs (``-p no:NAME``): they cost the same either
way and only add noise (``--all-plugins`` keeps them). Also lists the heavy modules a plain run
imports (there must be none).

CPU time on a loaded box swings by tens of milliseconds run to run; ``--instructions N`` also
counts the instructions each side executes under valgrind's callgrind (``PYTHONHASHSEED=0``:
the count repeats to a few parts per million), N runs each, and converts their difference to
milliseconds at the CPU time per instruction of the runs without the plugin.

Run: python benchmarks/bench_startup.py [--runs 41] [--instructions 3] [--root CHECKOUT]
     [--all-plugins]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from importlib.metadata import entry_points
from pathlib import Path

HEAVY = ("numpy", "pandas", "yaml", "ml_dtypes", "matplotlib", "pytest_accuracy.compare",
         "pytest_accuracy.dumps.model", "pytest_accuracy.logs", "pytest_accuracy.suite")
PROBE = """
import sys
def pytest_unconfigure(config):
    heavy = [m for m in {heavy!r} if m in sys.modules]
    print("heavy modules imported:", ", ".join(heavy) or "none", file=sys.stderr)
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _others_blocked() -> list[str]:
    """``-p no:NAME`` for every other installed pytest plugin."""
    names = sorted({ep.name for ep in entry_points(group="pytest11") if ep.name != "accuracy"})
    return [arg for name in names for arg in ("-p", f"no:{name}")]


class Runner:
    def __init__(self, project: Path, env: dict[str, str], common: list[str]) -> None:
        self.project, self.env, self.common = project, env, common

    def instructions(self, extra: list[str]) -> int:
        """Instructions one run executes (valgrind's callgrind; hash seed fixed)."""
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                               sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "test_one.py", *self.common, *extra], cwd=self.project,
                              env={**self.env, "PYTHONHASHSEED": "0"}, check=True,
                              capture_output=True, text=True)
        found = re.search(r"Collected : (\d+)", proc.stderr)
        if found is None:
            raise SystemExit(f"no instruction count from callgrind:\n{proc.stderr[-2000:]}")
        return int(found.group(1))

    def run(self, extra: list[str]) -> float:
        """CPU seconds (user + system) of one run: on a shared box, wall time is mostly others'."""
        before = _cpu()
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "test_one.py", *self.common, *extra], cwd=self.project, env=self.env,
                       check=True, capture_output=True)
        return _cpu() - before


def _env(root: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    return env


def _report(with_: list[float], without: list[float]) -> None:
    for name, values in (("with the plugin", with_), ("without (-p no:accuracy)", without)):
        print(f"{name:26} median {statistics.median(values) * 1000:7.1f} ms, fastest "
              f"{min(values) * 1000:7.1f} ms ({len(values)} runs)")
    paired = [a - b for a, b in zip(with_, without, strict=True)]
    low, _, high = statistics.quantiles(paired, n=4)
    medians = statistics.median(with_) - statistics.median(without)
    print(f"plugin cost: median of paired differences {statistics.median(paired) * 1000:+.1f} "
          f"ms (quartiles {low * 1000:+.1f} / {high * 1000:+.1f} ms), difference of medians "
          f"{medians * 1000:+.1f} ms, of fastest {(min(with_) - min(without)) * 1000:+.1f} ms")


def _instructions(runner: Runner, runs: int, cpu_without: float) -> str:
    counts: dict[str, list[int]] = {"with": [], "without": []}
    for _ in range(runs):
        counts["with"].append(runner.instructions([]))
        counts["without"].append(runner.instructions(["-p", "no:accuracy"]))
    with_, without = (statistics.median(v) for v in counts.values())
    extra = with_ - without
    return (f"instructions (callgrind, median of {runs}): with {with_ / 1e6:.1f} M, without "
            f"{without / 1e6:.1f} M, plugin {extra / 1e6:+.1f} M ({extra / without:+.2%}; "
            f"{extra / without * cpu_without * 1000:+.1f} ms at this box's median CPU time "
            f"without); spread with {(max(counts['with']) - min(counts['with'])) / 1e6:.2f} M, "
            f"without {(max(counts['without']) - min(counts['without'])) / 1e6:.2f} M")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=41)
    parser.add_argument("--instructions", type=int, default=0, metavar="N",
                        help="also count instructions under callgrind, N runs each")
    parser.add_argument("--root", type=Path, help="checkout to measure (put first on PYTHONPATH)")
    parser.add_argument("--all-plugins", action="store_true",
                        help="keep the other installed pytest plugins loaded in both runs")
    args = parser.parse_args()
    common = [] if args.all_plugins else _others_blocked()
    root = args.root.resolve() if args.root else None
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "test_one.py").write_text("def test_one():\n    assert True\n")
        (project / "pytest.ini").write_text("[pytest]\n")
        runner = Runner(project, _env(root), common)
        for _ in range(3):  # warm the page cache and write the .pyc files
            runner.run([])
            runner.run(["-p", "no:accuracy"])
        with_: list[float] = []
        without: list[float] = []
        for i in range(args.runs):  # alternate, and alternate which goes first
            order = [(with_, []), (without, ["-p", "no:accuracy"])]
            for times, extra in order if i % 2 == 0 else order[::-1]:
                times.append(runner.run(extra))
        instructions = (_instructions(runner, args.instructions, statistics.median(without))
                        if args.instructions else None)
        (project / "conftest.py").write_text(PROBE.format(heavy=HEAVY))
        probe = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "test_one.py", *common], cwd=project, env=runner.env,
                               capture_output=True, text=True)
    print(f"blocked in both runs: {' '.join(common[1::2]) or 'nothing'}")
    _report(with_, without)
    if instructions:
        print(instructions)
    print(next(line for line in probe.stderr.splitlines() if line.startswith("heavy")))


if __name__ == "__main__":
    main()
