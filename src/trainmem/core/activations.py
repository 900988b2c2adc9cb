"""Activation memory: the tensors autograd saves for backward, per decoder layer.

Counted tensor by tensor from what each op's backward needs (torch's derivatives.yaml saves a
mul's ``other`` only when ``self`` requires grad, a linear's input only for its weight grad, a
softmax its output) walking the Hugging Face decoder layer (transformers/models/llama/
modeling_llama.py and its siblings), in the spirit of Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models", section 4.1) but for the kernels
fine-tuning really uses: SDPA flash / memory-efficient attention saves q, k, v, the output and
a log-sum-exp per row, never the s x s scores; ``eager`` attention keeps the fp32 softmax and
its 16-bit copy. Sizes are bytes per token unless named otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainmem.core.architecture import PARTS, ModelSpec
from trainmem.core.plan import Plan
from trainmem.core.precision import Dtypes, kbit_fp32_stream
from trainmem.core.states import adapter_rank

Kernels = Literal["cuda", "cpu"]  # whose kernels decide what is saved


@dataclass(frozen=True)
class LayerActivations:
    saved: int  # saved for backward by one layer without checkpointing (bytes per token)
    checkpoint: int  # what gradient checkpointing keeps per layer (its input)
    backward_transient: int  # gradients in flight while one layer runs backward
    attention_scores: int  # eager attention only: bytes per token per key position
    saved_fixed: int = 0  # saved per layer whatever the tokens (PEFT's merged expert weights)
    transient_fixed: int = 0  # in flight per layer during its backward
    scores_transient: int = 0  # eager attention's backward, bytes per token per key position
    int8_inputs: int = 0  # LLM.int8 linears' inputs, held by bitsandbytes (bytes per token)
    int8_inputs_extra: int = 0  # the part of those that the saves above do not hold already
    # the layer's own input, held by its saves (Unsloth's RMSNorm saves X): without
    # checkpointing kept on top of ``saved``; under checkpointing it is the checkpoint itself
    input_kept: int = 0


def _input_saves(
    plan: Plan, dt: Dtypes, width: int, x_bytes: int, users: list[str], kernels: Kernels
) -> int:
    """Bytes saved for the input (``width`` wide) shared by the linears named ``users``.

    Full fine-tuning saves it once for the weight gradients (autocast: one 16-bit copy per
    linear, since autocast caches only leaf weights). LoRA saves it in each targeted layer's
    adapter, cast to fp32 once per layer when it is not fp32 already (under autocast lora_A
    then runs on, and saves, a 16-bit copy of that cast). With dropout each layer keeps its
    dropped-out copy and what dropout's backward needs: on CUDA ``native_dropout``'s 1-byte
    mask, on CPU an input-sized noise tensor (aten/src/ATen/native/Dropout.cpp).
    """
    if plan.training.trains_base:
        if dt.autocast and x_bytes == 4:
            return len(users) * 2 * width
        return x_bytes * width
    targets = [u for u in users if set(PARTS.get(u, (u,))) & set(plan.target_modules)]
    if not targets:
        return 0
    saved = 2 if dt.autocast else dt.trainable  # the input cast to the adapters' dtype
    if plan.lora_dropout > 0:
        keep = 1 if kernels == "cuda" else dt.trainable
        return len(targets) * (saved + keep) * width
    if x_bytes == saved and not dt.autocast:
        return saved * width  # already in the adapter's dtype: one tensor for all
    return len(targets) * saved * width


def _norm_saves(spec: ModelSpec, plan: Plan, dt: Dtypes, width: int) -> int:
    """RMSNorm: ``x.to(float32)`` is saved by ``pow``; the normalised value by the weight mul.

    Gemma's norm multiplies by ``(1 + weight)`` in fp32, so its saved normalised value is fp32.
    """
    normalised = 4 if spec.model_type.startswith("gemma") else dt.resid
    return 4 * width + (normalised * width if plan.training.trains_base else 0)


# The model types Unsloth's FastLlamaModel family patches (unsloth 015bdef,
# unsloth/models/llama.py FastLlamaModel.patch_peft_model: its apply_lora_mlp table; falcon_h1
# is listed but its MLP is left unpatched, qwen3moe's experts are not these linears).
UNSLOTH_FAST_MODELS = ("llama", "mistral", "qwen2", "gemma", "gemma2", "cohere", "granite", "qwen3")


@dataclass(frozen=True)
class UnslothPaths:
    """Which of Unsloth's LoRA autograd functions run (unsloth/kernels/fast_lora.py)."""

    qkv: bool = False  # LoRA_QKV: q, k and v from one input
    o: bool = False  # LoRA_W on o_proj
    mlp: bool = False  # LoRA_MLP: gate, up, act and down in one function


