"""Decoder architectures: the shapes that decide parameter counts and activation sizes.

A :class:`ModelSpec` is built from a Hugging Face ``config.json`` dict (``spec_from_config``)
so the built-in catalogue, a user's config file and a cached model all go through one path.
Parameter counts follow the modules transformers instantiates for each ``model_type``
(e.g. ``transformers/models/llama/modeling_llama.py``): GQA k/v widths, explicit ``head_dim``,
gated MLPs, attention biases, q/k norms, tied embeddings and MoE experts and routers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

from trainmem.core.errors import PlanError
from trainmem.core.units import MAX_COUNT, MIN_COUNT, fmt_count, shown

T = TypeVar("T")

# model_type -> per-architecture facts transformers hard-codes rather than reads from config.
_NORMS_PER_LAYER = {"gemma2": 4, "gemma3_text": 4, "gemma3": 4}
_QKV_BIAS = {"qwen2", "qwen2_moe"}  # Qwen2 always biases q/k/v, regardless of config
_QK_NORM_HEAD = {"qwen3", "qwen3_moe", "gemma3_text", "gemma3"}  # RMSNorm over head_dim
_QK_NORM_FULL = {"olmo2"}  # RMSNorm over the whole q / k projection width
_FUSED = {"phi3"}  # one qkv_proj and one gate_up_proj Linear (modeling_phi3.py)
# MoE models whose fused 3-D experts and router PEFT adapts: peft 0.22.0 converts the v4 module
# names (gate_proj, up_proj, down_proj, the router's gate) to target_parameters on the models
# transformers 5.25 maps to the mixtral and qwen2_moe conversion patterns
# (peft/utils/transformers_weight_conversion.py _MOE_TARGET_MODULE_MAPPING; peft 0.21 left
# qwen2_moe's routed experts alone and adapted only its shared expert). gpt-oss's are never
# adapted. Naming gate_proj / up_proj / down_proj reaches the qwen2_moe-pattern experts;
# mixtral's v4 names were w1 / w2 / w3, so such a list reaches nothing there. Checked with a
# real get_peft_model on tiny models of each (tests/measure/test_moe_lora_targets.py).
PEFT_ADAPTS_EXPERTS = {"qwen2_moe", "qwen3_moe", "mixtral"}
PEFT_MAPS_EXPERT_NAMES = {"qwen2_moe", "qwen3_moe"}
# What a fused Linear stands for, so LoRA targets and input casts follow the real modules.
PARTS = {
    "qkv": ("q", "k", "v"),
    "gate_up": ("gate", "up"),
    # qwen2_moe's shared expert: nn.Linear gate_proj / up_proj / down_proj under mlp.shared_expert
    "shared_gate": ("gate",),
    "shared_up": ("up",),
    "shared_down": ("down",),
}
_KNOWN = {
    "llama",
    "mistral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "mixtral",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "phi3",
    "olmo2",
    "gpt_oss",
    "smollm3",  # Llama's layers; its NoPE layers skip RoPE only (modeling_smollm3.py, 5.24)
}
# Types whose config class ties the embeddings when config.json leaves the key out (Gemma's
# configs; SmolLM3Config's tie_word_embeddings = True, configuration_smollm3.py, 5.24).
_TIED_BY_DEFAULT = ("gemma", "smollm3")


@dataclass(frozen=True)
class Linear:
    """One kind of linear layer inside a decoder layer (``count`` copies, e.g. experts)."""

    name: str  # q, k, v, o, gate, up, down, router
    in_features: int
    out_features: int
    bias: bool = False
    count: int = 1
    expert: bool = False

    @property
    def params(self) -> int:
        return self.count * (self.in_features * self.out_features + self.bias * self.out_features)

    @property
    def parts(self) -> tuple[str, ...]:
        return PARTS.get(self.name, (self.name,))


@dataclass(frozen=True)
class ModelSpec:
    """The shapes of a decoder-only causal LM."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    model_type: str = "llama"
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: str = "none"  # "none" | "head" | "full"
    norms_per_layer: int = 2
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0
    router_bias: bool = False
    expert_bias: bool = False
    attention_sinks: bool = False
    final_logit_softcap: bool = False
    attn_logit_softcap: bool = False  # Gemma 2: tanh on the scores (eager attention only)
    fused: bool = False  # qkv and gate/up projections are single Linear layers
    dtype: str = "bf16"  # the checkpoint's dtype
    hf_id: str | None = None
    source: str = "config"  # catalogue | config | safetensors | count | hf-cache
    assumed: bool = False  # dimensions guessed from a bare parameter count
    exact_params: int | None = None  # from safetensors headers, when known
    context: int = 0  # max_position_embeddings, the longest sequence it was built for; 0: unknown
    # Elements of the decoder's linear weights a pre-quantized checkpoint keeps in 16-bit: its
    # quantization_config's llm_int8_skip_modules (Unsloth's "dynamic 4-bit" checkpoints).
    unquantized_elements: int = 0
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def hf_dimensions(self) -> dict[str, int | bool]:
        """The dimensions as a Hugging Face config.json names them (spec_from_config's
        inverse for the fields every architecture has)."""
        return {
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate,
            "vocab_size": self.vocab,
            "tie_word_embeddings": self.tied_embeddings,
        }

    def hf_moe_dimensions(self) -> dict[str, int]:
        """A mixture of experts' dimensions under every name spec_from_config reads ({} for
        a dense model): transformers 5 maps ``num_experts`` onto ``num_local_experts``
        (``attribute_map`` of MixtralConfig / Qwen3MoeConfig), so both carry the same value."""
        if not self.is_moe:
            return {}
        return {
            "num_local_experts": self.experts,
            "num_experts": self.experts,
            "num_experts_per_tok": self.experts_per_token,
            "moe_intermediate_size": self.expert_intermediate,
            "shared_expert_intermediate_size": self.shared_expert_intermediate,
        }

    def linears(self) -> tuple[Linear, ...]:
        """The linear layers of one decoder layer, in forward order."""
        return self._linears

    @cached_property
    def _linears(self) -> tuple[Linear, ...]:
        # cached_property writes the instance __dict__ directly, so it works on a frozen class
        h = self.hidden
        if self.fused:
            layers = [Linear("qkv", h, self.q_dim + 2 * self.kv_dim, self.qkv_bias)]
        else:
            layers = [
                Linear("q", h, self.q_dim, self.qkv_bias),
                Linear("k", h, self.kv_dim, self.qkv_bias),
                Linear("v", h, self.kv_dim, self.qkv_bias),
            ]
        layers.append(Linear("o", self.q_dim, h, self.o_bias))
        if self.is_moe:
            e, i = self.experts, self.expert_intermediate
            # transformers 5 stores experts as fused 3-D parameters (gate_up_proj, down_proj)
            layers += [
                Linear("router", h, e, self.router_bias),
                Linear("gate_up", h, 2 * i, self.expert_bias, e, expert=True),
                Linear("down", i, h, self.expert_bias, e, expert=True),
            ]
            if self.shared_expert_intermediate:
                s = self.shared_expert_intermediate
                layers += [
                    Linear("shared_gate", h, s),
                    Linear("shared_up", h, s),
                    Linear("shared_down", s, h),
                    Linear("shared_expert_gate", h, 1),
                ]
        else:
            i = self.intermediate
            if self.fused:
                layers.append(Linear("gate_up", h, 2 * i, self.mlp_bias))
            else:
                layers += [Linear("gate", h, i, self.mlp_bias), Linear("up", h, i, self.mlp_bias)]
            layers.append(Linear("down", i, h, self.mlp_bias))
        return tuple(layers)

    def layer_norm_params(self) -> int:
        """RMSNorm weights inside one decoder layer (plus attention sinks, also per layer)."""
        n = self.norms_per_layer * self.hidden
        if self.qk_norm == "head":
            n += 2 * self.head_dim
        elif self.qk_norm == "full":
            n += self.q_dim + self.kv_dim
        if self.attention_sinks:
            n += self.heads
        return n

    @property
    def norm_params(self) -> int:
        """Every norm's weights: each layer's (no attention sinks) and the final one."""
        sinks = self.heads if self.attention_sinks else 0
        return self.layers * (self.layer_norm_params() - sinks) + self.hidden

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def layer_params(self) -> int:
        return sum(lin.params for lin in self.linears()) + self.layer_norm_params()

    @property
    def params(self) -> int:
        """Total parameters (the safetensors count when known, else from the shapes)."""
        if self.exact_params is not None:
            return self.exact_params
        return self.architecture_params

    @property
    def architecture_params(self) -> int:
        final_norm = self.hidden
        return (
            self.embedding_params
            + self.lm_head_params
            + self.layers * self.layer_params
            + final_norm
        )

    def quantized_linears(self) -> tuple[Linear, ...]:
        """The decoder's linears a bitsandbytes load quantizes: its nn.Linear modules.
        transformers 5 keeps MoE experts as fused 3-D parameters and the router as a parameter
        of its own module (MixtralTopKRouter...), which replace_with_bnb_linear does not
        convert (transformers 5.25 integrations/bitsandbytes.py: ``type(module) is
        nn.Linear``): they load in the 16-bit dtype. Checked by a 4-bit load of tiny mixtral,
        qwen2_moe, qwen3_moe and gpt_oss models (transformers 5.25, bitsandbytes 0.50.2, CPU):
        attention and shared experts Params4bit, experts and router bf16."""
        return tuple(lin for lin in self.linears() if _bnb_converts(lin))

    @property
    def bnb_kept_elements(self) -> int:
        """Elements of the decoder's linear weights a bitsandbytes load keeps in 16-bit: the
        linears it cannot convert, and those a pre-quantized checkpoint's skip list names."""
        unconverted = sum(
            lin.count * lin.in_features * lin.out_features
            for lin in self.linears()
            if not _bnb_converts(lin)
        )
        return self.layers * unconverted + self.unquantized_elements

    @property
    def layer_weight_elements(self) -> int:
        """Elements of one decoder layer's linear weights (no biases): what 4-bit quantization
        stores and autocast copies."""
        return sum(lin.count * lin.in_features * lin.out_features for lin in self.linears())

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (MoE: only the routed experts)."""
        if not self.is_moe:
            return self.params
        unused = self.experts - self.experts_per_token
        per_expert = sum(lin.params // lin.count for lin in self.linears() if lin.expert)
        return self.params - self.layers * unused * per_expert


# What spec_from_config accepts: (smallest, largest) per config.json field. The largest are
# far above every real model (the catalogue's largest: hidden 8,192, 80 layers, vocab 262,208,
# 64 heads, 128 experts) and exist to refuse nonsense such as a vocab of 1e30, not to judge
# taste. A model over MAX_PARAMS in all is refused too.
LIMITS = {
    "hidden_size": (1, 2**20),  # 1,048,576
    "num_hidden_layers": (1, 10_000),
    "num_attention_heads": (1, 65_536),
    "num_key_value_heads": (1, 65_536),
    "head_dim": (1, 65_536),
    "intermediate_size": (1, 2**24),  # 16,777,216
    "vocab_size": (1, 2**24),
    "num_local_experts": (0, 65_536),  # 0: a dense model
    "num_experts": (0, 65_536),
    "num_experts_per_tok": (1, 65_536),  # and at most the number of experts
    "moe_intermediate_size": (1, 2**24),
    "shared_expert_intermediate_size": (0, 2**24),
    "max_position_embeddings": (0, 2**27),
}
MAX_PARAMS = 10**14  # 100T parameters: ~50x the largest published model


def _int(cfg: dict[str, Any], key: str, default: object = None) -> int:
    """An integer field within LIMITS[key]: ints, or floats with an integral value (4096.0);
    never bools, strings, lists or objects. Missing (or null) with no default is refused."""
    value = cfg.get(key)
    if value is None:
        value = default
    if value is None:
        raise PlanError("model", f"config.json lacks {key!r}, which the estimate needs")
    lo, hi = LIMITS[key]
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**63:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        kind = "a positive integer" if lo == 1 else f"an integer from {lo}"
        raise PlanError(
            "model",
            f"config.json field {key!r} must be {kind} up to {hi:,} (got {shown(value)})",
        )
    return value


def _flag(cfg: dict[str, Any], key: str, default: bool) -> bool:
    return _typed(cfg, key, bool, "true or false", default)


def _softcap(cfg: dict[str, Any], key: str) -> bool:
    """Whether a soft-capping value (a number, or null for none) is set."""
    value = cfg.get(key)
    if value is None:
        return False
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise PlanError("model", f"config.json field {key!r} must be a number or null")
    return bool(value)


def _text(cfg: dict[str, Any], key: str, default: str) -> str:
    return _typed(cfg, key, str, "a string", default)


def _typed(cfg: dict[str, Any], key: str, kind: type[T], what: str, default: T) -> T:
    """An optional field of one JSON type (missing or null: ``default``)."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise PlanError("model", f"config.json field {key!r} must be {what}")
    return value


