"""Model states: weights, gradients, optimizer state, master copy and adapter, per GPU.

Per-parameter accounting follows ZeRO (Rajbhandari et al. 2019, section 3) for the way stages
1/2/3 partition optimizer state, gradients and parameters across data-parallel GPUs, with
DeepSpeed's mixed-precision layout (16-bit weights and gradients, fp32 master copy and Adam
moments; ``deepspeed/runtime/zero/stage_1_and_2.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.core.architecture import (
    PEFT_ADAPTS_EXPERTS,
    PEFT_MAPS_EXPERT_NAMES,
    Linear,
    ModelSpec,
)
from trainmem.core.plan import Plan
from trainmem.core.precision import Dtypes, kbit_upcast
from trainmem.core.sharding import (
    SUB_GROUP_SIZE,
    divided,
    fsdp2_shard_elements,
    full_plan,
    layout,
    offloaded_states,
    zero2_gradient_partition,
    zero_grad_norm,
)
from trainmem.core.units import shown

# bitsandbytes NF4 (bitsandbytes/functional.py quantize_4bit, blocksize 64 as transformers
# passes none; 0.50.2): 4 bits per weight and an fp32 absmax per block of 64. Double
# quantization (compress_statistics) re-quantizes the absmax to uint8 in blocks of 256 with an
# fp32 absmax per block: 4 bits + 1 byte per 64 weights + 4 bytes per 64*256 weights.
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)
NF4_NO_DOUBLE_QUANT_BYTES_PER_PARAM = 0.5 + 4 / 64
# bitsandbytes 8-bit blockwise optimizers: uint8 state + fp32 absmax per block of 256
# (bitsandbytes/optim/optimizer.py Optimizer8bit.init_state, block_wise=True).
ADAM8BIT_BYTES_PER_STATE = 1 + 4 / 256
BNB_MIN_8BIT_SIZE = 4096  # smaller tensors keep 32-bit states
# torchao 0.19 AdamW4bit as transformers passes it (trainer_optimizer.py: block_size=256):
# packed 4-bit state + an fp32 scale per block of 256 (torchao/optim/subclass_4bit.py);
# tensors under 4096 elements or not a multiple of the block keep states in the param dtype
# (torchao/optim/adam.py _new_buffer).
ADAM4BIT_BYTES_PER_STATE = 0.5 + 4 / 256
TORCHAO_BLOCK = 256
BITS_8 = ("adamw-8bit", "paged-adamw-8bit", "lion-8bit")
# Optimizer states per element, (count, bytes) for the ones with a fixed layout: bitsandbytes
# 32-bit states are fp32 whatever the parameter dtype (optimizer.py Optimizer2State/
# Optimizer1State.init_state); Lion keeps one momentum (bitsandbytes/optim/lion.py).
FIXED_STATES = {"paged-adamw-32bit": (2, 4), "lion": (1, 4)}


@dataclass(frozen=True)
class Matrix:
    """A trainable tensor's shape (``cols == 1`` for vectors), ``count`` copies in the model."""

    rows: int
    cols: int
    count: int
    embedding: bool = False  # an nn.Embedding weight (the Trainer's 8-bit optimizers keep 32)

    @property
    def numel(self) -> int:
        return self.rows * self.cols * self.count


@dataclass(frozen=True)
class States:
    weights: int  # base weights (frozen or trainable) resident on one GPU
    master: int  # fp32 master copy (DeepSpeed-style mixed precision)
    adapter: int  # LoRA A/B weights
    gradients: int
    optimizer: int
    optimizer_temp: int  # allocated during optimizer.step() only
    trainable_params: int
    offloaded: int = 0  # this process's states kept in host RAM (ZeRO-Offload, CPUOffload)


def adapter_rank(spec: ModelSpec, plan: Plan, lin: Linear) -> int:
    """The LoRA rank PEFT gives ``lin`` under this plan, 0 when it is not adapted."""
    if not plan.trains_adapter:
        return 0
    every = plan.lora_targets == "all-linear"
    linear = plan.lora_targets == "linear"  # axolotl: the leaf names of every nn.Linear
    if lin.expert or lin.name == "router":
        # MoE experts (fused 3-D parameters) and the router are adapted only on some models
        # (architecture.PEFT_ADAPTS_EXPERTS), the router (no nn.Linear) only under all-linear.
        if spec.model_type not in PEFT_ADAPTS_EXPERTS:
            return 0
        if lin.name == "router":
            return plan.lora_rank if every else 0
        if not every and spec.model_type not in PEFT_MAPS_EXPERT_NAMES:
            return 0
        if linear and not spec.shared_expert_intermediate:
            return 0  # no nn.Linear is named gate_proj / up_proj / down_proj to map from
    if lin.name == "shared_expert_gate":  # an nn.Linear no target list names
        return plan.lora_rank if every or linear else 0
    if not set(plan.target_modules) & set(lin.parts):
        return 0
    if lin.expert and lin.name == "gate_up":
        return 2 * plan.lora_rank  # PEFT doubles rank (and alpha) on the fused gate_up
    return plan.lora_rank


