"""axolotl end to end on the CPU: its published LoRA example (examples/llama-3/lora-1b.yml, 067b021)
with a tiny random Llama, run through axolotl's own entry point under the tracker, then planned
with ``trainmem-tui plan --from`` on the same file from the same folder.

    python3 -m venv /tmp/axo-venv      # a venv of its own: the project's .venv is never changed
    echo "import site; site.addsitedir('$PWD/.venv/lib/python3.11/site-packages')" \\
        > /tmp/axo-venv/lib/python3.11/site-packages/project.pth   # torch, transformers, peft
    /tmp/axo-venv/bin/pip install --no-deps axolotl==0.19.0 axolotl-contribs-lgpl==0.0.7 \\
        axolotl-contribs-mit==0.0.6 trl==1.9.0 bitsandbytes==0.50.2 colorama addict fire art \\
        fastcore termcolor requests urllib3 certifi posthog distro pillow numba llvmlite httpx \\
        httpcore triton evaluate wandb opentelemetry-api opentelemetry-sdk opentelemetry-proto \\
        opentelemetry-exporter-otlp-proto-http opentelemetry-exporter-otlp-proto-common \\
        opentelemetry-semantic-conventions
    /tmp/axo-venv/bin/python bench/measure/frameworks_axolotl.py \\
        --out bench/results/measure-cpu-frameworks.json

``axolotl.cli.train.do_cli(config)`` is what ``axolotl train CONFIG --launcher python`` runs
(cli/main.py -> ``python -m axolotl.cli.train``). axolotl 0.19.0 pins transformers 5.16.1 /
peft 0.20.0 / trl 1.9.0; it runs here on the project's transformers 5.24.0 and peft 0.21.2
(--no-deps) with its own trl 1.9.0 (it imports trl.experimental.prm, gone from trl 1.16); the
record states the versions. The example's CUDA-only keys are changed for
the CPU, each said in a comment: flash_attention_2 -> sdpa, adamw_8bit -> adamw_torch, bf16
auto -> false (fp32 steps; on a machine without a bf16 GPU axolotl's resolve_dtype
would make auto fp16), sample_packing off (its multipack needs
flash-attention), axolotl's Triton LoRA kernels off; the dataset and model are local,
max_steps 2.

The QLoRA case is examples/llama-3/qlora-1b.yml (067b021) changed the same way, with bf16: true
instead of auto: on a machine without a bf16 GPU axolotl's resolve_dtype turns auto into fp16,
while on the Ampere+ GPU the example is written for auto is bf16, and bf16 is the dtype axolotl's
QLoRA load is built around (bnb_4bit_compute_dtype and quant_storage = cfg.torch_dtype, the norms
and embeddings cast back to it). axolotl only warns that bf16 "is not supported on this GPU", but
transformers' TrainingArguments refuses bf16 without a GPU unless use_cpu is set, and axolotl
has no key that reaches it: this harness sets use_cpu=True for that case (said in its record);
the Trainer then runs CPU bf16 autocast. Its record also has ``param_dtypes``: the trained model's
parameters by dtype and by name group as the Trainer starts, i.e. after axolotl's load, its
embedding/norm casts, prepare_model_for_kbit_training and PEFT. ``--only NAME`` runs the cases
whose file name contains NAME and keeps the file's other axolotl records (merged by id).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import frameworks_common as common

REPRODUCE = __doc__.split("\n\n")[1]

LORA_1B = """\
base_model: ./tiny-llama   # examples/llama-3/lora-1b.yml: NousResearch/Llama-3.2-1B

datasets:
  - path: data/alpaca.jsonl  # teknium/GPT4-LLM-Cleaned, an alpaca dataset
    ds_type: json
    type: alpaca

val_set_size: 0
output_dir: ./outputs/lora-out

adapter: lora
lora_model_dir:

sequence_len: {seq}
sample_packing: false   # true in the example: multipack needs flash-attention
pad_to_sequence_len: true

lora_r: 16
lora_alpha: 32
lora_dropout: 0.05
lora_mlp_kernel: false   # axolotl's Triton LoRA kernels (on by default) need CUDA
lora_qkv_kernel: false
lora_o_kernel: false
lora_target_modules:
  - gate_proj
  - down_proj
  - up_proj
  - q_proj
  - v_proj
  - k_proj
  - o_proj

gradient_accumulation_steps: 1
micro_batch_size: {batch}
num_epochs: 1
max_steps: 2

optimizer: adamw_torch   # adamw_8bit in the example (bitsandbytes' CUDA kernels)
lr_scheduler: cosine
learning_rate: 0.0002

