"""axolotl YAML: every key the issue names, axolotl's defaults, and what is not modelled."""

import pytest
from config_helpers import read, write

from trainmem.core.errors import PlanError
from trainmem.sources.configs import read_configs

FULL = """
base_model: Qwen/Qwen2.5-7B
adapter: qlora
load_in_4bit: true
lora_r: 32
lora_alpha: 64
lora_dropout: 0.05
lora_target_modules: [q_proj, k_proj, v_proj, o_proj]
lora_modules_to_save: [embed_tokens, lm_head]
sequence_len: 4096
sample_packing: true
micro_batch_size: 3
gradient_checkpointing: offload
bf16: true
optimizer: paged_adamw_8bit
attn_implementation: flash_attention_2
plugins:
  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin
learning_rate: 0.0002
logging_steps: 1
"""


def test_every_key_maps_to_its_field(tmp_path):
    plan = read(tmp_path, "qlora.yml", FULL)
    assert plan.values == {
        "stack": "axolotl",
        "model": "Qwen/Qwen2.5-7B",
        "method": "qlora",
        "quant": "nf4",
        "double_quant": True,
        "kbit_prep": True,
        "lora_rank": 32,
        "lora_alpha": 64.0,
        "lora_dropout": 0.05,
        "lora_targets": "q,k,v,o",
        "modules_to_save": "embed_tokens,lm_head",
        "seq_len": 4096,
        "batch": 3,
        "packing": True,
        "grad_ckpt": True,
        "ckpt_offload": True,
        "precision": "bf16-mixed",
        "optimizer": "paged-adamw-8bit",
        "attn": "flash-attention-2",
        "loss": "fused",
    }
    name = str(tmp_path / "qlora.yml")
    assert plan.origins["batch"] == f"{name}:11 micro_batch_size"
    assert plan.origins["ckpt_offload"] == f"{name}:12 gradient_checkpointing"
    assert plan.origins["quant"] == "axolotl 067b021 default (src/axolotl/loaders/model.py:719)"
    assert "_prepare_model_for_quantization" in plan.origins["kbit_prep"]
    # learning_rate and logging_steps change no memory: not mentioned anywhere
    assert plan.unmodelled == () and plan.notes == ()


def test_defaults_of_a_bare_full_fine_tune(tmp_path):
    plan = read(tmp_path, "full.yml", "base_model: meta-llama/Llama-3.1-8B\n")
    assert {k: plan.values[k] for k in ("method", "seq_len", "batch", "grad_ckpt")} == {
        "method": "full",
        "seq_len": 512,
        "batch": 1,
        "grad_ckpt": False,
    }
    assert plan.values["optimizer"] == "adamw" and plan.values["packing"] is False
    assert plan.values["precision"] == "bf16"  # bf16: auto on a bf16 GPU loads in bf16
    assert plan.origins["seq_len"] == (
        "axolotl 067b021 default (src/axolotl/utils/schemas/config.py:665)"
    )
    assert plan.origins["batch"].endswith("(src/axolotl/utils/schemas/training.py:77)")
    assert plan.explicit == {"model", "stack"}


def test_lora_defaults_follow_peft_and_8bit_is_lora_on_int8(tmp_path):
    plan = read(
        tmp_path,
        "l.yml",
        """
        base_model: x/y
        adapter: lora
        load_in_8bit: true
        lora_target_linear: true
        """,
    )
    assert plan.values["method"] == "qlora" and plan.values["quant"] == "int8"
    assert (plan.values["lora_rank"], plan.values["lora_alpha"]) == (8, 8.0)
    assert plan.values["lora_targets"] == "linear"  # every nn.Linear (loaders/adapter.py:54-71)
    assert plan.values["lora_dropout"] == 0.0


