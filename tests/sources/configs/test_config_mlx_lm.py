"""mlx-lm's LoRA config and command line (mlx-lm 0.32.2 mlx_lm/lora.py): the published
example's keys (mlx-lm examples/lora_config.yaml), CONFIG_DEFAULTS for what is left out,
the command line over its --config file, and what is refused."""

import pytest
from config_helpers import read, write

from trainmem.core.errors import PlanError
from trainmem.core.plan import Plan
from trainmem.sources.configs import read_configs

# mlx-lm's examples/lora_config.yaml (ml-explore/mlx-lm d78bf58), its comments trimmed
EXAMPLE = """
# The path to the local model directory or Hugging Face repo.
model: "mlx-community/Llama-3.2-1B-Instruct-bf16"
train: true
fine_tune_type: lora
optimizer: adamw
data: "mlx-community/WikiSQL"
seed: 0
num_layers: 16
batch_size: 4
iters: 1000
val_batches: 25
learning_rate: 1e-5
steps_per_report: 10
steps_per_eval: 200
grad_accumulation_steps: 1
resume_adapter_file: null
adapter_path: "adapters"
save_every: 100
test: false
test_batches: 100
max_seq_length: 2048
grad_checkpoint: false
lora_parameters:
  keys: ["self_attn.q_proj", "self_attn.v_proj"]
  rank: 8
  scale: 20.0
  dropout: 0.0
"""


def test_the_published_example(tmp_path):
    plan = read(tmp_path, "lora_config.yaml", EXAMPLE)
    assert plan.values == {
        "stack": "mlx",
        "model": "Llama-3.2-1B-Instruct",
        "precision": "bf16",
        "method": "lora",
        "dora": False,
        "mlx_num_layers": 16,
        "batch": 4,
        "seq_len": 2048,
        "grad_ckpt": False,
        "optimizer": "adamw",
        "lora_rank": 8,
        "lora_dropout": 0.0,
        "lora_targets": "q,v",
    }
    where = tmp_path / "lora_config.yaml"
    assert plan.origins["mlx_num_layers"] == f"{where}:8 num_layers"
    assert plan.origins["lora_targets"] == f"{where}:24 lora_parameters.keys"
    assert "mlx_lm.convert's conversion of 'Llama-3.2-1B-Instruct'" in plan.origins["model"]
    Plan(**{k: v for k, v in plan.values.items()}).validated()  # every value is a plan's


def test_defaults_are_config_defaults(tmp_path):
    plan = read(tmp_path, "c.yaml", "model: Qwen/Qwen2.5-0.5B\ntrain: true\niters: 10\n")
    v, o = plan.values, plan.origins
    assert (v["method"], v["dora"], v["mlx_num_layers"], v["batch"]) == ("lora", False, 16, 4)
    assert (v["seq_len"], v["grad_ckpt"], v["optimizer"], v["lora_rank"]) == (
        2048,
        False,
        "adamw",
        8,
    )
    assert v["lora_targets"] == "all-linear"
    assert o["mlx_num_layers"] == "mlx-lm 0.32.2 default (mlx_lm/lora.py:59)"
    assert v["model"] == "Qwen/Qwen2.5-0.5B"  # not an mlx-community conversion: as written


def test_dora_on_a_quantized_conversion(tmp_path):
    plan = read(
        tmp_path,
        "q.yaml",
        """
        model: mlx-community/Qwen2.5-7B-Instruct-4bit
        train: true
        fine_tune_type: dora
        num_layers: 8
        grad_checkpoint: true
        optimizer: adafactor
        """,
    )
    v = plan.values
    assert (v["model"], v["method"], v["dora"], v["mlx_bits"]) == (
        "Qwen2.5-7B-Instruct",
        "qlora",
        True,
        4,
    )
    assert (v["mlx_num_layers"], v["grad_ckpt"], v["optimizer"]) == (8, True, "adafactor")
    assert "names an MLX-quantized checkpoint" in plan.origins["method"]
    assert any("group size" in n for n in plan.notes)


def test_command_line_and_python_dash_m():
    text = (
        "mlx_lm.lora --model mlx-community/Qwen2.5-7B-Instruct-8bit --train "
        "--fine-tune-type lora --num-layers -1 --batch-size 1 --max-seq-length 1024 "
        "--grad-checkpoint --optimizer sgd"
    )
    for command in (text, text.replace("mlx_lm.lora", "python -m mlx_lm lora")):
        plan = read_configs([], [command])
        v = plan.values
        assert (v["stack"], v["method"], v["mlx_bits"], v["mlx_num_layers"]) == (
            "mlx",
            "qlora",
            8,
            -1,
        )
        assert (v["batch"], v["seq_len"], v["grad_ckpt"], v["optimizer"]) == (1, 1024, True, "sgd")
        assert plan.origins["mlx_num_layers"] == "--from-args --num_layers"


def test_command_line_over_its_config(tmp_path, monkeypatch):
    # lora.py main(): an option given on the command line beats the file's key
    write(tmp_path, "lora_config.yaml", EXAMPLE)
    monkeypatch.chdir(tmp_path)
    plan = read_configs([], ["mlx_lm.lora --config lora_config.yaml --num-layers 4 --train"])
    assert plan.values["mlx_num_layers"] == 4
    assert plan.origins["mlx_num_layers"] == "--from-args --num_layers"
    assert plan.values["lora_targets"] == "q,v"
    assert plan.origins["batch"].endswith("lora_config.yaml:9 batch_size")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fine_tune_type: qlora\nnum_layers: 4\n", "'qlora' is not lora, dora or full"),
        ("fine_tune_type: lora\noptimizer: muon\n", "muon"),
        ("model: mlx-community/Qwen2.5-7B-Instruct-4bit\nfine_tune_type: full\n", "quantized"),
        ("fine_tune_type: lora\nlora_parameters: 8\n", "not a mapping"),
        ("fine_tune_type: lora\nlora_parameters:\n  keys: [self_attn.rope]\n", "not planned"),
        ("fine_tune_type: lora\nnum_layers: many\n", "num_layers"),
    ],
)
def test_bad_values_are_one_line(tmp_path, text, message):
    with pytest.raises(PlanError, match=message) as err:
        read(tmp_path, "bad.yaml", text)
    assert "\n" not in str(err.value)


def test_other_mlx_lm_commands_are_refused():
    with pytest.raises(PlanError, match="only `mlx_lm lora` trains"):
        read_configs([], ["python -m mlx_lm generate --model x"])


def test_not_training_is_said(tmp_path):
    plan = read(tmp_path, "c.yaml", "fine_tune_type: lora\nnum_layers: 4\n")
    assert any("train is not set" in n for n in plan.notes)
