"""LLaMA-Factory end to end on the CPU: its published LoRA example
(examples/train_lora/llama3_lora_sft.yaml, 13d252f) with a tiny random Llama, run through
``llamafactory-cli train`` (in this process: llamafactory.cli.main, which runs run_exp() itself
on one device) under the tracker, then planned with ``trainmem-tui plan --from`` on the same
file from the same folder.

    python3 -m venv /tmp/lf-venv       # a venv of its own: the project's .venv is never changed
    echo "import site; site.addsitedir('$PWD/.venv/lib/python3.11/site-packages')" \\
        > /tmp/lf-venv/lib/python3.11/site-packages/project.pth       # torch and the rest
    /tmp/lf-venv/bin/pip install --no-deps llamafactory==0.9.5 transformers==5.6.0 \\
        peft==0.18.1 trl==0.24.0 accelerate==1.11.0 datasets==4.0.0 tokenizers==0.22.2 \\
        "huggingface-hub>=1.5,<2" tyro==0.8.14 omegaconf antlr4-python3-runtime==4.9.3 fire \\
        termcolor docstring-parser shtab httpx httpcore certifi requests urllib3
    # torchaudio has no build for torch 2.13 (PyPI's newest, 2.11.1, fails to load its .so);
    # LLaMA-Factory imports it at module level for audio inputs only (data/mm_plugin.py:30)
    mkdir /tmp/lf-venv/lib/python3.11/site-packages/torchaudio
    touch /tmp/lf-venv/lib/python3.11/site-packages/torchaudio/__init__.py   # an empty stand-in
    /tmp/lf-venv/bin/python bench/measure/frameworks_llama_factory.py \\
        --out bench/results/measure-cpu-frameworks.json

LLaMA-Factory 0.9.5 (the newest release) requires transformers <= 5.6.0, peft <= 0.18.1 and
trl <= 0.24.0 (its extras/misc.py check_dependencies refuses others), so those run here in its
venv; ``plan --from`` runs in the project's own. CPU changes to the example, each said in a
comment: bf16 true -> false, the datasets are one local alpaca file registered in
data/dataset_info.json, template default (llama3's special tokens are not in the tiny
tokenizer), max_steps 2; rows are longer than cutoff_len, so every one is cut to exactly it.
"""

from __future__ import annotations

import argparse
import json
import os
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

LLAMA3_LORA_SFT = """\
### model
model_name_or_path: ./tiny-llama   # meta-llama/Meta-Llama-3-8B-Instruct in the example
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all

### dataset
dataset: alpaca_local   # identity,alpaca_en_demo in the example
template: default       # llama3 in the example
cutoff_len: {seq}
max_samples: 1000
overwrite_cache: true
preprocessing_num_workers: 1

### output
output_dir: saves/tiny/lora/sft
logging_steps: 1
save_strategy: "no"
overwrite_output_dir: true
report_to: none

### train
per_device_train_batch_size: {batch}
gradient_accumulation_steps: 1
learning_rate: 1.0e-4
num_train_epochs: 1.0
max_steps: 2
lr_scheduler_type: cosine
warmup_ratio: 0.1
bf16: false   # true in the example
ddp_timeout: 180000000
"""

CASES = [{"name": "llama3_lora_sft.yaml", "seq": 128, "batch": 2}]


def run(case: dict[str, Any], folder: Path) -> dict[str, Any]:
    import llamafactory
    from llamafactory.cli import main as cli

    config = folder / case["name"]
    config.write_text(LLAMA3_LORA_SFT.format(**case), encoding="utf-8")
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    cwd, argv = Path.cwd(), sys.argv
    try:
        os.chdir(folder)  # run from the folder holding data/ and the model, as its docs say
        sys.argv = ["llamafactory-cli", "train", str(config)]
        with common.Probed() as probed:
            cli()
            if not probed.probes:
                raise RuntimeError("LLaMA-Factory built no transformers Trainer")
            out["measured"] = common.measured(probed.probes[-1], probed.trainers[-1])
            out["trainer_class"] = type(probed.trainers[-1]).__name__
    except BaseException as e:  # SystemExit too: record honestly
        out["error"] = f"{type(e).__name__}: {e}"[:2000]
        out["traceback_tail"] = traceback.format_exc()[-3000:]
    finally:
        os.chdir(cwd)
        sys.argv = argv
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return common.record("llama-factory", llamafactory.__version__, config, folder, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args(argv)
    print("reproduce:\n" + REPRODUCE)
    folder = Path(tempfile.mkdtemp(prefix="trainmem-llama-factory-"))
    common.write_model(folder / "tiny-llama")
    common.write_alpaca(folder / "data" / "alpaca_local.json", words=300)
    info = {"alpaca_local": {"file_name": "alpaca_local.json", "formatting": "alpaca"}}
    (folder / "data" / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    records = [run(case, folder) for case in CASES]
    for rec in records:
        status = rec.get("error") or rec["plan_from"].get("error") or f"{rec['error_pct']:+.2f}%"
        print(f"{rec['id']}: {status}")
    common.save(args.out, "llama-factory", records)
    if args.keep:
        print(f"work folder: {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if all("measured" in r for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