@pytest.mark.parametrize(
    ("yaml", "field", "value"),
    [
        # bfloat16 also turns the Trainer's bf16 on (core/builders/base.py:276-278): autocast
        # over the fp32 adapters of a bf16 base
        ("bfloat16: true", "precision", "bf16-mixed"),
        ("bf16: false\nfloat16: true", "precision", "fp16"),  # fp16 weights, no autocast
        ("fp16: true", "precision", "fp16-mixed"),
        ("bf16: false", "precision", "fp32"),
        ("flash_attention: true", "attn", "flash-attention-2"),
        ("sdp_attention: true", "attn", "sdpa"),
        ("eager_attention: true", "attn", "eager"),
        ("attn_implementation: flex_attention", "attn", "flex"),
        ("gradient_checkpointing: true", "grad_ckpt", True),
        ("optimizer: adamw_torch", "optimizer", "adamw-foreach"),
        ("optimizer: lion_8bit", "optimizer", "lion-8bit"),
        (
            "plugins: [axolotl.integrations.liger.LigerPlugin]\n"
            "liger_fused_linear_cross_entropy: true",
            "loss",
            "fused",
        ),
        ("bnb_config_kwargs: {bnb_4bit_quant_type: fp4}", "quant", "fp4"),
        ("bnb_config_kwargs: {bnb_4bit_use_double_quant: false}", "double_quant", False),
    ],
)
def test_each_key(tmp_path, yaml, field, value):
    base = "base_model: x/y\nadapter: qlora\nload_in_4bit: true\nlora_target_linear: true\n"
    plan = read(tmp_path, "k.yml", base + yaml + "\n")
    assert plan.values[field] == value
    line = 5 + yaml.count("\n")  # the key's own line, after the four of the base
    assert plan.origins[field].startswith(f"{tmp_path / 'k.yml'}:{line} ")


def test_unmodelled_keys_are_named_and_unknown_ones_suggested(tmp_path):
    plan = read(
        tmp_path,
        "u.yml",
        """
        base_model: x/y
        fsdp_config: {fsdp_version: 2}
        torch_compile: true
        optimizer: galore_adamw
        attn_implementation: xformers
        plugins: [axolotl.integrations.liger.LigerPlugin]
        liger_rms_norm: true
        micro_batchsize: 4
        """,
    )
    name = tmp_path / "u.yml"
    assert plan.unmodelled == (
        f"{name}:4 optimizer (optimizer 'galore_adamw' is not modelled: planned with the default)",
        f"{name}:5 attn_implementation (attention 'xformers'; planned as sdpa)",
        f"{name}:3 torch_compile (compile workspace)",
        f"{name}:7 liger_rms_norm (Liger layer kernels)",
    )
    assert plan.values["optimizer"] == "adamw"  # the default, never a guess
    assert (plan.values["strategy"], plan.values["fsdp_version"]) == ("fsdp", 2)
    assert plan.notes == (
        f"{name}:8 micro_batchsize: unknown key, ignored (did you mean micro_batch_size?)",
    )
    assert plan.values["batch"] == 1


def test_deepspeed_file_is_read_relative_to_the_config(tmp_path):
    (tmp_path / "cfg").mkdir()
    write(
        tmp_path / "cfg",
        "zero3.json",
        '{"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}',
    )
    path = write(tmp_path / "cfg", "a.yml", "base_model: x/y\ndeepspeed: zero3.json\n")
    plan = read_configs([path])
    # parameters offloaded alone: planned as none (the optimizer stays on the GPU)
    assert (plan.values["zero"], plan.values["offload"]) == (3, "none")
    assert plan.origins["zero"] == f"{tmp_path / 'cfg' / 'zero3.json'}:1 zero_optimization.stage"


def test_missing_deepspeed_file_names_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # opened from the working directory, as axolotl does
    path = write(tmp_path, "a.yml", "base_model: x/y\ndeepspeed: nowhere/ds.json\n")
    with pytest.raises(PlanError) as err:
        read_configs([path])
    assert str(err.value) == (
        f"--from: {path}:2 deepspeed: no such file: {tmp_path / 'nowhere' / 'ds.json'}"
    )


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("rl: dpo", "a.yml:2: rl: dpo is not planned"),
        ("reward_model: true", "a.yml:2: reward_model: reward modelling is not planned"),
        ("adapter: qlora", "a.yml:2: adapter: qlora needs load_in_4bit: true"),
        ("load_in_4bit: true", "a.yml:2: load_in_4bit: a quantized base needs an adapter"),
        ("adapter: lora", "a.yml: lora_target_modules: absent"),
        ("micro_batch_size: four", "a.yml:2: micro_batch_size: 'four' is not a whole number"),
        ("sample_packing: maybe", "a.yml:2: sample_packing: 'maybe' is not true or false"),
        # axolotl's schema refuses it; it used to be read as "an fsdp: list without fsdp_config"
        (
            "fsdp: [full_shard]\nfsdp_config: [1, 2]",
            "a.yml:3: fsdp_config: [1, 2] is not a mapping",
        ),
    ],
)
def test_one_line_errors(tmp_path, yaml, message):
    with pytest.raises(PlanError) as err:
        read(tmp_path, "a.yml", f"base_model: x/y\n{yaml}\n")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_liger_keys_do_nothing_without_the_plugin(tmp_path):
    """axolotl merges Liger's keys into its schema, and applies them, only when the plugin is
    listed (utils/config/__init__.py:447-451, integrations/liger/plugin.py)."""
    text = """
        base_model: x/y
        liger_fused_linear_cross_entropy: true
        """
    plan = read(tmp_path, "l.yml", text)
    assert "loss" not in plan.values
    assert any("has no effect without the Liger plugin" in n for n in plan.notes)
    with_plugin = read(
        tmp_path, "p.yml", text + "plugins: [axolotl.integrations.liger.LigerPlugin]"
    )
    assert with_plugin.values["loss"] == "fused"


