"""Re-implementations of the public training-memory calculators we compare against.

Each peer is re-implemented from its published source (cited above each function),
not imported: the formulas are re-expressed here so the accuracy table can be
reproduced without the peers' dependencies (torch, DeepSpeed, a browser...).

All functions take the same two dicts:

* ``arch`` -- a Hugging Face ``config.json`` dict plus ``total_params`` (exact
  parameter count, tied weights counted once) and ``trainable_params`` (trainable
  count for this plan).
* ``plan`` -- ``{"method", "precision", "optimizer", "seq_len", "batch",
  "grad_ckpt", "attn", "lora_rank", "lora_alpha", "lora_targets", "gpus"}``.

and return the bytes the peer predicts for one training step's peak, or ``None``
where the peer has no answer for that kind of plan.  Where a peer reports in
MB/GB, the unit it really uses (MiB = 2**20, GiB = 2**30, or decimal) is noted
and converted back to bytes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

MIB = 1024**2
GIB = 1024**3

Arch = dict[str, Any]
Plan = dict[str, Any]

# Plan precisions that keep fp32 weights and autocast to 16 bit.
_MIXED = {"bf16-mixed", "fp16-mixed"}
# Plan precisions that store the weights themselves in 16 bit.
_HALF = {"bf16", "fp16"}


def _text_config(arch: Arch) -> Arch:
    """Multimodal configs nest the language model under ``text_config``."""
    text = arch.get("text_config")
    if isinstance(text, dict) and text.get("hidden_size"):
        return text
    return arch


def _lm_head_params(arch: Arch) -> int:
    """Parameters of an untied output projection (0 when tied to the embedding)."""
    cfg = _text_config(arch)
    if arch.get("tie_word_embeddings", cfg.get("tie_word_embeddings", True)):
        return 0
    return int(cfg["vocab_size"]) * int(cfg["hidden_size"])


def _is_adam(optimizer: str) -> bool:
    return optimizer.lower().replace("_", "-").startswith(("adam", "paged-adam"))


def _is_sgd(optimizer: str) -> bool:
    return optimizer.lower().startswith("sgd")


# ---------------------------------------------------------------------------
# 1. Hugging Face Accelerate, `accelerate estimate-memory`
# ---------------------------------------------------------------------------
#
# Source: huggingface/accelerate, src/accelerate/commands/estimate.py
#   (commit 00e4d264f66d9694ba6116a0dbe7ecec83655b43: `create_empty_model`,
#   `estimate_training_usage`, `gather_data`, `estimate_command`), and
#   src/accelerate/utils/modeling.py `calculate_maximum_sizes`.
# Docs: docs/source/usage_guides/model_size_estimator.md
#
# What the tool does:
# * builds the model on the meta device with `AutoModel.from_config(config,
#   torch_dtype=float32)` -- the *base* model, so an untied `lm_head` is NOT
#   counted -- and takes `total_size` = fp32 bytes of all its tensors;
# * one table row per dtype (float32, float16, int8, int4): "Total Size" is
#   total_size / {1, 2, 4, 8};
# * "Training using Adam" is max() over the dict returned by
#   `estimate_training_usage(total_size_fp32, dtype)`:
#     float32 -> {model: 4P, grads: 4P, optimizer: 8P, step: 16P} -> 16 B/param
#     float16 -> the "mixed precision" branch {model: 4P, grads: 6P,
#                optimizer: 8P, step: 8P} -> 8 B/param
#     int8/int4 -> N/A.
#   (Older releases printed 4 x the row's Total Size instead; that gives the same
#   16 and 8 B/param for float32/float16, so the choice of version does not
#   change our numbers.)
# * It explicitly excludes activations ("purely load the model").
#
# Mapping of our plans:
# * full, fp32                -> float32 row, training column (16 B/param).
# * full, bf16 / fp16         -> float16 row, training column (8 B/param).
# * full, bf16-mixed / fp16-mixed -> the code's own mixed-precision branch,
#   which is what the float16 row's training column prints (8 B/param).  Pass
#   ``mixed_precision_row="float32"`` to read the float32 row instead.
# * lora / qlora: the tool has no adapter mode; we take what a user would read
#   off, the "Total Size" (inference) of the base model in the dtype it is
#   loaded in: float32 for fp32 and *-mixed, float16 for bf16/fp16, int4 for
#   QLoRA.
# The tool also counts registered buffers (`named_module_tensors` includes them);
# they are not in a config.json, so they are 0 unless passed as `buffer_bytes`
# (rotary `inv_freq` is a few hundred bytes; BERT's position/token-type id
# buffers are 8 KiB).
def accelerate_estimate(
    arch: Arch, plan: Plan, mixed_precision_row: str = "float16", buffer_bytes: int = 0
) -> int | None:
    base_params = int(arch["total_params"]) - _lm_head_params(arch)
    fp32_total = 4 * base_params + buffer_bytes  # calculate_maximum_sizes, float32 model
    divisor = {"float32": 1, "float16": 2, "int8": 4, "int4": 8}

    method = plan["method"]
    precision = plan["precision"]
    if method == "full":
        if precision == "fp32":
            row = "float32"
        elif precision in _MIXED:
            row = mixed_precision_row
        else:
            row = "float16"
        usage = _accelerate_training_usage(fp32_total, row)
        return max(usage.values()) if max(usage.values()) != -1 else None
    if method == "qlora":
        row = "int4"
    elif precision in _HALF:
        row = "float16"
    else:
        row = "float32"
    return int(fp32_total / divisor[row])


def _accelerate_training_usage(fp32_bytes: int, dtype: str) -> dict[str, int]:
    """Re-expression of accelerate's `estimate_training_usage` (see above)."""
    sizes = {"model": -1, "optimizer": -1, "gradients": -1, "step": -1}
    half = fp32_bytes // 2
    if dtype == "float32":
        sizes.update(model=fp32_bytes, gradients=fp32_bytes, optimizer=2 * fp32_bytes)
        sizes["step"] = 4 * fp32_bytes
    elif dtype in ("float16", "bfloat16"):
        sizes.update(model=fp32_bytes, gradients=fp32_bytes + half, optimizer=2 * fp32_bytes)
        sizes["step"] = sizes["optimizer"]
    return sizes


