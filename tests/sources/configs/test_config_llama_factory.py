"""LLaMA-Factory YAML: its keys, its defaults (checkpointing on, fp32 upcast, cutoff 2048)."""

import pytest
from config_helpers import read

from trainmem.core.errors import PlanError


def test_every_key_maps_to_its_field(tmp_path):
    plan = read(
        tmp_path,
        "lf.yaml",
        """
        model_name_or_path: meta-llama/Llama-3.1-8B
        stage: sft
        finetuning_type: lora
        quantization_bit: 4
        quantization_method: bnb
        quantization_type: fp4
        double_quantization: false
        lora_rank: 16
        lora_alpha: 16
        lora_dropout: 0.1
        lora_target: q_proj,v_proj
        additional_target: lm_head
        cutoff_len: 1024
        per_device_train_batch_size: 2
        disable_gradient_checkpointing: true
        bf16: true
        optim: adamw_8bit
        flash_attn: fa2
        packing: true
        enable_liger_kernel: true
        template: llama3
        learning_rate: 1.0e-4
        """,
    )
    assert plan.values == {
        "stack": "llama-factory",
        "model": "meta-llama/Llama-3.1-8B",
        "method": "qlora",
        "quant": "fp4",
        "double_quant": False,
        "lora_rank": 16,
        "lora_alpha": 16.0,
        "lora_dropout": 0.1,
        "lora_targets": "q,v",
        "modules_to_save": "lm_head",
        "seq_len": 1024,
        "batch": 2,
        "grad_ckpt": False,
        "precision": "bf16-mixed",
        "optimizer": "adamw-8bit",
        "attn": "flash-attention-2",
        "packing": True,
        "loss": "fused",
    }
    assert plan.origins["grad_ckpt"] == f"{tmp_path / 'lf.yaml'}:15 disable_gradient_checkpointing"


def test_defaults(tmp_path):
    plan = read(tmp_path, "lf.yaml", "model_name_or_path: x/y\ncutoff_len: 2048\ntemplate: qwen\n")
    values = plan.values
    assert (values["method"], values["lora_rank"], values["lora_alpha"]) == ("lora", 8, 16.0)
    assert values["lora_targets"] == "all-linear" and values["lora_dropout"] == 0.0
    assert values["batch"] == 8 and values["grad_ckpt"] is True
    assert values["precision"] == "bf16" and values["packing"] is False  # no bf16 flag: no AMP
    assert plan.origins["lora_alpha"] == (
        "LLaMA-Factory ff6d4d1 default (src/llamafactory/hparams/finetuning_args.py:587)"
    )
    assert plan.origins["grad_ckpt"].endswith("(src/llamafactory/hparams/model_args.py:145)")
    assert plan.origins["batch"].endswith("(transformers/training_args.py:777)")


@pytest.mark.parametrize(
    ("yaml", "field", "value"),
    [
        ("finetuning_type: full\nbf16: true", "precision", "bf16-mixed"),  # fp32 master copy
        ("finetuning_type: full\npure_bf16: true", "precision", "bf16"),
        ("finetuning_type: full", "precision", "fp32"),  # upcast, no autocast
        ("fp16: true", "precision", "fp16-mixed"),
        ("stage: pt", "packing", True),  # parser.py:645: packing on for pre-training
        ("neat_packing: true", "packing", True),
        ("quantization_bit: 8", "quant", "int8"),
        ("flash_attn: disabled", "attn", "eager"),
        ("flash_attn: sdpa", "attn", "sdpa"),
        ("lora_target: all", "lora_targets", "all-linear"),
        ("additional_target: embed_tokens,lm_head", "modules_to_save", "embed_tokens,lm_head"),
    ],
)
def test_each_key(tmp_path, yaml, field, value):
    plan = read(
        tmp_path,
        "k.yaml",
        f"model_name_or_path: x/y\nstage: sft\n{yaml}\n".replace(
            "stage: sft\nstage: pt", "stage: pt"
        ),
    )
    assert plan.values[field] == value


