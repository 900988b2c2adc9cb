"""Training stacks, one record each: what runs around the model and which of its defaults
change memory. Every other module asks the record (``stack_record(plan.stack)``) instead of
comparing names, as with training methods (trainmem.core.methods).

Read from source (docs/research/training-stacks.md has the file:line of each claim): the
Hugging Face Trainer of transformers 5.24, TRL 1.16's SFTTrainer, axolotl 067b021 and
LLaMA-Factory ff6d4d1 (both run the Hugging Face Trainer), a hand-written PyTorch loop, and
Unsloth 015bdef (over TRL's SFTTrainer; its record cites its own files), and mlx-lm 0.32.2
on MLX 0.32 (Apple's own framework: its own step model, trainmem.core.mlx_step).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainmem.core.errors import record_named


@dataclass(frozen=True)
class Stack:
    name: str
    label: str  # the tool and the version read
    # A hand-written loop keeps ``out`` (logits, KV cache) alive through backward and the
    # optimizer step; Trainer.compute_loss returns the loss alone (transformers/trainer.py).
    keeps_output: bool
    # The loss when the plan says "auto": TRL's SFTTrainer always scores through its chunked
    # head (trl/trainer/sft_trainer.py compute_loss, loss_type "nll"); the others compute
    # transformers' ForCausalLMLoss on the full logits.
    default_loss: str
    # SFTTrainer loads a model given by id or path in float32 (trl/trainer/utils.py
    # create_model_from_path: dtype defaults to "float32") and runs it under bf16 autocast.
    fp32_base_under_autocast: bool
    # The Trainer gives every nn.Embedding 32-bit bitsandbytes optimizer state
    # (transformers/trainer.py, the optim_bits=32 override for 8-bit optimizers).
    embedding_32bit_states: bool
    # SFTTrainer casts trainable parameters to bf16 on a quantized model
    # (trl/trainer/sft_trainer.py, after get_peft_model, except DoRA's magnitude).
    quantized_trainable_16bit: bool
    # LLaMA-Factory casts trainable parameters to fp32 unless pure_bf16
    # (src/llamafactory/model/adapter.py, _setup_*_tuning).
    upcast_trainable: bool
    # LLaMA-Factory checkpoints with use_reentrant=True (model_args.py use_reentrant_gc,
    # model_utils/checkpointing.py); transformers 5.24 defaults to non-reentrant
    # (modeling_utils.py gradient_checkpointing_enable), as TRL and axolotl keep it.
    reentrant_ckpt: bool
    defaults: str  # what this stack does by default, shown beside the estimate
    # Who prepares an FSDP2 full fine-tune under mixed precision, by recipe
    # (trainmem.core.recipes): accelerate's fsdp2_prepare_model upcasts trainable parameters
    # to fp32 (Trainer, TRL, LLaMA-Factory); axolotl replaces it with its own, which does not
    # (monkeypatch/accelerate/fsdp2.py); a hand-written loop calls fully_shard itself.
    fsdp2_recipe: str = "fsdp2-accelerate"
    # What --ckpt-offload does: "torch" keeps every checkpointed input in host RAM
    # (torch.autograd.graph.save_on_cpu); "unsloth" is Unsloth's use_gradient_checkpointing=
    # "unsloth" (trainmem.core.offload), which keeps the last layer's input and a reload buffer
    # on the GPU.
    ckpt_offload_kind: str = "torch"
    # Which fused cross-entropy loss "fused" is: Liger's, or Unsloth's own (trainmem.core.losses).
    fused_loss: str = "liger"
    # Whether the stack's QLoRA path runs PEFT's prepare_model_for_kbit_training, which casts
    # every 16-bit parameter of a quantized model to fp32 (peft 0.22.0 utils/other.py:233-238):
    # the Trainer's usual QLoRA scripts call it, and axolotl does (trainmem.sources.configs
    # .axolotl _kbit_prep). TRL 1.16's SFTTrainer calls nothing of the kind
    # (trl/trainer/sft_trainer.py:805-912, removed in TRL 0.26), LLaMA-Factory runs its own
    # prepare_model_for_training, which upcasts only norms and only with upcast_layernorm
    # (model/model_utils/checkpointing.py:163-205), and Unsloth its own, which casts nothing it
    # freezes.
    kbit_upcast: bool = True
    # FSDP1's BackwardPrefetch when the plan says auto: transformers 5.25 passes
    # fsdp_config's backward_prefetch, else "NO_PREFETCH" (training_args.py:2875), which
    # accelerate 1.16 turns into None (utils/dataclasses.py:1769-1770); a loop's
    # FullyShardedDataParallel keeps torch's default, BACKWARD_PRE.
    fsdp1_prefetch: str = "none"
    # Whether the stack casts the norms, embed_tokens and lm_head back to the training dtype
    # after that upcast: axolotl does for any adapter outside QLoRA + FSDP (axolotl 067b021
    # loaders/model.py:455-477 _configure_embedding_dtypes, should_convert; "norm" in a
    # module's name, utils.py:231-239 get_linear_embedding_layers), so only the rest (biases,
    # routers, unquantized experts) stays fp32 and the residual stream is 16-bit.
    kbit_recast: bool = False
    # Whether that call is the user's own (a script around the Trainer, a loop), so that
    # leaving it out is advice to give; axolotl makes it itself, and no key turns it off.
    kbit_prep_in_script: bool = True
    # Unsloth's LoRA autograd functions replace PEFT's layers on its fast models
    # (trainmem.core.activations unsloth_lora_paths).
    fused_lora: bool = False
    # QLoRA's 4-bit weights in a floating storage dtype, which FSDP2 can shard: axolotl
    # (loaders/model.py bnb_4bit_quant_storage bfloat16) and LLaMA-Factory
    # (model_utils/quantization.py: the compute dtype, "crucial for fsdp+qlora") set it, and a
    # hand-written fully_shard needs it; the Trainer and TRL leave bitsandbytes' uint8, which
    # accelerate keeps out of FSDP2's sharding (trainmem.core.states.unsharded_4bit_bytes).
    bnb_float_storage: bool = True
    # The framework the step runs in: "torch" (the step model of trainmem.core.estimator) or
    # "mlx" (trainmem.core.mlx_step: lazy evaluation, MLX's allocator, its quantization).
    engine: str = "torch"


TRAINER = Stack(
    "trainer",
    "Hugging Face Trainer (transformers 5.24)",
    keeps_output=False,
    default_loss="standard",
    fp32_base_under_autocast=False,
    embedding_32bit_states=True,
    quantized_trainable_16bit=False,
    upcast_trainable=False,
    reentrant_ckpt=False,
    defaults="the output is dropped before backward; fused AdamW; the loss upcasts the full "
    "logits to fp32",
    bnb_float_storage=False,
)
TRL = Stack(
    "trl",
    "TRL 1.16 SFTTrainer",
    keeps_output=False,
    default_loss="chunked",
    fp32_base_under_autocast=True,
    embedding_32bit_states=True,
    quantized_trainable_16bit=True,
    upcast_trainable=False,
    reentrant_ckpt=False,
    defaults="a model given by id loads in fp32 under bf16 autocast; the loss is TRL's "
    "chunked head (no full logits); checkpointing on; max_length 1024",
    bnb_float_storage=False,  # ModelConfig bnb_4bit_quant_storage: None, bitsandbytes' uint8
    kbit_upcast=False,
)
AXOLOTL = replace(
    TRAINER,
    name="axolotl",
    label="axolotl 067b021 (Hugging Face Trainer)",
    fsdp2_recipe="fsdp2-axolotl",
    bnb_float_storage=True,
    kbit_prep_in_script=False,
    kbit_recast=True,
    defaults="sequence_len 512, micro_batch_size 1, adamw_torch_fused, checkpointing off; "
    "QLoRA is NF4 with double quant; the Liger and Cut Cross-Entropy plugins fuse the loss",
)
LLAMA_FACTORY = replace(
    TRAINER,
    name="llama-factory",
    label="LLaMA-Factory ff6d4d1 (Hugging Face Trainer)",
    upcast_trainable=True,
    reentrant_ckpt=True,
    bnb_float_storage=True,
    kbit_upcast=False,
    defaults="trainable parameters upcast to fp32 unless pure_bf16; checkpointing on "
    "(reentrant); cutoff_len 2048; lora_rank 8; enable_liger_kernel fuses the loss",
)
LOOP = Stack(
    "loop",
    "hand-written PyTorch loop",
    keeps_output=True,
    default_loss="standard",
    fp32_base_under_autocast=False,
    embedding_32bit_states=False,
    quantized_trainable_16bit=False,
    upcast_trainable=False,
    reentrant_ckpt=False,
    defaults="out = model(**batch) stays alive through backward and optimizer.step()",
    fsdp2_recipe="fsdp2-torch",
    fsdp1_prefetch="backward-pre",
)

# Unsloth at 015bdef (unslothai/unsloth) with unsloth_zoo at ce232d6, read from source: it needs
# a GPU, so none of this is measured here. It runs TRL's SFTTrainer (the TRL record) with:
# - use_gradient_checkpointing="unsloth" (FastLlamaModel.get_peft_model's default):
#   unsloth_zoo/gradient_checkpointing.py patch_unsloth_smart_gradient_checkpointing swaps
#   torch's checkpoint for unsloth_checkpoint, which forces use_reentrant=True
#   (UnslothCheckpointFunction); below 512 tokens plain checkpointing
#   (unsloth/models/_utils.py apply_unsloth_gradient_checkpointing).
# - its fused cross-entropy: the model's forward calls unsloth_fused_ce_loss
#   (unsloth/models/llama.py CausalLM_fast_forward) and Unsloth pins SFTConfig's loss_type to
#   "nll" so TRL's chunked head does not bypass it (unsloth/models/rl.py
#   _pin_pristine_sft_loss_type).
# - no fp32 upcast of a quantized model: FastLlamaModel.patch_peft_model calls Unsloth's
#   prepare_model_for_kbit_training (unsloth/models/_utils.py), which is unsloth_zoo's
#   prepare_model_for_training (training_utils.py): LoRA A/B in fp32, everything frozen
#   left in its loaded dtype; and it deletes SFTTrainer's bf16 cast of a quantized model's
#   adapters (unsloth/models/rl.py: "if _is_quantized_model:" -> "if False:").
# - its LoRA kernels (unsloth/kernels/fast_lora.py) and RMSNorm kernel.
# - a model it loads itself in bf16 (fp16 without bf16 support), so no fp32 base; 4-bit as NF4
#   with double quant (unsloth/models/llama.py FastLlamaModel.from_pretrained
#   BitsAndBytesConfig), often from a pre-quantized or "dynamic 4-bit" checkpoint whose
#   quantization_config keeps some linears in 16-bit (ModelSpec.unquantized_elements, within
#   bnb_kept_elements).
UNSLOTH = replace(
    TRL,
    name="unsloth",
    label="Unsloth 015bdef, unsloth_zoo ce232d6 (TRL 1.16 SFTTrainer)",
    default_loss="fused",
    fp32_base_under_autocast=False,
    quantized_trainable_16bit=False,
    reentrant_ckpt=True,
    ckpt_offload_kind="unsloth",
    fused_loss="unsloth",
    kbit_upcast=False,
    fused_lora=True,
    defaults="derived from source, not measured (Unsloth needs a GPU); fused LoRA kernels; "
    "its fused cross-entropy (no full logits); no fp32 upcast of the quantized model; "
    'use_gradient_checkpointing="unsloth" (its default) is --ckpt-offload; padding-free '
    "batching on by default (rows as long as their examples)",
)

# mlx-lm 0.32.2 (ml-explore/mlx-lm) on MLX 0.32: `mlx_lm.lora` (mlx_lm/lora.py train_model,
# mlx_lm/tuner/trainer.py train). None of the torch fields above apply: its step is modelled
# by trainmem.core.mlx_step, which cites each part.
MLX = replace(
    LOOP,
    name="mlx",
    label="mlx-lm 0.32.2 on MLX 0.32 (mlx_lm.lora)",
    keeps_output=False,
    engine="mlx",
    defaults="adapters (or a full fine-tune) on the last 16 layers only (--num-layers); rank "
    "8, scale 20; Adam; batch 4, max_seq_length 2048; no checkpointing; LoRA weights in fp32; "
    "QLoRA is a model MLX quantized itself (affine, 4-bit, groups of 64)",
)

STACK_RECORDS = {s.name: s for s in (TRAINER, TRL, AXOLOTL, LLAMA_FACTORY, LOOP, UNSLOTH, MLX)}
STACKS = tuple(STACK_RECORDS)


def stack_record(name: str) -> Stack:
    """The record of ``name``; a PlanError naming the known stacks otherwise."""
    return record_named(STACK_RECORDS, "stack", name)
