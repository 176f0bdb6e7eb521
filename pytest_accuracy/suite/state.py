"""Per-process state of the built-in suite: inputs resolved once, compare computed lazily."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_accuracy.settings import parse_int_set, path_setting, setting, typed_setting
from pytest_accuracy.suite.heap import long_lived
from pytest_accuracy.suite.run_layouts import config_layout, every_rank, layouts_hint, only

if TYPE_CHECKING:  # numpy and the compare core load when a compare runs, not at start-up
    from pytest_accuracy.compare import Comparison, Pairing
    from pytest_accuracy.compare.bench_noise import BenchNoise
    from pytest_accuracy.compare.criteria import CompareCriteria
    from pytest_accuracy.dumps.model import DumpSet
    from pytest_accuracy.pairing.layouts import Layout


@dataclass
class SuiteState:
    """What the generated items of one process share."""

    config: pytest.Config
    npu: Path | None
    bench: Path | None
    # (NPU layout, bench layout, why) read from the dumps where none was given
    inferred: tuple[Layout, Layout, str] | None = field(default=None, init=False)
    # why the layouts were not read from the dumps, where a part of the ranks was loaded and
    # the runs' rank counts differ (ranks then meet by number)
    unread_layouts: str | None = field(default=None, init=False)
    # what the view of the bench at another layout assumed (the backward's scale)
    view_notes: list[str] = field(default_factory=list, init=False)

    @property
    def has_dumps(self) -> bool:
        """Compare items are wanted: both dumps (an NPU dump alone is prechecked or, without
        --acc-precheck, checked for overflow)."""
        return self.npu is not None and self.bench is not None

    @cached_property
    def npu_dumps(self) -> DumpSet:
        """The NPU dump alone (overflow items)."""
        assert self.npu is not None
        return self._load(self.npu)

    def release(self) -> None:
        """Let go of the compare and its dump models (the outputs are written from the
        records; the layouts and the criteria stay)."""
        comparison = vars(self).pop("comparison", None)
        if comparison is not None:
            comparison.discard()
        vars(self).pop("npu_dumps", None)
        import gc

        gc.collect()  # the models' cycles: freed now, before the report is made

    @cached_property
    def criteria(self) -> CompareCriteria:
        from pytest_accuracy.settings import compare_criteria

        return compare_criteria(self.config)

    @cached_property
    def comparison(self) -> Comparison:
        from pytest_accuracy.compare import Comparison
        from pytest_accuracy.errors import AccuracyInputError

        if self.npu is None or self.bench is None:
            missing = "--acc-bench" if self.npu else "--acc-npu"
            given = self.npu or self.bench
            hint = " (or --acc-precheck to check the NPU dump alone)" if self.npu else ""
            raise AccuracyInputError(str(given),
                                     f"compare needs both dumps: {missing} is missing{hint}")
        with long_lived():
            npu, bench, noise = self._runs()
        inputs = str(typed_setting(self.config, "inputs") or "failing")
        return Comparison(npu, bench, self.criteria, self.pairing(), inputs=inputs,
                          noise=noise)

    def rank_comparison(self, rank: int) -> Comparison:
        """One rank's compare (every selected step of it), read when its item runs and let
        go with it: what a process holds grows with the largest rank, not the sum."""
        from pytest_accuracy.compare import Comparison

        npu, bench, noise = self._runs(rank)
        inputs = str(typed_setting(self.config, "inputs") or "failing")
        return Comparison(npu, bench, self.criteria, self.pairing(), inputs=inputs,
                          noise=noise)

    def _runs(self, rank: int | None = None) -> tuple[DumpSet, DumpSet, BenchNoise | None]:
        """The NPU dump, the bench as the NPU's ranks see it (their layouts may differ) and
        the bench's noise run, checked: ``rank`` alone, or every rank selected."""
        assert self.npu is not None and self.bench is not None
        peers = self._view_peers(rank)
        npu = self._load(self.npu, {rank} | peers if rank is not None else None)
        wanted = self._bench_ranks(npu)
        bench = self._load(self.bench, wanted if wanted is not None
                           else {rank} if rank is not None else None)
        if self.layouts is None and rank is None and every_rank(npu, self.npu) and (
                every_rank(bench, self.bench)):
            self._infer(npu, bench)  # from a part, a stage's ranks would read as a whole run
            if self.inferred is None:
                self.unread_layouts = layouts_hint(self.npu, self.bench, part=False)
        elif self.layouts is None:
            self.unread_layouts = self._unread_hint
        same = same_run(npu, bench) if self.layouts is None else None
        if same:
            _refuse(same, self.npu, rank)
        check_levels(npu, bench)
        check_tasks(npu, bench)
        try:
            noise = noise_run(self.config, bench, load=lambda path: self._load(
                path, wanted if wanted is not None else {rank} if rank is not None else None))
        except NoiseRunError as exc:
            _refuse(exc.problem, self.npu, rank)
        if self.layouts is None:
            return npu, bench, noise
        # imported where layouts differ: a run of one layout never loads them (0.01 s)
        from pytest_accuracy.compare.bench_noise import BenchNoise
        from pytest_accuracy.pairing.shards import relayout, with_joined

        mine, theirs = self.layouts
        view = relayout(npu, mine, bench, theirs)
        self.view_notes = view.notes
        if noise is not None:
            noise = BenchNoise(only(view, rank, peers),
                               only(relayout(npu, mine, noise.noise, theirs), rank, peers))
        return only(with_joined(npu, view), rank, peers), only(view, rank, peers), noise

    @cached_property
    def config_layouts(self) -> tuple[Layout, Layout, str] | None:
        """The runs' layouts as their configs set them (--acc-npu-config, --acc-bench-config,
        read as the config checklist reads them), where they differ and each run dumped as
        many ranks as its config has; else None (the dumps may still tell)."""
        from pytest_accuracy.pairing.layouts import Layout, layouts_problem

        assert self.npu is not None and self.bench is not None
        found = [config_layout(setting(self.config, key), path)
                 for key, path in (("npu_config", self.npu), ("bench_config", self.bench))]
        mine, theirs = found
        if mine is None or theirs is None:
            return None
        npu, bench = Layout(*mine[0]), Layout(*theirs[0])
        if npu == bench or layouts_problem(npu, bench):
            return None  # the same, or ones the compare cannot meet: the dumps decide
        return npu, bench, f"read from the configs: {mine[1]} and {theirs[1]}"

    def _view_peers(self, rank: int | None) -> set[int]:
        """A rank item's peers that the view of another layout reads (loaded, not compared):
        its TP group where the TP sizes differ (they tell a partial value from a replicated
        one), and its DP peers where the bench has fewer DP ranks (their statistics joined
        meet the bench's, ``batch_parts.dp_joins``)."""
        if rank is None or self.layouts is None:
            return set()
        from pytest_accuracy.pairing.batch_parts import dp_group

        mine, theirs = self.layouts
        pp_rank = mine.coords(rank)[2]
        places = range(mine.tp) if mine.tp != theirs.tp else [mine.coords(rank)[0]]
        return {mine.rank(t, mine.coords(r)[1], pp_rank) for r in dp_group(mine, theirs, rank)
                for t in places} - {rank}

    @property
    def layouts(self) -> tuple[Layout, Layout] | None:
        """The (NPU, bench) layouts where they differ: as given, as the runs' configs set them
        (known before any rank is read: rank items use them too), or as inferred from the
        dumps."""
        if self.given_layouts:
            return self.given_layouts
        if self.inferred is None and self.npu and self.bench and self.config_layouts:
            self.inferred = self.config_layouts  # said as inferred ones are, with its source
        return self.inferred[:2] if self.inferred else None

    def _infer(self, npu: DumpSet, bench: DumpSet) -> None:
        """Layouts read from the dumps where their ranks differ in number (none given)."""
        from pytest_accuracy.pairing.layouts import infer_layouts

        if len(npu.dumps) > 1 or len(bench.dumps) > 1:
            self.inferred = infer_layouts(npu, bench)

    @cached_property
    def given_layouts(self) -> tuple[Layout, Layout] | None:
        """The (NPU, bench) layouts given where their tensor parallelism differs, else None."""
        from pytest_accuracy.pairing.layouts import parse_layout

        given = setting(self.config, "npu_layout"), setting(self.config, "bench_layout")
        if not given[1]:  # the NPU's alone: its replicas' groups; the compare infers, if needed
            return None
        if not given[0]:
            raise pytest.UsageError(
                "--acc-bench-layout needs --acc-npu-layout: give both (e.g. "
                "--acc-npu-layout tp=2,dp=2 --acc-bench-layout tp=1,dp=2)")
        try:
            mine, theirs = parse_layout(str(given[0])), parse_layout(str(given[1]))
        except ValueError as exc:
            raise pytest.UsageError(f"--acc-npu-layout / --acc-bench-layout: {exc}") from None
        from pytest_accuracy.pairing.layouts import layouts_problem

        problem = layouts_problem(mine, theirs)
        if problem:
            raise pytest.UsageError(f"--acc-npu-layout / --acc-bench-layout: {problem}")
        return None if mine == theirs else (mine, theirs)

    def _bench_ranks(self, npu: DumpSet) -> set[int] | None:
        """The bench ranks the NPU ranks loaded are compared with (None: the same ranks)."""
        from pytest_accuracy.pairing.layouts import bench_ranks

        if self.layouts is None:
            return None
        mine, theirs = self.layouts
        ranks = {r for _, r in npu.dumps}
        beyond = sorted(r for r in ranks if r >= mine.world)
        if beyond:
            raise pytest.UsageError(
                f"--acc-npu-layout {mine} has {mine.world} ranks, the NPU dump {self.npu} has "
                f"rank {beyond[0]}: give the layout the NPU run had")
        return {b for r in ranks for b in bench_ranks(mine, theirs, r)}

    def _load(self, path: Path, only: set[int] | None = None) -> DumpSet:
        """The dump with --acc-steps-select / --acc-ranks applied (``only``: these ranks
        instead); an empty selection is named."""
        from pytest_accuracy.dumps.layout import load_dumps

        steps = parse_int_set(setting(self.config, "steps_select"), "steps")
        ranks = parse_int_set(setting(self.config, "ranks"), "ranks")
        if only is not None:
            ranks = only
        dumps = load_dumps(path, steps=steps, ranks=ranks)
        if not dumps.dumps and (steps is not None or ranks is not None):
            every = load_dumps(path).keys()
            hint = self._unread_hint if self.npu and self.bench else None
            raise pytest.UsageError(_empty_selection(path, steps, ranks, every)
                                    + (f" {hint}" if hint and self.layouts is None else ""))
        return dumps

    @cached_property
    def _unread_hint(self) -> str | None:
        """``layouts_hint`` of the two runs, once a process (rank items ask it each)."""
        assert self.npu is not None and self.bench is not None
        return layouts_hint(self.npu, self.bench)

    def pairing(self) -> Pairing | None:
        from pytest_accuracy.suite.pairing import choose_pairing

        return choose_pairing(self.config)

    def extra_groups(self) -> Iterator[tuple[str, type[pytest.Collector]]]:
        from pytest_accuracy.suite.registry import extra_groups

        yield from extra_groups(self.config)