# ---------------------------------------------------------------------------
# 2. gpu_poor ("Are you GPU poor?" calculator)
# ---------------------------------------------------------------------------
#
# Source: RahulSChand/gpu_poor, src/App.js
#   (commit 05d18ab8f093659c1689d93a66d549032e87c5ae: `computeModelSize`,
#   `convertToMBModelSize`, `getActivationMemory`, `getGradOptMemory`,
#   `getExtraMemory`, `getAllComputedData`, `handleClick`).
#
# Training mode ("Training (Huggingface)"), everything in MB = 2**20 bytes:
# * float bytes fB is always 2 (`convertToBytes` returns 2.0): the calculator has
#   no precision input, so fp32 plans get the same answer as bf16 plans;
# * params P = 2*V*h + L*(4*h^2 + 3*h*I)  (no GQA, no MoE, untied embeddings);
# * weights = 2P (full, LoRA); QLoRA: 2P/4 - 2P/64 plus 6% of 2P;
# * activations per layer, len = context length, all x fB except the fp32 copy
#   of the scores:  attention 8*len*h*fB + 2*len^2*a*fB + 4*len^2*a,
#   MLP 2*h*len*fB + 6*len*I*fB, norms 8*len + 6*len*h*fB;  x L x batch;
#   x 0.15 when gradient checkpointing is on;
# * gradients + optimizer: full Adam 3*P*fB, full SGD P*fB;
#   LoRA Adam L*8*h*2*4*3*2, LoRA SGD L*8*h*2*4*2 (rank is not an input);
#   QLoRA Adam L*8*h*0.5*4*3 (+ extra), QLoRA SGD L*8*h*0.5*4 (+ extra), where
#   extra = 0.75 * L*(15h + 6I) * 50 * sqrt(max(1, len/50)) * batch;
# * + 650 MB fixed "cuda + other overhead"; the UI shows ceil(total) MB.
# The UI tells training users to set "tokens to generate" to 1 and sums it
# with the prompt length, so len = seq_len + 1.  Optimizers other than the
# Adam family and SGD have no answer (None); 8-bit Adam maps to "ADAM".
def gpu_poor(arch: Arch, plan: Plan) -> int | None:
    cfg = _text_config(arch)
    vocab = int(cfg.get("vocab_size", 32000))
    h = int(cfg.get("hidden_size", 768))
    heads = int(cfg.get("num_attention_heads", 12))
    inter = int(cfg.get("intermediate_size") or 4 * h)
    layers = int(cfg.get("num_hidden_layers", 12))

    optimizer = plan["optimizer"]
    if _is_adam(optimizer):
        opt = "adam"
    elif _is_sgd(optimizer):
        opt = "sgd"
    else:
        return None
    method = plan["method"]
    batch = int(plan["batch"])
    ctx = int(plan["seq_len"]) + 1  # prompt len + "tokens to generate" (= 1)
    fb = 2.0

    params = vocab * h * 2 + layers * 4 * h * h + layers * 3 * inter * h

    weights_mb = params * fb / MIB
    if method == "qlora":
        weights_mb = weights_mb / 4 - (params * 2) / (64 * MIB) + 0.06 * weights_mb

    attn = (
        ctx * h * 3 * fb
        + ctx * h * 2 * fb
        + ctx * ctx * heads * fb
        + ctx * ctx * heads * 4
        + ctx * ctx * heads * fb
        + 3 * ctx * h * fb
    )
    ffn = 2 * h * ctx * fb + fb * 5 * ctx * inter + inter * ctx * fb
    norm = ctx * 4 * 2 + ctx * h * fb * 6
    activations_mb = (attn + ffn + norm) * layers * batch / MIB
    if plan.get("grad_ckpt"):
        activations_mb *= 0.15

    if method == "full":
        grad_opt = params * (3 if opt == "adam" else 1) * fb
    elif method == "lora":
        grad_opt = layers * 8 * h * 2 * 4 * (3 * 2 if opt == "adam" else 2)
    elif method == "qlora":
        common = (10 * h + 5 * h + 4 * inter + 2 * inter) * layers
        ratio = ctx / 50
        root = math.sqrt(ratio) if ratio > 1.0 else 1.0
        extra = 0.75 * common * 50 * root * 1.0
        grad_opt = layers * 8 * h * 0.5 * 4 * (3 if opt == "adam" else 1) + extra * batch
    else:
        return None
    grad_opt_mb = grad_opt / MIB

    total_mb = weights_mb + grad_opt_mb + activations_mb + 650
    return math.ceil(total_mb) * MIB