def unsloth_lora_paths(spec: ModelSpec, plan: Plan) -> UnslothPaths:
    """The fused LoRA paths FastLlamaModel.patch_peft_model installs (unsloth/models/llama.py):
    only with lora_dropout 0 (and bias "none"), each where every projection it covers is
    adapted and has no bias (Qwen2's q/k/v biases keep PEFT's layers there), no DoRA."""
    if not (plan.tooling.fused_lora and plan.trains_adapter and plan.lora_dropout == 0):
        return UnslothPaths()
    if spec.model_type not in UNSLOTH_FAST_MODELS or spec.fused or spec.is_moe:
        return UnslothPaths()
    targets = set(plan.target_modules)
    return UnslothPaths(
        qkv={"q", "k", "v"} <= targets and not spec.qkv_bias,
        o="o" in targets and not spec.o_bias,
        mlp={"gate", "up", "down"} <= targets and not spec.mlp_bias,
    )


# Unsloth's RMSNorm kernel (unsloth/kernels/rms_layernorm.py Fast_RMS_Layernorm.forward) saves
# its input X as it is and an fp32 inverse RMS per row: 4 bytes per token beyond X.
UNSLOTH_NORM_ROW = 4


def layer_activations(
    spec: ModelSpec, plan: Plan, dt: Dtypes, kernels: Kernels = "cuda"
) -> LayerActivations:
    if unsloth_fast_layer(spec, plan):
        return _unsloth_layer(spec, plan, dt, kernels)
    h, qd, kvd = spec.hidden, spec.q_dim, spec.kv_dim
    e, r = dt.act, dt.resid
    attn_e = 2 if dt.autocast else e  # SDPA runs on 16-bit copies under autocast
    saved = spec.norms_per_layer * _norm_saves(spec, plan, dt, h)

    # Attention: q/k/v projections share the normalised input.
    saved += _input_saves(plan, dt, h, r, ["qkv"] if spec.fused else ["q", "k", "v"], kernels)
    if spec.qk_norm != "none":
        saved += _norm_saves(spec, plan, dt, qd + kvd)
    eager = plan.attn == "eager"
    kv_width = qd if eager and spec.kv_heads != spec.heads else kvd  # eager repeats k/v
    saved += attn_e * (qd + 2 * kv_width)  # q, k, v after rotary, as the kernel saves them
    saved += attn_e * qd  # attention output (also o_proj's input)
    saved += 4 * spec.heads  # log-sum-exp per query row (fp32)
    if plan.trains_adapter:  # full fine-tuning's o_proj saves the output above itself
        saved += _input_saves(plan, dt, qd, attn_e, ["o"], kernels)

    fixed = fixed_transient = 0
    if spec.is_moe:
        moe_saved, fixed = _moe_saves(spec, plan, e)
        saved += moe_saved
        fixed_transient = fixed  # backward builds the merged weight's full gradient
    else:
        # MLP: gate/up share the normalised input; act(gate), act*up and up are saved.
        gate_up = ["gate_up"] if spec.fused else ["gate", "up"]
        saved += _input_saves(plan, dt, h, r, gate_up, kernels)
        i = spec.intermediate
        saved += 3 * e * i + _input_saves(plan, dt, i, e, ["down"], kernels)

    scores = 0
    if eager and spec.attention_sinks:
        # gpt-oss: one softmax over [scores, sink] in the activations' dtype, saved once
        scores = spec.heads * attn_e
    elif eager:
        # fp32 softmax output (saved by softmax) and its 16-bit copy (saved by the matmul).
        scores = spec.heads * (4 + (attn_e if attn_e != 4 else 0))
        if spec.attn_logit_softcap:
            scores += spec.heads * attn_e  # Gemma 2's tanh soft-cap saves its output
    i_eff = spec.expert_intermediate * spec.experts_per_token if spec.is_moe else spec.intermediate
    int8_all, int8_extra = _int8_inputs(spec, plan, dt, attn_e)
    return LayerActivations(
        saved=saved,
        checkpoint=r * h,
        backward_transient=2 * r * h + 3 * e * i_eff,
        attention_scores=scores,
        saved_fixed=fixed,
        transient_fixed=fixed_transient,
        scores_transient=spec.heads * _softmax_backward(plan, attn_e, kernels) if eager else 0,
        int8_inputs=int8_all,
        int8_inputs_extra=int8_extra,
    )


