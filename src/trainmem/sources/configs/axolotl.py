"""axolotl YAML (axolotl-ai-cloud/axolotl 067b021; the pydantic schema under
src/axolotl/utils/schemas/, the loaders under src/axolotl/loaders/)."""

from __future__ import annotations

from trainmem.core.errors import PlanError
from trainmem.core.units import shown
from trainmem.sources.configs import deepspeed as ds
from trainmem.sources.configs import optimizers
from trainmem.sources.configs.common import FIELD, ConfigPlan, Doc, ReadFile, Reading, named_path
from trainmem.sources.configs.lora import set_modules_to_save, set_targets

FRAMEWORK = "axolotl 067b021"
SCHEMAS = "src/axolotl/utils/schemas"
MARKERS = (
    "base_model",
    "micro_batch_size",
    "sequence_len",
    "adapter",
    "lora_target_linear",
    "sample_packing",
    "val_set_size",
    "num_epochs",
    "pad_to_sequence_len",
    "lora_r",
)
# Legacy boolean attention flags, mapped as normalize_attn_implementation does
# (schemas/enums.py:118-125, schemas/config.py:1527-1567).
_LEGACY_ATTN = {
    "xformers_attention": "xformers",
    "sage_attention": "sage",
    "flex_attention": "flex_attention",
    "flash_attention": "flash_attention_2",
    "sdp_attention": "sdpa",
    "eager_attention": "eager",
}
_ATTN = {
    "sdpa": "sdpa",
    "eager": "eager",
    "flash_attention_2": "flash-attention-2",
    "flex_attention": "flex",
}
LOADERS = "src/axolotl/loaders/model.py"
_UNMODELLED = {
    "fsdp": "the deprecated fsdp: list form; use fsdp_config",
    "fsdp_config.activation_checkpointing": "FSDP's own activation checkpointing",
    "fsdp_config.mixed_precision_policy": "an FSDP mixed-precision policy",
    "torch_compile": "compile workspace",
    "chunked_cross_entropy": "axolotl's chunked CE still builds bf16 logits",
    "context_parallel_size": "context parallelism",
    "sequence_parallel_degree": "sequence parallelism",
    "tensor_parallel_size": "tensor parallelism",
    "lora_mlp_kernel": "axolotl's LoRA kernels",
    "lora_qkv_kernel": "axolotl's LoRA kernels",
    "lora_o_kernel": "axolotl's LoRA kernels",
    "peft_use_dora": "DoRA magnitude vectors",
    "lora_target_parameters": "LoRA on parameters (MoE experts)",
    "layer_offloading": "layer offloading",
    "fp8": "fp8 training",
    "relora": "ReLoRA",
    "s2_attention": "shifted sparse attention",
    "unsloth_lora_mlp": "unsloth kernels",
    "unsloth_lora_qkv": "unsloth kernels",
    "unsloth_lora_o": "unsloth kernels",
    "unsloth_cross_entropy_loss": "unsloth kernels",
    "liger_rope": "Liger layer kernels",
    "liger_rms_norm": "Liger layer kernels",
    "liger_layer_norm": "Liger layer kernels",
    "liger_glu_activation": "Liger layer kernels",
    "liger_swiglu": "Liger layer kernels",
    "liger_cross_entropy": "Liger's (unfused) cross-entropy",
    "gptq": "a GPTQ-quantized base",
}
_KNOWN = (
    *MARKERS,
    *_LEGACY_ATTN,
    *_UNMODELLED,
    "load_in_4bit",
    "load_in_8bit",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "lora_modules_to_save",
    "gradient_checkpointing",
    "activation_offloading",
    "bf16",
    "fp16",
    "bfloat16",
    "float16",
    "optimizer",
    "attn_implementation",
    "deepspeed",
    "fsdp_config",
    "fsdp_version",
    "plugins",
    "liger_fused_linear_cross_entropy",
    "cut_cross_entropy",
    "bnb_config_kwargs",
    "revision_of_model",
)


def looks_like(doc: Doc) -> int:
    return sum(k in doc.data for k in MARKERS) * 2