# ---------------------------------------------------------------------------
# 3. DeepSpeed model-state estimators
# ---------------------------------------------------------------------------
#
# Source: deepspeedai/DeepSpeed, deepspeed/runtime/zero/stage_1_and_2.py
#   `estimate_zero2_model_states_mem_needs` (commit
#   7dee2e061c20239ececb779bfaf3b1b5a2228a3c) and deepspeed/runtime/zero/stage3.py
#   `estimate_zero3_model_states_mem_needs`, `model_to_params` (commit
#   ea78ab6863441bdf40e352132d5f930cc9e2d7aa).  Printed by the *_all_cold helpers
#   as `gpu_mem/2**30` "GB" (i.e. GiB).  Docs: docs/code-docs/source/memory.rst.
#
# Model states only (16-bit params, grads, fp32 master + Adam states); the docs
# say activations are not covered.  They assume mixed precision with Adam
# whatever the plan says.
def deepspeed_zero2_gpu_bytes(
    total_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1, cpu_offload: bool = False
) -> int:
    """Per-GPU bytes from `estimate_zero2_model_states_mem_needs` (current code)."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        return int(2 * total_params)
    # 2 B 16-bit params + 18 B (2 16-bit grads, 4 fp32 grads, 4 fp32 params,
    # 8 Adam states) sharded over the GPUs.
    return int(2 * total_params + int(18 * total_params / total_gpus))


def deepspeed_zero2_gpu_bytes_legacy(
    total_params: int, num_gpus_per_node: int = 1, num_nodes: int = 1, cpu_offload: bool = False
) -> int:
    """Older form of the same function, `4P + 16P/gpus`, which the memory.rst
    example output (15.93GB for 2851M params on 8 GPUs) was produced with.
    Identical to the current form on a single GPU (20 B/param)."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        return int(2 * total_params)
    return int(4 * total_params + int(16 * total_params / total_gpus))


def deepspeed_zero3_gpu_bytes(
    total_params: int,
    largest_layer_params: int,
    num_gpus_per_node: int = 1,
    num_nodes: int = 1,
    cpu_offload: bool = False,
    cpu_offload_params: bool = False,
) -> int:
    """Per-GPU bytes from `estimate_zero3_model_states_mem_needs`."""
    total_gpus = num_nodes * num_gpus_per_node
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            return int(largest_layer_memory)
        return int(largest_layer_memory + int(2 * total_params / total_gpus))
    return int(largest_layer_memory + int(18 * total_params / total_gpus))


def _largest_layer_params(arch: Arch) -> int:
    """Largest single module's own parameters, as DeepSpeed's `model_to_params`
    counts them (`m.parameters(recurse=False)`), for a standard HF decoder:
    the embedding / lm_head, an attention projection, or an MLP projection
    (per expert for MoE).  Biases are ignored.  A transformers version that
    fuses all experts into one module would give a larger number for MoE."""
    cfg = _text_config(arch)
    h = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or h // heads)
    candidates = [
        int(cfg["vocab_size"]) * h,
        h * heads * head_dim,
        h * kv * head_dim,
    ]
    if cfg.get("intermediate_size"):
        candidates.append(h * int(cfg["intermediate_size"]))
    if cfg.get("moe_intermediate_size"):
        candidates.append(h * int(cfg["moe_intermediate_size"]))
    return max(candidates)


# Plan mapping: full fine-tuning, no offload, `plan["gpus"]` GPUs on one node.
# LoRA/QLoRA -> None (the estimator has no notion of frozen weights).
def deepspeed_model_states(arch: Arch, plan: Plan) -> int | None:
    if plan["method"] != "full":
        return None
    return deepspeed_zero2_gpu_bytes(int(arch["total_params"]), int(plan.get("gpus", 1)))


def deepspeed_zero3_model_states(arch: Arch, plan: Plan) -> int | None:
    if plan["method"] != "full":
        return None
    return deepspeed_zero3_gpu_bytes(
        int(arch["total_params"]), _largest_layer_params(arch), int(plan.get("gpus", 1))
    )


# ---------------------------------------------------------------------------
# 4. Unsloth
# ---------------------------------------------------------------------------
#
# 4a. Unsloth Studio's training VRAM estimator.
# Source: unslothai/unsloth, studio/backend/utils/hardware/vram_estimation.py
#   (commit 007a781ca04043f98b647df62bedd943daecf274: `extract_arch_config`,
#   `compute_model_weights_bytes`, `compute_lora_params`,
#   `compute_optimizer_bytes`, `compute_activation_bytes`,
#   `estimate_training_vram`), explained in
#   studio/backend/utils/hardware/VRAM_ESTIMATION.md.
#
# total = weights + LoRA adapters + optimizer + gradients + activations + 1.4 GiB
# * weights: 2 B/elem (QLoRA: quantizable linears at 2/3.2 B, or 2/3.6 with
#   double-quant configs); precision is not an input (always 16-bit);
# * LoRA adapters: 2 B x (A+B) elements of the selected projections
#   ("all-linear" = the 7 text projections; routed MoE experts excluded);
# * optimizer: calibrated B/param, adamw_torch 6, adamw_8bit 4,
#   paged_adamw_32bit 8, sgd 4, anything else 4;
# * gradients: max(2 x trainable, 15% of weights) (LoRA: floor capped by
#   max(activations, optimizer));
# * activations per layer: (S*B*qkv + 2*S*B + 2*S*B*mlp) x 2 x 1.25, summed over
#   layers without checkpointing, else max layer x 2.0 (full) / 1.0 (LoRA) for
#   HF checkpointing; eager attention adds max(., B*heads*S^2*2*12*layers).
#
# Plan mapping: method -> training_method; grad_ckpt -> "true" (HF) or "none";
# attn sdpa -> "sdpa" (linear), eager -> "eager"; lora_targets all-linear ->
# "all-linear", attention -> q/k/v/o; optimizer names -> HF `optim` names
# (adamw, adamw-foreach -> adamw_torch; adamw-fused -> adamw_torch_fused;
# adamw-8bit -> adamw_8bit; others passed through, 4 B/param by default).
# Not ported: `llm_int8_skip_modules` handling (needs a pre-quantized repo's
# quantization_config) and the LFM2-specific LoRA module names.
_UNSLOTH_QUANT_4BIT_FACTOR = 16 / 5
_UNSLOTH_DOUBLE_QUANT_4BIT_FACTOR = 3.6
_UNSLOTH_CUDA_OVERHEAD = int(1.4 * GIB)
_UNSLOTH_NON_FLASH_FACTOR = 12.0
_UNSLOTH_LINEAR_ATTN = {"flash_attention_2", "sdpa", "flex_attention"}
_UNSLOTH_DEFAULT_TARGETS = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
]
_UNSLOTH_ATTN_TARGETS = {"q_proj", "k_proj", "v_proj", "o_proj"}
_UNSLOTH_MLP_TARGETS = {"gate_proj", "up_proj", "down_proj"}
_UNSLOTH_OPT_BYTES = {
    "adamw_8bit": 4,
    "paged_adamw_8bit": 4,
    "adamw_bnb_8bit": 4,
    "paged_adamw_32bit": 8,
    "adamw_torch": 6,
    "adamw_torch_fused": 6,
    "sgd": 4,
}
_UNSLOTH_GC = {"none": (None, None), "true": (2.0, 1.0), "unsloth": (1.5, 1.0)}
_PLAN_TO_HF_OPTIM = {
    "adamw": "adamw_torch",
    "adamw-foreach": "adamw_torch",
    "adamw-fused": "adamw_torch_fused",
    "adamw-8bit": "adamw_8bit",
    "paged-adamw-8bit": "paged_adamw_8bit",
    "paged-adamw-32bit": "paged_adamw_32bit",
    "sgd": "sgd",
}


