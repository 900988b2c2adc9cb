"""A training plan: every input the estimate depends on, each field declared once.

Each field's ``plan_field`` declaration (trainmem.core.fields) is the single source the CLI
flags, the dashboard form, plan files, ``plan --json`` and the measurement harness derive from;
``tests/test_plan_fields.py`` fails when a front end lacks one.

Defaults follow what most fine-tuners run today: LoRA rank 16 on all linear layers
(PEFT/TRL recipes), bf16 weights, fused AdamW (the Trainer's default with torch >= 2.8),
gradient checkpointing on (TRL's SFTConfig default), SDPA attention, 2048 tokens, batch 2.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import Any

from trainmem.core.alloc_conf import AllocatorConfig, AllocConfError, parse_alloc_conf
from trainmem.core.errors import PlanError
from trainmem.core.fields import FieldSpec, field_specs, plan_field
from trainmem.core.methods import METHODS, Method, method_record
from trainmem.core.stacks import STACKS, Stack, stack_record

PRECISIONS = ("fp32", "bf16", "fp16", "bf16-mixed", "fp16-mixed")
OPTIMIZERS = (
    "adamw",
    "adamw-foreach",
    "adamw-8bit",
    "paged-adamw-8bit",
    "paged-adamw-32bit",
    "adamw-4bit",
    "lion",
    "lion-8bit",
    "sgd",
    "adafactor",
)
ATTENTION = ("sdpa", "eager", "flash-attention-2", "flex")
LOSSES = ("auto", "standard", "chunked", "fused")
QUANTS = ("nf4", "fp4", "int8")
BASE_DTYPES = ("auto", "16-bit", "fp32")
REDUCE_DTYPES = ("auto", "fp32", "16-bit")
SAVABLE_MODULES = ("embed_tokens", "lm_head")
OFFLOAD = ("none", "optimizer", "params")
BACKWARD_PREFETCH = ("auto", "backward-pre", "backward-post", "none")
STRATEGIES = ("ddp", "fsdp", "zero")
FSDP_SHARDING = ("full-shard", "shard-grad-op", "hybrid-shard", "no-shard")
AUTO = -1  # a DeepSpeed bucket left to the Trainer ("auto": sized from hidden_size)
LORA_MODULES = ("q", "k", "v", "o", "gate", "up", "down")
# The form's sections of advanced fields: what the training stack does around the model,
# and how a run spreads over GPUs and nodes.
STACK = "stack"
GPUS = "gpus"
# The decoder's linear layers by their transformers names (Llama, Qwen, Mistral, Gemma...),
# as PEFT's target_modules and the training configs write them.
HF_LINEAR_NAMES = {f"{m}_proj": m for m in LORA_MODULES}
# "linear" is every nn.Linear by name, as axolotl's lora_target_linear lists them
# (src/axolotl/loaders/adapter.py:54-71 find_all_linear_names): all-linear less what PEFT reaches
# as parameters only (fused MoE experts, routers that are not nn.Linear).
LORA_PRESETS = {
    "all-linear": LORA_MODULES,
    "linear": LORA_MODULES,
    "attention": ("q", "k", "v", "o"),
}


def _adapter(plan: Plan) -> bool:
    return method_record(plan.method).trains_adapter


def _quantized(plan: Plan) -> bool:
    return method_record(plan.method).kbit_prep


def _nf4(plan: Plan) -> bool:
    return _quantized(plan) and plan.quant != "int8"


def _lora_16bit_base(plan: Plan) -> bool:
    return _adapter(plan) and not _quantized(plan)


def _checkpointed(plan: Plan) -> bool:
    return plan.grad_ckpt


def _mlx(plan: Plan) -> bool:
    return stack_record(plan.stack).engine == "mlx"


def _torch(applies: Callable[[Plan], bool]) -> Callable[[Plan], bool]:
    """``applies`` on the torch stacks only: the mlx stack has none of PEFT's, bitsandbytes'
    or the CUDA allocator's settings (trainmem.core.mlx_step reads its own fields)."""
    return lambda plan: not _mlx(plan) and applies(plan)


def _not_mlx(plan: Plan) -> bool:
    return not _mlx(plan)


