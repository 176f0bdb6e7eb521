"""Every ``--acc-*`` option and its ``acc_*`` ini key: one table, one parser per kind of value."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

Kind = Literal["path", "paths", "globs", "text", "float", "int", "int_set", "window", "choice",
               "flag", "dtype_pairs", "device", "layout"]


class Option:
    """``--acc-<name>`` on the command line, ``acc_<name_with_underscores>`` in the ini file.

    A plain class: this module loads in every pytest run of a project that has the plugin
    installed, and a dataclass or NamedTuple costs more to build than the whole table."""

    __slots__ = ("choices", "dest", "flag", "help", "kind", "name")

    def __init__(self, name: str, kind: Kind, help: str, choices: tuple[str, ...] = ()) -> None:
        self.name, self.kind, self.help, self.choices = name, kind, help, choices
        self.flag = f"--acc-{name}"
        self.dest = "acc_" + name.replace("-", "_")

    def __repr__(self) -> str:
        return f"Option({self.name!r}, {self.kind!r})"

    @property
    def form(self) -> str:
        """The accepted form, as the help and the error messages name it."""
        return _FORMS.get(self.kind) or "one of " + ", ".join(self.choices)


_FORMS = {
    "path": "PATH", "paths": "PATH (repeatable)", "globs": "GLOB (repeatable)", "text": "TEXT",
    "float": "a number, e.g. 0.01", "int": "an integer, e.g. 100",
    "int_set": "integers and ranges, e.g. '0,2-4'", "window": "'start:end', e.g. '100:2000'",
    "flag": "a flag (ini: true or false)",
    "dtype_pairs": "NPU_DTYPE:BENCH_DTYPE pairs of float dtypes, e.g. 'bfloat16:float32'",
    "device": "dump, cpu, cuda[:N], npu[:N], optionally prefixed torch: or mindspore: "
              "(e.g. mindspore:cpu)",
    "layout": "tp=N,dp=N,pp=N (any of them; the rest 1), e.g. 'tp=2,dp=4'",
}
_LAYOUT = re.compile(r"\s*(tp|dp|pp)\s*=\s*[1-9]\d*\s*(,\s*(tp|dp|pp)\s*=\s*[1-9]\d*\s*)*")
_DEVICE = re.compile(r"dump|((torch|mindspore):)?(cpu|(cuda|npu|gpu)(:\d+)?)")
# float dtype names an --acc-allow-precision pair may use (numpy and torch spellings)
_FLOAT_NAMES = {"float64", "double", "float32", "float", "float16", "half", "bfloat16",
                "float8_e4m3fn", "float8_e5m2"}

OPTIONS: tuple[Option, ...] = (
    Option("npu", "path", "NPU (device under test) msprobe dump: root, step dir, rank dir or "
           "dump.json"),
    Option("bench", "path", "bench msprobe dump (same layouts as --acc-npu)"),
    Option("npu-layout", "layout", "compare: the NPU run's parallel layout (Megatron rank "
           "order); with --acc-bench-layout, shards meet the bench's slices; alone, its dp "
           "names the replica groups (accuracy::replicas)"),
    Option("dp-size", "int", "the NPU run's data-parallel size: its replicas are checked "
           "against each other, no bench needed (pp=1, tp = ranks / dp; else --acc-npu-layout)"),
    Option("bench-layout", "layout", "compare: the bench run's parallel layout, when its "
           "tensor, data or pipeline parallelism differs from the NPU's"),
    Option("bench-noise", "path", "a second bench dump of the same training under another "
           "kernel, seed or device: each node is held to the two bench runs' spread there"),
    Option("npu-log", "path", "NPU training log (MindFormers, Megatron, MindSpeed, HF, "
           "torchtitan, CSV/JSONL)"),
    Option("bench-log", "paths", "bench training log; repeat for repeated bench runs (the band)"),
    Option("npu-config", "path", "NPU training config (MindFormers yaml or Megatron args)"),
    Option("bench-config", "path", "bench training config (MindFormers yaml or Megatron args)"),
    Option("npu-monitor", "path", "NPU msprobe monitor output: TrainerMon CSV folder, csv2tb "
           "TensorBoard folder or grad_probe dump_path"),
    Option("bench-monitor", "path", "bench msprobe monitor output (same layouts as "
           "--acc-npu-monitor)"),
    Option("json", "path", "write the versioned JSON result document here"),
    Option("report", "path", "write the report folder (index.html, CSV tables, plots) here"),
    Option("markdown", "path", "write a Markdown summary (verdict, first divergence, top "
           "failures) here; on GitHub Actions it is also appended to $GITHUB_STEP_SUMMARY"),
    Option("waivers", "path", "waivers yaml: node/API patterns with a relaxed tolerance or a "
           "known divergence"),
    Option("mapping", "path", "msprobe mapping yaml (api/cell/data/layer mapping) or an "
           "inferred mapping"),
    Option("rel-err", "float", "compare: relative L2 error allowed, overriding the per-dtype "
           "defaults"),
    Option("min-cosine", "float", "compare: minimum cosine, overriding the per-dtype defaults"),
    Option("min-matched", "float", "compare: minimum share of NPU nodes with a bench "
           "counterpart (default 0.5)"),
    Option("no-dtype-aware", "flag", "compare: judge every float tensor with the float32 "
           "tolerance"),
    Option("allow-precision", "dtype_pairs", "compare: NPU:BENCH dtype pairs compared on "
           "purpose, e.g. 'bfloat16:float32' (a bf16 run against an fp32 golden); any other "
           "precision change at a node fails it"),
    Option("steps-select", "int_set", "only these steps of the dumps, e.g. '0,2-4'"),
    Option("ranks", "int_set", "only these ranks of the dumps, e.g. '0-7'"),
    Option("scope", "globs", "only NPU nodes matching this glob (repeatable), e.g. "
           "'Module.layers.1.*'"),
    Option("inputs", "choice", "compare inputs too: failing (default: only where the first "
           "divergence needs them) or all (the full msprobe-style table)", ("failing", "all")),
    Option("local-norm-step", "int", "compare per-parameter gradient norms at this step "
           "(default: the first)"),
    Option("items", "choice", "compare items: auto (one per node up to 2000 nodes, else one "
           "per layer or run of up to 64 nodes; one per rank when a step's ranks hold 16 MB of "
           "dump.json), node, region, rank", ("auto", "node", "region", "rank")),
    Option("align", "choice", "pairing: auto (names where they hold, else aligned), always, name",
           ("auto", "always", "name")),
    Option("suite", "choice", "built-in suite: auto (when inputs are given on the command line "
           "or in the ini file), on, off", ("auto", "on", "off")),
    Option("strict-waivers", "flag", "a waiver that matched no compared node fails the run "
           "(default: said in the accuracy section)"),
    Option("missing-input", "choice", "a suite test whose fixture's input is given nowhere: "
           "error (default: a CI job that lost its paths must not pass), or skip",
           ("error", "skip")),
    Option("precheck", "flag", "generate per-API precheck items from the NPU dump"),
    Option("device", "device", "precheck device (default dump: judge the dumped outputs; cpu "
           "re-runs with the dump's framework, mindspore:cpu with MindSpore's CPU backend)"),
    Option("standard", "choice", "precheck standard (default: default)", ("default", "dtype")),
    Option("npu-precheck-results", "path", "msprobe acc_check (run_ut) output of the run under "
           "test: its details CSV, result CSV or their folder; gated as precheck items "
           "(msprobe's verdicts and our standard on its numbers)"),
    Option("bench-precheck-results", "path", "msprobe acc_check output before the change (same "
           "forms): an API that passed there and fails now, or whose error grew, fails"),
    Option("precheck-growth", "float", "msprobe results: growth of an API's error over "
           "--acc-bench-precheck-results allowed (default 2, msprobe's own ratio limit)"),
    Option("first-loss-abs", "float", "loss: first-step absolute error allowed (default 0.005)"),
    Option("first-loss-rel", "float", "loss: first-step relative error allowed (default 0.005)"),
    Option("mean-abs", "float", "loss: mean absolute error allowed (default 0.01)"),
    Option("mean-rel", "float", "loss: mean relative error allowed (default 0.01)"),
    Option("gnorm-rel", "float", "loss: grad-norm mean relative error allowed (default 0.10)"),
    Option("band-factor", "float", "loss: band width in multiples of the bench runs' own spread "
           "(default 2)"),
    Option("loss-steps", "window", "loss: inclusive step window 'start:end'"),
    Option("log-tag", "text", "loss: TensorBoard scalar tag of the loss, e.g. 'loss/train' "
           "(default: the common loss tags)"),
    Option("logging-steps", "int", "loss: the HF run's logging_steps, to number printed "
           "{'loss': ...} dicts when no trainer_state.json says their steps"),
    Option("relax-to-bench-noise", "flag", "loss: widen each threshold to the bench runs' spread "
           "(>= 2 bench logs)"),
    Option("merge", "paths", "merge these --acc-json parts of sharded runs (repeatable) into one "
           "verdict; collects only accuracy::merge"),
    Option("write-golden", "path", "write the NPU log as a Megatron golden-values JSON here"),
)

BY_DEST = {o.dest: o for o in OPTIONS}
INPUT_DESTS = ("acc_npu", "acc_bench", "acc_bench_noise", "acc_npu_log", "acc_bench_log",
               "acc_npu_config", "acc_bench_config", "acc_npu_precheck_results",
               "acc_bench_precheck_results", "acc_npu_monitor", "acc_bench_monitor")


class OptionValueError(ValueError):
    """A value that does not parse; the message names the option and the accepted form."""


def parse_value(option: Option, value: Any, source: str) -> Any:
    """``value`` parsed for ``option``; ``source`` is the flag or ini key the user typed."""
    if value is None or option.kind in ("path", "paths", "globs", "text"):
        return value
    text = str(value).strip()
    try:
        if option.kind == "float":
            number = float(text)
            if not math.isfinite(number):  # nan compares false with everything: passes all
                raise ValueError(text)
            return number
        if option.kind == "int":
            return int(text)
        if option.kind == "int_set":
            return parse_int_set(text)
        if option.kind == "window":
            start, sep, end = text.partition(":")
            if not sep:
                raise ValueError(text)
            return int(start), int(end)
        if option.kind == "flag":
            return parse_bool(value)
        if option.kind == "dtype_pairs":
            return _dtype_pairs(text)
        if option.kind == "device" and _DEVICE.fullmatch(text):
            return text
        if option.kind == "layout" and _LAYOUT.fullmatch(text):
            return text
    except ValueError:
        pass
    else:
        if text in option.choices:
            return text
    raise OptionValueError(f"{source}: expected {option.form}, got {text!r}")


def _dtype_pairs(text: str) -> str:
    for item in text.replace(";", ",").split(","):
        npu, sep, bench = item.strip().partition(":")
        names = {npu.strip().lower().removeprefix("torch."), bench.strip().lower()
                 .removeprefix("torch.")}
        if item.strip() and (not sep or not names <= _FLOAT_NAMES):
            raise ValueError(item)
    return text


def parse_int_set(text: str) -> set[int]:
    """'0,2-4' -> {0, 2, 3, 4}; raises ValueError on anything else."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        start, end = int(lo), int(hi or lo)
        if end < start:
            raise ValueError(part)
        out.update(range(start, end + 1))
    return out


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(text)