bf16: false   # auto in the example
tf32: false

gradient_checkpointing: {ckpt}
logging_steps: 1
attn_implementation: sdpa   # flash_attention_2 in the example
save_strategy: "no"
weight_decay: 0.0
special_tokens:
  pad_token: "<pad>"
"""

QLORA_1B = """\
base_model: ./tiny-llama   # examples/llama-3/qlora-1b.yml: NousResearch/Llama-3.2-1B

load_in_8bit: false
load_in_4bit: true

datasets:
  - path: data/alpaca.jsonl  # teknium/GPT4-LLM-Cleaned, an alpaca dataset
    ds_type: json
    type: alpaca
dataset_prepared_path: last_run_prepared
val_set_size: 0   # 0.1 in the example: no eval pass on 16 rows
output_dir: ./outputs/qlora-out

adapter: qlora
lora_model_dir:

sequence_len: {seq}   # 2048 in the example
sample_packing: false   # true in the example: multipack needs flash-attention
eval_sample_packing: false
pad_to_sequence_len: true   # not in the example: every step {seq} tokens, as in the LoRA case

lora_r: 32
lora_alpha: 16
lora_dropout: 0.05
lora_mlp_kernel: false   # axolotl's Triton LoRA kernels (on by default) need CUDA
lora_qkv_kernel: false
lora_o_kernel: false
lora_target_modules:
  - gate_proj
  - down_proj
  - up_proj
  - q_proj
  - v_proj
  - k_proj
  - o_proj

gradient_accumulation_steps: 1   # 4 in the example: one micro-batch a measured step
micro_batch_size: {batch}
num_epochs: 1
max_steps: 2   # not in the example: two steps, step 2 measured
optimizer: adamw_torch   # adamw_bnb_8bit in the example (bitsandbytes' CUDA optimizer kernels)
lr_scheduler: cosine
learning_rate: 0.0002

bf16: true   # auto in the example: bf16 on its Ampere+ GPU, but fp16 on a machine without one
tf32: false

gradient_checkpointing: {ckpt}
resume_from_checkpoint:
logging_steps: 1
attn_implementation: sdpa   # flash_attention_2 in the example

loss_watchdog_threshold: 5.0
loss_watchdog_patience: 3

warmup_ratio: 0.1
save_strategy: "no"   # evals_per_epoch 4, saves_per_epoch 1 in the example: no eval, no checkpoint
weight_decay: 0.0
special_tokens:
  pad_token: "<pad>"   # <|end_of_text|> in the example: the tiny tokenizer's pad
