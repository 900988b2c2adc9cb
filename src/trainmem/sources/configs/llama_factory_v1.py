"""LLaMA-Factory v1 YAML (hiyouga/LlamaFactory ff6d4d1, src/llamafactory/v1/), which
``llamafactory-cli`` runs only with USE_V1=1 (src/llamafactory/cli.py:19-22): ``model``,
``peft_config``, ``quant_config``, ``dist_config`` and the other plugin blocks, the keys of
v1/config/{model,data,training}_args.py. v1 trains in its own loop (v1/core/base_trainer.py),
not the Hugging Face Trainer: it is planned as the ``loop`` stack."""

from __future__ import annotations

from trainmem.core.units import shown
from trainmem.sources.configs import framework_fields
from trainmem.sources.configs.common import ConfigPlan, Doc, ReadFile, Reading
from trainmem.sources.configs.loader import read_doc
from trainmem.sources.configs.lora import set_modules_to_save, set_targets

FRAMEWORK = "LLaMA-Factory v1 ff6d4d1"
V1 = "src/llamafactory/v1"
CONFIG = f"{V1}/config"
# Keys of v1's argument classes that neither LLaMA-Factory's own (v0) format, axolotl nor
# the Trainer has: micro_batch_size (axolotl's too) and cutoff_len (v0's too) do not decide.
MARKERS = (
    "peft_config",
    "dist_config",
    "kernel_config",
    "quant_config",
    "init_config",
    "optim_config",
    "model_class",
    "train_dataset",
    "enable_activation_checkpointing",
    "batching_strategy",
    "cp_size",
    "sample_backend",
)
_ATTN = {"eager": "eager", "sdpa": "sdpa", "flash_attention_2": "flash-attention-2"}
# DPO keys of v1's TrainingArguments (training_args.py:147-170): the command (`dpo`) picks
# the trainer, so their presence says the file is for DPO.
_DPO = ("pref_loss", "pref_beta", "pref_ftx", "simpo_gamma", "dpo_label_smoothing", "ld_alpha")
LOSS = (
    "LLaMA-Factory v1's loss: a contiguous fp32 copy of the shifted logits beside the fp32 "
    f"logits ({V1}/core/base_trainer.py:240-243), one more than planned"
)


def looks_like(doc: Doc) -> int:
    score = sum(k in doc.data for k in MARKERS) * 3
    if not score and "model" in doc.data and "micro_batch_size" in doc.data:
        score = 3  # v1's model and micro_batch_size (axolotl: base_model; v0: model_name_or_path)
    return score


def read(doc: Doc, read_file: ReadFile) -> ConfigPlan:
    r = Reading(doc, FRAMEWORK)
    for key in _DPO:
        if doc.has(key):
            raise doc.error(key, "a DPO key; only supervised fine-tuning is planned")
    model_class = (doc.text("model_class") or "llm").lower()
    if model_class != "llm":  # model_engine.py:168-181: a classifier or a bare AutoModel
        raise doc.error("model_class", f"{shown(model_class)} is not planned (llm)")
    r.values["stack"], r.origins["stack"] = (
        "loop",
        f"{doc.name}: LLaMA-Factory v1 keys (its own loop, {V1}/core/base_trainer.py)",
    )
    r.explicit.add("stack")
    r.notes.append(f"{doc.name}: a LLaMA-Factory v1 config: llamafactory-cli runs it with USE_V1=1")
    r.unmodelled.append(f"{doc.name}: {LOSS}")
    model = doc.text("model")
    if model:
        r.set("model", model, "model")
    else:
        r.notes.append(f"{doc.name} names no model: the plan's model is --model's")
    _method(r)
    r.keyed("seq_len", "cutoff_len", doc.integer, 2048, f"{CONFIG}/training_args.py:41-44")
    r.keyed("batch", "micro_batch_size", doc.integer, 1, f"{CONFIG}/training_args.py:33-36")
    # base_trainer.py:91-92: gradient_checkpointing_enable({"use_reentrant": False})
    r.keyed(
        "grad_ckpt",
        "enable_activation_checkpointing",
        doc.flag,
        True,
        f"{CONFIG}/training_args.py:73-76",
    )
    name = doc.text("optim_config.name")
    if name:  # optimizer plugins (Muon...): trainer_plugins/optimizers/optimizer.py
        r.unmodelled_key("optim_config.name", f"optimizer {shown(name)}; planned as AdamW")
    # base_trainer.py:207-209: torch.optim.AdamW(params, lr): foreach on CUDA
    r.default("optimizer", "adamw-foreach", f"{V1}/core/base_trainer.py:209")
    _attention(r)
    _kernels(r)
    _sizes(r)
    _distributed(r, read_file)
    r.typos(MARKERS, framework_fields.LLAMA_FACTORY_V1)
    return r.result()


