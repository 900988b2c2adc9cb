"""Measure real mlx-lm training steps on the CPU build of MLX (issue 23, "Measured").

    .venv/bin/python bench/measure/mlx_measure.py --out bench/results/measure-cpu-mlx.json \
        [--only SUBSTR] [--subset full|quick]

Each record runs in a fresh process (``--case JSON``): mlx-lm's grad_checkpoint patches the
layer class for good, and MLX's peak counter and buffer cache are per process. The step is
mlx-lm 0.32.2's own (mlx_lm/tuner/trainer.py train(): ``nn.value_and_grad(model, loss)``
over ``default_loss``, ``mx.compile`` with the model, optimizer and random state as inputs
and outputs, ``optimizer.update`` inside, then ``mx.eval(state, losses, n_tokens,
grad_accum)``), on a model prepared as mlx_lm/lora.py train_model() prepares it
(``model.freeze()``, ``linear_to_lora_layers`` or ``unfreeze`` of the last num_layers
layers). Models are random (nothing downloaded), built by mlx-lm's own model classes from a
config dict, cast to bf16 / fp16, and quantized by ``mlx_lm.utils.quantize_model`` (affine,
what ``mlx_lm.convert -q`` writes). Step 1 is the warm-up (the optimizer creates its state,
the compiled graph is traced); ``mx.reset_peak_memory()`` then step 2 is measured:
``mx.get_peak_memory()`` over it, ``mx.get_active_memory()`` before and after,
``mx.get_cache_memory()`` after.

Batches are random token rows of batch x (seq_len + 1) tokens: default_loss feeds
``batch[:, :-1]`` and scores ``batch[:, 1:]``, so the model sees seq_len tokens, all scored.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Small random models of two architectures, config.json dicts as transformers writes them;
# every linear's input width is a multiple of 64 (MLX's default quantization group).
MODELS: dict[str, dict[str, Any]] = {
    "llama-tiny": {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 8,
        "intermediate_size": 704,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "rms_norm_eps": 1e-5,
        "vocab_size": 8192,
        "tie_word_embeddings": False,
        "max_position_embeddings": 4096,
    },
    "qwen2-tiny": {
        "model_type": "qwen2",
        "hidden_size": 192,
        "num_hidden_layers": 6,
        "intermediate_size": 512,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "vocab_size": 12288,
        "tie_word_embeddings": True,
        "max_position_embeddings": 4096,
        "rope_theta": 1000000.0,
    },
}


def cases(subset: str) -> list[dict[str, Any]]:
    """The plans measured. On llama-tiny: every fine-tune type in fp32 (fast on a CPU) with
    checkpointing off and on, at 128 x 2 on half the layers and 512 x 1 on all of them; in
    bf16 on half and all the layers; 4- and 8-bit quantized LoRA (checkpointing off and on)
    and DoRA; a long rank-32 row and the other optimizers; DoRA with checkpointing at 1024
    tokens; every fine-tune type in bf16 with checkpointing. On qwen2-tiny (tied embeddings,
    q/k/v biases) a smaller set of the same. bf16 and quantized matrix products are slow on
    MLX's CPU build, hence fewer of those."""
    out: list[dict[str, Any]] = []

    def add(model: str, method: str, dtype: str, ckpt: bool, nl: int, **kw: Any) -> None:
        base = {"rank": 8, "optimizer": "adam", "bits": 0, "seq": 128, "batch": 2}
        base.update(model=model, method=method, dtype=dtype, ckpt=ckpt, num_layers=nl)
        out.append({**base, **kw})

    for model, cfg in MODELS.items():
        half = cfg["num_hidden_layers"] // 2
        small = model != "llama-tiny"
        for method in ("lora", "dora", "full"):
            for ckpt in (False, True):
                add(model, method, "fp32", ckpt, half)
                if not small or method == "lora":
                    add(model, method, "fp32", ckpt, -1, seq=512, batch=1)
            if not small or method != "dora":
                add(model, method, "bf16", False, half)
            if not small:
                add(model, method, "bf16", False, -1)
        add(model, "lora", "bf16", False, half, bits=4)
        add(model, "lora", "bf16", False, half, bits=8)
        if not small:
            add(model, "lora", "bf16", True, half, bits=4)
            add(model, "lora", "bf16", True, half, bits=8)
            add(model, "dora", "bf16", False, half, bits=4)
            add(model, "lora", "fp32", False, half, seq=1024, batch=2, rank=32)
            add(model, "full", "fp32", False, half, optimizer="adafactor")
        add(model, "full", "fp32", False, half, optimizer="sgd")
        # DoRA under checkpointing at sizes the record's DoRA term was not read from
        add(model, "dora", "fp32", True, -1, seq=1024, batch=1)
        if not small:
            for method in ("lora", "dora", "full"):
                add(model, method, "bf16", True, half)
            for nl in (2, 6):  # what DoRA keeps per trained layer under checkpointing
                add(model, "dora", "bf16", True, nl)
            add(model, "dora", "bf16", True, half, seq=256, batch=1)
    out.sort(key=lambda c: (c["bits"] > 0, c["dtype"] != "fp32"))  # the fast ones first
    if subset == "quick":
        out = out[::7]
    return out


