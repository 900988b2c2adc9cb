"""Hand-checked cases for the peer-calculator re-implementations in bench/accuracy/peers.py."""

from __future__ import annotations

import math

import pytest
from accuracy import peers

GIB = 1024**3
MIB = 1024**2

# Llama-2-7B shapes (gpu_poor / Transformer Math examples).
LLAMA2_7B = {
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "head_dim": None,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "total_params": 6_738_415_616,
    "trainable_params": 6_738_415_616,
}

# Llama-3.2-1B shapes (no head_dim key -> Unsloth's non-structured path).
LLAMA32_1B = {
    "hidden_size": 2048,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 8192,
    "vocab_size": 128256,
    "tie_word_embeddings": True,
    "total_params": 1_235_814_400,
    "trainable_params": 11_272_192,
}


def plan(**overrides):
    base = {
        "method": "full",
        "precision": "bf16-mixed",
        "optimizer": "adamw",
        "seq_len": 511,
        "batch": 1,
        "grad_ckpt": False,
        "attn": "sdpa",
        "lora_rank": 16,
        "lora_alpha": 32,
        "lora_targets": "all-linear",
        "gpus": 1,
    }
    base.update(overrides)
    return base


# --- Accelerate -------------------------------------------------------------

# bert-base-cased as AutoModel: 108,310,272 params.  The Accelerate docs
# (model_size_estimator.md) print Total Size 413.18 MB / Training 1.61 GB for
# float32 and Total Size 206.59 MB for float16 (MB/GB there are MiB/GiB).
BERT = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "vocab_size": 28996,
    "tie_word_embeddings": True,
    "total_params": 108_310_272,
    "trainable_params": 108_310_272,
}


def test_accelerate_matches_docs_example():
    fp32_train = peers.accelerate_estimate(BERT, plan(precision="fp32"))
    assert fp32_train == 16 * 108_310_272
    assert round(fp32_train / GIB, 2) == 1.61
    lora_fp32 = peers.accelerate_estimate(BERT, plan(method="lora", precision="fp32"))
    assert lora_fp32 == 4 * 108_310_272
    # The docs' 413.18 also holds BertModel's two int64 id buffers (2 x 512 x 8 B).
    with_buffers = peers.accelerate_estimate(
        BERT, plan(method="lora", precision="fp32"), buffer_bytes=2 * 512 * 8
    )
    assert round(with_buffers / MIB, 2) == 413.18
    lora_bf16 = peers.accelerate_estimate(BERT, plan(method="lora", precision="bf16"))
    assert round(lora_bf16 / MIB, 2) == 206.59


def test_accelerate_rows_and_base_model_only():
    p = 1_000_000_000
    arch = {**LLAMA2_7B, "total_params": p}
    head = 32000 * 4096  # untied lm_head is not part of AutoModel
    base = p - head
    assert peers.accelerate_estimate(arch, plan(precision="fp32")) == 16 * base
    # float16 row = the code's mixed-precision branch: max(4P, 6P, 8P, 8P) = 8P.
    assert peers.accelerate_estimate(arch, plan(precision="bf16")) == 8 * base
    assert peers.accelerate_estimate(arch, plan(precision="bf16-mixed")) == 8 * base
    assert (
        peers.accelerate_estimate(arch, plan(precision="bf16-mixed"), mixed_precision_row="float32")
        == 16 * base
    )
    assert peers.accelerate_estimate(arch, plan(method="qlora", precision="bf16")) == 4 * base // 8
    tied = {**arch, "tie_word_embeddings": True}
    assert peers.accelerate_estimate(tied, plan(precision="fp32")) == 16 * p


# --- gpu_poor ---------------------------------------------------------------


# Worked by hand for Llama-2-7B, prompt len 511 + 1 token to generate = 512,
# batch 1 (all MB = MiB):
#   P = 2*32000*4096 + 32*(4*4096^2 + 3*4096*11008) = 6,738,149,376
#   weights = 2P = 12852.0 MB
#   activations/layer = attn 8*512*4096*2 + 2*512^2*32*2 + 4*512^2*32
#                       + ffn 2*4096*512*2 + 6*512*11008*2 + norm 8*512 + 6*512*4096*2
#   x 32 layers = 6160.125 MB
#   grad+Adam = 3 * P * 2 = 38556.0 MB;  + 650 overhead -> 58218.125 -> 58219 MB
def test_gpu_poor_full_adam_llama2_7b():
    assert peers.gpu_poor(LLAMA2_7B, plan()) == 58219 * MIB


