"""Write real msprobe TrainerMon outputs of a tiny Llama: a reference run and variants of it.

Run with msprobe (PyPI mindstudio-probe 26.2.0), torch and transformers installed, e.g.
``../../.venv-zoo/bin/python make_monitor.py OUT`` from this folder.  Each run is one
``OUT/<run>/<MonthDay_HH-MM-SS>-rank0-<uid>/`` directory of TrainerMon CSVs (10 decimals:
``ndigits`` 10, as msprobe's default 6 rounds Adam's exp_avg_sq of this model to 0) (or TensorBoard
events with ``--format tensorboard``).  Runs (5 optimizer steps, seed 0, CPU, float32, AdamW):

* ``bench``: eager attention, the reference.
* ``benign``: SDPA attention instead of eager: the same maths in another op order, so the two
  runs differ by float rounding only.
* ``bug``: the gradient of ``model.layers.1.mlp.down_proj.weight`` is scaled by 1.25 from
  optimizer step 2 on (a wrong per-layer loss-scale), the NPU side of the example pair.
* ``lr_bug``: ``model.layers.1.mlp.down_proj.weight`` in its own parameter group with 2x the
  learning rate: its updated weights part before its gradients do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

STEPS = 5
BUG_PARAM = "model.layers.1.mlp.down_proj.weight"
BUG_STEP = 2


def config(fmt: str) -> dict[str, object]:
    return {"targets": {}, "wg_distribution": True, "mv_distribution": True,
            "param_distribution": True, "xy_distribution": False, "format": fmt,
            "ops": ["norm", "min", "max", "mean", "zeros", "nans"], "start_step": 0,
            "step_interval": 1, "ndigits": 10}


def run(kind: str, out: Path, fmt: str, steps: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    attn = "sdpa" if kind == "benign" else "eager"
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False, attn_implementation=attn)
    model = LlamaForCausalLM(cfg)
    named = dict(model.named_parameters())
    if kind == "lr_bug":
        rest = [p for n, p in named.items() if n != BUG_PARAM]
        groups = [{"params": rest}, {"params": [named[BUG_PARAM]], "lr": 2e-3}]
        opt = torch.optim.AdamW(groups, lr=1e-3)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    os.environ["MONITOR_OUTPUT_DIR"] = str(out)
    from msprobe.pytorch import TrainerMon

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(config(fmt), handle)
    monitor = TrainerMon(handle.name, params_have_main_grad=False)
    monitor.set_monitor(model, optimizer=opt, grad_acc_steps=1)
    seeded = torch.Generator().manual_seed(1)
    data = torch.randint(0, cfg.vocab_size, (steps, 2, 16), generator=seeded)
    for step in range(steps):
        loss = model(input_ids=data[step], labels=data[step]).loss
        loss.backward()
        if kind == "bug" and step >= BUG_STEP:
            named[BUG_PARAM].grad.mul_(1.25)
        opt.step()
        opt.zero_grad()
        print(f"{kind} step {step} loss {loss.item():.6f}")
    os.unlink(handle.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--format", default="csv", choices=("csv", "tensorboard"))
    parser.add_argument("--runs", default="bench,benign,bug,lr_bug")
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    for kind in args.runs.split(","):
        target = args.out / kind
        shutil.rmtree(target, ignore_errors=True)
        # one process per run: TrainerMon patches the optimizer and module hooks globally
        pid = os.fork()
        if pid == 0:
            run(kind, target, args.format, args.steps)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if status:
            sys.exit(f"run {kind} failed ({status})")


if __name__ == "__main__":
    main()
