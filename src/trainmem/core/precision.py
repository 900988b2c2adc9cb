"""What each precision recipe stores in which dtype, as the frameworks really do it.

- ``fp32``: fp32 weights, gradients, activations.
- ``bf16`` / ``fp16``: the model is loaded in 16 bits; torch.optim.AdamW keeps its moments in the
  parameters' dtype (``torch.zeros_like(p, memory_format=torch.preserve_format)`` in
  torch/optim/adamw.py ``_init_group``), so states are 16-bit too.
- ``bf16-mixed`` / ``fp16-mixed``: full fine-tuning keeps fp32 weights and gradients and runs
  the forward under ``torch.autocast``: linear layers run on 16-bit copies (autocast caches one
  copy of each leaf weight for the whole forward, aten/src/ATen/autocast_mode.cpp
  ``cached_cast``), the residual stream and norms stay fp32 (the embedding output is fp32).
  With LoRA/QLoRA it is the usual Trainer(bf16=True) set-up: a 16-bit frozen base, autocast on.
- QLoRA with PEFT's ``prepare_model_for_kbit_training`` (peft/utils/other.py) casts every
  non-quantized 16-bit parameter (embeddings, lm_head, norms) to fp32, so the residual stream
  becomes fp32; bitsandbytes' ``Linear4bit.forward`` casts its output back to the input dtype.
- A LoRA base loaded in fp32 under autocast (``base_dtype``; TRL's SFTTrainer loads a model
  id in float32, trl/trainer/utils.py create_model_from_path) keeps fp32 weights and residual
  stream; its linears run on 16-bit copies of the frozen weights, made per op (autocast caches
  only weights that require grad).
- LoRA adapters: PEFT upcasts 16-bit adapter weights to fp32 (``autocast_adapter_dtype=True``,
  peft/tuners/tuners_utils.py) and casts each targeted layer's input to the adapter dtype
  (``_cast_input_dtype`` in peft/tuners/lora/layer.py) before ``lora_A``.
- A sharded full fine-tune under a framework's mixed precision (FSDP's MixedPrecisionPolicy,
  DeepSpeed's bf16 / fp16) takes its dtypes from its recipe (trainmem.core.recipes): stored
  parameters, gathered units, gradients before and after the reduce, and the reduce buffer
  can each have their own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainmem.core.plan import Plan
from trainmem.core.recipes import recipe


@dataclass(frozen=True)
class Dtypes:
    weight: int  # bytes per element of the (base) weights as stored
    trainable: int  # bytes of trainable parameters, hence of their (stored) gradients
    state: int  # bytes of one optimizer moment element
    resid: int  # residual stream and norm outputs
    act: int  # linear-layer outputs (attention and MLP intermediates)
    autocast: bool
    # Sharded mixed precision (trainmem.core.recipes); the stored dtypes above otherwise:
    gathered: int = 0  # the unsharded weights the layers compute with (0: ``weight``)
    grad_compute: int = 0  # a gradient as autograd produces it (0: ``trainable``)
    reduce: int = 0  # the gradient reduce buffer (0: ``grad_compute``)

    def __post_init__(self) -> None:
        # frozen: fill the defaults in by hand
        object.__setattr__(self, "gathered", self.gathered or self.weight)
        object.__setattr__(self, "grad_compute", self.grad_compute or self.trainable)
        object.__setattr__(self, "reduce", self.reduce or self.grad_compute)

    def computed(self) -> Dtypes:
        """The dtypes the layers see: the gathered weights and the gradients autograd makes
        (what activations, the loss and autocast's copies depend on)."""
        return replace(self, weight=self.gathered, trainable=self.grad_compute)


def kbit_upcast(plan: Plan) -> bool:
    """Whether PEFT's prepare_model_for_kbit_training casts the quantized model's 16-bit
    parameters to fp32 (peft 0.22.0 utils/other.py:233-238): where the stack runs it."""
    return plan.training.kbit_prep and plan.kbit_prep and plan.tooling.kbit_upcast


def kbit_fp32_stream(plan: Plan) -> bool:
    """Whether the norms, embeddings and lm_head stay in fp32 after it, so that the residual
    stream and the logits are fp32: not where the stack casts them back (Stack.kbit_recast)."""
    return kbit_upcast(plan) and not plan.tooling.kbit_recast


def dtypes(plan: Plan) -> Dtypes:
    found = recipe(plan)
    if found is not None:
        return Dtypes(
            weight=found.params,
            trainable=found.grad_sharded,
            state=found.optimizer_state,
            resid=found.activations,
            act=found.activations,
            autocast=found.autocast,
            gathered=found.gathered,
            grad_compute=found.grad_compute,
            reduce=found.reduce,
        )
    mixed = plan.precision.endswith("-mixed")
    half = plan.precision in ("bf16", "fp16") or (
        mixed and plan.trains_adapter and not plan.fp32_base
    )
    weight = 2 if half else 4
    resid = 2 if half else 4
    act = 2 if (half or mixed) else 4
    if kbit_fp32_stream(plan):
        resid = act = 4  # PEFT's fp32 upcast (Unsloth does none: Stack.kbit_upcast)
    trainable = 4 if plan.trains_adapter else weight  # PEFT keeps adapters in fp32
    if plan.training.quantized_base and plan.tooling.quantized_trainable_16bit:
        trainable = 2  # TRL casts a quantized model's adapters to bf16 (sft_trainer.py)
    return Dtypes(
        weight=weight,
        trainable=trainable,
        state=trainable,
        resid=resid,
        act=act,
        autocast=mixed,
    )