def _mlx_rules(plan: Plan) -> None:
    """What the mlx stack cannot be asked for: mlx-lm's own loss (tuner/trainer.py
    default_loss) and one process (its data parallelism over Macs is not modelled)."""
    if plan.loss not in ("auto", "standard"):
        raise PlanError(
            "loss", "mlx-lm computes its own loss (default_loss): use auto on the mlx stack"
        )
    if plan.world > 1 or plan.sharding != "ddp":
        raise PlanError(
            "gpus", "the mlx stack plans one Mac: mlx-lm's distributed training is not modelled"
        )


def _mlx_adapter(plan: Plan) -> bool:
    return _mlx(plan) and _adapter(plan)


def _mlx_quantized(plan: Plan) -> bool:
    return _mlx(plan) and method_record(plan.method).quantized_base


def _sharded(plan: Plan) -> bool:
    return plan.sharding in ("zero", "fsdp")


def _fsdp(plan: Plan) -> bool:
    return plan.strategy == "fsdp"


def _fsdp1(plan: Plan) -> bool:
    return plan.strategy == "fsdp" and plan.fsdp_version == 1


def _not_fsdp(plan: Plan) -> bool:
    return plan.strategy != "fsdp"


def _fsdp_mixed(plan: Plan) -> bool:
    return (
        plan.strategy == "fsdp"
        and plan.precision.endswith("-mixed")
        and method_record(plan.method).trains_base
    )


def _deepspeed(plan: Plan) -> bool:
    return plan.sharding == "zero"


def _zero12(plan: Plan) -> bool:
    return plan.sharding == "zero" and plan.zero in (1, 2)


def _zero3(plan: Plan) -> bool:
    return plan.sharding == "zero" and plan.zero == 3


def _bucket(label: str, help: str, default: int, applies: Any) -> Any:
    """A DeepSpeed size in elements; -1 is "auto", which the Trainer fills from hidden_size."""
    return plan_field(
        default,
        FieldSpec(
            "int",
            label,
            help + "; -1 = auto",
            low=AUTO,
            high=10**12,
            advanced=True,
            section=GPUS,
            applies=applies,
        ),
    )


