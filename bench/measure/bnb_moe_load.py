"""What a bitsandbytes 4-bit load keeps of a mixture-of-experts model, against the estimate.

    python -m venv /tmp/bnb-venv && /tmp/bnb-venv/bin/pip install torch==2.13.0 \
        "transformers==5.25.0" "peft==0.21.2" "bitsandbytes==0.50.2" -e .
    /tmp/bnb-venv/bin/python bench/measure/bnb_moe_load.py --out bench/results/bnb-moe-load.json

(Or the project's .venv, which has torch, transformers and peft, with bitsandbytes put beside
it: ``pip install --no-deps --target /tmp/bnb bitsandbytes`` and ``PYTHONPATH=/tmp/bnb``.)

For tiny random mixtral, qwen2_moe, qwen3_moe and gpt_oss models (every MoE model_type the
estimate follows), saved in bf16 and loaded with ``BitsAndBytesConfig(load_in_4bit=True)`` on
the CPU, then passed through PEFT's ``prepare_model_for_kbit_training``: which parameters are
4-bit, and the bytes of all of them (a Params4bit: its packed storage and its quant state's
absmax, nested absmax and code). It prints them beside the estimate's weights for the same
config (trainmem.core.states.stored_weight_bytes, kbit_prep off and on); the JSON keeps the
measurements, which bench/accuracy/compare.py sets against the estimate of the day.
transformers 5 keeps the experts as fused 3-D parameters, which replace_with_bnb_linear does
not convert, and PEFT's preparation casts every 16-bit parameter that is not Params4bit to
fp32.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the `accuracy` package
from accuracy.bnb_load import estimated

COMMON = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
}
MODELS = {
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 256,
    },
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128},
    "gpt_oss": {"num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 64},
}


def param_bytes(model: torch.nn.Module) -> int:
    total = 0
    for p in model.parameters():
        total += p.numel() * p.element_size()
        state = getattr(p, "quant_state", None)
        if state is not None:  # bitsandbytes QuantState: absmax, code, nested state
            for t in (state.absmax, state.code):
                total += t.numel() * t.element_size()
            nested = getattr(state, "state2", None)
            if nested is not None:
                for t in (nested.absmax, nested.code):
                    total += t.numel() * t.element_size()
    return total


def main() -> None:
    import bitsandbytes
    import peft
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig

    logging.disable(logging.WARNING)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    machine = {
        "device": "cpu",
        "platform": platform.platform(),
        "python": sys.version.split()[0],
    }
    versions = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "bitsandbytes": bitsandbytes.__version__,
    }
    print(f"machine: {machine}\n{versions}\ncommand: python bench/measure/bnb_moe_load.py")
    print("model_type    loaded B      ours B |   prepared B      ours B")
    quant = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    records = []
    for model_type, extra in MODELS.items():
        cfg = AutoConfig.for_model(model_type, **COMMON, **extra)
        folder = tempfile.mkdtemp()
        AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16).save_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(
            folder, quantization_config=quant, dtype=torch.bfloat16, device_map="cpu"
        )
        layer0 = {
            n.split("layers.0.")[1]: type(p).__name__ == "Params4bit"
            for n, p in model.named_parameters()
            if "layers.0." in n and "norm" not in n and not n.endswith("bias")
        }
        loaded = param_bytes(model)
        peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        record = {
            "model_type": model_type,
            "config": {"model_type": model_type, **COMMON, **extra},
            "four_bit": sorted(n for n, four in layer0.items() if four),
            "sixteen_bit": sorted(n for n, four in layer0.items() if not four),
            "loaded_bytes": loaded,
            "prepared_bytes": param_bytes(model),  # after prepare_model_for_kbit_training
        }
        records.append(record)
        ours = estimated(record)
        print(
            f"{model_type:11s} {loaded:11,d} {ours[False]:11,d} | "
            f"{record['prepared_bytes']:11,d} {ours[True]:11,d}"
        )
    if args.out:
        command = "python bench/measure/bnb_moe_load.py --out " + str(args.out)
        doc = {"kind": "bnb-load", "machine": machine, "versions": versions, "command": command}
        doc["records"] = records
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