def _method(r: Reading) -> None:
    """No peft_config: the whole model trains, cast to fp32 (core/model_engine.py:204-207);
    peft_config lora: PEFT's LoRA (plugins/model_plugins/peft.py:158-198)."""
    doc = r.doc
    quantized = doc.lookup("quant_config") is not None
    peft = doc.lookup("peft_config")
    if peft is None:
        if quantized:
            raise doc.error("quant_config", "a quantized model trains only with LoRA (peft_config)")
        r.default("method", "full", f"{V1}/core/model_engine.py:204-207, no peft_config")
        return
    if not isinstance(peft, dict):
        raise doc.error("peft_config", f"{shown(peft)} is not a block of keys ({{name: lora}})")
    kind = (doc.text("peft_config.name") or "").lower()
    if kind != "lora":
        raise doc.error(
            "peft_config.name", f"{shown(kind)} is not planned (lora, or no peft_config)"
        )
    if quantized:
        _quantized(r)
    else:
        r.set("method", "lora", "peft_config.name")
    peft_py = f"{V1}/plugins/model_plugins/peft.py"
    r.keyed("lora_rank", "peft_config.r", doc.integer, 8, f"{peft_py}:38")
    r.keyed("lora_alpha", "peft_config.lora_alpha", doc.number, 16.0, f"{peft_py}:40")
    r.keyed("lora_dropout", "peft_config.lora_dropout", doc.number, 0.05, f"{peft_py}:42")
    # peft.py:168-174: "all" is every linear but the head; another string is one module name
    names = doc.names("peft_config.target_modules")
    if names:
        set_targets(r, "peft_config.target_modules", names)
    else:
        r.default("lora_targets", "all-linear", f"{peft_py}:44 all")
    saved = doc.names("peft_config.modules_to_save")
    if saved:
        set_modules_to_save(r, "peft_config.modules_to_save", saved)
    r.unmodelled_present(
        {
            "peft_config.use_dora": "DoRA magnitude vectors",
            # peft.py:145-153: training resumes the adapter, its own rank and targets
            "peft_config.adapter_name_or_path": "the adapter's own LoRA settings",
        }
    )


def _quantized(r: Reading) -> None:
    """bitsandbytes through quant_config (plugins/model_plugins/quantization.py): auto without
    quantization_bit quantizes nothing (:65-67), bnb without it 4 bits (:88-90). v1 never
    runs PEFT's prepare_model_for_kbit_training (model_engine.py:204-220: get_peft_model
    only), so nothing is upcast to fp32."""
    doc = r.doc
    quant_py = f"{V1}/plugins/model_plugins/quantization.py"
    name = (doc.text("quant_config.name") or "").lower()
    if name not in ("bnb", "auto"):
        raise doc.error("quant_config.name", f"{shown(name)} is not planned (bnb or auto)")
    bits = doc.integer("quant_config.quantization_bit")
    if bits is None and name == "auto":
        r.set("method", "lora", "quant_config.name")
        r.notes.append(f"{doc.origin('quant_config.name')}: no quantization_bit: not quantized")
        return
    if bits not in (None, 4, 8):
        raise doc.error("quant_config.quantization_bit", f"{bits} is not 4 or 8")
    bits_key = "quant_config.quantization_bit" if bits is not None else "quant_config.name"
    r.set("method", "qlora", bits_key)
    r.default("kbit_prep", False, f"{V1}/core/model_engine.py:204-220, no kbit preparation")
    if bits == 8:
        r.set("quant", "int8", bits_key)
        return
    quant_key = "quant_config.quantization_type"
    quant = (doc.text(quant_key) or "").lower()
    if quant and quant not in ("nf4", "fp4"):
        raise doc.error(quant_key, f"{shown(quant)} is not nf4 or fp4")
    if quant:
        r.set("quant", quant, quant_key)
    else:
        r.default("quant", "nf4", f"{quant_py}:44")
    r.keyed("double_quant", "quant_config.double_quantization", doc.flag, True, f"{quant_py}:43")


def _attention(r: Reading) -> None:
    text = r.doc.text("flash_attn")  # absent: sdpa (config/model_args.py:36-37)
    if not text:
        return
    attn = _ATTN.get(text.lower())
    if attn is None:  # model_args.py:63-68 refuses any other
        raise r.doc.error("flash_attn", f"{shown(text)} is not eager, sdpa or flash_attention_2")
    r.set("attn", attn, "flash_attn")


def _kernels(r: Reading) -> None:
    """kernel_config.name, comma-separated (plugins/model_plugins/kernels/interface.py:44-60):
    auto applies only NPU kernels (:31-39); Liger's fused loss is turned off while training,
    which needs the logits (kernels/liger_kernel_ops.py:134-136): layer kernels only."""
    text = r.doc.text("kernel_config.name") or ""
    others = [n.strip() for n in text.split(",") if n.strip() and n.strip() != "auto"]
    if others:
        r.unmodelled_key("kernel_config.name", f"kernels {', '.join(others)}; the loss unfused")