def _empty_selection(path: Path, steps: set[int] | None, ranks: set[int] | None,
                     every: list[tuple[int, int]]) -> str:
    asked = [f"{flag_}={_ranges(chosen)}" for flag_, chosen in
             (("--acc-steps-select", steps), ("--acc-ranks", ranks)) if chosen is not None]
    have_steps = _ranges({s for s, _ in every}) or "none"
    have_ranks = _ranges({r for _, r in every}) or "none"
    return (f"{' '.join(asked)} selects nothing in {path}: it has steps {have_steps} and "
            f"ranks {have_ranks}.")


def _ranges(values: set[int]) -> str:
    """{0, 1, 2, 5} -> '0-2,5' (the form the options take)."""
    out: list[str] = []
    for v in sorted(values):
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ",".join(out)


# Levels whose nodes never pair: L0 records modules only, L1 APIs only (mix has both).
_DISJOINT = {frozenset(("L0", "L1"))}


def check_levels(npu: DumpSet, bench: DumpSet) -> None:
    """Two dumps that cannot share a node are a usage error that names both levels."""
    if frozenset((npu.level, bench.level)) in _DISJOINT:
        raise pytest.UsageError(
            f"the NPU dump is level {npu.level} ({_WHAT[npu.level]}) and the bench dump level "
            f"{bench.level} ({_WHAT[bench.level]}): they share no node. Dump both at the same "
            f"level (or mix).")