@dataclass(frozen=True)
class Plan:
    """One training configuration. ``validated()`` returns it checked and normalised."""

    model: str = plan_field(
        "Qwen/Qwen2.5-7B",
        FieldSpec(
            "text",
            "Model",
            "a count (7B, 494M), a catalogue id, a config.json path or folder, or a Hugging "
            "Face id in the local cache (org/name@revision for a revision)",
        ),
    )
    method: str = plan_field(
        "lora", FieldSpec("choice", "Method", "what is trained", choices=METHODS)
    )
    seq_len: int = plan_field(
        2048, FieldSpec("int", "Seq length", "tokens per example", low=1, high=10_000_000)
    )
    batch: int = plan_field(2, FieldSpec("int", "Batch", "micro-batch per GPU", low=1, high=65_536))
    grad_ckpt: bool = plan_field(
        True,
        FieldSpec(
            "bool", "Grad ckpt", "gradient checkpointing (on by default, as TRL's SFTConfig)"
        ),
    )
    precision: str = plan_field(
        "bf16",
        FieldSpec(
            "choice",
            "Precision",
            "dtype the model is loaded in; -mixed = fp32 weights under autocast",
            choices=PRECISIONS,
            advanced=True,
        ),
    )
    optimizer: str = plan_field(
        "adamw",
        FieldSpec(
            "choice",
            "Optimizer",
            "adamw is torch's fused AdamW, the Trainer's default; -8bit and -32bit are "
            "bitsandbytes', adamw-4bit torchao's AdamW4bit, lion bitsandbytes' Lion",
            choices=OPTIMIZERS,
            advanced=True,
        ),
    )
    stack: str = plan_field(
        "trainer",
        FieldSpec(
            "choice",
            "Stack",
            "what runs around the model: trainer (the Hugging Face Trainer drops the model "
            "output before backward), trl (SFTTrainer: fp32 load, chunked loss), axolotl, "
            "llama-factory (fp32 upcast of what trains) or loop (keeps `out` alive)",
            choices=STACKS,
            advanced=True,
            section=STACK,
        ),
    )
    loss: str = plan_field(
        "auto",
        FieldSpec(
            "choice",
            "Loss",
            "standard (fp32 upcast of the full logits), chunked (TRL's chunked head), fused "
            "(Liger's fused linear cross-entropy, Cut Cross-Entropy); auto follows the stack",
            choices=LOSSES,
            advanced=True,
            section=STACK,
            applies=_not_mlx,  # mlx-lm computes its own (trainmem.core.plan _mlx_rules)
        ),
    )
    lora_rank: int = plan_field(
        16,
        FieldSpec(
            "int",
            "LoRA rank",
            "adapter rank r",
            low=1,
            high=65_536,
            advanced=True,
            applies=_adapter,
        ),
    )
    lora_alpha: float = plan_field(
        32.0,
        FieldSpec(
            "float",
            "LoRA alpha",
            "adapter scaling (no effect on memory)",
            low=0,
            low_open=True,
            high=1e6,
            advanced=True,
            applies=_adapter,
        ),
    )
    lora_targets: str = plan_field(
        "all-linear",
        FieldSpec(
            "text",
            "Targets",
            "all-linear, linear (every nn.Linear, axolotl's lora_target_linear: no fused MoE "
            "experts), attention, or a list such as q,k,v,o,gate,up,down",
            advanced=True,
            applies=_adapter,
        ),
    )
    lora_dropout: float = plan_field(
        0.0,
        FieldSpec(
            "float",
            "LoRA drop",
            "adapter dropout (PEFT's default 0); above 0 each adapter keeps a copy of its input",
            low=0.0,
            high=0.99,
            advanced=True,
            applies=_adapter,
        ),
    )
    kbit_prep: bool = plan_field(
        True,
        FieldSpec(
            "bool",
            "kbit prep",
            "QLoRA with PEFT's prepare_model_for_kbit_training, its fp32 copy of every 16-bit "
            "weight, where the stack runs it (a Trainer script's usual call; axolotl, which "
            "then casts norms and embeddings back; TRL, LLaMA-Factory and Unsloth run none)",
            advanced=True,
            applies=_torch(_quantized),
        ),
    )
    quant: str = plan_field(
        "nf4",
        FieldSpec(
            "choice",
            "Quant",
            "bitsandbytes format of the frozen base: nf4 or fp4 (4-bit, the same size) or "
            "int8 (LLM.int8, load_in_8bit)",
            choices=QUANTS,
            advanced=True,
            section=STACK,
            applies=_torch(_quantized),
        ),
    )
    double_quant: bool = plan_field(
        True,
        FieldSpec(
            "bool",
            "Double quant",
            "NF4 with bitsandbytes' nested quantization of the absmax (bnb_4bit_use_double_quant; "
            "on in axolotl and LLaMA-Factory, off in a bare BitsAndBytesConfig)",
            advanced=True,
            section=STACK,
            applies=_torch(_nf4),
        ),
    )
    base_dtype: str = plan_field(
        "auto",
        FieldSpec(
            "choice",
            "Base dtype",
            "dtype the frozen LoRA base is loaded in: auto is fp32 on the trl stack under "
            "-mixed precision (SFTTrainer loads a model id in float32), else 16-bit",
            choices=BASE_DTYPES,
            advanced=True,
            section=STACK,
            applies=_torch(_lora_16bit_base),
        ),
    )
    modules_to_save: str = plan_field(
        "",
        FieldSpec(
            "text",
            "Save modules",
            "modules trained in full beside the adapter (PEFT modules_to_save): "
            "embed_tokens, lm_head or both, comma separated",
            advanced=True,
            section=STACK,
            applies=_torch(_adapter),
        ),
    )
    attn: str = plan_field(
        "sdpa",
        FieldSpec(
            "choice",
            "Attention",
            "sdpa (transformers' default), flash-attention-2 and flex keep no s^2 scores; "
            "eager keeps them",
            choices=ATTENTION,
            advanced=True,
            applies=_not_mlx,
        ),
    )
    ckpt_offload: bool = plan_field(
        False,
        FieldSpec(
            "bool",
            "Ckpt offload",
            "checkpointed layer inputs kept in host RAM (activation_checkpointing_kwargs "
            "offload, axolotl gradient_checkpointing: offload)",
            advanced=True,
            section=STACK,
            applies=_torch(_checkpointed),
        ),
    )
    packing: bool = plan_field(
        False,
        FieldSpec(
            "bool",
            "Packing",
            "examples packed into full rows (every micro-batch holds seq x batch real "
            "tokens); without it rows are padded to the longest in the batch",
            advanced=True,
            section=STACK,
            applies=_not_mlx,
        ),
    )
    # The mlx stack's own fields (trainmem.core.mlx_step; mlx-lm 0.32.2 mlx_lm/lora.py).
    mlx_num_layers: int = plan_field(
        16,
        FieldSpec(
            "int",
            "MLX layers",
            "mlx-lm --num-layers: adapters on (or a full fine-tune of) the last N decoder "
            "layers, 16 by default; -1 or 0 = all; the frozen layers below keep no activations",
            low=-1,
            high=65_536,
            advanced=True,
            section=STACK,
            applies=_mlx,
        ),
    )
    dora: bool = plan_field(
        False,
        FieldSpec(
            "bool",
            "DoRA",
            "mlx-lm --fine-tune-type dora: LoRA plus a learned magnitude per output row "
            "(mlx_lm/tuner/dora.py)",
            advanced=True,
            section=STACK,
            applies=_mlx_adapter,
        ),
    )
    mlx_bits: int = plan_field(
        4,
        FieldSpec(
            "choice",
            "MLX bits",
            "bits per weight of a model MLX quantized (mlx_lm.convert -q --q-bits; affine)",
            choices=(2, 3, 4, 5, 6, 8),
            advanced=True,
            section=STACK,
            applies=_mlx_quantized,
        ),
    )
    mlx_group_size: int = plan_field(
        64,
        FieldSpec(
            "choice",
            "MLX group",
            "weights per scale and bias in MLX's affine quantization (--q-group-size)",
            choices=(32, 64, 128),
            advanced=True,
            section=STACK,
            applies=_mlx_quantized,
        ),
    )
    gpus: int = plan_field(
        1,
        FieldSpec(
            "int",
            "GPUs",
            "GPUs per node",
            low=1,
            high=65_536,
            advanced=True,
            section=GPUS,
            applies=_not_mlx,
        ),
    )
    nodes: int = plan_field(
        1,
        FieldSpec(
            "int",
            "Nodes",
            "machines, each with --gpus GPUs",
            low=1,
            high=65_536,
            advanced=True,
            section=GPUS,
            applies=_not_mlx,
        ),
    )
    strategy: str = plan_field(
        "ddp",
        FieldSpec(
            "choice",
            "Strategy",
            "ddp (every GPU holds everything), fsdp (PyTorch FSDP) or zero (DeepSpeed ZeRO); "
            "a ZeRO stage above 0 implies zero",
            choices=STRATEGIES,
            advanced=True,
            section=GPUS,
            applies=_not_mlx,
        ),
    )
    fsdp: str = plan_field(
        "full-shard",
        FieldSpec(
            "choice",
            "FSDP",
            "full-shard (weights gathered per layer, freed after use), shard-grad-op (kept "
            "gathered from forward to backward; FSDP2 reshard_after_forward=False), "
            "hybrid-shard (sharded within a node, replicated across nodes), no-shard",
            choices=FSDP_SHARDING,
            advanced=True,
            section=GPUS,
            applies=_fsdp,
        ),
    )
    fsdp_version: int = plan_field(
        2,
        FieldSpec(
            "choice",
            "FSDP version",
            "2: fully_shard, per-parameter DTensors; 1: FullyShardedDataParallel's flat "
            "parameters (accelerate's default)",
            choices=(2, 1),
            advanced=True,
            section=GPUS,
            applies=_fsdp,
        ),
    )
    backward_prefetch: str = plan_field(
        "auto",
        FieldSpec(
            "choice",
            "Backward prefetch",
            "FSDP1's BackwardPrefetch: backward-pre gathers the next layer while one computes "
            "(torch's default, a hand-written loop's); the Trainer, TRL, axolotl and "
            "LLaMA-Factory pass none unless their fsdp_config names one; auto = the stack's",
            choices=BACKWARD_PREFETCH,
            advanced=True,
            section=GPUS,
            applies=_fsdp1,
        ),
    )
    reduce_dtype: str = plan_field(
        "auto",
        FieldSpec(
            "choice",
            "Reduce dtype",
            "FSDP mixed precision: the dtype gradients are reduce-scattered in "
            "(MixedPrecisionPolicy / MixedPrecision reduce_dtype); auto follows the stack: "
            "16-bit under accelerate (Trainer, TRL, axolotl, LLaMA-Factory), fp32 for a "
            "hand-written loop (PyTorch's FSDP2 recipe)",
            choices=REDUCE_DTYPES,
            advanced=True,
            section=GPUS,
            applies=_fsdp_mixed,
        ),
    )
    zero: int = plan_field(
        0,
        FieldSpec(
            "choice",
            "ZeRO stage",
            "DeepSpeed ZeRO stage: 1 shards optimizer state, 2 gradients too, 3 weights too",
            choices=(0, 1, 2, 3),
            advanced=True,
            section=GPUS,
            applies=_not_fsdp,
        ),
    )
    offload: str = plan_field(
        "none",
        FieldSpec(
            "choice",
            "Offload",
            "to host RAM: ZeRO-Offload of the optimizer (stage 1-3) or of parameters too "
            "(stage 3); FSDP's CPUOffload moves parameters, gradients and optimizer (params)",
            choices=OFFLOAD,
            advanced=True,
            section=GPUS,
            applies=_sharded,
        ),
    )
    reduce_bucket: int = _bucket(
        "Reduce bucket",
        "DeepSpeed reduce_bucket_size, gradient elements reduced at once",
        500_000_000,
        _deepspeed,
    )
    overlap_comm: bool = plan_field(
        False,
        FieldSpec(
            "bool",
            "Overlap comm",
            "DeepSpeed overlap_comm in stages 1-2: a second reduce bucket (stage 3 has one "
            "buffer either way)",
            advanced=True,
            section=GPUS,
            applies=_zero12,
        ),
    )
    prefetch_bucket: int = _bucket(
        "Prefetch bucket",
        "DeepSpeed stage3_prefetch_bucket_size, parameter elements gathered ahead",
        50_000_000,
        _zero3,
    )
    max_live_params: int = plan_field(
        1_000_000_000,
        FieldSpec(
            "int",
            "Max live",
            "DeepSpeed stage3_max_live_parameters: gathered elements kept at most",
            low=0,
            high=10**12,
            advanced=True,
            section=GPUS,
            applies=_zero3,
        ),
    )
    persistence_threshold: int = _bucket(
        "Persist below",
        "DeepSpeed stage3_param_persistence_threshold: parameters this small stay gathered",
        100_000,
        _zero3,
    )
    ram_efficient_loading: bool = plan_field(
        False,
        FieldSpec(
            "bool",
            "RAM-efficient load",
            "FSDP cpu_ram_efficient_loading: only the first process of a node loads the "
            "weights into host RAM (otherwise every process loads the whole model)",
            advanced=True,
            section=GPUS,
            applies=_fsdp,
        ),
    )
    device: str = plan_field(
        "auto",
        FieldSpec(
            "text",
            "Device",
            "auto, a preset (rtx-4090, h100-80gb, mac-36gb), a size (24GiB, unified:36GB), "
            "or a comma list",
            advanced=True,
        ),
    )
    alloc_conf: str = plan_field(
        "",
        FieldSpec(
            "text",
            "Allocator",
            "PYTORCH_CUDA_ALLOC_CONF of the run (e.g. expandable_segments:True); empty: "
            "torch's defaults. It changes what the caching allocator reserves",
            advanced=True,
            applies=_not_mlx,
        ),
    )
    rule_of_thumb: bool = plan_field(
        False,
        FieldSpec(
            "bool",
            "Judge on",
            "judge the fit on the guide's rule of thumb instead of the detailed estimate",
            bool_words=("rule of thumb", "device peak"),
            advanced=True,
        ),
    )

    def validated(self) -> Plan:
        """Every field checked against its declaration, then the rules between fields.

        Checked once: the plan returned carries a mark (not a field, so ``replace()`` makes
        an unchecked copy, and equality ignores it) that makes its own ``validated()`` free,
        so the estimate, the report and the what-ifs may each ask without checking again."""
        if self.__dict__.get("_checked"):
            return self
        values = {spec.name: spec.check(getattr(self, spec.name)) for spec in PLAN_FIELDS}
        plan = replace(self, **values)
        if not plan.model.strip():
            raise PlanError("model", "is empty; give a catalogue id, a count like 7B or a path")
        plan = _sharding_rules(plan)
        mixed = plan.precision.endswith("-mixed")
        if plan.base_dtype == "fp32" and plan.precision in ("bf16", "fp16"):
            raise PlanError(
                "base_dtype", f"an fp32 base runs under autocast: use {plan.precision}-mixed"
            )
        if plan.base_dtype == "16-bit" and plan.precision == "fp32":
            raise PlanError("base_dtype", "a 16-bit base needs bf16, fp16 or -mixed precision")
        if plan.loss == "fused" and not (mixed or plan.precision in ("bf16", "fp16")):
            raise PlanError(
                "loss", "the fused kernels (Liger, Cut Cross-Entropy) need bf16 or fp16"
            )
        if _mlx(plan):
            _mlx_rules(plan)
        try:
            parse_alloc_conf(plan.alloc_conf)
        except AllocConfError as exc:
            raise PlanError("alloc_conf", str(exc)) from None
        targets = parse_lora_targets(plan.lora_targets)
        preset = plan.lora_targets.strip().lower()
        checked = replace(
            plan,
            model=plan.model.strip(),
            lora_targets=preset if preset in LORA_PRESETS else ",".join(targets),
            modules_to_save=",".join(parse_saved_modules(plan.modules_to_save)),
        )
        object.__setattr__(checked, "_checked", True)  # frozen: the mark goes in by hand
        return checked

    @cached_property
    def allocator(self) -> AllocatorConfig:
        """The caching allocator's settings this plan's run has (``alloc_conf`` read as
        torch reads PYTORCH_CUDA_ALLOC_CONF)."""
        return parse_alloc_conf(self.alloc_conf)

    @cached_property
    def training(self) -> Method:
        """The method's record (raises PlanError for an unknown method)."""
        return method_record(self.method)

    @cached_property
    def tooling(self) -> Stack:
        """The stack's record (raises PlanError for an unknown stack)."""
        return stack_record(self.stack)

    @property
    def prefetches_backward(self) -> bool:
        """Whether a layer's backward runs with the next layer's all-gather already out: FSDP2
        always (torch 2.13 _fsdp_param_group.py:795 _backward_prefetch), FSDP1 under
        BACKWARD_PRE only. BACKWARD_POST prefetches after the layer has resharded
        (torch 2.13 fsdp/_runtime_utils.py:793-807 _post_backward_reshard), so one layer is
        gathered while each computes, as with none."""
        if self.fsdp_version != 1:
            return True
        kind = self.backward_prefetch
        return (self.tooling.fsdp1_prefetch if kind == "auto" else kind) == "backward-pre"

    @property
    def loss_kind(self) -> str:
        """The loss that really runs: the plan's, or its stack's default under "auto"."""
        return self.tooling.default_loss if self.loss == "auto" else self.loss

    @property
    def fp32_base(self) -> bool:
        """Whether a LoRA plan's frozen base is fp32 (as loaded, before autocast)."""
        if not self.trains_adapter or self.training.quantized_base:
            return False
        if self.base_dtype != "auto":
            return self.base_dtype == "fp32"
        if self.precision == "fp32":
            return True
        return self.precision.endswith("-mixed") and self.tooling.fp32_base_under_autocast

    @cached_property
    def saved_modules(self) -> tuple[str, ...]:
        """PEFT modules_to_save: modules trained in full beside the adapter (LoRA only)."""
        return parse_saved_modules(self.modules_to_save) if self.trains_adapter else ()

    @property
    def trains_lm_head(self) -> bool:
        """Whether the lm_head weight gets a gradient (full fine-tuning or modules_to_save)."""
        return self.training.trains_base or "lm_head" in self.saved_modules

    @property
    def sharding(self) -> str:
        """The strategy in effect: a ZeRO stage above 0 is DeepSpeed's, so under the default
        ddp it means zero (plan files written before ``strategy`` existed mean that)."""
        return "zero" if self.strategy == "ddp" and self.zero > 0 else self.strategy

    @property
    def world(self) -> int:
        """Data-parallel processes over every node (one per GPU)."""
        return self.gpus * self.nodes

    @property
    def trains_adapter(self) -> bool:
        return self.training.trains_adapter

    @cached_property
    def target_modules(self) -> tuple[str, ...]:
        return parse_lora_targets(self.lora_targets)

    def ignored_fields(self) -> tuple[str, ...]:
        """Fields set away from their default that do not apply to this plan (LoRA rank on
        a full fine-tune): said in the notes, so nobody believes they changed the figure."""
        return tuple(
            s.name
            for s in PLAN_FIELDS
            if s.applies is not None and not s.applies(self) and getattr(self, s.name) != s.default
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """Build from a dict (a saved plan); unknown keys are an error, not silently dropped.
        Missing keys take their defaults."""
        known = {s.key for s in PLAN_FIELDS}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PlanError(unknown[0], f"unknown plan field; known: {', '.join(sorted(known))}")
        return cls(**{s.name: data[s.key] for s in PLAN_FIELDS if s.key in data}).validated()


def _sharding_rules(plan: Plan) -> Plan:
    """The rules between the multi-GPU fields (``Plan.sharding`` is the strategy in effect)."""
    if plan.sharding in ("zero", "ddp"):  # ddp here: zero is 0
        if plan.offload == "optimizer" and plan.zero == 0:
            raise PlanError("offload", "optimizer offload needs ZeRO stage 1, 2 or 3 (--zero)")
        if plan.offload == "params" and plan.zero != 3:
            raise PlanError(
                "offload", "parameter offload needs ZeRO stage 3 (--zero 3) or --strategy fsdp"
            )
    if _deepspeed(plan) and plan.reduce_bucket == 0:  # DeepSpeed 0.19.8 zero/config.py:113 gt=0
        raise PlanError("reduce_bucket", "DeepSpeed needs at least 1 element (or -1, auto)")
    if plan.strategy == "fsdp":
        if plan.offload == "optimizer":
            raise PlanError(
                "offload", "FSDP offloads parameters with their gradients and optimizer: use params"
            )
        if plan.fsdp == "hybrid-shard" and plan.nodes == 1:
            raise PlanError("fsdp", "hybrid shard replicates across nodes: it needs --nodes 2+")
        if plan.fsdp == "no-shard" and plan.fsdp_version == 2:
            raise PlanError("fsdp", "FSDP2 has no no-shard (that is --strategy ddp)")
    return plan


PLAN_FIELDS: tuple[FieldSpec, ...] = field_specs(Plan)
FIELDS_BY_NAME = {s.name: s for s in PLAN_FIELDS}


def parse_lora_targets(text: str) -> tuple[str, ...]:
    """``all-linear`` | ``attention`` | a comma list of q,k,v,o,gate,up,down (``*_proj`` ok)."""
    text = text.strip().lower()
    if text in LORA_PRESETS:
        return LORA_PRESETS[text]
    names = [t.strip().removesuffix("_proj") for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in LORA_MODULES]
    if bad or not names:
        raise PlanError(
            "lora_targets",
            f"{text!r} is not all-linear, attention or a list of {','.join(LORA_MODULES)}",
        )
    return tuple(m for m in LORA_MODULES if m in names)


def parse_saved_modules(text: str) -> tuple[str, ...]:
    """``""`` | a comma list of embed_tokens, lm_head (PEFT's modules_to_save), in that order."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in SAVABLE_MODULES]
    if bad:
        raise PlanError("modules_to_save", f"{bad[0]!r} is not one of {', '.join(SAVABLE_MODULES)}")
    return tuple(m for m in SAVABLE_MODULES if m in names)
