"""Optimizer names as the Hugging Face Trainer knows them (transformers 5.24
training_args.py ``OptimizerNames``, which axolotl's ``optimizer`` and LLaMA-Factory's
``optim`` take too) mapped to the plan's optimizers. Any other name is reported as not
modelled, never guessed: the plan keeps its optimizer and says so."""

from __future__ import annotations

from trainmem.core.units import shown
from trainmem.sources.configs.common import Reading

# Two moments in the parameters' dtype (torch.optim.AdamW, fused or foreach).
_ADAMW = {"adamw_torch_fused": "adamw", "adamw_torch": "adamw-foreach"}
# bitsandbytes: 8-bit moments; paged variants allocate in CUDA unified memory.
_BNB = {
    "adamw_bnb_8bit": "adamw-8bit",
    "adamw_8bit": "adamw-8bit",  # an alias of adamw_bnb_8bit (training_args.py:130)
    "paged_adamw_8bit": "paged-adamw-8bit",
    "paged_adamw_32bit": "paged-adamw-32bit",
    "lion_32bit": "lion",
    "paged_lion_32bit": "lion",
    "lion_8bit": "lion-8bit",
    "paged_lion_8bit": "lion-8bit",
}
_OTHER = {"adamw_torch_4bit": "adamw-4bit", "sgd": "sgd", "adafactor": "adafactor"}
# torchao's AdamW8bit (trainer_optimizer.py:462-467, block_size 256): 8-bit moments with an
# fp32 scale per block of 256, the bytes of bitsandbytes' blockwise state, so planned as
# adamw-8bit; the two differ on small tensors and embeddings (a note says how).
_TORCHAO_8BIT = {"adamw_torch_8bit": "adamw-8bit"}
OPTIMIZER_NAMES = {**_ADAMW, **_BNB, **_OTHER, **_TORCHAO_8BIT}


def read_optimizer(r: Reading, key: str) -> bool:
    """Set ``optimizer`` from ``key`` when it names one the plan models and return True;
    otherwise (absent, or an unmodelled name, reported) False: the caller sets the
    framework's default."""
    name = r.doc.text(key)
    if name is None:
        return False
    plan_name = OPTIMIZER_NAMES.get(name.lower())
    if plan_name is None:
        r.unmodelled_key(key, f"optimizer {shown(name)} is not modelled: planned with the default")
        return False
    r.set("optimizer", plan_name, key)
    if name.lower() in _TORCHAO_8BIT:
        r.notes.append(
            f"{r.doc.origin(key)}: torchao's AdamW8bit, planned as bitsandbytes' 8-bit AdamW "
            "(1 + 4/256 bytes per moment); torchao also quantizes embeddings, which the plan "
            "keeps at 32 bits as the Trainer does for bitsandbytes, and keeps tensors under 4096 "
            "elements in their own dtype, not fp32"
        )
    return True