def peft_refusal(spec: ModelSpec, plan: Plan) -> str | None:
    """Why get_peft_model raises on this plan's LoRA targets, or None: the figures then
    describe a run that cannot start (peft 0.22.0 tuners/tuners_utils.py inject_adapter,
    utils/transformers_weight_conversion.py _convert_peft_config_moe)."""
    if not plan.trains_adapter or plan.stack == "mlx":  # mlx-lm builds its own adapters
        return None
    named = set(plan.target_modules)
    if (
        spec.model_type in PEFT_MAPS_EXPERT_NAMES
        and plan.lora_targets not in ("all-linear", "linear")
        and len(named & {"gate", "up"}) == 1
    ):
        return (
            f"PEFT refuses these LoRA targets on {spec.model_type}: transformers 5 fuses the "
            "experts' gate_proj and up_proj into gate_up_proj, so name both or neither"
        )
    if not trainable_matrices(spec, plan):
        return (  # any model_type a config.json gives: cut short and escaped
            f"PEFT refuses these LoRA targets on {shown(spec.model_type)}: none of them names "
            "a layer of this model, so there is no adapter to train"
        )
    return None


def trainable_matrices(spec: ModelSpec, plan: Plan) -> list[Matrix]:
    """Shapes of every trainable tensor: the whole model, or the LoRA A and B matrices."""
    if plan.trains_adapter:
        out: list[Matrix] = []
        for lin in spec.linears():
            rank = adapter_rank(spec, plan, lin)
            if rank:
                if lin.expert:  # PEFT target_parameters: A (r*E, in) and B (out, r*E)
                    n, rank = spec.layers, rank * lin.count
                else:
                    n = lin.count * spec.layers
                out += [Matrix(rank, lin.in_features, n), Matrix(lin.out_features, rank, n)]
        return out
    mats = [Matrix(spec.vocab, spec.hidden, 1, embedding=True)]
    if not spec.tied_embeddings:
        mats.append(Matrix(spec.vocab, spec.hidden, 1))
    for lin in spec.linears():
        mats.append(Matrix(lin.out_features, lin.in_features, lin.count * spec.layers))
        if lin.bias:
            mats.append(Matrix(lin.out_features, 1, lin.count * spec.layers))
    mats.append(Matrix(spec.layer_norm_params(), 1, spec.layers))
    mats.append(Matrix(spec.hidden, 1, 1))
    return mats


def quantized_weight_bytes(spec: ModelSpec, plan: Plan) -> int:
    """The decoder layers' linear weights as bitsandbytes stores them: NF4 / FP4 (the same
    size) with or without double quantization, or LLM.int8 (Int8Params._quantize in
    bitsandbytes/nn/modules.py 0.50.2: an int8 weight and an fp32 scale per output row)."""
    all_elements = spec.layers * spec.layer_weight_elements
    quantized = all_elements - spec.bnb_kept_elements  # the rest: 16-bit (the caller's)
    if plan.quant == "int8":
        per_layer = sum(
            lin.count * (lin.in_features + 4) * lin.out_features for lin in spec.linears()
        )
        return spec.layers * per_layer * quantized // max(1, all_elements)
    per_param = NF4_BYTES_PER_PARAM if plan.double_quant else NF4_NO_DOUBLE_QUANT_BYTES_PER_PARAM
    return round(quantized * per_param)


def saved_module_matrices(spec: ModelSpec, plan: Plan) -> list[Matrix]:
    """PEFT modules_to_save: a trainable deep copy of each named module, beside the frozen
    original (peft/utils/other.py ModulesToSaveWrapper.update, 0.21.2); a copy of a tied
    lm_head is untied."""
    return [
        Matrix(spec.vocab, spec.hidden, 1, embedding=name == "embed_tokens")
        for name in plan.saved_modules
    ]