def read(doc: Doc, read_file: ReadFile) -> ConfigPlan:
    r = Reading(doc, FRAMEWORK)
    _stage(doc)
    r.values["stack"], r.origins["stack"] = "axolotl", f"{doc.name}: axolotl keys"
    r.explicit.add("stack")
    model = doc.text("base_model")
    if model:
        revision = doc.text("revision_of_model")
        r.set(
            "model", f"{model}@{revision}" if revision and "@" not in model else model, "base_model"
        )
    else:
        r.notes.append(f"{doc.name} names no base_model: the plan's model is --model's")
    _method(r)
    r.keyed("seq_len", "sequence_len", doc.integer, 512, f"{SCHEMAS}/config.py:665")
    r.keyed("batch", "micro_batch_size", doc.integer, 1, f"{SCHEMAS}/training.py:77")
    r.keyed("packing", "sample_packing", doc.flag, False, f"{SCHEMAS}/config.py:688")
    _checkpointing(r)
    _precision(r)
    if not optimizers.read_optimizer(r, "optimizer"):
        r.default("optimizer", "adamw", f"{SCHEMAS}/training.py:122 adamw_torch_fused")
    _attention(r)
    _loss(r)
    _fsdp(r)
    r.unmodelled_present(_UNMODELLED)
    _deepspeed(r, read_file)
    r.typos(_KNOWN)
    return r.result()


def _fsdp(r: Reading) -> None:
    """``fsdp_config`` (src/axolotl/utils/schemas/fsdp.py, 067b021), handed to accelerate's FSDP
    plugin as environment variables (utils/trainer.py setup_fsdp_envs): FSDP_VERSION only
    for version 2 (else accelerate's 1), FSDP_RESHARD_AFTER_FORWARD only when true (else
    accelerate's full shard), offload_params, cpu_ram_efficient_loading."""
    doc = r.doc
    config = doc.lookup("fsdp_config")
    if not isinstance(config, dict) or not config:  # axolotl sets up FSDP only when given
        return
    r.set("strategy", "fsdp", "fsdp_config")
    for key in ("fsdp_version", "fsdp_config.fsdp_version", "fsdp_config.version"):
        version = doc.integer(key)
        if version is not None:
            if version not in (1, 2):
                raise doc.error(key, f"{version} is not 1 or 2")
            r.set("fsdp_version", version, key)
            break
    else:
        r.default("fsdp_version", 1, "accelerate/utils/dataclasses.py:1831 (no FSDP_VERSION)")
    if doc.flag("fsdp_config.reshard_after_forward") is False:
        r.set("fsdp", "shard-grad-op", "fsdp_config.reshard_after_forward")
    elif doc.flag("fsdp_config.reshard_after_forward"):
        r.set("fsdp", "full-shard", "fsdp_config.reshard_after_forward")
    else:
        r.default("fsdp", "full-shard", "accelerate/utils/dataclasses.py:1859")
    if doc.flag("fsdp_config.offload_params"):
        r.set("offload", "params", "fsdp_config.offload_params")
    efficient = doc.flag("fsdp_config.cpu_ram_efficient_loading")
    if efficient is not None:
        r.set("ram_efficient_loading", efficient, "fsdp_config.cpu_ram_efficient_loading")


def _stage(doc: Doc) -> None:
    rl = doc.text("rl")
    if rl:
        raise PlanError(
            FIELD,
            f"{doc.where('rl')}: rl: {rl} is not planned: only supervised fine-tuning is "
            "(a reference model and chosen/rejected pairs are not modelled)",
        )
    for key in ("reward_model", "process_reward_model"):
        if doc.flag(key):
            raise PlanError(
                FIELD, f"{doc.where(key)}: {key}: reward modelling is not planned (value head)"
            )


