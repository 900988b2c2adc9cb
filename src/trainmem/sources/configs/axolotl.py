"""axolotl YAML (axolotl-ai-cloud/axolotl 067b021; the pydantic schema under
src/axolotl/utils/schemas/, the loaders under src/axolotl/loaders/)."""

from __future__ import annotations

from trainmem.core.errors import PlanError
from trainmem.core.units import shown
from trainmem.sources.configs import deepspeed as ds
from trainmem.sources.configs import framework_fields, optimizers
from trainmem.sources.configs.common import (
    FIELD,
    ConfigPlan,
    Doc,
    ReadFile,
    Reading,
    checked_reentrant,
    legacy_fsdp_words,
)
from trainmem.sources.configs.lora import set_modules_to_save, set_target_modules

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
    "torch_compile": "compile workspace",
    "chunked_cross_entropy": "axolotl's chunked CE still builds bf16 logits",
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
    # schemas/integrations.py:36 LISAConfig: only lisa_n_layers layers train at a time
    "lisa_n_layers": "LISA layer-wise sampling; planned as a full fine-tune of every layer",
    "tiled_mlp": "ALST tiled MLP (the MLP's activations in shards), schemas/config.py:1009",
    # schemas/config.py:1091-1100: FSDP shards over dp_shard_size devices, not every GPU
    "dp_shard_size": "FSDP's shard group; planned as sharding over every GPU",
    # schemas/config.py:654: every other parameter is frozen
    "unfrozen_parameters": "only the matching parameters train; planned with all trainable",
    "qat": "quantization-aware training's fake quantization (schemas/config.py:280)",
}
# Parallel sizes, 1 (or absent) being off: a size above 1 splits work the plan keeps whole
# (schemas/config.py:1097-1129; integrations/expert_parallel/args.py:23).
_SIZES = {
    "context_parallel_size": "context parallelism: each GPU holds part of the sequence; "
    "planned whole",
    "sequence_parallel_degree": "context parallelism: each GPU holds part of the sequence; "
    "planned whole",
    "tensor_parallel_size": "tensor parallelism; planned whole",
    "expert_parallel_size": "expert parallelism: each GPU holds part of the experts; planned whole",
    "dp_replicate_size": "replicas of the FSDP shard group (HSDP); planned whole",
}
_KNOWN = (
    *MARKERS,
    *_LEGACY_ATTN,
    *_UNMODELLED,
    *_SIZES,
    "load_in_4bit",
    "load_in_8bit",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "lora_modules_to_save",
    "gradient_checkpointing",
    "gradient_checkpointing_kwargs",
    "activation_offloading",
    "bf16",
    "fp16",
    "bfloat16",
    "float16",
    "optimizer",
    "attn_implementation",
    "deepspeed",
    "fsdp",
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
    r.unmodelled_sizes(_SIZES)
    _deepspeed(r, read_file)
    if r.values.get("method") == "qlora":  # after the DeepSpeed file: ZeRO-3 skips it
        _kbit_prep(r)
    r.typos(_KNOWN, framework_fields.AXOLOTL)
    return r.result()


def fsdp_key(doc: Doc, name: str) -> str:
    """The dotted key of fsdp_config field ``name`` as the file writes it: axolotl drops the
    ``fsdp_`` prefix of every fsdp_config key but fsdp_version (schemas/validation.py:1085-1103
    check_fsdp_config_kwargs_prefix, key.replace("fsdp_", "")), a later key over an earlier."""
    config = doc.lookup("fsdp_config")
    found = f"fsdp_config.{name}"
    if isinstance(config, dict):
        for key in map(str, config):
            bare = key.replace("fsdp_", "") if key.startswith("fsdp_") else key
            if (key if key == "fsdp_version" else bare) == name:
                found = f"fsdp_config.{key}"
    return found


def _uses_fsdp(doc: Doc) -> bool:
    config = doc.lookup("fsdp_config")
    if config is not None and not isinstance(config, dict):  # axolotl's schema refuses it
        raise doc.error(
            "fsdp_config",
            f"{shown(config)} is not a mapping of FSDP settings "
            f"({SCHEMAS}/config.py:1049 fsdp_config: FSDPConfig | None, {FRAMEWORK})",
        )
    # FSDP is set up where `cfg.fsdp or cfg.fsdp_config` (utils/trainer.py:664-666
    # prepare_optim_env, core/builders/base.py:684): an empty mapping alone is not FSDP, but
    # beside an fsdp: list it is (its settings then the defaults). A list without any
    # fsdp_config fails in setup_fsdp_envs (cfg.fsdp_config.activation_checkpointing on None).
    return isinstance(config, dict) and (bool(config) or bool(doc.names("fsdp")))


def _fsdp(r: Reading) -> None:
    """``fsdp_config`` (src/axolotl/utils/schemas/fsdp.py, 067b021), its keys with or without
    the ``fsdp_`` prefix, handed to accelerate's FSDP plugin as environment variables
    (utils/trainer.py:591-622 setup_fsdp_envs: offload_params, cpu_ram_efficient_loading) and
    to TrainingArguments with the legacy ``fsdp:`` list (core/builders/base.py:684-686), whose
    words transformers applies where fsdp_config is silent (training_args.py
    _apply_legacy_fsdp_to_config, setdefault). The version is fsdp_version, else
    fsdp_config's version / fsdp_version, else 1 (validation.py:1107-1129 pins FSDP1)."""
    doc = r.doc
    words = doc.names("fsdp") or []
    if not _uses_fsdp(doc):  # axolotl sets up FSDP only from fsdp_config
        if words:
            r.unmodelled_key("fsdp", "an fsdp: list without fsdp_config, which FSDP needs")
        return
    r.set("strategy", "fsdp", "fsdp_config")
    for key in ("fsdp_version", "fsdp_config.version", "fsdp_config.fsdp_version"):
        version = doc.integer(key)
        if version is not None:
            if version not in (1, 2):
                raise doc.error(key, f"{version} is not 1 or 2")
            r.set("fsdp_version", version, key)
            break
    else:
        r.default("fsdp_version", 1, f"{SCHEMAS}/validation.py:1124-1129, no fsdp_version")
        version = 1
    reshard_key = fsdp_key(doc, "reshard_after_forward")
    reshard = doc.flag(reshard_key)
    if reshard is not None:
        r.set("fsdp", "full-shard" if reshard else "shard-grad-op", reshard_key)
    legacy_fsdp_words(doc, r, words, version=version, strategy_set=reshard is not None)
    if "fsdp" not in r.values:
        r.default("fsdp", "full-shard", "transformers/training_args.py:2860-2870")
    offload_key = fsdp_key(doc, "offload_params")
    if doc.flag(offload_key):
        r.set("offload", "params", offload_key)
    efficient_key = fsdp_key(doc, "cpu_ram_efficient_loading")
    efficient = doc.flag(efficient_key)
    if efficient is not None:
        r.set("ram_efficient_loading", efficient, efficient_key)
    if doc.flag(key := fsdp_key(doc, "activation_checkpointing")):
        r.unmodelled_key(key, "FSDP's own activation checkpointing")
    strategy_key = fsdp_key(doc, "sharding_strategy")
    if doc.has(strategy_key):  # not an FSDPConfig field: pydantic drops it
        r.notes.append(
            f"{doc.origin(strategy_key)}: ignored, as axolotl drops it (not a field of "
            f"{SCHEMAS}/fsdp.py); the sharding is {r.values['fsdp']}"
        )
    prefetch_key = fsdp_key(doc, "backward_prefetch")
    if doc.has(prefetch_key):  # not an FSDPConfig field either
        r.notes.append(
            f"{doc.origin(prefetch_key)}: ignored, as axolotl drops it (not a field of "
            f"{SCHEMAS}/fsdp.py); FSDP1 runs with transformers' NO_PREFETCH "
            "(training_args.py:2875)"
        )
    policy_key = fsdp_key(doc, "mixed_precision_policy")
    if doc.has(policy_key):  # a schema field that nothing reads
        r.notes.append(
            f"{doc.origin(policy_key)}: no effect: axolotl passes it to neither accelerate nor "
            "transformers (training_args.py _process_fsdp_args); FSDP's policy follows bf16/fp16"
        )


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
    elif adapter == "lora" and eight:  # loaders/model.py:740-744: LoRA on LLM.int8
        r.set("method", "qlora", "load_in_8bit")
        r.set("quant", "int8", "load_in_8bit")
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


def _kbit_prep(r: Reading) -> None:
    """axolotl runs PEFT's prepare_model_for_kbit_training on a quantized LoRA / QLoRA base
    unless QLoRA runs under FSDP, FSDP loads RAM-efficiently, ZeRO-3 is on, or
    quantize_moe_experts quantized the experts (src/axolotl/loaders/model.py:988-1023
    _prepare_model_for_quantization, 067b021; it also skips it for LoRA on Qwen (1) and LoftQ,
    which this reader does not see). quantize_moe_experts loads 3-D expert weights in 4 or 8
    bits (monkeypatch/moe_quant.py), which the plan does not express: named."""
    doc = r.doc
    adapter = (doc.text("adapter") or "").lower()
    efficient = _uses_fsdp(doc) and bool(doc.flag(fsdp_key(doc, "cpu_ram_efficient_loading")))
    if (_uses_fsdp(doc) and adapter == "qlora") or efficient:
        r.default("kbit_prep", False, f"{LOADERS}:1003-1009, under FSDP")
    elif r.values.get("strategy") == "zero" and r.values.get("zero") == 3:
        r.default("kbit_prep", False, f"{LOADERS}:1003-1009, under ZeRO-3")
    elif doc.flag("quantize_moe_experts"):
        r.default("kbit_prep", False, f"{LOADERS}:1011-1013, experts quantized")
        r.unmodelled_key(
            "quantize_moe_experts", "experts quantized as they load: planned in 16-bit"
        )
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
        # every nn.Linear's name, bar lm_head (loaders/adapter.py:54-71, :174-182): not PEFT's
        # all-linear, which on qwen3_moe and mixtral also adapts the fused experts
        r.set("lora_targets", "linear", "lora_target_linear")
    # loaders/adapter.py:171-190 passes lora_target_modules to PEFT as written (a string is a
    # regex); absent, it passes [], which targets nothing
    elif not set_target_modules(r, "lora_target_modules"):
        if doc.has("lora_target_parameters"):  # schemas/peft.py:57: PEFT's target_parameters
            raise doc.error(
                "lora_target_parameters",
                "LoRA on parameters (MoE experts) is not planned, and no module is targeted: "
                "trainmem puts LoRA on linear modules (lora_target_modules or lora_target_linear)",
            )
        raise doc.error(
            "lora_target_modules", "absent, and lora_target_linear is not true: no layer"
        )
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
    if r.values.get("grad_ckpt"):  # axolotl passes use_reentrant False unless told
        checked_reentrant(r, "gradient_checkpointing_kwargs.use_reentrant", "axolotl")
    if offloading in (None, False) or value in ("offload", "offload_disk"):
        return
    if offloading in (True, "legacy") and r.values.get("grad_ckpt"):
        r.set("ckpt_offload", True, "activation_offloading")
    else:
        r.unmodelled_key("activation_offloading", f"{shown(offloading)} without checkpointing")


def _precision(r: Reading) -> None:
    """What axolotl loads the model in and what the Trainer then autocasts to.

    bf16 absent or auto is on for a bf16 GPU unless fp16 (config.py:559, utils/config/
    __init__.py:156-173 resolve_dtype); the model loads in bf16 when bf16 or bfloat16, in
    fp16 when load_in_8bit, fp16 or float16, else fp32 (__init__.py:190-196); the Trainer's
    bf16 is ``bf16 or bfloat16`` (bf16: full only evaluates in bf16) and its fp16 is ``fp16
    and not bf16`` (core/builders/base.py:270-278). In trainmem's terms: an fp32 model under
    autocast is -mixed; a 16-bit model under autocast is -mixed for LoRA (fp32 adapters) and
    under FSDP (accelerate's mixed precision: MixedPrecisionPolicy from bf16,
    transformers/training_args.py:1614-1618 -> accelerate/state.py:1014-1015, with axolotl's
    own FSDP2 preparation at fsdp_version 2, loaders/patch_manager.py:344-351), else the
    16-bit dtype itself."""
    doc = r.doc
    adapter = r.values.get("method") in ("lora", "qlora")
    raw = doc.lookup("bf16")
    fp16 = bool(doc.flag("fp16"))
    if raw is None or str(raw).lower() == "auto":
        bf16, bf16_key = not fp16, ""
    elif str(raw).lower() == "full":
        bf16, bf16_key = True, "bf16"
    else:
        bf16, bf16_key = bool(doc.flag("bf16")), "bf16"
    bfloat16, float16 = bool(doc.flag("bfloat16")), bool(doc.flag("float16"))
    eight = bool(doc.flag("load_in_8bit"))
    if bf16 or bfloat16:
        load = "bf16"
    elif eight or fp16 or float16:
        load = "fp16"
    else:
        load = "fp32"
    full_eval = str(raw).lower() == "full"
    if (bf16 and not full_eval) or bfloat16:
        autocast = "bf16"
    elif fp16 and not bf16:
        autocast = "fp16"
    else:
        autocast = None
    if autocast is None:
        precision = load
    elif load == "fp32" or adapter or _uses_fsdp(doc):
        precision = f"{autocast}-mixed"
    else:
        precision = load
    if bfloat16:  # the key that decided
        key = "bfloat16"
    elif autocast == "fp16" or (fp16 and load == "fp16"):
        key = "fp16"
    elif load == "fp16":
        key = "float16" if float16 else "load_in_8bit"
    else:
        key = bf16_key
    if float16 and load == "bf16":
        r.notes.append(
            f"{doc.origin('float16')}: no effect: with bf16 on (auto on a bf16 GPU), axolotl "
            "loads the model in bf16 (utils/config/__init__.py:190-191)"
        )
    if key:
        r.set("precision", precision, key)
    else:  # config.py:559; resolve_dtype picks bf16 on a bf16 GPU
        r.default("precision", precision, f"{SCHEMAS}/config.py:559 bf16 auto, a bf16 GPU")


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
    elif doc.flag("liger_fused_linear_cross_entropy"):
        # Liger's keys are the plugin's: merged into the schema only when plugins are listed
        # (utils/config/__init__.py:447-451), applied by its pre_model_load (liger/plugin.py).
        r.notes.append(
            f"{doc.origin('liger_fused_linear_cross_entropy')} has no effect without the Liger "
            "plugin (plugins: - axolotl.integrations.liger.LigerPlugin): planned with the "
            "standard loss"
        )


def _deepspeed(r: Reading, read_file: ReadFile) -> None:
    doc = r.doc
    value = doc.lookup("deepspeed")
    if isinstance(value, str) and value.strip():
        r.merged(read_file(r.named("deepspeed", value.strip()), doc.origin("deepspeed")))
    elif isinstance(value, dict):
        prefix = "deepspeed."
        lines = {k[len(prefix) :]: n for k, n in doc.lines.items() if k.startswith(prefix)}
        r.merged(ds.read(Doc(doc.name, value, lines, doc.path)))
    elif value is not None:
        raise doc.error("deepspeed", "is neither a path nor a mapping")