def _experts(cfg: dict[str, Any]) -> tuple[int, int]:
    """(experts, experts per token); (0, 0) for a dense model."""
    experts = 0
    for key in ("num_local_experts", "num_experts"):
        if cfg.get(key) is not None:
            experts = experts or _int(cfg, key)
    if not experts:
        return 0, 0
    per_token = _int(cfg, "num_experts_per_tok")
    if per_token > experts:
        raise PlanError(
            "model",
            f"config.json field 'num_experts_per_tok' ({per_token}) exceeds the "
            f"number of experts ({experts})",
        )
    return experts, per_token


def spec_from_config(
    cfg: dict[str, Any], name: str, *, source: str = "config", hf_id: str | None = None
) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json dict, refusing (PlanError, one line
    naming the field and what is accepted) wrong types and values outside LIMITS."""
    if not isinstance(cfg, dict):
        raise PlanError("model", "config.json must hold a JSON object")
    text = cfg.get("text_config")
    model_type = _text(cfg, "model_type", "llama")
    if text is not None and not isinstance(text, dict):
        raise PlanError("model", "config.json field 'text_config' must be an object")
    if text is not None:  # multimodal wrappers (Gemma 3): plan the text decoder
        cfg = {"model_type": model_type, **text}
        model_type = _text(cfg, "model_type", model_type)
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    if heads % kv_heads:
        raise PlanError("model", "num_attention_heads must be a multiple of num_key_value_heads")
    if cfg.get("head_dim") is not None:
        head_dim = _int(cfg, "head_dim")
    elif model_type in ("gemma3_text", "gemma3"):
        head_dim = 256  # Gemma3TextConfig's default head_dim
    elif hidden < heads:
        raise PlanError(
            "model",
            f"config.json gives {heads} attention heads for hidden_size {hidden} "
            "and no head_dim: each head would be 0 wide",
        )
    else:
        head_dim = hidden // heads
    intermediate = _int(cfg, "intermediate_size")
    experts, per_token = _experts(cfg)
    notes: list[str] = []
    if not modelled(model_type):
        notes.append(f"model_type {shown(model_type)} is not modelled exactly; assumed Llama-like")
    attention_bias = _flag(cfg, "attention_bias", False)
    spec = ModelSpec(
        name=name,
        hidden=hidden,
        layers=_int(cfg, "num_hidden_layers"),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=_int(cfg, "vocab_size"),
        tied_embeddings=_flag(cfg, "tie_word_embeddings", model_type.startswith(_TIED_BY_DEFAULT)),
        model_type=model_type,
        qkv_bias=attention_bias or model_type in _QKV_BIAS,
        o_bias=attention_bias and model_type != "qwen2",
        mlp_bias=_flag(cfg, "mlp_bias", False),
        qk_norm="head"
        if model_type in _QK_NORM_HEAD
        else "full"
        if model_type in _QK_NORM_FULL
        else "none",
        norms_per_layer=_NORMS_PER_LAYER.get(model_type, 2),
        experts=experts,
        experts_per_token=per_token,
        expert_intermediate=_int(cfg, "moe_intermediate_size", intermediate) if experts else 0,
        shared_expert_intermediate=_int(cfg, "shared_expert_intermediate_size", 0),
        router_bias=model_type == "gpt_oss",
        expert_bias=model_type == "gpt_oss",
        attention_sinks=model_type == "gpt_oss",
        final_logit_softcap=_softcap(cfg, "final_logit_softcapping"),
        attn_logit_softcap=_softcap(cfg, "attn_logit_softcapping"),
        fused=model_type in _FUSED,
        dtype=_dtype_name(cfg.get("torch_dtype") or cfg.get("dtype")),
        hf_id=hf_id,
        source=source,
        context=_int(cfg, "max_position_embeddings", 0),
        notes=tuple(notes),
    )
    skipped = _skipped_modules(cfg)
    if skipped:
        kept = unquantized_elements(spec, skipped)
        spec = replace(spec, unquantized_elements=kept)
        if kept:
            share = kept / (spec.layers * spec.layer_weight_elements)
            note = f"its quantization_config keeps {share:.1%} of the decoder's linear weights"
            spec = replace(spec, notes=(*spec.notes, f"{note} in 16-bit (llm_int8_skip_modules)"))
    if spec.architecture_params > MAX_PARAMS:
        raise PlanError(
            "model",
            f"config.json describes {fmt_count(spec.architecture_params)} parameters, "
            f"over the {fmt_count(MAX_PARAMS)} this planner accepts",
        )
    return spec


MAX_SKIPPED = 10_000  # llm_int8_skip_modules entries read (a dynamic quant lists a few dozen)


def _skipped_modules(cfg: dict[str, Any]) -> tuple[str, ...]:
    """quantization_config.llm_int8_skip_modules: the names a pre-quantized checkpoint left
    unquantized; anything that is not a short list of names is refused."""
    quant = cfg.get("quantization_config")
    if not isinstance(quant, dict) or quant.get("llm_int8_skip_modules") is None:
        return ()
    names = quant["llm_int8_skip_modules"]
    if (
        not isinstance(names, list)
        or len(names) > MAX_SKIPPED
        or not all(isinstance(n, str) and 0 < len(n) <= 200 for n in names)
    ):
        raise PlanError(
            "model",
            "config.json field 'quantization_config.llm_int8_skip_modules' must be a list of "
            f"module names (at most {MAX_SKIPPED:,})",
        )
    return tuple(names)


_HF_NAMES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj"}
_HF_NAMES |= {"o": "self_attn.o_proj", "qkv": "self_attn.qkv_proj"}
_HF_NAMES |= {"gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
_HF_NAMES |= {"gate_up": "mlp.gate_up_proj"}


def skipped_by(name: str, patterns: frozenset[str]) -> bool:
    """Whether a module ``name`` is left unquantized by the skip list ``patterns``:
    transformers 5.24 quantizers/quantizers_utils.py should_convert_module, each pattern taken
    literally (never as a regex of untrusted text), matching as a suffix of the name, or from
    its start up to a module boundary. Each of the name's suffixes and prefixes is looked up,
    not each pattern tried (10,000 layers and 10,000 names took 113 s)."""
    if "" in patterns:  # every name ends with it
        return True
    for k in range(len(name)):
        if name[k:] in patterns:
            return True
        head = name[: k + 1]
        after = k + 1
        if head in patterns and (after == len(name) or head.endswith(".") or name[after] == "."):
            return True
    return False


def _bnb_converts(lin: Linear) -> bool:
    return not lin.expert and lin.name != "router"  # see ModelSpec.quantized_linears


def unquantized_elements(spec: ModelSpec, skipped: tuple[str, ...]) -> int:
    """Elements of the decoder's linear weights (``model.layers.N.self_attn.q_proj``...) that
    a skip list keeps in 16-bit, of those bitsandbytes would quantize (not MoE experts or
    routers: ModelSpec.quantized_linears)."""
    patterns = frozenset(skipped)
    linears = [(lin, _HF_NAMES.get(lin.name)) for lin in spec.quantized_linears()]
    total = 0
    for layer in range(spec.layers):
        for lin, module in linears:
            if module is None:
                continue
            if skipped_by(f"model.layers.{layer}.{module}", patterns):
                total += lin.count * lin.in_features * lin.out_features
    return total


def _dtype_name(value: object) -> str:
    names = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
    return names.get(value, "bf16") if isinstance(value, str) else "bf16"


# Typical decoder shapes by size (Llama 3 / Qwen 2.5 families), used when only a count is given.
_TYPICAL = (  # (params, hidden, layers)
    (0.1e9, 576, 30),
    (0.5e9, 896, 24),
    (1.5e9, 1536, 28),
    (3e9, 3072, 28),
    (8e9, 4096, 32),
    (14e9, 5120, 48),
    (32e9, 5120, 64),
    (70e9, 8192, 80),
    (405e9, 16384, 126),
)


def modelled(model_type: str) -> bool:
    """Whether the estimate follows ``model_type``'s own modules (else: Llama-like)."""
    return model_type in _KNOWN