_WHAT = {"L0": "modules only", "L1": "APIs only"}


def same_run(npu: DumpSet, bench: DumpSet) -> str | None:
    """Why the two dumps are one run given twice (the same dump.json files, through a link
    or not, or files of the same bytes at every step and rank both hold), else None: a run
    against itself passes whatever it holds."""
    keys = sorted(set(npu.dumps) & set(bench.dumps))
    return _one_run([(npu.dumps[k].path, bench.dumps[k].path) for k in keys])


def same_run_files(npu: list[tuple[int, int, Path]], bench: list[tuple[int, int, Path]]
                   ) -> str | None:
    """``same_run`` from the dump.json files alone (``layout.dump_files``), none parsed."""
    theirs = {(s, r): p for s, r, p in bench}
    return _one_run([(p, theirs[(s, r)]) for s, r, p in npu if (s, r) in theirs])


def _refuse(problem: str, npu: Path, rank: int | None) -> NoReturn:
    """A set-up that cannot be compared: a usage error for the whole run; for one rank's
    item (read when it runs), that item's error."""
    if rank is None:
        raise pytest.UsageError(problem)
    from pytest_accuracy.errors import AccuracyInputError

    raise AccuracyInputError(str(npu), problem)


class NoiseRunError(Exception):
    """A second bench run that cannot serve as the bench's noise (the message says why)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def noise_run(config: pytest.Config, bench: DumpSet, marker: Mapping[str, Any] | None = None,
              load: Callable[[Path], DumpSet] | None = None) -> BenchNoise | None:
    """The second bench run (--acc-bench-noise or ``@accuracy(bench_noise=...)``), checked
    to be another run of the bench's steps and not the same one: a noise of zero would hold
    every node to the dtype's floor, a run of other steps would teach nothing."""
    from pytest_accuracy.compare.bench_noise import BenchNoise, identical_runs
    from pytest_accuracy.dumps.layout import load_dumps

    path = path_setting(config, "bench_noise", marker)
    if path is None:
        return None
    noise = load(path) if load is not None else load_dumps(path)
    shared = sorted(set(bench.dumps) & set(noise.dumps))
    problem = _one_run([(bench.dumps[k].path, noise.dumps[k].path) for k in shared],
                       ("--acc-bench", "--acc-bench-noise"))
    if problem is None and not shared:
        problem = (f"--acc-bench-noise {path}: holds no step and rank of the bench dump "
                   f"(it has {_keys(noise)}, the bench {_keys(bench)})")
    problem = problem or identical_runs(bench, noise)
    if problem:
        raise NoiseRunError(problem)
    check_levels(bench, noise)
    check_tasks(bench, noise)
    return BenchNoise(bench, noise)


