"""A MindSpore L1 tensor dump of a small attention + MLP block, written by the real msprobe.

A different model from the bundled tiny Llama (``example_data/dumps/ms_fp32``): a
pre-LayerNorm block written with ``mindspore.mint`` APIs (linear with bias, bmm, where,
sqrt/div layer norm, sigmoid/tanh/relu gates, cat, max, exp, abs, maximum), a dropout (a
random API: the precheck must skip it) and a squared-error loss, one training step
(forward + backward by ``mindspore.value_and_grad``) in PyNative mode on the CPU.

Source: written for pytest-accuracy's MindSpore precheck executor (issue 15), in the style
of the bundled fixtures' generator (msprobe ``PrecisionDebugger`` with ``task: tensor``,
``level: L1``).  Needs mindspore 2.10.0, mindstudio-probe 26.2.0 and numpy<2::

    python benchmarks/make_ms_block_dump.py tests/data/ms_block/L1_tensor

The dump (about 0.4 MB) is committed under ``tests/data/ms_block``; absolute paths in its
dump.json are those of the machine that made it, as in any real dump.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, mint, nn, ops

# msprobe's MindSpore statistics call mint.norm (LinalgVectorNorm), which has no CPU kernel
# in MindSpore 2.10: route it to ops.norm (same L2 norm) before msprobe is imported.
mint.norm = ops.norm

B, T, D, H, FF = 2, 6, 16, 2, 32


def _param(rng: np.random.Generator, shape: tuple[int, ...], name: str) -> Parameter:
    return Parameter(Tensor((rng.standard_normal(shape) * 0.2).astype(np.float32)), name=name)


class Block(nn.Cell):  # type: ignore[misc]
    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self.wq, self.bq = _param(rng, (D, D), "wq"), _param(rng, (D,), "bq")
        self.wk, self.wv = _param(rng, (D, D), "wk"), _param(rng, (D, D), "wv")
        self.wo = _param(rng, (D, D), "wo")
        self.w1, self.b1 = _param(rng, (FF, D), "w1"), _param(rng, (FF,), "b1")
        self.w2 = _param(rng, (D, FF // 2), "w2")
        self.gamma = _param(rng, (D,), "gamma")
        causal = np.tril(np.ones((T, T), dtype=bool))
        self.mask = Tensor(np.broadcast_to(causal, (B * H, T, T)).copy())
        self.neg = Tensor(-1e9, ms.float32)

    def norm(self, x: Any) -> Any:
        centred = mint.sub(x, x.mean(-1, keepdim=True))
        var = mint.square(centred).mean(-1, keepdim=True)
        return mint.div(centred, mint.sqrt(var + 1e-5)) * self.gamma

    def heads(self, x: Any) -> Any:
        return mint.permute(x.reshape(B, T, H, D // H), (0, 2, 1, 3)).reshape(B * H, T, D // H)

    def construct(self, x: Any) -> Any:
        h = self.norm(x)
        q = self.heads(mint.nn.functional.linear(h, self.wq, self.bq))
        k = self.heads(mint.nn.functional.linear(h, self.wk))
        v = self.heads(mint.nn.functional.linear(h, self.wv))
        s = mint.bmm(q, mint.transpose(k, 1, 2)) * (D // H) ** -0.5
        a = mint.nn.functional.softmax(mint.where(self.mask, s, self.neg), dim=-1)
        o = mint.bmm(ops.dropout(a, p=0.1), v)
        o = mint.permute(o.reshape(B, H, T, D // H), (0, 2, 1, 3)).reshape(B, T, D)
        x = x + mint.nn.functional.linear(o, self.wo)
        g, u = mint.split(mint.nn.functional.linear(self.norm(x), self.w1, self.b1), FF // 2, -1)
        gated = mint.nn.functional.sigmoid(g) * mint.nn.functional.tanh(u)
        y = x + mint.nn.functional.linear(mint.nn.functional.relu(gated), self.w2)
        peak = mint.max(mint.abs(y), -1, True)[0]
        return mint.cat([y, mint.exp(-peak)], -1), mint.maximum(y, x)


def main(dump_path: str) -> None:
    from msprobe.mindspore import PrecisionDebugger

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    rng = np.random.default_rng(15)
    block = Block(rng)
    x = Tensor(rng.standard_normal((B, T, D)).astype(np.float32))
    target = Tensor(rng.standard_normal((B, T, D + 1)).astype(np.float32))
    config = {"task": "tensor", "dump_path": os.path.abspath(dump_path), "rank": [],
              "step": [], "level": "L1", "async_dump": False,
              "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
    fd, cfg = tempfile.mkstemp(suffix=".json")
    with os.fdopen(fd, "w") as handle:
        json.dump(config, handle)
    debugger = PrecisionDebugger(config_path=cfg)
    os.remove(cfg)

    def loss_fn(inp: Any, tgt: Any) -> Any:
        out, top = block(inp)
        return mint.mean(mint.square(out - tgt)) + mint.mean(top)

    grad_fn = ms.value_and_grad(loss_fn, None, block.trainable_params())
    debugger.start(block)
    loss, _ = grad_fn(x, target)
    debugger.stop()
    debugger.step()
    print(f"loss {float(loss.asnumpy()):.8f}")


if __name__ == "__main__":
    main(sys.argv[1])
