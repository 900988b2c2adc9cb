"""LLaMA-Factory YAML (hiyouga/LlamaFactory ff6d4d1; src/llamafactory/hparams/), whose
training keys are transformers 5.24's TrainingArguments (Seq2SeqTrainingArguments)."""

from __future__ import annotations

from trainmem.core.errors import PlanError
from trainmem.core.units import shown
from trainmem.sources.configs import deepspeed as ds
from trainmem.sources.configs import framework_fields, optimizers
from trainmem.sources.configs.common import FIELD, ConfigPlan, Doc, ReadFile, Reading
from trainmem.sources.configs.lora import set_modules_to_save, set_targets

FRAMEWORK = "LLaMA-Factory ff6d4d1"
HP = "src/llamafactory/hparams"
MARKERS = (
    "stage",
    "finetuning_type",
    "cutoff_len",
    "template",
    "lora_target",
    "quantization_bit",
    "flash_attn",
    "pure_bf16",
    "disable_gradient_checkpointing",
    "enable_liger_kernel",
    "dataset_dir",
    "lora_rank",
)
_ATTN = {"disabled": "eager", "sdpa": "sdpa", "fa2": "flash-attention-2"}
_UNMODELLED = {
    "use_unsloth": "unsloth kernels",
    "use_unsloth_gc": "unsloth's checkpointing",
    "use_galore": "GaLore projections",
    "use_apollo": "APOLLO projections",
    "use_badam": "BAdam block updates",
    "use_adam_mini": "Adam-mini states",
    "use_muon": "Muon states",
    "use_llama_pro": "LLaMA Pro expanded blocks",
    "use_dora": "DoRA magnitude vectors",
    "pissa_init": "PiSSA initialisation",
    "shift_attn": "shifted sparse attention",
    "mixture_of_depths": "mixture of depths",
    "upcast_layernorm": "fp32 layer norms",
    "upcast_lmhead_output": "fp32 lm_head output",
    "use_kt": "KTransformers offload",
    "sequence_parallel_size": "sequence parallelism",
    "fp8": "fp8 training",
    "fsdp": "FSDP sharding (issue 10)",
    "fsdp_config": "FSDP sharding (issue 10)",
    "torch_compile": "compile workspace",
    # Ray workers, one GPU each, train data-parallel under USE_RAY=1 (train/tuner.py:308)
    "ray_num_workers": "Ray's data-parallel workers; planned as one process",
}
# Keys of the Megatron trainers LLaMA-Factory runs under USE_MCA=1 (mcore_adapter's
# TrainingArguments) or USE_MEGATRON_BRIDGE=1 (hparams/megatron_bridge_args.py:32-142),
# chosen by the environment, not the file (hparams/parser.py:395-407): the plan models the
# Hugging Face Trainer, not Megatron-Core's tensor, pipeline and expert parallel step.
_MEGATRON = frozenset(
    {
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "virtual_pipeline_model_parallel_size",
        "expert_model_parallel_size",
        "context_parallel_size",
        "sequence_parallel",
        "recompute_granularity",
        "recompute_method",
        "use_distributed_optimizer",
        "overlap_param_gather",
        "overlap_grad_reduce",
        "moe_token_dispatcher_type",
        "megatron_pretrained_checkpoint",
    }
)
_KNOWN = (
    *MARKERS,
    *_UNMODELLED,
    "model_name_or_path",
    "quantization_method",
    "quantization_type",
    "double_quantization",
    "lora_alpha",
    "lora_dropout",
    "additional_target",
    "per_device_train_batch_size",
    "bf16",
    "fp16",
    "optim",
    "packing",
    "neat_packing",
    "deepspeed",
)


def looks_like(doc: Doc) -> int:
    return sum(k in doc.data for k in MARKERS) * 2