def unsloth_fast_layer(spec: ModelSpec, plan: Plan) -> bool:
    """Whether the decoder layer is Unsloth's (LlamaDecoderLayer_fast_forward and kin, with its
    RMSNorm kernel): on its fast models under LoRA / QLoRA with sdpa-like attention."""
    return (
        plan.tooling.fused_lora
        and plan.trains_adapter
        and spec.model_type in UNSLOTH_FAST_MODELS
        and not (spec.fused or spec.is_moe)
        and plan.attn != "eager"
    )


def _unsloth_layer(spec: ModelSpec, plan: Plan, dt: Dtypes, kernels: Kernels) -> LayerActivations:
    """One Unsloth decoder layer (unsloth/models/llama.py LlamaDecoderLayer_fast_forward,
    LlamaAttention_fast_forward): what each autograd function saves, bytes per token.

    - RMSNorm kernel: X and an fp32 inverse RMS. The first norm's X is the layer's input
      (``input_kept``), the second's the residual after attention.
    - LoRA_QKV (fast_lora.py): X (the norm's output) once for q, k and v; the LoRA A/B weights
      it saves are parameters. RoPE's kernel saves only the shared cos / sin tables.
    - attention (flash-attention / SDPA): q, k, v, the output and a log-sum-exp per row, as the
      standard count; LoRA_W on o_proj saves X, which is that output itself.
    - LoRA_MLP: X (the norm's output), e = X @ G and g = X @ U; the SwiGLU output is recomputed
      in backward. Its backward holds DW = dY @ W_down^T (tokens x intermediate) and writes the
      SwiGLU gradients and dX in place into e, g and X (swiglu_DWf_DW_dfg_kernel,
      ``out = X``).
    A projection left on PEFT's path (a bias, a missing target, dropout) is counted as PEFT's."""
    paths = unsloth_lora_paths(spec, plan)
    h, qd, kvd = spec.hidden, spec.q_dim, spec.kv_dim
    e, r = dt.act, dt.resid
    saved = 2 * UNSLOTH_NORM_ROW + r * h  # the second norm's X (the first's is the input)
    qkv = ["q", "k", "v"]
    saved += r * h if paths.qkv else _input_saves(plan, dt, h, r, qkv, kernels)
    # attention: flash-attention (attn flash-attention-2, if installed) saves k / v as they are;
    # otherwise Unsloth runs xformers, a dependency of its install, and repeats k / v to every
    # head first when training (unsloth/utils/attention_dispatch.py run_attention, XFORMERS)
    kv = kvd if plan.attn == "flash-attention-2" else qd
    saved += e * (qd + 2 * kv) + e * qd + 4 * spec.heads
    if not paths.o:
        saved += _input_saves(plan, dt, qd, e, ["o"], kernels)
    i = spec.intermediate
    if paths.mlp:
        saved += r * h + 2 * e * i
        transient = 2 * r * h + e * i
    else:
        saved += _input_saves(plan, dt, h, r, ["gate", "up"], kernels)
        saved += 3 * e * i + _input_saves(plan, dt, i, e, ["down"], kernels)
        transient = 2 * r * h + 3 * e * i
    int8_all, int8_extra = _int8_inputs(spec, plan, dt, e)
    return LayerActivations(
        saved=saved,
        checkpoint=r * h,
        backward_transient=transient,
        attention_scores=0,
        int8_inputs=int8_all,
        int8_inputs_extra=int8_extra,
        input_kept=r * h,
    )