def _method(r: Reading) -> None:
    doc = r.doc
    adapter = (doc.text("adapter") or "").lower()
    four, eight = doc.flag("load_in_4bit"), doc.flag("load_in_8bit")
    if not adapter:
        if four or eight:  # schemas/peft.py validate_adapter refuses this
            key = "load_in_4bit" if four else "load_in_8bit"
            raise doc.error(key, "a quantized base needs an adapter (lora or qlora)")
        r.default("method", "full", f"{SCHEMAS}/peft.py:41 adapter None")
        return
    if adapter == "qlora":
        if eight or not four:  # schemas/peft.py validate_qlora
            raise doc.error("adapter", "qlora needs load_in_4bit: true (and not load_in_8bit)")
        r.set("method", "qlora", "adapter")
        _quant(r)
        _kbit_prep(r, adapter)
    elif adapter == "lora" and eight:  # loaders/model.py:740-744: LoRA on LLM.int8
        r.set("method", "qlora", "load_in_8bit")
        r.set("quant", "int8", "load_in_8bit")
        _kbit_prep(r, adapter)
    elif adapter == "lora":
        r.set("method", "lora", "adapter")
        if four:
            r.notes.append(
                f"{doc.origin('load_in_4bit')}: ignored with adapter lora: axolotl quantizes "
                "to 4 bits only for adapter qlora (src/axolotl/loaders/model.py:712)"
            )
    else:
        raise doc.error("adapter", f"{shown(adapter)} is not planned (lora or qlora)")
    _lora(r)


def _kbit_prep(r: Reading, adapter: str) -> None:
    """axolotl runs PEFT's prepare_model_for_kbit_training on a quantized LoRA / QLoRA base
    unless QLoRA runs under FSDP or FSDP loads RAM-efficiently (src/axolotl/loaders/model.py
    _prepare_model_for_quantization, 067b021; it also skips it under ZeRO-3 and for LoRA on
    Qwen, which this reader cannot see)."""
    fsdp = r.doc.lookup("fsdp_config")
    efficient = isinstance(fsdp, dict) and bool(fsdp.get("cpu_ram_efficient_loading"))
    if (isinstance(fsdp, dict) and fsdp and adapter == "qlora") or efficient:
        r.default("kbit_prep", False, f"{LOADERS} _prepare_model_for_quantization, under FSDP")
    else:
        r.default("kbit_prep", True, f"{LOADERS} _prepare_model_for_quantization")


def _quant(r: Reading) -> None:
    """NF4 with double quant (src/axolotl/loaders/model.py:712-720) unless
    bnb_config_kwargs overrides them (:733-734)."""
    doc = r.doc
    key = "bnb_config_kwargs.bnb_4bit_quant_type"
    quant = (doc.text(key) or "").lower()
    if quant:
        if quant not in ("nf4", "fp4"):
            raise doc.error(key, f"{shown(quant)} is not nf4 or fp4")
        r.set("quant", quant, key)
    else:
        r.default("quant", "nf4", "src/axolotl/loaders/model.py:719")
    key = "bnb_config_kwargs.bnb_4bit_use_double_quant"
    r.keyed("double_quant", key, doc.flag, True, "src/axolotl/loaders/model.py:718")


def _lora(r: Reading) -> None:
    doc = r.doc
    # None is passed to PEFT as r=None / lora_alpha=None (loaders/adapter.py:188-190);
    # planned at PEFT's own defaults.
    r.keyed("lora_rank", "lora_r", doc.integer, 8, "lora_r None; peft/tuners/lora/config.py:632")
    r.keyed(
        "lora_alpha",
        "lora_alpha",
        doc.number,
        8.0,
        "lora_alpha None; peft/tuners/lora/config.py:652",
    )
    r.keyed("lora_dropout", "lora_dropout", doc.number, 0.0, f"{SCHEMAS}/peft.py:80")
    if doc.flag("lora_target_linear"):
        r.set("lora_targets", "all-linear", "lora_target_linear")
    else:
        names = doc.names("lora_target_modules")
        if not names:  # loaders/adapter.py:171 passes [] to PEFT, which then targets nothing
            raise doc.error(
                "lora_target_modules", "absent, and lora_target_linear is not true: no layer"
            )
        set_targets(r, "lora_target_modules", names)
    saved = doc.names("lora_modules_to_save")
    if saved:
        set_modules_to_save(r, "lora_modules_to_save", saved)