def case_id(c: dict[str, Any]) -> str:
    quant = f"q{c['bits']}" if c["bits"] else c["dtype"]
    return (
        f"{c['model']}/{c['method']}/{quant}/{c['optimizer']}/s{c['seq']}/b{c['batch']}/"
        f"{'gc' if c['ckpt'] else 'nogc'}/nl{c['num_layers']}/r{c['rank']}/mlx"
    )


def run_case(c: dict[str, Any]) -> dict[str, Any]:
    """One measured step (in this process)."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    import numpy as np
    from mlx.nn.utils import average_gradients
    from mlx.utils import tree_flatten, tree_map
    from mlx_lm.tuner.trainer import default_loss, grad_checkpoint
    from mlx_lm.tuner.utils import linear_to_lora_layers
    from mlx_lm.utils import _get_classes, quantize_model

    mx.random.seed(0)
    cfg = MODELS[c["model"]]
    model_class, args_class = _get_classes(cfg)
    model = model_class(args_class.from_dict(cfg))
    dtype = {"bf16": mx.bfloat16, "fp16": mx.float16, "fp32": mx.float32}[c["dtype"]]
    model.set_dtype(dtype)
    if c["bits"]:
        model, _ = quantize_model(model, dict(cfg), group_size=64, bits=c["bits"])
    mx.eval(model.parameters())
    # mlx_lm/lora.py train_model()
    model.freeze()
    if c["method"] == "full":
        for layer in model.layers[-max(c["num_layers"], 0) :]:
            layer.unfreeze()
    else:
        params = {"rank": c["rank"], "dropout": 0.0, "scale": 20.0}
        linear_to_lora_layers(model, c["num_layers"], params, use_dora=c["method"] == "dora")
    mx.eval(model.parameters())
    opt_class = {
        "adam": optim.Adam,
        "adamw": optim.AdamW,
        "sgd": optim.SGD,
        "adafactor": optim.Adafactor,
    }[c["optimizer"]]
    optimizer = opt_class(learning_rate=1e-5)
    # mlx_lm/tuner/trainer.py train()
    if c["ckpt"]:
        grad_checkpoint(model.layers[0])
    loss_value_and_grad = nn.value_and_grad(model, default_loss)
    state = [model.state, optimizer.state, mx.random.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(batch: Any, prev_grad: Any, do_update: bool) -> Any:
        (lvalue, toks), grad = loss_value_and_grad(model, *batch)
        if prev_grad is not None:
            grad = tree_map(lambda x, y: x + y, grad, prev_grad)
        if do_update:
            grad = average_gradients(grad)
            optimizer.update(model, grad)
            grad = None
        return lvalue, toks, grad

    model.train()
    rng = np.random.default_rng(0)

    def batch() -> Any:
        rows = rng.integers(0, cfg["vocab_size"], (c["batch"], c["seq"] + 1), dtype=np.int32)
        lengths = [(0, c["seq"] + 1)] * c["batch"]
        return mx.array(rows), mx.array(lengths)

    def one_step() -> float:
        lvalue, toks, grad = step(batch(), None, True)
        mx.eval(state, lvalue, toks, grad)
        return float(lvalue.item())

    t0 = time.perf_counter()
    one_step()  # warm-up: optimizer state, compiled graph
    b = batch()
    mx.eval(b)
    mx.reset_peak_memory()
    active_start = mx.get_active_memory()
    lvalue, toks, grad = step(b, None, True)
    mx.eval(state, lvalue, toks, grad)
    peak = mx.get_peak_memory()
    active_end = mx.get_active_memory()
    cache = mx.get_cache_memory()
    seconds = time.perf_counter() - t0
    leaves = dict(tree_flatten(model.parameters()))
    trainable = dict(tree_flatten(model.trainable_parameters()))
    opt_state = [v for _, v in tree_flatten(optimizer.state) if isinstance(v, mx.array)]
    return {
        "peak_allocated_bytes": int(peak),
        "active_start_bytes": int(active_start),
        "active_end_bytes": int(active_end),
        "cache_bytes": int(cache),
        "params_bytes": int(sum(v.nbytes for v in leaves.values())),
        "trainable_bytes": int(sum(v.nbytes for v in trainable.values())),
        "trainable_params": int(sum(v.size for v in trainable.values())),
        "optimizer_state_bytes": int(sum(v.nbytes for v in opt_state if v.ndim > 0)),
        "loss": float(lvalue.item()),
        "seconds": round(seconds, 2),
        "execution": "real",
        "device": str(mx.default_device()),
    }


def record(c: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """The record in the schema of bench/results/measure-cpu-*.json: ``plan`` in the
    project's plan field names (mlx-lm's Adam and AdamW are the plan's adamw; a quantized
    model's LoRA is qlora), ``case`` as mlx-lm was run."""
    cfg = MODELS[c["model"]]
    return {
        "id": case_id(c),
        "model": {"name": c["model"], "hf_id": None, "config": cfg},
        "plan": {
            "model": c["model"],
            "method": "full" if c["method"] == "full" else ("qlora" if c["bits"] else "lora"),
            "dora": c["method"] == "dora",
            "precision": c["dtype"],
            "seq_len": c["seq"],
            "batch": c["batch"],
            "grad_ckpt": c["ckpt"],
            "optimizer": "adamw" if c["optimizer"] in ("adam", "adamw") else c["optimizer"],
            "stack": "mlx",
            "lora_rank": c["rank"],
            "mlx_num_layers": c["num_layers"],
            "mlx_bits": c["bits"] or 4,
            "mlx_group_size": 64,
        },
        "case": c,
        "measured": measured,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", default="")
    ap.add_argument("--subset", choices=("full", "quick"), default="full")
    ap.add_argument("--resume", action="store_true", help="keep the records --out holds")
    ap.add_argument("--case", help=argparse.SUPPRESS)  # one case, in a child process
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))))
        return
    started = time.perf_counter()
    records = []
    if args.resume and args.out and args.out.exists():
        records = json.loads(args.out.read_text())["records"]
    done = {r["id"] for r in records}
    for c in cases(args.subset):
        if args.only not in case_id(c) or case_id(c) in done:
            continue
        child = subprocess.run(
            [sys.executable, __file__, "--case", json.dumps(c)],
            capture_output=True,
            text=True,
            check=False,
        )
        if child.returncode != 0:
            print(f"{case_id(c)}: failed\n{child.stderr[-2000:]}", file=sys.stderr)
            continue
        measured = json.loads(child.stdout.strip().splitlines()[-1])
        records.append(record(c, measured))
        print(f"{case_id(c)}: peak {measured['peak_allocated_bytes'] / 1e6:.2f} MB", flush=True)
        if args.out:  # after every record: a long run interrupted keeps what it measured
            write(args.out, results(args, records, started, complete=False))
    data = results(args, records, started, complete=not args.only and args.subset == "full")
    if args.out:
        write(args.out, data)
    else:
        print(json.dumps(data, indent=1))


def write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def results(
    args: argparse.Namespace, records: list[dict[str, Any]], started: float, complete: bool
) -> dict[str, Any]:
    return {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "device": "mlx-cpu",
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "versions": {p: version(p) for p in ("mlx", "mlx-lm")},
        "command": "python bench/measure/mlx_measure.py " + " ".join(sys.argv[1:]),
        "complete": complete,
        "notes": {
            "step": "mlx-lm 0.32.2 tuner/trainer.py train()'s compiled step, step 2 of 2",
            "peak": "mx.get_peak_memory() over the measured step (MLX's allocator: live "
            "buffers); cache_bytes = mx.get_cache_memory() after it",
        },
        "total_seconds": round(time.perf_counter() - started, 1),
        "records": records,
    }


if __name__ == "__main__":
    main()