def _sizes(r: Reading) -> None:
    doc = r.doc
    # training_args.py:85-92 (base_trainer.py:149-162); :93-100, the FSDP2 device mesh
    r.unmodelled_sizes({"cp_size": "context parallelism over {n} GPUs; planned whole"})
    if doc.integer("mp_shard_size") is not None:
        r.unmodelled_key("mp_shard_size", "the FSDP2 shard group's size; planned over every GPU")
    r.unmodelled_sizes({"mp_replicate_size": "replicas of the FSDP2 shard group; planned as one"})
    strategy = (doc.text("batching_strategy") or "normal").lower()  # training_args.py:65-68
    if strategy != "normal":
        r.unmodelled_key(
            "batching_strategy", f"{shown(strategy)}; planned as rows of cutoff_len tokens"
        )


def _distributed(r: Reading, read_file: ReadFile) -> None:
    """dist_config.name: none runs one process (DDP over several, base_trainer.py:182-195),
    fsdp2 FSDP2 with MixedPrecisionPolicy(bf16 params, fp32 reduce) when bf16, the default
    (trainer_plugins/distributed/fsdp2.py:182-216; training_args.py:61-64), deepspeed the
    named DeepSpeed file with bf16 unless it disables it (model_plugins/deepspeed_utils.py
    :55-78). v1 passes bf16 to FSDP2 alone (base_trainer.py:197-203): without it nothing
    autocasts, and a full fine-tune trains its fp32 model (model_engine.py:207). LoRA keeps
    the checkpoint's 16-bit base with fp32 adapters (PEFT's autocast_adapter_dtype, peft
    0.21.2 mapping_func.py:110, tuners/tuners_utils.py:628): -mixed."""
    doc = r.doc
    full = r.values.get("method") == "full"
    name = (doc.text("dist_config.name") or "").lower()
    training = f"{CONFIG}/training_args.py:61-64"
    if name == "fsdp2":
        fsdp2 = f"{V1}/plugins/trainer_plugins/distributed/fsdp2.py"
        r.set("strategy", "fsdp", "dist_config.name")
        r.set("fsdp_version", 2, "dist_config.name")
        reshard = doc.flag("dist_config.reshard_after_forward")
        if reshard is None:
            r.default("fsdp", "full-shard", f"{fsdp2}:188")
        else:
            r.set(
                "fsdp",
                "full-shard" if reshard else "shard-grad-op",
                "dist_config.reshard_after_forward",
            )
        if doc.flag("dist_config.offload_params"):  # fsdp2.py:189, CPUOffloadPolicy
            r.set("offload", "params", "dist_config.offload_params")
        bf16 = doc.flag("bf16")
        value = "bf16-mixed" if bf16 is not False else "fp32"
        if bf16 is None:
            r.default("precision", value, f"{training}, {fsdp2}:187, :206-216")
        else:
            r.set("precision", value, "bf16")
        return
    if doc.flag("bf16"):
        r.notes.append(
            f"{doc.origin('bf16')}: no effect without dist_config fsdp2: v1 passes bf16 to FSDP2 "
            f"alone ({V1}/core/base_trainer.py:197-203)"
        )
    if name == "deepspeed":
        _deepspeed(r, read_file, full)
        return
    if name:  # fsdpturbo: expert-parallel FSDP (distributed/interface.py:104-135)
        r.unmodelled_key("dist_config.name", f"{shown(name)}; planned on one GPU, unsharded")
    if full:
        r.default("precision", "fp32", f"{V1}/core/model_engine.py:207, no autocast")
    else:
        r.default("precision", "bf16-mixed", f"{V1}/core/model_engine.py:188-195 dtype auto")
        r.default("base_dtype", "16-bit", "the checkpoint's dtype (model_engine.py:191)")


def _deepspeed(r: Reading, read_file: ReadFile, full: bool) -> None:
    """dist_config.config_file, opened as DeepSpeed opens it (from the working directory)."""
    doc = r.doc
    key = "dist_config.config_file"
    text = doc.text(key)
    if not text:  # deepspeed.py:58-60
        raise doc.error(key, "absent: v1's DeepSpeed engine needs the DeepSpeed config's path")
    path = r.named(key, text)
    plan = read_file(path, doc.origin(key))
    enabled = read_doc(path).lookup("bf16.enabled")  # read_file just opened it
    off = enabled is False or str(enabled).lower() == "false"
    # DeepSpeed casts every parameter to bf16 (adapters too) over an fp32 master
    source = f"{V1}/plugins/model_plugins/deepspeed_utils.py:55-78, bf16 unless disabled"
    if off and not full:
        r.default("precision", "bf16-mixed", f"{source}; the checkpoint's 16-bit base")
    else:
        r.default("precision", "fp32" if off else "bf16", source)
    r.merged(plan)


__all__ = ["MARKERS", "looks_like", "read"]