def read(doc: Doc, read_file: ReadFile) -> ConfigPlan:
    r = Reading(doc, FRAMEWORK)
    _not_megatron(doc)
    stage = (doc.text("stage") or "sft").lower()  # finetuning_args.py:460
    if stage not in ("sft", "pt"):
        raise PlanError(
            FIELD,
            f"{doc.where('stage')}: stage: {stage} is not planned: only sft and pt are "
            "(reward models, PPO, DPO and KTO hold value heads, reference models or pairs)",
        )
    r.values["stack"], r.origins["stack"] = "llama-factory", f"{doc.name}: LLaMA-Factory keys"
    r.explicit.add("stack")
    model = doc.text("model_name_or_path")
    if model:
        r.set("model", model, "model_name_or_path")
    else:
        r.notes.append(f"{doc.name} names no model_name_or_path: the plan's model is --model's")
    _method(r)
    r.keyed("seq_len", "cutoff_len", doc.integer, 2048, f"{HP}/data_args.py:46")
    r.keyed(
        "batch", "per_device_train_batch_size", doc.integer, 8, "transformers/training_args.py:777"
    )
    disabled = doc.flag("disable_gradient_checkpointing")
    if disabled is None:  # on unless disabled (model/model_utils/checkpointing.py:184)
        r.default("grad_ckpt", True, f"{HP}/model_args.py:145")
    else:
        r.set("grad_ckpt", not disabled, "disable_gradient_checkpointing")
    _precision(r)
    if not optimizers.read_optimizer(r, "optim"):
        r.default("optimizer", "adamw", "transformers/training_args.py:806-814, torch >= 2.8")
    _packing(r, stage)
    _attention(r)
    if doc.flag("enable_liger_kernel"):  # model/model_utils/liger_kernel.py:97-101: FLCE
        r.set("loss", "fused", "enable_liger_kernel")
    r.unmodelled_present(_UNMODELLED)
    _deepspeed(r, read_file)
    r.typos(_KNOWN, framework_fields.LLAMA_FACTORY | framework_fields.TRAINING_ARGUMENTS)
    return r.result()


def _not_megatron(doc: Doc) -> None:
    key = next((str(k) for k in doc.data if k in _MEGATRON), None)
    if key is not None:
        raise PlanError(
            FIELD,
            f"{doc.where(key)}: {key}: a Megatron key: this LLaMA-Factory config trains under "
            "Megatron-Core (USE_MCA=1 or USE_MEGATRON_BRIDGE=1), whose tensor, pipeline and "
            "expert parallel step trainmem does not plan",
        )


def _method(r: Reading) -> None:
    doc = r.doc
    kind = (doc.text("finetuning_type") or "lora").lower()
    if kind not in ("lora", "full"):
        raise doc.error("finetuning_type", f"{kind} is not planned (lora or full)")
    bits = doc.integer("quantization_bit")
    if bits is not None and kind != "lora":
        raise doc.error("quantization_bit", "quantization trains only with LoRA")
    if kind == "full":
        if doc.has("finetuning_type"):
            r.set("method", "full", "finetuning_type")
        return
    if bits is None:
        if doc.has("finetuning_type"):
            r.set("method", "lora", "finetuning_type")
        else:
            r.default("method", "lora", f"{HP}/finetuning_args.py:464")
    else:
        _quantized(r, bits)
    _lora(r)


def _quantized(r: Reading, bits: int) -> None:
    doc = r.doc
    method = (doc.text("quantization_method") or "bnb").lower()  # model_args.py:279
    if method != "bnb":
        raise doc.error("quantization_method", f"{method} is not planned (bnb)")
    r.set("method", "qlora", "quantization_bit")
    if bits == 8:
        r.set("quant", "int8", "quantization_bit")
        return
    if bits != 4:
        raise doc.error("quantization_bit", f"{bits} bits are not planned with bnb (4 or 8)")
    quant = (doc.text("quantization_type") or "").lower()
    if quant:
        if quant not in ("nf4", "fp4"):
            raise doc.error("quantization_type", f"{shown(quant)} is not nf4 or fp4")
        r.set("quant", quant, "quantization_type")
    else:
        r.default("quant", "nf4", f"{HP}/model_args.py:287")
    r.keyed("double_quant", "double_quantization", doc.flag, True, f"{HP}/model_args.py:291")


