"""Write the cluster-shaped logs of this folder and their truth table (``truth.json``).

Run from the repository root: ``python tests/data/log_samples/cluster/make_cluster_logs.py``.
Each log is printed with its tool's own format string (cited per writer below, from
``tests/data/log_samples/*`` and the format notes in the spec); the truth is the printed
text of each value read back with ``float``, never with the readers under test.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = 30
# torchtitan/tools/utils.py Color: red, green, orange, turquoise, blue, cyan, magenta, reset
RED, GREEN, ORANGE, TURQ = "\x1b[31m", "\x1b[32m", "\x1b[38;2;255;165;0m", "\x1b[38;2;54;234;195m"
BLUE, CYAN, MAGENTA, YELLOW, RESET = "\x1b[34m", "\x1b[36m", "\x1b[35m", "\x1b[33m", "\x1b[39m"


def curve(seed: int, n: int = STEPS) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    return [(10.5 * 0.97**i + rng.uniform(-0.05, 0.05), 2.0 + rng.uniform(0, 1)) for i in range(n)]


def titan_step(step: int, loss: float, gnorm: float) -> str:
    # torchtitan/components/metrics.py MetricsProcessor.log (2026, as in torchtitan_issue_lines):
    # f"{color.red}step: {step:2}  {color.green}loss: {loss:8.5f}  {color.orange}grad_norm:
    # {grad_norm:7.4f}  {color.turquoise}memory: ..GiB(..%)  {color.blue}tps: {round(tps):,}
    # {color.cyan}tflops: {tflops:,.2f}  {color.magenta}mfu: {mfu:.2f}%{color.reset}"
    return (f"{RED}step: {step:2}  {GREEN}loss: {loss:8.5f}  {ORANGE}grad_norm: {gnorm:7.4f}  "
            f"{TURQ}memory:  9.46GiB(64.99%)  {BLUE}tps: 7,282  {CYAN}tflops: 0.52  "
            f"{MAGENTA}mfu: 0.17%{RESET}")


def titan_validate(step: int, loss: float) -> str:
    # torchtitan/components/metrics.py MetricsProcessor.log_validation:
    # f"{color.yellow}validate step: {step:2}  {color.green}loss: {loss:7.4f}  "
    # f"{color.turquoise}memory: {..:5.2f}GiB({..:.2f}%){color.reset}"
    return (f"{YELLOW}validate step: {step:2}  {GREEN}loss: {loss:7.4f}  "
            f"{TURQ}memory:  9.46GiB(64.99%){RESET}")


def titan_prefix(rank: int, second: int) -> str:
    # torchrun --role rank --tee 3 (torchtitan run_train.sh): "[rank{N}]:"; logger format
    # torchtitan/tools/logging.py: "[titan] %(asctime)s - %(name)s - %(levelname)s - "
    return f"[rank{rank}]:[titan] 2026-05-18 16:04:{second % 60:02d},338 - root - INFO - "


def write_torchtitan_pp(truth: dict[str, object]) -> None:
    """PP=2 x DP=2 on 4 ranks, all ranks tee'd into one file; stage 0 (ranks 0, 1) prints the
    -1.0 placeholder (train.py: ``torch.tensor([-1.0])`` when not pp_has_last_stage) and
    every few steps a placeholder rank writes last.  Validation every 10 steps."""
    values = curve(1)
    rng = random.Random(11)
    lines, val = [], {}
    for i, (loss, gnorm) in enumerate(values, start=1):
        ranks = [0, 1, 2, 3]
        rng.shuffle(ranks)
        for r in ranks:
            body = titan_step(i, -1.0 if r < 2 else loss, gnorm)
            lines.append(titan_prefix(r, i) + body)
        if i % 10 == 0:
            v = loss + 0.3
            val[i] = float(f"{v:7.4f}")
            for r in (2, 3):
                lines.append(titan_prefix(r, i) + titan_validate(i, v))
    (HERE / "torchtitan_pp2_tee.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    truth["torchtitan_pp2_tee.log"] = {
        "loss": [float(f"{lo:8.5f}") for lo, _ in values],
        "grad_norm": [float(f"{g:7.4f}") for _, g in values],
        "skipped": [False] * STEPS, "validation": val,
    }
    stage0 = [titan_prefix(0, i) + titan_step(i, -1.0, g) for i, (_, g) in enumerate(values, 1)]
    (HERE / "torchtitan_stage0_only.log").write_text("\n".join(stage0) + "\n", encoding="utf-8")


def mf_line(step: int, loss: float | None, gnorm: float) -> str:
    # MindFormers pynative trainer (spec 1a, G5): "{ step:[%5d/%5d], loss: %10.6f,
    # per_step_time: %6dms, lr: %10.6e, grad_norm: %10.6f, throughput: %6.2fT }", and
    # "loss: N/A (non-last PP stage, refer to last stage for real loss)" on other stages.
    # msrun worker log prefix (mindformers/tools/logger.py):
    # '%(asctime)s - %(name)s[%(filepath)s:%(lineno)d] - %(levelname)s - %(message)s'
    text = ("N/A (non-last PP stage, refer to last stage for real loss)" if loss is None
            else f"{loss:10.6f}")
    return (f"2026-01-15 10:00:{step % 60:02d},100 - mindformers[mindformers/pynative/callback/"
            f"loss_callback.py:88] - INFO - {{ step:[{step:5d}/{STEPS:5d}], loss: {text}, "
            f"per_step_time: {1357:6d}ms, lr: {1e-5:10.6e}, grad_norm: {gnorm:10.6f}, "
            f"throughput: {1.36:6.2f}T }}")


def write_msrun(truth: dict[str, object]) -> None:
    """msrun ``--worker_num 4``, PP=2: msrun_log/worker_{0..3}.log (and scheduler.log), and
    what ``tail -f msrun_log/worker_*.log`` shows (``==> name <==`` before each chunk)."""
    values = curve(2)
    folder = HERE / "msrun_pp2" / "msrun_log"
    folder.mkdir(parents=True, exist_ok=True)
    per_rank = {r: [mf_line(i, None if r < 2 else lo, g) for i, (lo, g) in enumerate(values, 1)]
                for r in range(4)}
    for r, lines in per_rank.items():
        (folder / f"worker_{r}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "scheduler.log").write_text("[INFO] scheduler started\n", encoding="utf-8")
    chunks, rng = [], random.Random(5)
    cursor = dict.fromkeys(per_rank, 0)
    while any(cursor[r] < STEPS for r in per_rank):
        r = rng.choice([r for r in per_rank if cursor[r] < STEPS])
        take = rng.randint(1, 4)
        part = per_rank[r][cursor[r] : cursor[r] + take]
        cursor[r] += len(part)
        chunks.append(f"\n==> msrun_log/worker_{r}.log <==\n" + "\n".join(part))
    (HERE / "msrun_pp2_tail.log").write_text("".join(chunks).lstrip("\n") + "\n",
                                            encoding="utf-8")
    truth["msrun_pp2"] = truth["msrun_pp2_tail.log"] = {
        "loss": [float(f"{lo:10.6f}") for lo, _ in values],
        "grad_norm": [float(f"{g:10.6f}") for _, g in values],
        "skipped": [False] * STEPS,
    }


def megatron_line(step: int, loss: float | None, gnorm: float, skipped: int) -> str:
    # megatron/training/training.py training_log (spec 1b, HEAD): each field ' key: value |';
    # an fp16 overflow step adds nothing to the loss accumulator, so no 'lm loss' field.
    loss_field = f" lm loss: {loss:.6E} |" if loss is not None else ""
    return (f" [2025-10-22 16:59:16] iteration {step:8d}/{STEPS:8d} | consumed samples: "
            f"{step * 8:12d} | elapsed time per iteration (ms): 16442.7 | learning rate: "
            f"{3.9e-07:.6E} | global batch size:     8 |{loss_field} loss scale: "
            f"{65536.0 if not skipped else 32768.0:.1f} | grad norm: {gnorm:.3f} | number of "
            f"skipped iterations: {skipped:3d} | number of nan iterations:   0 |")


def write_megatron_tee(truth: dict[str, object]) -> None:
    """torchrun --tee 3 (prefix "[default{local_rank}]:"), TP=2 PP=2 on 4 ranks: the last rank
    prints the iteration lines (print_rank_last); the tee cuts some mid-field while other
    ranks write; fp16 skips at steps 7 and 19."""
    values = curve(3)
    rng = random.Random(7)
    lines, skipped = [], []
    for i, (loss, gnorm) in enumerate(values, start=1):
        skip = i in (7, 19)
        skipped.append(skip)
        text = megatron_line(i, None if skip else loss, gnorm, int(skip))
        for r in (0, 1, 2):
            if rng.random() < 0.3:
                lines.append(f"[default{r}]:WARNING: rank {r} waited 0.{r}s in all-reduce")
        if i % 4 == 2:  # cut mid-field, another rank's line between the pieces
            cut = text.index("lm loss") + 5 if "lm loss" in text else len(text) // 2
            lines += [f"[default3]:{text[:cut]}", "[default1]:NCCL INFO comm 0x5 rank 1",
                      f"[default3]:{text[cut:]}"]
        else:
            lines.append(f"[default3]:{text}")
    (HERE / "megatron_tee_split.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    truth["megatron_tee_split.log"] = {
        "loss": [None if s else float(f"{lo:.6E}")
                 for (lo, _), s in zip(values, skipped, strict=True)],
        "grad_norm": [float(f"{g:.3f}") for _, g in values],
        "skipped": skipped,
    }


def write_srun_label(truth: dict[str, object]) -> None:
    """srun --label ("N: " prefix) over 2 ranks of a torchtitan run with PP=2: rank 1 is last."""
    values = curve(4)
    lines = []
    for i, (loss, gnorm) in enumerate(values, start=1):
        lines.append("1: " + titan_prefix(1, i)[len("[rank1]:"):] + titan_step(i, loss, gnorm))
        lines.append("0: " + titan_prefix(0, i)[len("[rank0]:"):] + titan_step(i, -1.0, gnorm))
    (HERE / "torchtitan_srun_label.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    truth["torchtitan_srun_label.log"] = {
        "loss": [float(f"{lo:8.5f}") for lo, _ in values],
        "grad_norm": [float(f"{g:7.4f}") for _, g in values],
        "skipped": [False] * STEPS,
    }


def write_hf(truth: dict[str, object]) -> None:
    """transformers ProgressCallback.on_log (2025): floats printed f"{v:.4g}" as strings; the
    run's checkpoint-20/trainer_state.json has log_history (loss round(x, 4)) and
    logging_steps 5; the log runs past the checkpoint (steps 25, 30)."""
    values = curve(5)[:6]
    folder = HERE / "hf_4g"
    (folder / "checkpoint-20").mkdir(parents=True, exist_ok=True)
    lines, history = [], []
    for k, (loss, gnorm) in enumerate(values, start=1):
        step, epoch = 5 * k, 5 * k / 60
        lr = 5e-5 * (1 - step / 60)
        record = {"loss": round(loss, 4), "grad_norm": gnorm, "learning_rate": lr,
                  "epoch": epoch}
        lines.append(str({key: f"{v:.4g}" for key, v in record.items()}))
        if step <= 20:
            history.append({**record, "step": step})
    (folder / "train.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    state = {"global_step": 20, "logging_steps": 5, "log_history": history}
    (folder / "checkpoint-20" / "trainer_state.json").write_text(json.dumps(state, indent=2))
    truth["hf_4g/train.log"] = {
        "steps": [5 * k for k in range(1, 7)],
        "loss": [float(f"{round(lo, 4):.4g}") for lo, _ in values],
        "grad_norm": [float(f"{g:.4g}") for _, g in values],
        "skipped": [False] * 6,
    }
    bare = HERE / "hf_4g_no_state"
    bare.mkdir(exist_ok=True)
    (bare / "train.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    truth: dict[str, object] = {}
    write_torchtitan_pp(truth)
    write_msrun(truth)
    write_megatron_tee(truth)
    write_srun_label(truth)
    write_hf(truth)
    (HERE / "truth.json").write_text(json.dumps(truth, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