def _checkpointing(r: Reading) -> None:
    doc = r.doc
    value = doc.lookup("gradient_checkpointing")
    offloading = doc.lookup("activation_offloading")
    if value is None:
        r.default("grad_ckpt", False, f"{SCHEMAS}/config.py:600")
    elif value == "offload":  # schemas/validation.py:1426-1435: GC + activation_offloading
        r.set("grad_ckpt", True, "gradient_checkpointing")
        r.set("ckpt_offload", True, "gradient_checkpointing")
    elif value == "offload_disk":
        r.set("grad_ckpt", True, "gradient_checkpointing")
        r.unmodelled_key("gradient_checkpointing", "offload to disk")
    else:
        r.set("grad_ckpt", doc.flag("gradient_checkpointing"), "gradient_checkpointing")
    if offloading in (None, False) or value in ("offload", "offload_disk"):
        return
    if offloading in (True, "legacy") and r.values.get("grad_ckpt"):
        r.set("ckpt_offload", True, "activation_offloading")
    else:
        r.unmodelled_key("activation_offloading", f"{shown(offloading)} without checkpointing")


def _precision(r: Reading) -> None:
    """Loaded in bf16 when bf16 or bfloat16, fp16 when fp16 or float16 (or load_in_8bit),
    else fp32 (src/axolotl/utils/config/__init__.py:190-196); bf16/fp16 also turn on the
    Trainer's autocast, which over a 16-bit LoRA base is "-mixed" in trainmem's terms."""
    doc = r.doc
    adapter = r.values.get("method") in ("lora", "qlora")
    for key, dtype in (("bfloat16", "bf16"), ("float16", "fp16")):  # pure 16-bit, no AMP
        if doc.flag(key):
            r.set("precision", dtype, key)
            return
    bf16 = doc.lookup("bf16")
    if doc.flag("fp16") and bf16 in (None, "auto", False):
        r.set("precision", "fp16-mixed" if adapter else "fp16", "fp16")
        return
    precision = "bf16-mixed" if adapter else "bf16"
    if bf16 is None or bf16 == "auto":  # config.py:559; resolve_dtype picks bf16 on a bf16 GPU
        r.default("precision", precision, f"{SCHEMAS}/config.py:559 bf16 auto, a bf16 GPU")
    elif doc.flag("bf16"):
        r.set("precision", precision, "bf16")
    else:
        r.set("precision", "fp32", "bf16")


def _attention(r: Reading) -> None:
    doc = r.doc
    key = "attn_implementation"
    impl = doc.text(key)
    if not impl:
        key = next((k for k in _LEGACY_ATTN if doc.flag(k)), "")
        impl = _LEGACY_ATTN.get(key)
    if not impl:
        return  # None: transformers' default, sdpa
    attn = _ATTN.get(impl)
    if attn is None:
        r.unmodelled_key(key, f"attention {shown(impl)}; planned as sdpa")
    else:
        r.set("attn", attn, key)


def _loss(r: Reading) -> None:
    doc = r.doc
    plugins = doc.names("plugins") or []
    if (
        any("cut_cross_entropy" in p for p in plugins)
        and doc.flag("cut_cross_entropy") is not False
    ):
        r.set("loss", "fused", "plugins")  # integrations/cut_cross_entropy/args.py:33: on
    elif any("liger" in p for p in plugins) and doc.flag("liger_fused_linear_cross_entropy"):
        r.set("loss", "fused", "liger_fused_linear_cross_entropy")


def _deepspeed(r: Reading, read_file: ReadFile) -> None:
    doc = r.doc
    value = doc.lookup("deepspeed")
    if isinstance(value, str) and value.strip():
        r.merged(read_file(named_path(doc, "deepspeed", value.strip()), doc.origin("deepspeed")))
    elif isinstance(value, dict):
        prefix = "deepspeed."
        lines = {k[len(prefix) :]: n for k, n in doc.lines.items() if k.startswith(prefix)}
        r.merged(ds.read(Doc(doc.name, value, lines, doc.path)))
    elif value is not None:
        raise doc.error("deepspeed", "is neither a path nor a mapping")