def saved_module_bytes(plan: Plan, dt: Dtypes) -> int:
    """Bytes per element of a modules_to_save copy: the original module's dtype (PEFT does not
    upcast it), fp32 where LLaMA-Factory upcasts what trains (unless pure_bf16), 16-bit where
    TRL casts a quantized model's trainable parameters to bf16."""
    stack = plan.tooling
    if stack.upcast_trainable and plan.precision not in ("bf16", "fp16"):
        return 4
    if plan.training.quantized_base:
        return 2 if stack.quantized_trainable_16bit else dt.resid
    return dt.weight


def _optimizer_bytes(
    plan: Plan, mats: list[Matrix], trainable: int, state: int, embedding_32bit: bool = True
) -> int:
    if plan.optimizer == "sgd":
        return 0  # torch.optim.SGD without momentum keeps no state
    if plan.optimizer in FIXED_STATES:
        count, size = FIXED_STATES[plan.optimizer]
        return count * size * trainable
    if plan.optimizer in BITS_8:
        states = 1 if plan.optimizer == "lion-8bit" else 2
        return sum(
            round(m.numel * states * ADAM8BIT_BYTES_PER_STATE)
            if m.rows * m.cols >= BNB_MIN_8BIT_SIZE and not (m.embedding and embedding_32bit)
            else m.numel * 4 * states
            for m in mats
        )
    if plan.optimizer == "adamw-4bit":
        return sum(
            round(m.numel * 2 * ADAM4BIT_BYTES_PER_STATE)
            if m.rows * m.cols >= BNB_MIN_8BIT_SIZE and m.rows * m.cols % TORCHAO_BLOCK == 0
            else m.numel * 2 * state
            for m in mats
        )
    if plan.optimizer == "adafactor":
        # transformers' Adafactor (beta1=None): factored second moment, a row and a column
        # vector in fp32 per matrix; vectors keep a full fp32 second moment.
        return sum(4 * m.count * (m.rows + m.cols if m.cols > 1 else m.rows) for m in mats)
    return 2 * state * trainable  # AdamW: exp_avg and exp_avg_sq in the parameters' dtype


def _optimizer_temp(
    plan: Plan, mats: list[Matrix], trainable: int, state: int, shard: int = 1
) -> int:
    if plan.optimizer == "adamw-foreach":
        # torch/optim/adamw.py _multi_tensor_adamw: torch._foreach_sqrt(exp_avg_sqs) allocates
        # one tensor per parameter in the states' dtype before _foreach_addcdiv_.
        return state * divided(trainable, shard)
    if plan.optimizer == "adafactor":
        # transformers/optimization.py Adafactor.step: fp32 grad copy, grad**2 and the update
        # for the parameter being stepped.
        largest = max((m.rows * m.cols for m in mats), default=0)
        return 3 * 4 * largest
    return 0  # fused AdamW, 8-bit AdamW and SGD update in place


def stored_weight_bytes(spec: ModelSpec, plan: Plan, dt: Dtypes) -> int:
    """The whole model's weights as loaded on one process, before any sharding."""
    if plan.training.quantized_base:
        q_elems = spec.layers * spec.layer_weight_elements - spec.bnb_kept_elements
        other = spec.params - q_elems  # embeddings, lm_head, norms, biases, skipped linears
        if kbit_upcast(plan) and plan.tooling.kbit_recast:  # norms and embeddings cast back
            recast = min(other, spec.embedding_params + spec.lm_head_params + spec.norm_params)
            return quantized_weight_bytes(spec, plan) + recast * dt.weight + (other - recast) * 4
        return quantized_weight_bytes(spec, plan) + other * dt.resid
    return spec.params * dt.weight