"""

CASES = [
    {"name": "lora-1b.yml", "seq": 128, "batch": 2, "ckpt": "true", "template": LORA_1B},
    {"name": "lora-1b-nockpt.yml", "seq": 128, "batch": 2, "ckpt": "false", "template": LORA_1B},
    {
        "name": "qlora-1b.yml",
        "seq": 128,
        "batch": 2,
        "ckpt": "true",
        "template": QLORA_1B,
        "use_cpu": True,
    },
    {
        "name": "qlora-1b-nockpt.yml",
        "seq": 128,
        "batch": 2,
        "ckpt": "false",
        "template": QLORA_1B,
        "use_cpu": True,
    },
]


def _group(name: str) -> str:
    """The name group a parameter belongs to, for the dtype summary."""
    for key in ("lora_A", "lora_B", "embed_tokens", "lm_head"):
        if key in name:
            return key
    if "norm" in name:
        return "norm"
    if name.endswith(".bias"):
        return "bias"
    if ".base_layer." in name:
        return "base_layer"
    return "other"


def param_dtypes(model: Any) -> dict[str, Any]:
    """Elements and bytes per dtype, and per name group (with the parameter classes), of ``model``.

    bitsandbytes' packed 4-bit weights are Params4bit whose storage dtype is the
    quant_storage (bf16 in axolotl's QLoRA): two 4-bit values a byte, so their ``numel`` is a
    quarter of the weight's when stored as bf16; they are listed as their own class.
    """
    by_dtype: dict[str, dict[str, int]] = {}
    groups: dict[str, dict[str, Any]] = {}
    for name, p in model.named_parameters():
        dt = str(p.dtype).replace("torch.", "")
        cls = type(p).__name__
        g = groups.setdefault(_group(name), {"dtypes": {}, "classes": {}, "trainable": 0})
        for tally in (by_dtype, g["dtypes"]):
            d = tally.setdefault(dt, {"elements": 0, "bytes": 0, "tensors": 0})
            d["elements"] += p.numel()
            d["bytes"] += p.numel() * p.element_size()
            d["tensors"] += 1
        g["classes"][cls] = g["classes"].get(cls, 0) + 1
        g["trainable"] += p.numel() if p.requires_grad else 0
        g.setdefault("example", name)
    return {
        "by_dtype": by_dtype,
        "by_group": groups,
        "fp32_groups": sorted(k for k, g in groups.items() if "float32" in g["dtypes"]),
        "bf16_groups": sorted(k for k, g in groups.items() if "bfloat16" in g["dtypes"]),
    }


def _version(mod: str) -> str:
    try:
        return str(__import__(mod).__version__)
    except Exception as e:  # an honest record of what was not there
        return f"unavailable ({type(e).__name__})"


def run(case: dict[str, Any], folder: Path) -> dict[str, Any]:
    import axolotl
    from axolotl.cli.train import do_cli

    config = folder / case["name"]
    config.write_text(case["template"].format(**case), encoding="utf-8")
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    cwd = Path.cwd()
    try:
        import os

        os.chdir(folder)  # the example's paths are relative: run from its folder
        with common.Probed() as probed:
            from transformers import Trainer, TrainingArguments

            probed_train = Trainer.train  # Probed's wrapper: read the dtypes as training starts

            def train(trainer: Any, *a: Any, **k: Any) -> Any:
                out.setdefault("param_dtypes", param_dtypes(trainer.model))
                return probed_train(trainer, *a, **k)

            Trainer.train = train  # type: ignore[method-assign]
            post_init = TrainingArguments.__post_init__
            if case.get("use_cpu"):
                # bf16 on a CPU: transformers' TrainingArguments raises "Your setup doesn't
                # support bf16/gpu. You need to assign use_cpu ..." and axolotl has no key that
                # reaches use_cpu, so it is set here (on a GPU-less machine the device is the
                # CPU either way; it only turns the check off and pin_memory off).
                def cpu_post_init(args: Any) -> None:
                    args.use_cpu = True
                    post_init(args)

                TrainingArguments.__post_init__ = cpu_post_init  # type: ignore[method-assign]
                out["training_args_use_cpu"] = "set by this harness (axolotl has no key for it)"
            try:
                do_cli(config=str(config))
            finally:
                Trainer.train = probed_train  # type: ignore[method-assign]
                TrainingArguments.__post_init__ = post_init  # type: ignore[method-assign]
            if not probed.probes:
                raise RuntimeError("axolotl built no transformers Trainer")
            out["measured"] = common.measured(probed.probes[-1], probed.trainers[-1])
            out["trainer_class"] = type(probed.trainers[-1]).__name__
    except Exception as e:  # record honestly
        out["error"] = f"{type(e).__name__}: {e}"[:2000]
        out["traceback_tail"] = traceback.format_exc()[-3000:]
    finally:
        os.chdir(cwd)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    out["versions"] = {**common.versions_now(), "bitsandbytes": _version("bitsandbytes")}
    return common.record("axolotl", axolotl.__version__, config, folder, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument(
        "--only", help="run the cases whose file name contains this; keep the other records"
    )
    args = ap.parse_args(argv)
    import os

    os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")  # no telemetry: this machine is offline
    cases = [c for c in CASES if not args.only or args.only in c["name"]]
    if not cases:
        ap.error(f"no case matches {args.only!r}")
    print("reproduce:\n" + REPRODUCE)
    folder = Path(tempfile.mkdtemp(prefix="trainmem-axolotl-"))
    common.write_model(folder / "tiny-llama")
    common.write_alpaca(folder / "data" / "alpaca.jsonl")
    records = []
    for case in cases:
        rec = run(case, folder)
        records.append(rec)
        status = rec.get("error") or rec["plan_from"].get("error") or f"{rec['error_pct']:+.2f}%"
        print(f"{rec['id']}: {status}")
    if args.only and args.out.is_file():  # merge by id: the records not rerun stay
        old_file = json.loads(args.out.read_text())
        old = old_file.get("records", [])
        old_versions = old_file.get("versions", {}).get("axolotl")
        new = {r["id"]: r for r in records}
        ours = [r for r in old if r.get("framework") == "axolotl"]
        for r in ours:  # the file's versions become this run's: the kept records keep theirs
            if old_versions and r["id"] not in new:
                r.setdefault("versions", old_versions)
        merged = [new.pop(r["id"], r) for r in ours]
        records = merged + list(new.values())
    common.save(args.out, "axolotl", records)
    if args.keep:
        print(f"work folder: {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if all("measured" in r for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
