"""Write small paired training logs in real MindFormers / Megatron-LM formats (deterministic)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
STEPS = 300
PER_EPOCH = 150  # MindFormers prints the step within the epoch: 2 epochs of 150


def base_curve() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shared loss curve, batch noise (same data order in every run) and grad norm."""
    t = np.arange(1, STEPS + 1)
    data_noise = np.random.default_rng(0).normal(0.0, 0.04, STEPS)  # same batches everywhere
    loss = 2.2 + 8.6 * np.exp(-t / 25.0) + 0.5 * np.exp(-t / 200.0) + data_noise
    gnorm = 1.2 + 30.0 * np.exp(-t / 15.0) + np.abs(np.random.default_rng(1).normal(0, 0.08, STEPS))
    lr = np.minimum(t / 20.0, 1.0) * 1e-4 * (0.5 + 0.5 * np.cos(np.pi * t / STEPS))
    return loss, gnorm, lr


def run(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One run: base curve plus non-deterministic noise that grows as training goes on."""
    loss, gnorm, _ = base_curve()
    rng = np.random.default_rng(seed)
    t = np.arange(1, STEPS + 1)
    sigma = 0.0005 + 0.006 * t / STEPS  # step 1 is almost deterministic, later steps are not
    return loss + rng.normal(0.0, sigma), gnorm * (1 + rng.normal(0.0, 0.02, STEPS))


def megatron(path: Path, loss: np.ndarray, gnorm: np.ndarray, nan_steps: set[int]) -> None:
    """Megatron-LM core_v0.12-era ``training_log`` lines (timestamp, lm loss, grad norm)."""
    _, _, lr = base_curve()
    lines = []
    for i in range(STEPS):
        step = i + 1
        head = (
            f" [2025-10-22 16:{step // 60:02d}:{step % 60:02d}] iteration {step:8d}/{STEPS:8d} |"
            f" consumed samples: {step * 8:12d} | elapsed time per iteration (ms): 812.4 |"
            f" learning rate: {lr[i]:.6E} | global batch size:     8 |"
        )
        if step in nan_steps:  # a NaN iteration drops the loss field and counts itself
            body = " loss scale: 1.0 | grad norm: nan | number of skipped iterations:   0 |"
            body += " number of nan iterations:   1 |"
        else:
            body = f" lm loss: {loss[i]:.6E} | loss scale: 1.0 | grad norm: {gnorm[i]:.3f} |"
            body += " number of skipped iterations:   0 | number of nan iterations:   0 |"
        lines.append(head + body)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def mindformers(path: Path, loss: np.ndarray, gnorm: np.ndarray) -> None:
    """MindFormers r1.7+ MFLossMonitor lines as msrun's worker_0.log has them."""
    _, _, lr = base_curve()
    lines = []
    for i in range(STEPS):
        epoch, step = i // PER_EPOCH + 1, i % PER_EPOCH + 1
        stamp = f"2025-04-07 15:{i // 60:02d}:{i % 60:02d},308"
        lines.append(
            f"{stamp} - [mindformers/core/callback/callback.py:529] - INFO - "
            f"{{ Epoch:[{epoch:3d}/{STEPS // PER_EPOCH:3d}], step:[{step:5d}/{PER_EPOCH:5d}], "
            f"loss: {loss[i]:5.6f}, per_step_time: 1758ms, lr: {lr[i]:.8g}, "
            f"overflow cond: False, loss_scale: 1.0, global_norm: [{gnorm[i]:.6f}], "
            f"train_throughput_per_npu: 170.173T"
        )
        pct = 100.0 * (i + 1) / STEPS
        lines.append(
            f"{stamp} - [mindformers/core/callback/callback.py:560] - INFO -   "
            f"{pct:4.1f}% |{'█' * int(pct // 2):<50}| 4.55000 samples/s/p  0:08:12 }}"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def golden(path: Path, loss: np.ndarray) -> None:
    """Megatron functional-test golden values (2025+ dict layout) of bench run A."""
    values = {str(s): round(float(v), 5) for s, v in zip(range(1, STEPS + 1), loss, strict=True)}
    spec = {"start_step": 1, "end_step": STEPS, "step_interval": 1, "values": values}
    path.write_text(json.dumps({"lm loss": spec}, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    loss_a, gn_a = run(seed=7)
    loss_b, gn_b = run(seed=8)
    loss_n, gn_n = run(seed=9)
    megatron(HERE / "megatron_bench_a.log", loss_a, gn_a, nan_steps=set())
    megatron(HERE / "megatron_bench_b.log", loss_b, gn_b, nan_steps={77})
    mindformers(HERE / "mindformers_npu.log", loss_n, gn_n)
    t = np.arange(1, STEPS + 1)
    drift = 0.1 * np.clip((t - 150) / 10.0, 0.0, 1.0)  # stable +0.1 from step 160 on
    mindformers(HERE / "npu_late_drift.log", loss_n + drift, gn_n)
    first = 0.1 * np.exp(-(t - 1) / 2.0)  # forward mismatch: step 1 off, fades in a few steps
    mindformers(HERE / "npu_first_offset.log", loss_n + first, gn_n)
    spike = np.where(t == 200, 1.5, 0.0) + np.where(t > 200, 0.08 + 0.004 * (t - 200), 0.0)
    mindformers(HERE / "npu_spike.log", loss_n + spike, gn_n * np.where(t >= 200, 3.0, 1.0))
    golden(HERE / "megatron_golden.json", loss_a)


if __name__ == "__main__":
    main()
