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
auto -> false (auto is fp32 on a CPU anyway), sample_packing off (its multipack needs
flash-attention), axolotl's Triton LoRA kernels off; the dataset and model are local,
max_steps 2.
"""

from __future__ import annotations

import argparse
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

CASES = [
    {"name": "lora-1b.yml", "seq": 128, "batch": 2, "ckpt": "true"},
    {"name": "lora-1b-nockpt.yml", "seq": 128, "batch": 2, "ckpt": "false"},
]


def run(case: dict[str, Any], folder: Path) -> dict[str, Any]:
    import axolotl
    from axolotl.cli.train import do_cli

    config = folder / case["name"]
    config.write_text(LORA_1B.format(**case), encoding="utf-8")
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    cwd = Path.cwd()
    try:
        import os

        os.chdir(folder)  # the example's paths are relative: run from its folder
        with common.Probed() as probed:
            do_cli(config=str(config))
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
    return common.record("axolotl", axolotl.__version__, config, folder, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)
    print("reproduce:\n" + REPRODUCE)
    folder = Path(tempfile.mkdtemp(prefix="trainmem-axolotl-"))
    common.write_model(folder / "tiny-llama")
    common.write_alpaca(folder / "data" / "alpaca.jsonl")
    records = []
    for case in CASES:
        rec = run(case, folder)
        records.append(rec)
        status = rec.get("error") or rec["plan_from"].get("error") or f"{rec['error_pct']:+.2f}%"
        print(f"{rec['id']}: {status}")
    common.save(args.out, "axolotl", records)
    if args.keep:
        print(f"work folder: {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if all("measured" in r for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