def test_gpu_poor_lora_and_qlora():
    # LoRA Adam with checkpointing: 12852 + 6160.125*0.15 + 32*8*4096*2*4*3*2/MiB (48) + 650
    lora = peers.gpu_poor(LLAMA2_7B, plan(method="lora", grad_ckpt=True))
    assert lora == math.ceil(12852 + 6160.125 * 0.15 + 48 + 650) * MIB == 14475 * MIB
    # QLoRA Adam: weights 12852/4 - 2P/(64 MiB) + 0.06*12852 = 3783.3075 MB;
    # grad+opt = 32*8*4096*0.5*4*3 + 0.75*32*(15*4096 + 6*11008)*50*sqrt(512/50) bytes
    qlora = peers.gpu_poor(LLAMA2_7B, plan(method="qlora"))
    extra = 0.75 * 32 * (15 * 4096 + 6 * 11008) * 50 * math.sqrt(512 / 50)
    grad_opt = (32 * 8 * 4096 * 0.5 * 4 * 3 + extra) / MIB
    assert qlora == math.ceil(3783.3075 + grad_opt + 6160.125 + 650) * MIB == 11067 * MIB


def test_gpu_poor_ignores_precision_and_rejects_other_optimizers():
    assert peers.gpu_poor(LLAMA2_7B, plan(precision="fp32")) == peers.gpu_poor(LLAMA2_7B, plan())
    assert peers.gpu_poor(LLAMA2_7B, plan(optimizer="adafactor")) is None


# --- DeepSpeed --------------------------------------------------------------


def test_deepspeed_docs_example_zero2():
    # memory.rst: 2851M params, 1 node x 8 GPUs -> 5.31GB (offload) / 15.93GB (none).
    p = 2851_000_000
    offload = peers.deepspeed_zero2_gpu_bytes(p, num_gpus_per_node=8, cpu_offload=True)
    legacy = peers.deepspeed_zero2_gpu_bytes_legacy(p, num_gpus_per_node=8)
    assert f"{offload / 2**30:6.2f}" == "  5.31"
    assert f"{legacy / 2**30:6.2f}" == " 15.93"
    # The current code (2P + 18P/gpus) prints a smaller figure for 8 GPUs.
    assert f"{peers.deepspeed_zero2_gpu_bytes(p, 8) / 2**30:6.2f}" == " 11.28"


def test_deepspeed_docs_example_zero3():
    # memory.rst, cold: 2851M params, 32M largest layer, 8 GPUs.
    p, largest = 2851_000_000, 32_000_000
    none = peers.deepspeed_zero3_gpu_bytes(p, largest, num_gpus_per_node=8)
    opt_only = peers.deepspeed_zero3_gpu_bytes(p, largest, 8, cpu_offload=True)
    both = peers.deepspeed_zero3_gpu_bytes(p, largest, 8, cpu_offload=True, cpu_offload_params=True)
    assert f"{none / 2**30:6.2f}" == "  6.09"
    assert f"{opt_only / 2**30:6.2f}" == "  0.78"
    assert f"{both / 2**30:6.2f}" == "  0.12"


def test_deepspeed_7b_single_gpu():
    arch = {**LLAMA2_7B, "total_params": 7_000_000_000}
    got = peers.deepspeed_model_states(arch, plan())
    assert got == 20 * 7_000_000_000  # 2P + 18P/1; legacy 4P + 16P/1 is the same
    assert got == peers.deepspeed_zero2_gpu_bytes_legacy(7_000_000_000)
    assert round(got / GIB, 2) == 130.39
    assert peers.deepspeed_model_states(arch, plan(method="lora")) is None
    # ZeRO-3, 1 GPU: 4 * largest layer (embedding 32000*4096) + 18P.
    z3 = peers.deepspeed_zero3_model_states(arch, plan())
    assert z3 == 4 * 32000 * 4096 + 18 * 7_000_000_000


# --- Unsloth ----------------------------------------------------------------