def _assumed_shape(params: int) -> tuple[int, int, int]:
    """(hidden, layers, vocab) of a typical decoder with about ``params`` parameters."""
    smallest, hidden, layers = _TYPICAL[0]
    if params >= smallest:
        hidden, layers = min(_TYPICAL, key=lambda t: abs(t[0] - params) / t[0])[1:]
        return hidden, layers, 128256 if params >= 1e9 else 49152
    # Below the smallest typical model its shape would not fit in the count (its embedding
    # alone is 28M): shrink width and depth by the cube root of the ratio and the vocab so
    # the embedding takes a third of the count, as in TinyStories-like models.
    scale = (params / smallest) ** (1 / 3)
    hidden = max(64, 64 * round(hidden * scale / 64))
    layers = max(2, round(layers * scale))
    vocab = min(49152, max(256, params // (3 * hidden) // 64 * 64))
    return hidden, layers, vocab


def spec_from_count(params: int, name: str) -> ModelSpec:
    """A typical Llama-3-style decoder with ``params`` parameters (dimensions assumed).

    Counts from 1M to 5T are accepted; below 100M the shape is scaled down so that every
    part of it is positive and the parts add up to the count."""
    if params < MIN_COUNT or params > MAX_COUNT:
        raise PlanError("model", f"{params:,} parameters is outside 1M..5T")
    hidden, layers, vocab = _assumed_shape(params)
    heads = max(1, hidden // 128) if hidden >= 1024 else max(1, hidden // 64)
    kv_heads = max(1, heads // 4) if heads % 4 == 0 else heads
    base = ModelSpec(
        name=name,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=hidden // heads,
        intermediate=hidden * 3,
        vocab=vocab,
        tied_embeddings=params < 4e9,
        source="count",
        assumed=True,
    )
    # Solve the MLP width so the shapes add up to the requested count.
    fixed = base.architecture_params - base.layers * 3 * hidden * base.intermediate
    intermediate = max(1, round((params - fixed) / (3 * hidden * layers)))
    spec = replace(base, intermediate=intermediate, exact_params=params)
    note = (
        f"dimensions assumed from a typical decoder of this size: hidden {hidden}, "
        f"{layers} layers, {heads} heads ({kv_heads} kv), MLP {intermediate}, vocab {vocab}"
    )
    return replace(spec, notes=(note,))