def _lora(r: Reading) -> None:
    doc = r.doc
    r.keyed("lora_rank", "lora_rank", doc.integer, 8, f"{HP}/finetuning_args.py:77")
    alpha = doc.number("lora_alpha")
    if alpha is None:  # finetuning_args.py:587: lora_alpha or lora_rank * 2
        r.default("lora_alpha", 2.0 * r.values["lora_rank"], f"{HP}/finetuning_args.py:587")
    else:
        r.set("lora_alpha", alpha, "lora_alpha")
    r.keyed("lora_dropout", "lora_dropout", doc.number, 0.0, f"{HP}/finetuning_args.py:73")
    names = doc.names("lora_target")
    if names:
        set_targets(r, "lora_target", names)
    else:
        r.default("lora_targets", "all-linear", f"{HP}/finetuning_args.py:81 all")
    saved = doc.names("additional_target")
    if saved:
        set_modules_to_save(r, "additional_target", saved)


def _precision(r: Reading) -> None:
    """Trainable parameters are upcast to fp32 unless pure_bf16 or use_badam
    (model/adapter.py:337-349), and bf16/fp16 run the Trainer's autocast: full fine-tuning is
    then fp32 weights under autocast, LoRA a 16-bit base (torch_dtype auto,
    model/loader.py:154) under autocast. Without the upcast the weights stay in the compute
    dtype the model loads in: fp16 with fp16, else bf16 (hparams/parser.py:640-643; with
    neither, bf16 for a bf16 checkpoint on a bf16 GPU, model/patcher.py:375-379)."""
    doc = r.doc
    adapter = r.values.get("method") in ("lora", "qlora")
    if doc.flag("pure_bf16"):
        r.set("precision", "bf16", "pure_bf16")
    elif doc.flag("use_badam"):
        r.set(
            "precision",
            "fp16" if doc.flag("fp16") and not doc.flag("bf16") else "bf16",
            "use_badam",
        )
    elif doc.flag("bf16"):
        r.set("precision", "bf16-mixed", "bf16")
    elif doc.flag("fp16"):
        r.set("precision", "fp16-mixed", "fp16")
    else:  # no autocast: fp32 trainable weights; a LoRA base in the checkpoint's 16 bits
        r.default(
            "precision",
            "bf16" if adapter else "fp32",
            "transformers/training_args.py:874, :880; model/adapter.py:337-349",
        )


def _packing(r: Reading, stage: str) -> None:
    doc = r.doc
    for key in ("neat_packing", "packing"):
        value = doc.flag(key)
        if value:
            r.set("packing", True, key)
            return
    if doc.has("packing"):
        r.set("packing", False, "packing")
    else:  # hparams/parser.py:645: on for stage pt
        r.default("packing", stage == "pt", f"{HP}/data_args.py:108, parser.py:645")


def _attention(r: Reading) -> None:
    doc = r.doc
    value = (doc.text("flash_attn") or "auto").lower()  # model_args.py:117
    if value == "auto":
        return  # leaves transformers' choice, sdpa (model/model_utils/attention.py:65)
    attn = _ATTN.get(value)
    if attn is None:
        r.unmodelled_key("flash_attn", f"{value} is not modelled; planned as sdpa")
    else:
        r.set("attn", attn, "flash_attn")


def _deepspeed(r: Reading, read_file: ReadFile) -> None:
    doc = r.doc
    value = doc.lookup("deepspeed")
    if isinstance(value, str) and value.strip():
        r.merged(read_file(r.named("deepspeed", value.strip()), doc.origin("deepspeed")))
    elif isinstance(value, dict):
        r.merged(ds.read(Doc(doc.name, value, {}, doc.path)))