def test_parallel_sizes_and_partial_training_are_named(tmp_path):
    # examples/expert_parallel/qwen3_30ba3b_ep_fsdp_fft_4gpu.yaml, bigstral's
    # unfrozen_parameters, qat
    plan = read(
        tmp_path,
        "ep.yml",
        """
        base_model: Qwen/Qwen3-30B-A3B
        expert_parallel_size: 2
        dp_shard_size: 2
        context_parallel_size: 1
        unfrozen_parameters:
          - ^lm_head.weight$
        qat:
          weight_dtype: int4
        fsdp_config:
          fsdp_version: 2
        """,
    )
    name = tmp_path / "ep.yml"
    assert set(plan.unmodelled) == {
        f"{name}:2 expert_parallel_size (expert parallelism: each GPU holds part of the "
        "experts; planned whole)",
        f"{name}:3 dp_shard_size (FSDP's shard group; planned as sharding over every GPU)",
        f"{name}:5 unfrozen_parameters (only the matching parameters train; planned with all "
        "trainable)",
        f"{name}:7 qat (quantization-aware training's fake quantization (schemas/config.py:280))",
    }  # a parallel size of 1 is off


def test_expert_only_lora_names_lora_target_parameters(tmp_path):
    # examples/minimax/m2-qlora.yaml: adapters on expert parameters, no module
    with pytest.raises(PlanError) as err:
        read(
            tmp_path,
            "m2.yml",
            "base_model: x/y\nadapter: lora\nlora_target_parameters:\n"
            "  - mlp.experts.gate_up_proj\n  - mlp.experts.down_proj\n",
        )
    assert str(err.value) == (
        f"--from: {tmp_path / 'm2.yml'}:3: lora_target_parameters: LoRA on parameters (MoE "
        "experts) is not planned, and no module is targeted: trainmem puts LoRA on linear "
        "modules (lora_target_modules or lora_target_linear)"
    )


def test_real_axolotl_keys_are_not_misspellings(tmp_path):
    # examples/deepseek-v2/qlora-fsdp-2_5.yaml: peft_use_rslora is a schema field
    # (schemas/peft.py:92), not a misspelt peft_use_dora
    plan = read(
        tmp_path,
        "rs.yml",
        "base_model: x/y\npeft_use_rslora: true\nmicro_batch_sise: 2\n",
    )
    assert [n for n in plan.notes if "unknown key" in n] == [
        f"{tmp_path / 'rs.yml'}:3 micro_batch_sise: unknown key, ignored (did you mean "
        "micro_batch_size?)"
    ]


QLORA = (
    "base_model: Qwen/Qwen3-30B-A3B\nadapter: qlora\nload_in_4bit: true\n"
    "lora_target_modules: [q_proj, v_proj]\n"
)


def test_kbit_preparation_is_skipped_under_zero3(tmp_path):
    # src/axolotl/loaders/model.py:1003-1009: is_deepspeed_zero3_enabled() skips it, so the
    # stage read from the DeepSpeed file decides
    write(tmp_path, "z3.json", '{"zero_optimization": {"stage": 3}}')
    write(tmp_path, "z2.json", '{"zero_optimization": {"stage": 2}}')
    three = read(tmp_path, "a.yml", QLORA + "deepspeed: z3.json\n")
    assert three.values["kbit_prep"] is False
    assert three.origins["kbit_prep"].endswith("model.py:1003-1009, under ZeRO-3)")
    assert read(tmp_path, "b.yml", QLORA + "deepspeed: z2.json\n").values["kbit_prep"] is True


def test_quantized_experts_skip_kbit_preparation_and_are_named(tmp_path):
    # model.py:1011-1013: experts quantized as they load (monkeypatch/moe_quant.py) skip it
    plan = read(tmp_path, "moe.yml", QLORA + "quantize_moe_experts: true\n")
    assert plan.values["kbit_prep"] is False
    assert plan.unmodelled == (
        f"{tmp_path / 'moe.yml'}:5 quantize_moe_experts (experts quantized as they load: "
        "planned in 16-bit)",
    )
