"""Write real legacy msprobe grad_probe outputs (``grad_summary_<step>.csv`` and sign ``.npy``).

grad_probe was removed in msprobe 26.x; this runs PyPI mindstudio-probe 8.3.3 over the same tiny
Llama as ``make_monitor.py`` (its ``run`` kinds ``bench`` and ``bug``), e.g.::

    pip install --no-deps --target /tmp/gp833 mindstudio-probe==8.3.3
    PYTHONPATH=/tmp/gp833 ../../.venv-zoo/bin/python make_grad_probe.py OUT --level L1

Each run is ``OUT/<level>/<run>/rank0/grad_summary_<step>.csv`` (and ``step<s>/<param>.npy``,
the sign of every gradient element, for L1 and L2).
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
PARAMS = ["model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight",
          "model.layers.1.self_attn.o_proj.weight"]


def run(kind: str, out: Path, level: str) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False, attn_implementation="eager")
    model = LlamaForCausalLM(cfg)
    named = dict(model.named_parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"task": "grad_probe", "dump_path": str(out), "rank": [], "step": [],
              "grad_probe": {"grad_level": level, "param_list": PARAMS, "bounds": [-1e-3, 0, 1e-3]}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(config, handle)
    import numpy as np

    if not hasattr(np, "unicode_"):  # msprobe 8.3.3 names np.unicode_, gone in numpy 2
        np.unicode_ = np.str_
    from msprobe.pytorch import PrecisionDebugger

    debugger = PrecisionDebugger(handle.name)
    debugger.monitor(model)
    seeded = torch.Generator().manual_seed(1)
    data = torch.randint(0, cfg.vocab_size, (STEPS, 2, 16), generator=seeded)
    for step in range(STEPS):
        loss = model(input_ids=data[step], labels=data[step]).loss
        loss.backward()
        if kind == "bug" and step >= BUG_STEP:
            named[BUG_PARAM].grad.mul_(1.25)
        opt.step()
        opt.zero_grad()
    os.unlink(handle.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--level", default="L1", choices=("L0", "L1", "L2"))
    args = parser.parse_args()
    for kind in ("bench", "bug"):
        target = args.out / args.level / kind
        shutil.rmtree(target, ignore_errors=True)
        pid = os.fork()  # one process per run: the debugger is a process-wide singleton
        if pid == 0:
            run(kind, target, args.level)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if status:
            sys.exit(f"run {kind} failed ({status})")


if __name__ == "__main__":
    main()