def _softmax_backward(plan: Plan, attn_e: int, kernels: Kernels) -> int:
    """Bytes per score element that eager attention's softmax backward holds beyond the saved
    scores. ``softmax(x, dtype=float32)`` casts a bf16 or fp32 input to fp32 first and runs
    an fp32 softmax (aten/src/ATen/native/SoftMax.cpp: only fp16 on CUDA takes the fused
    half_to_float path), so its backward holds the fp32 output, the fp32 incoming gradient
    (the probabilities' gradient cast up) and an fp32 result: 12 bytes, where 6 (fp32 output
    and its 16-bit copy) or 4 (fp32) were saved. Measured on CPU at 8192 tokens
    (bench/results/measure-cpu-real-stacks.json); fp16 on CUDA returns its result in fp16."""
    saved = 4 + (attn_e if attn_e != 4 else 0)
    peak = 10 if plan.precision.startswith("fp16") and kernels == "cuda" else 12
    return peak - saved


def _int8_inputs(spec: ModelSpec, plan: Plan, dt: Dtypes, attn_e: int) -> tuple[int, int]:
    """(all, not already saved) bytes per token of the inputs LLM.int8 linears keep.

    bitsandbytes 0.50.2 MatMul8bitLt / MatMul8bitFp (autograd/_functions.py) keep their input
    as ``ctx.tensors`` / ``ctx.A``, attributes rather than saved tensors: checkpointing's
    saved-tensor hooks never see them, so under non-reentrant checkpointing every 8-bit
    linear's input stays alive until its backward. LoRA's own save of a targeted input is
    the same tensor when the input is already in the adapters' dtype (no cast)."""
    if not (plan.training.quantized_base and plan.quant == "int8") or spec.is_moe:
        return 0, 0
    r, e = dt.resid, dt.act
    groups = [
        (["qkv"] if spec.fused else ["q", "k", "v"], spec.hidden, r),
        (["o"], spec.q_dim, attn_e),
        (["gate_up"] if spec.fused else ["gate", "up"], spec.hidden, r),
        (["down"], spec.intermediate, e),
    ]
    total = extra = 0
    for users, width, x_bytes in groups:
        total += width * x_bytes
        targeted = any(set(PARTS.get(u, (u,))) & set(plan.target_modules) for u in users)
        shared = targeted and x_bytes == dt.trainable and not dt.autocast
        if not (shared and plan.lora_dropout == 0):
            extra += width * x_bytes
    return total, extra