def test_unsloth_qlora_llama32_1b_by_hand():
    # QLoRA r=16 all-linear, batch 2, seq 512, HF checkpointing, adamw_8bit, sdpa.
    p = plan(
        method="qlora",
        precision="bf16",
        optimizer="adamw-8bit",
        seq_len=512,
        batch=2,
        grad_ckpt=True,
    )
    kv = (2048 // 32) * 8
    quantizable = 16 * ((2048 + kv + kv + 2048) * 2048 + 2048 * 8192 * 3)
    non_quantizable = 2 * 2048 * 16 + 128256 * 2048  # norms + tied embedding
    weights = int(quantizable * 2 / (16 / 5) + non_quantizable * 2)
    assert weights == 1_133_641_728
    lora_params = 16 * (
        (2048 * 16 + 16 * 2048) * 2  # q, o
        + (2048 * 16 + 16 * kv) * 2  # k, v
        + (2048 * 16 + 16 * 8192) * 2  # gate, up
        + (8192 * 16 + 16 * 2048)  # down
    )
    assert lora_params == 11_272_192
    optimizer = 4 * lora_params
    tokens = 512 * 2
    activations = int((tokens * (2048 + 2 * kv) + tokens * 2 + tokens * 2 * 8192) * 2 * 1.25)
    gradients = max(2 * lora_params, min(int(weights * 0.15), max(activations, optimizer)))
    expected = weights + 2 * lora_params + optimizer + gradients + activations + int(1.4 * GIB)
    assert expected == 2_804_138_393
    assert peers.unsloth(LLAMA32_1B, p) == expected


def test_unsloth_eager_and_full():
    # Eager attention swaps in B*heads*S^2*2*12*layers when that is larger.
    p = plan(seq_len=4096, batch=1, attn="eager", optimizer="adamw")
    got = peers.unsloth_training_vram(
        LLAMA32_1B,
        "full",
        batch_size=1,
        max_seq_length=4096,
        gradient_checkpointing="none",
        optimizer="adamw_torch",
        attention_implementation="eager",
    )
    assert got["activations"] == 1 * 32 * 4096 * 4096 * 2 * 12 * 16
    assert got["optimizer_states"] == 6 * got["model_weights"] // 2
    assert peers.unsloth(LLAMA32_1B, p) == got["total"]


def test_unsloth_docs_table():
    assert peers.unsloth_table({"total_params": 8_000_000_000}, plan(method="qlora")) == 6 * GIB
    lora_7_5b = peers.unsloth_table({"total_params": 7_500_000_000}, plan(method="lora"))
    assert lora_7_5b == round(20.5 * GIB)  # halfway between 19 GB (7B) and 22 GB (8B)
    assert peers.unsloth_table({"total_params": 1_000_000_000}, plan(method="lora")) is None
    assert peers.unsloth_table({"total_params": 8_000_000_000}, plan()) is None


# --- Transformer Math 101 -----------------------------------------------------


def test_transformer_math_101():
    arch = {**LLAMA2_7B, "total_params": 6_740_000_000}
    p = plan(seq_len=2048, batch=1)
    sbhl = 2048 * 1 * 4096 * 32
    # mixed precision AdamW: 2 + 12 + 2 = 16 B/param; SDPA -> selective formula.
    assert peers.transformer_math_101(arch, p) == 16 * 6_740_000_000 + 34 * sbhl
    eager = peers.transformer_math_101(arch, {**p, "attn": "eager"})
    assert eager == 16 * 6_740_000_000 + sbhl * 34 + 5 * 32 * 2048 * 2048 * 32
    assert eager == 16 * 6_740_000_000 + int(sbhl * (10 + 24 + 5 * 32 * 2048 / 4096))
    ckpt = peers.transformer_math_101(arch, {**p, "grad_ckpt": True, "precision": "fp32"})
    assert ckpt == 20 * 6_740_000_000 + 2 * sbhl
    eight_bit = peers.transformer_math_101(arch, {**p, "optimizer": "adamw-8bit"})
    assert eight_bit == 10 * 6_740_000_000 + 34 * sbhl
    assert peers.transformer_math_101(arch, {**p, "method": "lora"}) is None


# --- Interface ----------------------------------------------------------------


def test_estimate_all_interface():
    for method in ("full", "lora", "qlora"):
        out = peers.estimate_all(LLAMA32_1B, plan(method=method))
        assert set(out) == set(peers.PEERS)
        for name, value in out.items():
            assert value is None or (isinstance(value, int) and value > 0), name
    for name, (fn, citation) in peers.PEERS.items():
        assert callable(fn) and citation, name


@pytest.mark.parametrize(
    "arch",
    [
        # Qwen2-MoE-like: routed + shared experts, head_dim -> structured path.
        {
            "hidden_size": 2048,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "head_dim": 128,
            "intermediate_size": 5632,
            "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632,
            "num_experts": 60,
            "num_experts_per_tok": 4,
            "vocab_size": 151936,
            "tie_word_embeddings": False,
            "total_params": 14_315_784_192,
            "trainable_params": 14_315_784_192,
        },
        # Mixtral-like, no head_dim key.
        {
            "hidden_size": 4096,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "intermediate_size": 14336,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "vocab_size": 32000,
            "tie_word_embeddings": False,
            "total_params": 46_702_792_704,
            "trainable_params": 46_702_792_704,
        },
    ],
)
def test_moe_configs_run(arch):
    for method in ("full", "lora", "qlora"):
        out = peers.estimate_all(arch, plan(method=method, attn="eager", grad_ckpt=True))
        assert out["unsloth"] and out["unsloth"] > 0
        assert out["gpu_poor"] and out["gpu_poor"] > 0
