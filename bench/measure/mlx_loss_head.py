"""How many logits-sized buffers MLX's cross-entropy and its gradient hold at their peak, as
mlx-lm's compiled step runs them (trainmem.core.mlx_step CPU_LOSS_BUFFERS).

    .venv/bin/python bench/measure/mlx_loss_head.py

A frozen lm_head, then ``nn.losses.cross_entropy`` as mlx_lm/tuner/trainer.py default_loss
calls it, under ``mx.value_and_grad`` and ``mx.compile``; the peak over the second call,
less the input gradient, in units of one logits tensor of the dtype.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

TOKENS, HIDDEN, VOCAB = 256, 256, 8192


def buffers(dtype: mx.Dtype, compiled: bool) -> float:
    w = (mx.random.normal((VOCAB, HIDDEN)) * 0.02).astype(dtype)
    x = mx.random.normal((1, TOKENS, HIDDEN)).astype(dtype)
    targets = mx.random.randint(0, VOCAB, (1, TOKENS))

    def loss(x: mx.array) -> mx.array:
        ce = nn.losses.cross_entropy(x @ w.T, targets)
        return ce.astype(mx.float32).sum() / TOKENS

    f = mx.value_and_grad(loss)
    if compiled:
        f = mx.compile(f)
    mx.eval(f(x))  # the first call traces and compiles
    mx.eval(x, w, targets)
    mx.reset_peak_memory()
    start = mx.get_active_memory()
    value, grad = f(x)
    mx.eval(value, grad)
    return (mx.get_peak_memory() - start - grad.nbytes) / (TOKENS * VOCAB * w.itemsize)


if __name__ == "__main__":
    print(f"MLX {mx.__version__} on {mx.default_device()}")
    for dtype in (mx.float32, mx.bfloat16, mx.float16):
        for compiled in (False, True):
            print(f"{dtype}, compiled {compiled}: {buffers(dtype, compiled):.2f} logits buffers")
