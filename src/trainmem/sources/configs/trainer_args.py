"""TRL ``SFTConfig`` and Hugging Face ``TrainingArguments`` as YAML, JSON or a command line,
with TRL's ``ModelConfig`` keys (`trl sft --config`): TRL 1.16.0 (trl/trainer/sft_config.py,
base_config.py, model_config.py) over transformers 5.24.0 (transformers/training_args.py).

A document is TRL's when it has a key only TRL defines (or came from `trl sft`); otherwise
it is plain TrainingArguments, which say nothing about the model, its dtype, LoRA or the
sequence length: those stay as trainmem's defaults (or the script's own keys, when given),
and the output says so.
"""

from __future__ import annotations

from trainmem.core.errors import PlanError
from trainmem.core.units import shown
from trainmem.sources.configs import framework_fields, optimizers
from trainmem.sources.configs.common import (
    FIELD,
    FSDP_WORDS,
    ConfigPlan,
    Doc,
    ReadFile,
    Reading,
    backward_prefetch,
    checked_reentrant,
    legacy_fsdp_words,
)
from trainmem.sources.configs.loader import read_doc
from trainmem.sources.configs.lora import set_modules_to_save, set_target_modules

TRL = "TRL 1.16.0"
HF = "transformers 5.24.0"
# Keys only TRL's SFTConfig / ModelConfig / ScriptArguments define.
TRL_KEYS = frozenset(
    {
        "max_length",
        "packing",
        "packing_strategy",
        "padding_free",
        "dataset_text_field",
        "dataset_name",
        "completion_only_loss",
        "assistant_only_loss",
        "loss_type",
        "model_init_kwargs",
        "model_name_or_path",
        "use_peft",
        "lora_r",
        "load_in_4bit",
        "load_in_8bit",
        "use_bnb_nested_quant",
        "activation_offloading",
        "chat_template_path",
        "accelerate_config",  # `trl sft`'s, passed to accelerate launch
    }
)
HF_KEYS = frozenset(
    {
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "output_dir",
        "optim",
        "learning_rate",
        "num_train_epochs",
        "bf16",
        "gradient_checkpointing",
        "activation_checkpointing",
        "deepspeed",
    }
)
# Keys of DPO, KTO, reward, GRPO and RLOO configs that SFT has not: their steps hold a
# reference model, pairs of sequences or generations, which the memory model does not.
_OTHER_STAGES = {
    "beta": "DPO/KTO",
    "ref_model_init_kwargs": "DPO/KTO",
    "precompute_ref_log_probs": "DPO/KTO",
    "max_prompt_length": "DPO/KTO/GRPO",
    "rpo_alpha": "DPO",
    "desirable_weight": "KTO",
    "center_rewards_coefficient": "reward modelling",
    "num_generations": "GRPO/RLOO",
}
_ATTN = {
    "sdpa": "sdpa",
    "eager": "eager",
    "flash_attention_2": "flash-attention-2",
    "flex_attention": "flex",
}
_DTYPES = {"float32": "fp32", "fp32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
_UNMODELLED = {
    "torch_compile": "compile workspace",
    "activation_offloading": "TRL's activation offloading",
    "auto_find_batch_size": "the batch is searched at run time",
    "optim_target_modules": "GaLore/APOLLO projections",
    "use_dora": "DoRA magnitude vectors",
    "lora_target_parameters": "LoRA on parameters (MoE experts)",
    "parallelism_config": "tensor/context parallelism",
    "torch_empty_cache_steps": "cache emptying changes reserved memory",
}


def looks_like(doc: Doc) -> int:
    return sum(k in doc.data for k in TRL_KEYS | HF_KEYS)


def is_trl(doc: Doc) -> bool:
    return any(k in doc.data for k in TRL_KEYS)


def read(doc: Doc, read_file: ReadFile, *, trl: bool | None = None) -> ConfigPlan:
    trl = is_trl(doc) if trl is None else trl
    r = Reading(doc, TRL if trl else HF)
    for key, stage in _OTHER_STAGES.items():
        if doc.has(key):
            raise PlanError(
                FIELD,
                f"{doc.where(key)}: {key}: a {stage} key; only supervised fine-tuning is "
                "planned (a reference model, paired or generated sequences are not modelled)",
            )
    r.values["stack"], r.origins["stack"] = (
        ("trl", f"{doc.name}: TRL keys") if trl else ("trainer", f"{doc.name}: TrainingArguments")
    )
    r.explicit.add("stack")
    _model(r)
    _method(r, trl)
    _lengths(r, trl)
    _checkpointing(r, trl)
    _precision(r, trl)
    if not optimizers.read_optimizer(r, "optim"):
        r.default("optimizer", "adamw", "transformers/training_args.py:806-814, torch >= 2.8")
    _loss(r, trl)
    _attention(r)
    _fsdp(r)
    r.unmodelled_present(_UNMODELLED)
    deepspeed = doc.valued("deepspeed")
    if isinstance(deepspeed, str) and deepspeed.strip():
        path = r.named("deepspeed", deepspeed.strip())
        r.merged(read_file(path, doc.origin("deepspeed")))
    elif isinstance(deepspeed, dict):
        from trainmem.sources.configs import deepspeed as ds

        r.merged(ds.read(Doc(doc.name, deepspeed, _sub_lines(doc, "deepspeed"), doc.path)))
    known = ("lora_alpha", "lora_dropout", "fsdp", "fsdp_config", *_CHECKPOINT_KWARGS)
    r.typos(
        {*TRL_KEYS, *HF_KEYS, *known}, framework_fields.TRAINING_ARGUMENTS | framework_fields.TRL
    )
    return r.result()


def _sub_lines(doc: Doc, key: str) -> dict[str, int]:
    prefix = f"{key}."
    return {k[len(prefix) :]: n for k, n in doc.lines.items() if k.startswith(prefix)}


def _model(r: Reading) -> None:
    doc = r.doc
    model = doc.text("model_name_or_path")
    if not model:
        r.notes.append(
            f"{doc.name} names no model (model_name_or_path): the plan's model is --model's"
        )
        return
    revision = doc.text("model_revision")
    if revision and revision != "main" and "@" not in model:
        model = f"{model}@{revision}"
    r.set("model", model, "model_name_or_path")


def _method(r: Reading, trl: bool) -> None:
    doc = r.doc
    peft = doc.flag("use_peft")
    four, eight = doc.flag("load_in_4bit"), doc.flag("load_in_8bit")
    if four and eight:
        raise doc.error("load_in_8bit", "load_in_4bit and load_in_8bit together")
    if (four or eight) and not peft:
        key = "load_in_4bit" if four else "load_in_8bit"
        raise doc.error(key, "a quantized base trains only with LoRA (use_peft: true)")
    if peft is None and not trl:
        return  # TrainingArguments say nothing of adapters: --method decides
    if not peft:
        r.default("method", "full", "trl/trainer/model_config.py:103 use_peft False")
        return
    if four:
        r.set("method", "qlora", "load_in_4bit")
        quant = (doc.text("bnb_4bit_quant_type") or "nf4").lower()
        if quant not in ("nf4", "fp4"):
            raise doc.error("bnb_4bit_quant_type", f"{shown(quant)} is not nf4 or fp4")
        if doc.has("bnb_4bit_quant_type"):
            r.set("quant", quant, "bnb_4bit_quant_type")
        else:
            r.default("quant", "nf4", "trl/trainer/model_config.py:160")
        r.keyed(
            "double_quant",
            "use_bnb_nested_quant",
            doc.flag,
            False,
            "trl/trainer/model_config.py:164",
        )
    elif eight:
        r.set("method", "qlora", "load_in_8bit")
        r.set("quant", "int8", "load_in_8bit")
    else:
        r.set("method", "lora", "use_peft")
    r.keyed("lora_rank", "lora_r", doc.integer, 16, "trl/trainer/model_config.py:107")
    r.keyed("lora_alpha", "lora_alpha", doc.number, 32.0, "trl/trainer/model_config.py:111")
    r.keyed("lora_dropout", "lora_dropout", doc.number, 0.05, "trl/trainer/model_config.py:115")
    # TRL turns a one-item list into its string (trl/trainer/model_config.py:177-178) and
    # get_peft_config passes it to LoraConfig (trl/trainer/utils.py:280), trl 1.16.0
    if not set_target_modules(r, "lora_target_modules", one_item_is_string=True):
        # None: PEFT's per-architecture list, q_proj and v_proj for Llama, Qwen, Mistral
        r.default("lora_targets", "q,v", "peft/utils/constants.py:85, peft 0.21.2")
    saved = doc.names("lora_modules_to_save")
    if saved:
        set_modules_to_save(r, "lora_modules_to_save", saved)


def _lengths(r: Reading, trl: bool) -> None:
    doc = r.doc
    if trl:
        if doc.has("max_seq_length") and not doc.has("max_length"):
            raise doc.error(
                "max_seq_length",
                "was renamed max_length (TRL #2947) and removed (#3704); TRL 1.16 rejects it",
            )
        length = doc.lookup("max_length")
        if length is None:
            r.default("seq_len", 1024, "trl/trainer/sft_config.py:202")
        elif str(length).lower() == "none":
            raise doc.error("max_length", "None (no truncation): give the longest example")
        else:
            r.set("seq_len", doc.integer("max_length"), "max_length")
    else:  # a script's own length argument, when it has one
        for key in ("max_seq_length", "max_length", "block_size"):
            if doc.has(key):
                r.set("seq_len", doc.integer(key), key)
                break
    r.keyed(
        "batch", "per_device_train_batch_size", doc.integer, 8, "transformers/training_args.py:777"
    )
    packing = doc.flag("packing")
    padding_free = doc.flag("padding_free")
    if packing:
        r.set("packing", True, "packing")
    elif padding_free:
        r.set("packing", True, "padding_free")
    elif trl:
        r.default("packing", False, "trl/trainer/sft_config.py:222, :238")


def _checkpointing(r: Reading, trl: bool) -> None:
    doc = r.doc
    for key in ("activation_checkpointing", "gradient_checkpointing"):  # new name first
        value = doc.flag(key)
        if value is not None:
            r.set("grad_ckpt", value, key)
            break
    else:
        if trl:
            r.default("grad_ckpt", True, "trl/trainer/base_config.py:62")
        else:
            r.default("grad_ckpt", False, "transformers/training_args.py:1541-1542")
    for key in _CHECKPOINT_KWARGS:
        if r.values.get("grad_ckpt"):  # the Trainer's default is non-reentrant
            checked_reentrant(r, f"{key}.use_reentrant", "trl" if trl else "trainer")
        if doc.flag(f"{key}.offload"):
            r.set("ckpt_offload", True, f"{key}.offload")
        every = doc.integer(f"{key}.every_n_layers")
        if every is not None and every > 1:
            r.unmodelled_key(f"{key}.every_n_layers", "only every n-th layer checkpointed")
        if doc.flag(f"{key}.selective"):
            r.unmodelled_key(f"{key}.selective", "selective checkpointing keeps attention")


# TrainingArguments' kwargs for checkpointing, the new name first (training_args.py)
_CHECKPOINT_KWARGS = ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs")


def _load_dtype(r: Reading, trl: bool) -> tuple[str, str]:
    """The dtype the model is loaded in and the key (or default) that says so."""
    doc = r.doc
    for key in ("model_init_kwargs.dtype", "model_init_kwargs.torch_dtype", "dtype", "torch_dtype"):
        text = doc.text(key)
        if text and text != "auto":
            dtype = _DTYPES.get(text.lower().removeprefix("torch."))
            if dtype is None:
                raise doc.error(key, f"{shown(text)} is not float32, bfloat16 or float16")
            return dtype, key
    if trl:  # SFTTrainer: a model given by id loads in float32 (trl/trainer/utils.py:1332)
        return "fp32", "float32 (trl/trainer/model_config.py:89, utils.py:1332)"
    return "16-bit", ""


def _precision(r: Reading, trl: bool) -> None:
    """TRL and the Trainer autocast under bf16/fp16; what the weights are depends on the
    dtype the model is loaded in."""
    doc = r.doc
    bf16, fp16 = doc.flag("bf16"), doc.flag("fp16")
    if bf16 is None and trl:
        bf16 = not fp16  # base_config.py:108: bf16 defaults to True unless fp16
    autocast = "bf16" if bf16 else "fp16" if fp16 else None
    flag_key = "bf16" if doc.has("bf16") else "fp16" if doc.has("fp16") else None
    load, load_key = _load_dtype(r, trl)
    adapter = r.values.get("method") in ("lora", "qlora")
    if autocast is None:
        precision = "fp32" if load == "fp32" else ("fp16" if load == "fp16" else "bf16")
    elif load == "fp32":
        precision = f"{autocast}-mixed"
    elif adapter or _sharded(doc):
        # under FSDP the Trainer's bf16/fp16 is accelerate's mixed precision
        # (training_args.py:1614-1618 -> accelerate/state.py:1014-1015 set_mixed_precision)
        # over parameters it upcasts to fp32 (utils/fsdp_utils.py fsdp2_prepare_model)
        precision = f"{autocast}-mixed"
    else:
        precision = autocast
    key = flag_key or (load_key if load_key and "/" not in load_key else None)
    if trl:
        source = f"trl/trainer/base_config.py:68, :108; model dtype {load_key or 'float32'}"
    else:
        source = "transformers/training_args.py:874, :880; the checkpoint's dtype"

    def put(name: str, value: str) -> None:
        if key:
            r.set(name, value, key)
        else:
            r.default(name, value, source)

    put("precision", precision)
    if r.values.get("method") == "lora" and precision.endswith("-mixed"):
        base = "fp32" if load == "fp32" else "16-bit"
        if load_key and "/" not in load_key:
            r.set("base_dtype", base, load_key)
        else:
            r.default("base_dtype", base, f"model dtype {load_key or 'of the checkpoint'}")
    if not trl and not load_key:
        r.notes.append(
            f"{doc.name}: the model's dtype is the training script's; planned as "
            "transformers 5's from_pretrained default, the checkpoint's (16-bit) dtype"
        )


def _sharded(doc: Doc) -> bool:
    fsdp = doc.lookup("fsdp")
    return bool(fsdp) and fsdp not in ("false", "False")


def _loss(r: Reading, trl: bool) -> None:
    doc = r.doc
    loss = (doc.text("loss_type") or "").lower()
    if trl and loss in ("nll", "chunked_nll", "dft"):  # all through TRL's chunked head
        r.set("loss", "chunked", "loss_type")
    elif trl and loss:
        r.unmodelled_key("loss_type", f"loss {shown(loss)}")
    liger = doc.flag("use_liger_kernel")
    fused = doc.flag("liger_kernel_config.fused_linear_cross_entropy")
    if liger and trl:  # TRL forces Liger's fused loss off (sft_trainer.py:1127-1140)
        r.unmodelled_key("use_liger_kernel", "Liger's layer kernels (RMSNorm, SwiGLU, RoPE)")
    elif liger and fused is not False:  # transformers integrations/liger.py: FLCE on
        r.set("loss", "fused", "use_liger_kernel")
    smoothing = doc.number("label_smoothing_factor")
    if smoothing and trl:
        r.unmodelled_key("label_smoothing_factor", "TRL builds the full logits for it")


def _attention(r: Reading) -> None:
    doc = r.doc
    for key in ("model_init_kwargs.attn_implementation", "attn_implementation"):
        text = doc.text(key)
        if not text:
            continue
        attn = _ATTN.get(text)
        if attn is None:
            r.unmodelled_key(key, f"attention {shown(text)}; planned as sdpa")
        else:
            r.set("attn", attn, key)
        return


def _fsdp_key(doc: Doc, prefix: str, name: str) -> str:
    """The key of fsdp_config field ``name`` as written: transformers drops an ``fsdp_``
    prefix (training_args.py:2784-2786, k[5:]), so fsdp_version is version."""
    config = doc.lookup(prefix.rstrip(".")) if prefix else doc.data
    found = f"{prefix}{name}"
    if isinstance(config, dict):
        for key in map(str, config):
            if key == name or (key.startswith("fsdp_") and key[5:] == name):
                found = f"{prefix}{key}"
    return found


def _fsdp(r: Reading) -> None:
    """``fsdp`` (True, or the legacy words) and ``fsdp_config`` (a mapping, or a JSON file
    opened from the working directory, training_args.py:2781-2783), as transformers 5.24
    builds accelerate's FSDP plugin from them (training_args.py _process_fsdp_args and
    _apply_legacy_fsdp_to_config): version 2 unless fsdp_config's version says 1, the legacy
    words only where fsdp_config is silent (setdefault; FSDP2 takes full_shard and
    shard_grad_op only), reshard_after_forward True unless set (FSDP2: full shard),
    cpu_offload, cpu_ram_efficient_loading."""
    doc = r.doc
    fsdp = doc.lookup("fsdp")
    if not _sharded(doc):
        return
    r.set("strategy", "fsdp", "fsdp")
    config = doc.lookup("fsdp_config")
    if isinstance(config, str) and config.strip():
        path = r.named("fsdp_config", config.strip())
        c, prefix = Reading(read_doc(path, what="fsdp_config file"), r.framework), ""
    else:
        c, prefix = r, "fsdp_config."
    cdoc = c.doc
    key = _fsdp_key(cdoc, prefix, "version")
    version = cdoc.integer(key)
    if version is None:
        c.default("fsdp_version", 2, "transformers/training_args.py:2826")
        version = 2
    elif version not in (1, 2):
        raise cdoc.error(key, f"{version} is not 1 or 2")
    else:
        c.set("fsdp_version", version, key)
    reshard_key = _fsdp_key(cdoc, prefix, "reshard_after_forward")
    reshard = cdoc.lookup(reshard_key)
    if isinstance(reshard, bool) or str(reshard).lower() in ("true", "false"):
        full = reshard is True or str(reshard).lower() == "true"
        c.set("fsdp", "full-shard" if full else "shard-grad-op", reshard_key)
    elif isinstance(reshard, str) and reshard.lower() in FSDP_WORDS:
        c.set("fsdp", FSDP_WORDS[reshard.lower()], reshard_key)
    elif reshard is not None:
        raise cdoc.error(reshard_key, f"{shown(reshard)} is not a sharding strategy")
    words = fsdp.split() if isinstance(fsdp, str) else list(fsdp) if isinstance(fsdp, list) else []
    legacy_fsdp_words(doc, r, words, version=version, strategy_set=reshard is not None)
    if "fsdp" not in r.values and "fsdp" not in c.values:
        c.default("fsdp", "full-shard", "transformers/training_args.py:2860-2870")
    backward_prefetch(c, cdoc, _fsdp_key(cdoc, prefix, "backward_prefetch"), version)
    offload_key = _fsdp_key(cdoc, prefix, "cpu_offload")
    if cdoc.flag(offload_key):
        c.set("offload", "params", offload_key)
    efficient_key = _fsdp_key(cdoc, prefix, "cpu_ram_efficient_loading")
    efficient = cdoc.flag(efficient_key)
    if efficient is not None:
        c.set("ram_efficient_loading", efficient, efficient_key)
    if cdoc.flag(ac_key := _fsdp_key(cdoc, prefix, "activation_checkpointing")):
        c.unmodelled_key(ac_key, "FSDP's own activation checkpointing")
    if c is not r:
        r.merged(c.result())