def test_unmodelled(tmp_path):
    plan = read(
        tmp_path,
        "u.yaml",
        "model_name_or_path: x/y\nfinetuning_type: lora\nuse_unsloth: true\nflash_attn: fa3\n",
    )
    name = tmp_path / "u.yaml"
    assert plan.unmodelled == (
        f"{name}:4 flash_attn (fa3 is not modelled; planned as sdpa)",
        f"{name}:3 use_unsloth (unsloth kernels)",
    )


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("stage: dpo", "u.yaml:2: stage: dpo is not planned"),
        ("stage: rm", "u.yaml:2: stage: rm is not planned"),
        ("finetuning_type: freeze", "u.yaml:2: finetuning_type: freeze is not planned"),
        ("finetuning_type: full\nquantization_bit: 4", "quantization trains only with LoRA"),
        ("quantization_bit: 4\nquantization_method: hqq", "quantization_method: hqq is not"),
        ("lora_target: c_attn", "u.yaml:2: lora_target: c_attn not planned"),
    ],
)
def test_not_planned_is_one_line(tmp_path, yaml, message):
    with pytest.raises(PlanError) as err:
        read(tmp_path, "u.yaml", f"model_name_or_path: x/y\n{yaml}\n")
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("yaml", "precision"),
    [
        ("", "bf16"),  # examples/extras/badam/llama3_full_sft.yaml: no bf16, a bf16 checkpoint
        ("bf16: true", "bf16"),  # 16-bit weights under autocast: no fp32 copy
        ("fp16: true", "fp16"),  # parser.py:642-643: fp16 compute dtype
    ],
)
def test_badam_keeps_the_trainable_weights_16_bit(tmp_path, yaml, precision):
    # model/adapter.py:343: no fp32 upcast under pure_bf16 or use_badam
    plan = read(
        tmp_path,
        "badam.yaml",
        f"model_name_or_path: x/y\nstage: sft\nfinetuning_type: full\nuse_badam: true\n{yaml}\n",
    )
    assert plan.values["precision"] == precision
    assert plan.origins["precision"] == f"{tmp_path / 'badam.yaml'}:4 use_badam"
    assert f"{tmp_path / 'badam.yaml'}:4 use_badam (BAdam block updates)" in plan.unmodelled


def test_megatron_config_is_refused(tmp_path):
    # examples/megatron/qwen3_moe_full.yaml: runs only under USE_MCA=1 (hparams/parser.py:397)
    with pytest.raises(PlanError) as err:
        read(
            tmp_path,
            "mca.yaml",
            "model_name_or_path: x/y\nstage: sft\nfinetuning_type: full\nbf16: true\n"
            "sequence_parallel: false\npipeline_model_parallel_size: 4\n"
            "expert_model_parallel_size: 2\nrecompute_granularity: full\n",
        )
    assert str(err.value) == (
        f"--from: {tmp_path / 'mca.yaml'}:5: sequence_parallel: a Megatron key: this "
        "LLaMA-Factory config trains under Megatron-Core (USE_MCA=1 or USE_MEGATRON_BRIDGE=1), "
        "whose tensor, pipeline and expert parallel step trainmem does not plan"
    )


def test_ray_workers_and_real_keys(tmp_path):
    plan = read(
        tmp_path,
        "ray.yaml",
        "model_name_or_path: x/y\nray_num_workers: 4\nstage: sft\nper_device_eval_batch_size: 1\n"
        "use_rslora: true\nper_device_train_batchsize: 2\n",
    )
    name = tmp_path / "ray.yaml"
    assert plan.unmodelled == (
        f"{name}:2 ray_num_workers (Ray's data-parallel workers; planned as one process)",
    )
    # real keys of LLaMA-Factory and TrainingArguments are not misspellings; a misspelling is
    assert [n for n in plan.notes if "unknown key" in n] == [
        f"{name}:6 per_device_train_batchsize: unknown key, ignored (did you mean "
        "per_device_train_batch_size?)"
    ]