def _first_scalar(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return value[0] if value else None
    return value


def _max_scalar(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        items = [v for v in value if v is not None]
        return max(items) if items else None
    return value


class _UnslothArch:
    """The fields of Unsloth's `ModelArchConfig`, read from a config dict the way
    its `extract_arch_config` reads them from a transformers config."""

    def __init__(self, arch: Arch) -> None:
        cfg = _text_config(arch)
        quant = arch.get("quantization_config") or {}
        self.quant_factor = (
            _UNSLOTH_DOUBLE_QUANT_4BIT_FACTOR
            if quant.get("bnb_4bit_use_double_quant", False)
            else _UNSLOTH_QUANT_4BIT_FACTOR
        )
        self.h = int(cfg["hidden_size"])
        self.n_layers = int(cfg["num_hidden_layers"])
        self.n_heads = int(cfg["num_attention_heads"])
        inter = _first_scalar(cfg.get("intermediate_size"))
        self.inter = int(inter) if inter is not None else self.h * 4
        self.vocab = int(cfg["vocab_size"])
        self.n_kv = int(cfg.get("num_key_value_heads") or self.n_heads)
        self.tie = bool(cfg.get("tie_word_embeddings", arch.get("tie_word_embeddings", True)))

        ffn_cfg = cfg.get("ffn_config")
        ffn: Arch = ffn_cfg if isinstance(ffn_cfg, dict) else {}

        def moe(name: str) -> Any:
            value = cfg.get(name)
            return ffn.get(name) if value is None else value

        experts = None
        for key in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"):
            experts = _first_scalar(moe(key))
            if experts is not None:
                break
        self.n_experts_raw = experts
        moe_inter = moe("moe_intermediate_size")
        if moe_inter is None:
            moe_inter = moe("ffn_hidden_size")
        self.moe_inter = _first_scalar(moe_inter)
        self.n_shared = (
            _first_scalar(moe("n_shared_experts"))
            or _first_scalar(moe("num_shared_experts"))
            or _first_scalar(moe("moe_num_shared_experts"))
            or 0
        )
        self.shared_inter = moe("shared_expert_intermediate_size")
        if self.shared_inter and self.n_shared == 0:
            self.n_shared = 1
        self.top_k = int(
            _max_scalar(moe("num_experts_per_tok"))
            or _max_scalar(moe("top_k_experts"))
            or _max_scalar(moe("moe_top_k"))
            or _max_scalar(moe("moe_topk"))
            or 1
        )
        self.dense_layers: tuple[int, ...] = ()
        if experts is not None and experts > 1:
            self.dense_layers = self._dense_layer_indices(cfg)
        mlp_dense = _first_scalar(moe("intermediate_size_mlp"))
        self.dense_inter = int(mlp_dense) if mlp_dense is not None else None
        if (
            mlp_dense is not None
            and experts is not None
            and experts > 1
            and self.shared_inter is None
            and self.n_shared == 0
        ):
            self.n_shared = 1

        self.q_lora_rank: Any = cfg.get("q_lora_rank")
        self.kv_lora_rank: Any = cfg.get("kv_lora_rank")
        self.qk_nope: Any = cfg.get("qk_nope_head_dim")
        self.qk_rope: Any = cfg.get("qk_rope_head_dim")
        self.v_head: Any = cfg.get("v_head_dim")
        self.head_dim = cfg.get("head_dim")
        self.global_head_dim = cfg.get("global_head_dim")
        self.n_global_kv = cfg.get("num_global_key_value_heads")
        self.k_eq_v = bool(cfg.get("attention_k_eq_v", False))
        self.layer_types = cfg.get("layer_types")
        self.n_kv_shared = cfg.get("num_kv_shared_layers") or 0
        self.double_wide = bool(cfg.get("use_double_wide_mlp", False))
        self.vocab_pli = cfg.get("vocab_size_per_layer_input") or 0
        self.pli = cfg.get("hidden_size_per_layer_input") or 0
        self.moe_dense_mlp = bool(cfg.get("enable_moe_block", False))

    def _dense_layer_indices(self, cfg: Arch) -> tuple[int, ...]:
        n = self.n_layers
        mlp_types = cfg.get("mlp_layer_types")
        if mlp_types:
            return tuple(i for i, t in enumerate(mlp_types[:n]) if str(t).lower() == "dense")
        moe_layers = cfg.get("moe_layers")
        if moe_layers is not None:
            moe_set = {int(i) for i in moe_layers}
            return tuple(i for i in range(n) if i not in moe_set)
        start, interval = cfg.get("moe_layer_start_index"), cfg.get("moe_layer_interval")
        if start is not None and interval is not None and int(interval) > 0:
            end_raw = cfg.get("moe_layer_end_index")
            end = n if end_raw is None or int(end_raw) == -1 else min(int(end_raw) + 1, n)
            moe_set = {i for i in range(max(0, int(start)), end) if (i + 1) % int(interval) == 0}
            return tuple(i for i in range(n) if i not in moe_set)
        first_k = cfg.get("first_k_dense_replace")
        if first_k is not None:
            return tuple(range(min(int(first_k), n)))
        step = cfg.get("decoder_sparse_step")
        mlp_only = {int(i) for i in (cfg.get("mlp_only_layers") or [])}
        if step is not None and step > 0:
            return tuple(i for i in range(n) if i in mlp_only or (i + 1) % step != 0)
        return ()

    # -- shape helpers (`_head_dim`, `_layer_types`, `_get_kv_size`, ...) --
    @property
    def n_experts(self) -> int:
        e = self.n_experts_raw
        return int(e) if e and e > 1 else 1

    @property
    def n_dense(self) -> int:
        return len(self.dense_layers)

    def structured(self) -> bool:
        if self.q_lora_rank is not None:
            return False
        return bool(
            self.layer_types
            or self.head_dim is not None
            or self.global_head_dim is not None
            or self.n_global_kv is not None
            or self.k_eq_v
            or self.n_kv_shared > 0
            or self.double_wide
        )

    def types(self) -> list[str]:
        if self.layer_types and len(self.layer_types) == self.n_layers:
            return list(self.layer_types)
        return ["full_attention"] * self.n_layers

    def kv_size(self) -> int:
        return (self.h // self.n_heads) * self.n_kv

    def mlp_size(self) -> int:
        return int(self.moe_inter) if self.moe_inter is not None else self.inter

    def dense_mlp_size(self) -> int:
        return self.dense_inter or self.inter

    def shared_size(self) -> int:
        return int(self.shared_inter or self.mlp_size())

    def is_dense_layer(self, i: int) -> bool:
        if self.dense_layers:
            return i in self.dense_layers
        return i < self.n_dense

    def kv_shared(self, i: int) -> bool:
        if self.n_kv_shared <= 0:
            return False
        first = self.n_layers - self.n_kv_shared
        return i >= first > 0

    def attn_dims(self, i: int) -> tuple[int, int, bool, bool]:
        sliding = self.types()[i] == "sliding_attention"
        hd = self.global_head_dim if (not sliding and self.global_head_dim) else None
        hd = hd or self.head_dim or self.h // self.n_heads
        alt = self.k_eq_v and not sliding
        kv_heads = self.n_global_kv if (alt and self.n_global_kv) else self.n_kv
        has_k = not self.kv_shared(i)
        return self.n_heads * hd, kv_heads * hd, has_k, has_k and not alt

    def layer_mlp(self, i: int) -> int:
        if self.double_wide and self.kv_shared(i):
            return self.dense_mlp_size() * 2
        return self.dense_mlp_size()

    def linear_dims(self, i: int) -> dict[str, tuple[int, int]]:
        h = self.h
        if self.structured():
            q, kv, has_k, has_v = self.attn_dims(i)
            mlp = self.layer_mlp(i)
        else:
            q, kv, has_k, has_v, mlp = h, self.kv_size(), True, True, self.mlp_size()
        dims = {"q_proj": (h, q), "o_proj": (q, h)}
        if has_k:
            dims["k_proj"] = (h, kv)
        if has_v:
            dims["v_proj"] = (h, kv)
        dims.update(gate_proj=(h, mlp), up_proj=(h, mlp), down_proj=(mlp, h))
        return dims

    def attn_elements(self) -> int:
        h = self.h
        if self.q_lora_rank is not None:
            nh = self.n_heads
            qk_head = self.qk_nope + self.qk_rope
            return int(
                h * self.q_lora_rank
                + self.q_lora_rank * nh * qk_head
                + h * (self.kv_lora_rank + self.qk_rope)
                + self.kv_lora_rank * nh * (self.qk_nope + self.v_head)
                + nh * self.v_head * h
                + self.q_lora_rank
                + self.kv_lora_rank
            )
        kv = self.kv_size()
        return (h + kv + kv + h) * h

    def routed_moe_elements(self) -> int:
        e = self.n_experts
        return self.h * self.mlp_size() * 3 * e + e * self.h

    def shared_moe_elements(self) -> int:
        if not self.n_shared:
            return 0
        total = self.h * self.shared_size() * 3 * self.n_shared
        if self.shared_inter:
            total += self.n_shared * self.h
        return total

    def ple_quantizable(self) -> int:
        p = self.pli
        if p <= 0:
            return 0
        return self.h * (self.n_layers * p) + 2 * (self.h * p) * self.n_layers

    def ple_norms(self) -> int:
        return self.h * self.n_layers + self.pli if self.pli > 0 else 0


def _unsloth_layer_elements(a: _UnslothArch) -> tuple[int, int, int, int]:
    """(quantizable over all layers, norms per layer, embeddings, lm_head)."""
    n = a.n_layers
    moe_mlp = a.routed_moe_elements() + a.shared_moe_elements()
    if a.structured():
        attn_total = 0
        dense_per_layer = []
        for i in range(n):
            dense = 0
            for name, (i_dim, o_dim) in a.linear_dims(i).items():
                if name in _UNSLOTH_ATTN_TARGETS:
                    attn_total += i_dim * o_dim
                elif name in _UNSLOTH_MLP_TARGETS:
                    dense += i_dim * o_dim
            dense_per_layer.append(dense)
        if a.n_experts > 1:
            moe_total = moe_mlp * (n - a.n_dense)
            if a.moe_dense_mlp:
                mlp_total = sum(dense_per_layer) + moe_total
            else:
                dense_only = sum(v for i, v in enumerate(dense_per_layer) if a.is_dense_layer(i))
                mlp_total = moe_total + dense_only
        else:
            mlp_total = sum(dense_per_layer)
    elif a.n_experts > 1:
        attn_total = a.attn_elements() * n
        moe_total = moe_mlp * (n - a.n_dense)
        dense_mlp = a.h * a.dense_mlp_size() * 3
        mlp_total = moe_total + dense_mlp * (n if a.moe_dense_mlp else a.n_dense)
    else:
        attn_total = a.attn_elements() * n
        mlp_total = a.h * a.dense_mlp_size() * 3 * n
    embed = a.vocab * a.h + a.vocab_pli * a.pli * n + a.ple_norms()
    lm_head = 0 if a.tie else a.vocab * a.h
    return attn_total + mlp_total + a.ple_quantizable(), 2 * a.h, embed, lm_head


def _unsloth_weights_bytes(a: _UnslothArch, qlora: bool) -> int:
    quantizable, norms, embed, lm_head = _unsloth_layer_elements(a)
    non_quantizable = norms * a.n_layers + embed + lm_head
    if qlora:
        return int(quantizable * 2 / a.quant_factor + non_quantizable * 2)
    return int((quantizable + non_quantizable) * 2)


def _unsloth_total_params(a: _UnslothArch) -> int:
    quantizable, norms, embed, lm_head = _unsloth_layer_elements(a)
    return quantizable + norms * a.n_layers + embed + lm_head


def _unsloth_lora_mlp(h: int, mlp: int, r: int, targets: list[str], mult: int) -> int:
    ab = {
        "gate_proj": (h * r, r * mlp),
        "up_proj": (h * r, r * mlp),
        "down_proj": (mlp * r, r * h),
    }
    return sum((x + y) * mult for name, (x, y) in ab.items() if name in targets)


def _unsloth_lora_attn(a: _UnslothArch, r: int, targets: list[str]) -> int:
    h = a.h
    if a.q_lora_rank is not None:
        nh = a.n_heads
        dims = {
            "q_proj": (a.q_lora_rank, nh * (a.qk_nope + a.qk_rope)),
            "k_proj": (h, a.kv_lora_rank + a.qk_rope),
            "v_proj": (a.kv_lora_rank, nh * (a.qk_nope + a.v_head)),
            "o_proj": (nh * a.v_head, h),
        }
    else:
        kv = a.kv_size()
        dims = {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h)}
    return sum(i * r + r * o for name, (i, o) in dims.items() if name in targets)


def _unsloth_lora_params(a: _UnslothArch, r: int, targets: list[str] | str) -> int:
    targets_list = [targets] if isinstance(targets, str) else list(targets)
    normalized = {str(t).lower().replace("_", "-") for t in targets_list}
    all_linear = normalized == {"all-linear"}
    selected = list(_UNSLOTH_DEFAULT_TARGETS) if all_linear else targets_list
    n, h = a.n_layers, a.h
    if a.structured():
        attn_total = 0
        dense_per_layer = []
        for i in range(n):
            dense = 0
            for name, (i_dim, o_dim) in a.linear_dims(i).items():
                if not all_linear and name not in selected:
                    continue
                if name in _UNSLOTH_ATTN_TARGETS:
                    attn_total += i_dim * r + r * o_dim
                elif name in _UNSLOTH_MLP_TARGETS:
                    dense += i_dim * r + r * o_dim
            dense_per_layer.append(dense)
        if a.n_experts > 1:
            routed = (
                0 if all_linear else _unsloth_lora_mlp(h, a.mlp_size(), r, selected, a.n_experts)
            )
            shared = _unsloth_lora_mlp(h, a.shared_size(), r, selected, a.n_shared)
            moe = (routed + shared) * (n - a.n_dense)
            if a.moe_dense_mlp:
                mlp_total = sum(dense_per_layer) + moe
            else:
                mlp_total = moe + sum(
                    v for i, v in enumerate(dense_per_layer) if a.is_dense_layer(i)
                )
        else:
            mlp_total = sum(dense_per_layer)
    elif a.n_experts > 1:
        attn_total = _unsloth_lora_attn(a, r, selected) * n
        routed = 0 if all_linear else _unsloth_lora_mlp(h, a.mlp_size(), r, selected, a.n_experts)
        shared = _unsloth_lora_mlp(h, a.shared_size(), r, selected, a.n_shared)
        dense = _unsloth_lora_mlp(h, a.dense_mlp_size(), r, selected, 1)
        mlp_total = (routed + shared) * (n - a.n_dense) + dense * (
            n if a.moe_dense_mlp else a.n_dense
        )
    else:
        attn_total = _unsloth_lora_attn(a, r, selected) * n
        mlp_total = _unsloth_lora_mlp(h, a.dense_mlp_size(), r, selected, 1) * n
    ple = 0
    if a.pli > 0:
        named = set(targets_list)
        if "per_layer_model_projection" in named:
            ple += h * r + r * (n * a.pli)
        if "per_layer_input_gate" in named:
            ple += (h * r + r * a.pli) * n
        if "per_layer_projection" in named:
            ple += (a.pli * r + r * h) * n
    return attn_total + mlp_total + ple


def _unsloth_layer_activation(a: _UnslothArch, i: int, batch: int, seq: int) -> int:
    is_moe = a.n_experts > 1 and not a.is_dense_layer(i)
    if a.structured():
        q, kv, _, _ = a.attn_dims(i)
        alt = a.k_eq_v and a.types()[i] != "sliding_attention"
        qkv = q + kv * (1 if alt else 2)
        if is_moe:
            mlp = a.mlp_size() * a.top_k
            if a.n_shared:
                mlp += a.shared_size() * a.n_shared
            if a.moe_dense_mlp:
                mlp += a.layer_mlp(i)
        else:
            mlp = a.layer_mlp(i)
    else:
        qkv = a.h + 2 * a.kv_size()
        if is_moe:
            mlp = a.mlp_size() * a.top_k
            if a.n_shared:
                mlp += a.shared_size() * a.n_shared
            if a.moe_dense_mlp:
                mlp += a.inter
        else:
            mlp = a.mlp_size()
    tokens = seq * batch
    ple = tokens * (a.h + a.pli) if a.pli > 0 else 0
    return int((tokens * qkv + tokens * 2 + tokens * 2 * mlp + ple) * 2 * 1.25)


def _unsloth_activations(
    a: _UnslothArch, batch: int, seq: int, gc: str, is_lora: bool, attn_impl: str
) -> int:
    full_mult, lora_mult = _UNSLOTH_GC.get(gc.lower(), (None, None))
    mult = lora_mult if is_lora else full_mult
    if mult is None:
        effective_layers: float = a.n_layers
        linear = sum(_unsloth_layer_activation(a, i, batch, seq) for i in range(a.n_layers))
    else:
        effective_layers = mult
        peak = max(_unsloth_layer_activation(a, i, batch, seq) for i in range(a.n_layers))
        linear = int(peak * mult)
    if a.pli > 0:
        linear += int(seq * batch * a.n_layers * a.pli * 2 * 1.25)
    if attn_impl in _UNSLOTH_LINEAR_ATTN:
        return linear
    scores = batch * a.n_heads * seq * seq
    return max(linear, int(scores * 2 * _UNSLOTH_NON_FLASH_FACTOR * effective_layers))


def unsloth_training_vram(
    arch: Arch,
    method: str,
    batch_size: int,
    max_seq_length: int,
    lora_rank: int = 16,
    target_modules: list[str] | str = "all-linear",
    gradient_checkpointing: str = "unsloth",
    optimizer: str = "adamw_8bit",
    attention_implementation: str = "flash_attention_2",
) -> dict[str, int]:
    """Breakdown in bytes, as Unsloth's `estimate_training_vram` returns it."""
    a = _UnslothArch(arch)
    method = method.lower()
    is_lora = method in ("qlora", "lora")
    weights = _unsloth_weights_bytes(a, qlora=method == "qlora")
    lora_params = _unsloth_lora_params(a, lora_rank, target_modules) if is_lora else 0
    trainable = lora_params if is_lora else _unsloth_total_params(a)
    opt_key = optimizer.lower().replace("-", "_")
    optimizer_bytes = trainable * _UNSLOTH_OPT_BYTES.get(opt_key, 4)
    activations = _unsloth_activations(
        a, batch_size, max_seq_length, gradient_checkpointing, is_lora, attention_implementation
    )
    floor = int(weights * 0.15)
    if is_lora:
        floor = min(floor, max(activations, optimizer_bytes))
    gradients = max(trainable * 2, floor)
    parts = {
        "model_weights": weights,
        "lora_adapters": lora_params * 2,
        "optimizer_states": optimizer_bytes,
        "gradients": gradients,
        "activations": activations,
        "cuda_overhead": _UNSLOTH_CUDA_OVERHEAD,
    }
    parts["total"] = sum(parts.values())
    return parts


def unsloth(arch: Arch, plan: Plan) -> int | None:
    method = plan["method"]
    if method not in ("full", "lora", "qlora"):
        return None
    targets: list[str] | str = (
        "all-linear"
        if plan.get("lora_targets", "all-linear") == "all-linear"
        else ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    optimizer = str(plan["optimizer"])
    optim = _PLAN_TO_HF_OPTIM.get(optimizer, optimizer)
    return unsloth_training_vram(
        arch,
        method,
        batch_size=int(plan["batch"]),
        max_seq_length=int(plan["seq_len"]),
        lora_rank=int(plan.get("lora_rank", 16)),
        target_modules=targets,
        gradient_checkpointing="true" if plan.get("grad_ckpt") else "none",
        optimizer=optim,
        attention_implementation="eager" if plan.get("attn") == "eager" else "sdpa",
    )["total"]


# 4b. Unsloth's published VRAM table.
# Source: https://unsloth.ai/docs/get-started/fine-tuning-for-beginners/unsloth-requirements
#   ("Fine-tuning VRAM requirements": QLoRA = 4-bit, LoRA = 16-bit, "the absolute
#   minimum"; no sequence length or batch size stated).  Rows as published; the
#   page's "GB" is read as GiB, matching Unsloth's own estimator code, which
#   reports `bytes / 1024**3` as "_gb".  We interpolate linearly in the
#   parameter count (billions = 1e9) between rows and answer None outside
#   3B..405B and for full fine-tuning (the table has no such column).
UNSLOTH_TABLE: list[tuple[float, float, float]] = [
    # (params in billions, QLoRA 4-bit GB, LoRA 16-bit GB)
    (3, 3.5, 8),
    (7, 5, 19),
    (8, 6, 22),
    (9, 6.5, 24),
    (11, 7.5, 29),
    (14, 8.5, 33),
    (27, 22, 64),
    (32, 26, 76),
    (40, 30, 96),
    (70, 41, 164),
    (81, 48, 192),
    (90, 53, 212),
    (405, 237, 950),
]


def unsloth_table(arch: Arch, plan: Plan) -> int | None:
    method = plan["method"]
    if method not in ("lora", "qlora"):
        return None
    column = 1 if method == "qlora" else 2
    billions = int(arch["total_params"]) / 1e9
    rows = UNSLOTH_TABLE
    if billions < rows[0][0] or billions > rows[-1][0]:
        return None
    for lo, hi in itertools.pairwise(rows):
        if lo[0] <= billions <= hi[0]:
            frac = (billions - lo[0]) / (hi[0] - lo[0])
            gb = lo[column] + frac * (hi[column] - lo[column])
            return round(gb * GIB)
    return round(rows[-1][column] * GIB)


# ---------------------------------------------------------------------------
# 5. EleutherAI "Transformer Math 101"
# ---------------------------------------------------------------------------
#
# Source: Quentin Anthony, Stella Biderman, Hailey Schoelkopf, "Transformer
#   Math 101", EleutherAI blog, 2023-04-18, https://blog.eleuther.ai/transformer-math/
#   ("Memory Requirements" -> "Training"), whose activation formulas are from
#   Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
#   Transformer Models" (arXiv:2205.05198).
#
# Total = model + optimizer + gradients + activations, with
# * model: 4 B/param pure fp32, 2 B/param pure fp16/bf16 and mixed precision;
# * optimizer: vanilla AdamW 12 B/param (fp32 copy 4 + momentum 4 + variance 4),
#   8-bit (bitsandbytes) 6 B/param, SGD with momentum 8 B/param.  The blog's
#   AdamW figure includes the fp32 copy even for pure fp32 training; applied
#   literally, as a reader would, fp32 AdamW is 4+12+4 = 20 B/param and mixed
#   precision 2+12+2 = 16 B/param;
# * gradients: "fp32 or fp16", matching the model dtype: 4 or 2 B/param;
# * activations (bytes, tensor parallel t = 1):
#     no recomputation         s*b*h*L*(10 + 24 + 5*a*s/h)
#     selective recomputation  s*b*h*L*(10 + 24)
#     full recomputation       2*s*b*h*L
#
# Plan mapping: grad_ckpt -> full recomputation; otherwise eager attention ->
# no recomputation, SDPA -> the selective formula (its only saving is the
# s^2 attention scores, which SDPA/FlashAttention never stores).  Optimizers
# other than the AdamW family and SGD have no answer.  LoRA/QLoRA -> None:
# the post does not cover adapters.
def transformer_math_101(arch: Arch, plan: Plan) -> int | None:
    if plan["method"] != "full":
        return None
    optimizer = plan["optimizer"].lower()
    if "8bit" in optimizer.replace("-", "").replace("_", ""):
        opt_bytes = 6
    elif _is_adam(optimizer):
        opt_bytes = 12
    elif _is_sgd(optimizer):
        opt_bytes = 8
    else:
        return None
    params = int(arch["total_params"])
    precision = plan["precision"]
    model_bytes = 4 if precision == "fp32" else 2
    grad_bytes = 4 if precision == "fp32" else 2

    cfg = _text_config(arch)
    s, b = int(plan["seq_len"]), int(plan["batch"])
    h, layers, a = (
        int(cfg["hidden_size"]),
        int(cfg["num_hidden_layers"]),
        int(cfg["num_attention_heads"]),
    )
    sbhl = s * b * h * layers
    if plan.get("grad_ckpt"):
        activations = 2 * sbhl
    elif plan.get("attn") == "eager":
        activations = sbhl * 34 + (5 * a * s * s * b * layers)  # sbhL * 5as/h
    else:
        activations = sbhl * 34
    return params * (model_bytes + opt_bytes + grad_bytes) + activations


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------

PEERS: dict[str, tuple[Callable[[Arch, Plan], int | None], str]] = {
    "accelerate": (
        accelerate_estimate,
        "huggingface/accelerate src/accelerate/commands/estimate.py "
        "(`accelerate estimate-memory`, commit 00e4d264)",
    ),
    "gpu_poor": (
        gpu_poor,
        "RahulSChand/gpu_poor src/App.js training mode (commit 05d18ab8)",
    ),
    "deepspeed_zero2": (
        deepspeed_model_states,
        "deepspeedai/DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py "
        "estimate_zero2_model_states_mem_needs (commit 7dee2e06)",
    ),
    "deepspeed_zero3": (
        deepspeed_zero3_model_states,
        "deepspeedai/DeepSpeed deepspeed/runtime/zero/stage3.py "
        "estimate_zero3_model_states_mem_needs (commit ea78ab68)",
    ),
    "unsloth": (
        unsloth,
        "unslothai/unsloth studio/backend/utils/hardware/vram_estimation.py "
        "estimate_training_vram (commit 007a781c)",
    ),
    "unsloth_table": (
        unsloth_table,
        "https://unsloth.ai/docs/get-started/fine-tuning-for-beginners/unsloth-requirements "
        "(VRAM table, interpolated)",
    ),
    "transformer_math_101": (
        transformer_math_101,
        "EleutherAI blog 'Transformer Math 101' (2023), https://blog.eleuther.ai/transformer-math/",
    ),
}


def estimate_all(arch: dict[str, Any], plan: dict[str, Any]) -> dict[str, int | None]:
    """Bytes each peer predicts for this plan's training peak; None where the peer has no answer."""
    return {name: fn(arch, plan) for name, (fn, _citation) in PEERS.items()}