def model_states(spec: ModelSpec, plan: Plan, dt: Dtypes) -> States:
    mats = trainable_matrices(spec, plan)
    trainable = sum(m.numel for m in mats)
    params = spec.params
    weights = stored_weight_bytes(spec, plan, dt)
    adapter = trainable * dt.trainable if plan.trains_adapter else 0
    gradients = trainable * dt.trainable
    embedding_32bit = plan.tooling.embedding_32bit_states
    optimizer = _optimizer_bytes(plan, mats, trainable, dt.state, embedding_32bit)
    saved = saved_module_matrices(spec, plan)
    if saved:  # trained in full in their own dtype, beside the adapter
        e = saved_module_bytes(plan, dt)
        count = sum(m.numel for m in saved)
        adapter += count * e
        gradients += count * e
        optimizer += _optimizer_bytes(plan, saved, count, e, embedding_32bit)
        trainable += count
    master = 0
    lay = layout(plan)
    if lay.strategy == "zero" and not plan.trains_adapter and plan.precision != "fp32":
        # DeepSpeed mixed precision: 16-bit weights and gradients, fp32 master and moments.
        weights, gradients = 2 * params, 2 * trainable
        master = 4 * trainable
        optimizer = _optimizer_bytes(plan, mats, trainable, 4)
    full = (weights, gradients, master, optimizer)
    n = lay.shard
    fp32_grads = 0
    if lay.strategy == "zero" and master:
        # stage_1_and_2.py:2361 (stage3.py per sub-group): step() makes an fp32 copy of this
        # process's gradient partition for the fp32 master; ZeRO-Offload makes it on the CPU.
        fp32_grads = 4 * min(divided(trainable, n if lay.optimizer else 1), SUB_GROUP_SIZE)
        # ZeRO 1-2 take the gradients' fp64 norm first, one slice at a time
        fp32_grads = max(fp32_grads, zero_grad_norm(plan, spec, trainable))

    def share(total: int) -> int:
        """This process's part of a trainable state: FSDP2 pads each parameter's dim 0 (a
        LoRA A of rank 16 over 64 GPUs is 64 rows), the others pad one flat buffer."""
        if lay.strategy == "fsdp" and plan.fsdp_version == 2 and trainable:
            padded = fsdp2_shard_elements([(m.rows, m.cols, m.count) for m in mats + saved], n)
            return -(-total * padded // trainable)
        return divided(total, n)

    if lay.optimizer:
        master, optimizer = divided(master, n), share(optimizer)
    if lay.gradients and lay.strategy == "zero" and plan.zero == 2 and master and trainable:
        gradients = gradients * zero2_gradient_partition(plan, spec, trainable) // trainable
    elif lay.gradients:
        gradients = share(gradients)
    if lay.weights:
        whole = unsharded_4bit_bytes(spec, plan)
        weights = whole + _sharded_weights(spec, plan, weights - whole, n)
        adapter = share(adapter)  # trainable weights are sharded like the rest
    largest = max((m.rows * m.cols for m in mats + saved), default=0)
    offloaded = offloaded_states(plan, full[0] + adapter, *full[1:], largest=largest)
    if plan.offload != "none":
        # ZeRO-Offload keeps master, states and the gradient partition on the CPU; FSDP's
        # CPUOffload the sharded weights and gradients too.
        master = optimizer = fp32_grads = 0
        if lay.strategy == "zero" and lay.gradients:
            gradients = 0
        if plan.offload == "params" or lay.strategy == "fsdp":
            weights = gradients = adapter = 0
    return States(
        weights=weights,
        master=master,
        adapter=adapter,
        gradients=gradients,
        optimizer=optimizer,
        optimizer_temp=_optimizer_temp(plan, mats, trainable, dt.state, n if lay.optimizer else 1)
        + fp32_grads,
        trainable_params=trainable,
        offloaded=offloaded,
    )


def unsharded_4bit_bytes(spec: ModelSpec, plan: Plan) -> int:
    """The 4-bit weights FSDP2 leaves whole on every GPU: accelerate excludes frozen Params4bit
    whose storage is not floating (bitsandbytes' default uint8) from fully_shard, as
    ignored_params (accelerate 1.16 utils/fsdp_utils.py fsdp2_prepare_model,
    incompatible_params4bit: "Default uint8 quant_storage cannot survive fully_shard's DTensor
    conversion"); a stack that loads them with a floating storage has them sharded
    (Stack.bnb_float_storage)."""
    fsdp2 = plan.strategy == "fsdp" and plan.fsdp != "no-shard" and plan.fsdp_version == 2
    four_bit = plan.training.quantized_base and plan.quant != "int8"
    if not (fsdp2 and four_bit) or plan.tooling.bnb_float_storage:
        return 0
    return quantized_weight_bytes(spec, plan)


def _sharded_weights(spec: ModelSpec, plan: Plan, weights: int, n: int) -> int:
    """One process's weight shard: FSDP2 pads each parameter's dim 0
    (sharding.fsdp2_shard_elements); DeepSpeed and FSDP1 pad one flat buffer."""
    if plan.strategy == "fsdp" and plan.fsdp_version == 2 and not plan.training.quantized_base:
        shapes = [(m.rows, m.cols, m.count) for m in trainable_matrices(spec, full_plan(plan))]
        elements = sum(r * c * k for r, c, k in shapes)
        if elements == spec.params:  # shapes account for every parameter
            return fsdp2_shard_elements(shapes, n) * (weights // max(1, elements))
    return divided(weights, n)