def _moe_saves(spec: ModelSpec, plan: Plan, e: int) -> tuple[int, int]:
    """(bytes per token, bytes per layer) a transformers-5 MoE block saves for backward.

    Experts run as grouped matmuls over the T*k (token, expert) pairs sorted by expert
    (transformers/integrations/moe.py): saved are the gathered token rows, the up/gate
    projection and activation outputs, the sorted routing weights, three int64 index
    tensors per pair, the fp32 router softmax and the top-k. With frozen experts the
    gathered rows and act*up are not needed. Measured to the byte on Qwen3-30B-A3B, Mixtral
    and gpt-oss (bench/results/measure-cpu-moe.json). When LoRA adapts the experts, PEFT
    merges W + BA into a 16-bit copy of each layer's expert weights (a parametrization),
    kept for backward: the per-layer part.
    """
    h, k, i, n_exp = spec.hidden, spec.experts_per_token, spec.expert_intermediate, spec.experts
    adapted = any(adapter_rank(spec, plan, lin) for lin in spec.linears() if lin.expert)
    trainable = plan.training.trains_base or adapted
    if spec.model_type == "gpt_oss":  # interleaved clamp / sigmoid gate, top-k softmax
        if trainable:
            per_token = e * h + 10 * k + k * (34 + 2 * e * h + 7 * e * i)
        else:
            per_token = 10 * k + k * (26 + e * h + 6 * e * i)
    else:
        weights = 4 if spec.model_type == "mixtral" else 2  # Mixtral keeps them in fp32
        router = 4 * n_exp + 12 * k + 4
        if trainable:
            per_token = e * h + router + k * (weights + 24 + 2 * e * h + 4 * e * i)
        else:
            per_token = router + k * (weights + 24 + e * h + 3 * e * i)
    merged = (
        2
        * sum(
            lin.count * lin.in_features * lin.out_features for lin in spec.linears() if lin.expert
        )
        if adapted
        else 0
    )
    return per_token, merged


@dataclass(frozen=True)
class HeadActivations:
    saved: int  # final norm and lm_head input, bytes per token
    logits_forward: int  # bytes per token alive while the loss is computed in forward
    loss_backward: int  # bytes per token during log_softmax backward
    output: int = 0  # bytes per token of the logits the model returns (``out.logits``)


def head_activations(spec: ModelSpec, plan: Plan, dt: Dtypes) -> HeadActivations:
    """Final norm, lm_head and the loss.

    transformers' ForCausalLMLoss (transformers/loss/loss_utils.py) upcasts the logits with
    ``logits.float()`` before cross_entropy, whose log_softmax saves its fp32 output. During
    backward, log_softmax's grad input, grad output and saved output (three fp32 tensors of
    batch x seq x vocab) are alive at once: for large vocabularies this is the step's peak.
    """
    v, h = spec.vocab, spec.hidden
    logits_e = 2 if dt.autocast else dt.act
    if kbit_fp32_stream(plan):
        logits_e = 4  # fp32 lm_head after prepare_model_for_kbit_training
    saved = final_norm_saves(spec, plan, dt)
    if plan.trains_lm_head:
        saved += 2 * h if dt.autocast else dt.resid * h  # lm_head input for its weight grad
    upcast = 4 if logits_e != 4 else 0
    softcap = logits_e * v if spec.final_logit_softcap else 0  # Gemma 2: tanh saves its output
    return HeadActivations(
        saved=saved + softcap,
        logits_forward=(logits_e + upcast + 4) * v + softcap,
        output=logits_e * v,
        loss_backward=12 * v,
    )


def final_norm_saves(spec: ModelSpec, plan: Plan, dt: Dtypes) -> int:
    """The final RMSNorm's saves, bytes per token (Unsloth's kernel: X and the inverse RMS;
    unsloth/models/llama.py LlamaModel_fast_forward calls fast_rms_layernorm on self.norm)."""
    if unsloth_fast_layer(spec, plan):
        return dt.resid * spec.hidden + UNSLOTH_NORM_ROW
    return _norm_saves(spec, plan, dt, spec.hidden)


def autocast_copy_bytes(spec: ModelSpec) -> tuple[int, int]:
    """16-bit weight copies autocast makes: (per decoder layer, for lm_head)."""
    return 2 * spec.layer_weight_elements, 2 * spec.vocab * spec.hidden