def _keys(dumps: DumpSet) -> str:
    keys = dumps.keys()
    shown = ", ".join(f"step {s} rank {r}" for s, r in keys[:3])
    return shown + (f" and {len(keys) - 3} more" if len(keys) > 3 else "") if keys else "none"


def _one_run(pairs: list[tuple[Path, Path]],
             flags: tuple[str, str] = ("--acc-npu", "--acc-bench")) -> str | None:
    if not pairs:
        return None
    if all(a.resolve() == b.resolve() for a, b in pairs):
        how = "the same files"
    elif all(a.is_file() and b.is_file() and _same_bytes(a, b) for a, b in pairs):
        how = "files of the same bytes"
    else:
        return None
    said = (f"{flags[0]} and {flags[1]} are one run: {pairs[0][0]} and {pairs[0][1]} are {how}"
            f" (at all {len(pairs)} step/rank dumps both hold). ")
    if flags[1] == "--acc-bench-noise":
        return said + ("One run shows no noise of its own: give a second bench run made under "
                       "another kernel, seed or device as --acc-bench-noise.")
    return said + ("A run compared with itself (or with a bit-identical rerun of its "
                   "statistics) passes whatever it holds: give the benchmark run's dump as "
                   "--acc-bench.")


def _same_bytes(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes (their sizes first; then read in blocks)."""
    if a.stat().st_size != b.stat().st_size:
        return False
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def check_tasks(npu: DumpSet, bench: DumpSet) -> None:
    """Dumps of different tasks are compared on what both recorded (the coverage item says
    so in the summary); an md5 dump without statistics against another task is a usage error
    that names both dump.json files and their tasks."""
    from pytest_accuracy.dumps.tasks import task_mismatch

    mismatch = task_mismatch(npu, bench)
    if mismatch is not None and not mismatch.comparable:
        raise pytest.UsageError(mismatch.problem())


def make_state(config: pytest.Config) -> SuiteState:
    return SuiteState(config, path_setting(config, "npu"), path_setting(config, "bench"))


STATE_KEY = pytest.StashKey[SuiteState]()
