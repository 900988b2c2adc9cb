"""`plan --from FILE` / `--from-args` and `trainmem-tui --from FILE`: origins in the JSON and
the table, flags over files, and bad files as one line with exit status 2."""

import json
import textwrap

from trainmem.cli import dashboard_cmd
from trainmem.cli.main import main

AXOLOTL = """
base_model: Qwen/Qwen2.5-7B
adapter: lora
lora_r: 32
lora_target_linear: true
sequence_len: 1024
micro_batch_size: 4
gradient_checkpointing: true
torch_compile: true
deepspeed: ds.json
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def configs(tmp_path):
    write(tmp_path, "ds.json", '{"zero_optimization": {"stage": 2}}')
    return write(tmp_path, "axo.yml", AXOLOTL)


def plan_json(capsys, *args):
    assert main(["plan", *args, "--device", "h100-80gb", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_the_plan_the_file_describes_and_each_origin(tmp_path, capsys):
    path = configs(tmp_path)
    out = plan_json(capsys, "--from", str(path))
    plan, origins = out["plan"], out["origins"]
    assert (plan["model"], plan["method"], plan["stack"]) == ("Qwen/Qwen2.5-7B", "lora", "axolotl")
    assert (plan["seq_len"], plan["batch"], plan["lora_rank"], plan["zero"]) == (1024, 4, 32, 2)
    # ZeRO-2 from ds.json: DeepSpeed casts the whole model to bf16 and nothing autocasts
    assert plan["precision"] == "bf16" and plan["optimizer"] == "adamw"
    assert set(origins) == set(plan)
    assert origins["batch"] == f"{path}:6 micro_batch_size"
    assert origins["zero"] == f"{tmp_path / 'ds.json'}:1 zero_optimization.stage"
    assert origins["optimizer"].startswith("axolotl 067b021 default (")
    assert origins["device"] == "flag --device" and origins["gpus"] == "trainmem default"
    assert out["unmodelled"] == [f"{path}:8 torch_compile (compile workspace)"]
    assert f"not modelled: {path}:8 torch_compile (compile workspace)" in out["notes"]


def test_flags_override_files(tmp_path, capsys):
    path = configs(tmp_path)
    out = plan_json(capsys, "--from", str(path), "--batch", "1", "--no-grad-ckpt", "--zero", "0")
    assert (out["plan"]["batch"], out["plan"]["grad_ckpt"], out["plan"]["zero"]) == (1, False, 0)
    assert out["origins"]["batch"] == "flag --batch"
    assert out["origins"]["grad_ckpt"] == "flag --grad-ckpt"
    assert out["plan"]["seq_len"] == 1024  # what no flag set still comes from the file


def test_a_flag_equal_to_its_default_still_overrides(tmp_path, capsys):
    out = plan_json(capsys, "--from", str(configs(tmp_path)), "--batch", "2")
    assert out["plan"]["batch"] == 2 and out["origins"]["batch"] == "flag --batch"


def test_from_args(capsys):
    out = plan_json(
        capsys,
        "--from-args",
        "accelerate launch --num_processes 2 trl sft --model_name_or_path Qwen/Qwen2.5-7B "
        "--per_device_train_batch_size 2 --max_length 512 --use_peft",
    )
    plan = out["plan"]
    assert (plan["stack"], plan["gpus"], plan["seq_len"], plan["method"]) == ("trl", 2, 512, "lora")
    assert out["origins"]["gpus"] == "--from-args --num_processes"


def test_without_from_every_origin_is_a_flag_or_the_default(capsys):
    out = plan_json(capsys, "--model", "7B")
    assert out["origins"]["model"] == "flag --model" and out["unmodelled"] == []
    assert {o for k, o in out["origins"].items() if k not in ("model", "device")} == {
        "trainmem default"
    }


def test_text_output_has_a_from_section(tmp_path, capsys):
    path = configs(tmp_path)
    assert main(["plan", "--from", str(path), "--device", "h100-80gb"]) == 0
    out = capsys.readouterr().out
    assert "plan fields from" in out and "micro_batch_size" in out
    assert "not modelled:" in out and "torch_compile" in out


def one_line_error(capsys, *args):
    assert main(["plan", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    return captured.err


def test_malformed_yaml_is_one_line_with_the_line_number(tmp_path, capsys):
    path = write(tmp_path, "bad.yml", "base_model: x/y\nadapter: [lora\n")
    err = one_line_error(capsys, "--from", str(path))
    assert err.startswith(f"trainmem-tui plan: error: --from: {path}:3: not valid YAML: ")


def test_malformed_json_and_missing_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a named file is opened from the working directory
    path = write(tmp_path, "ds.json", '{"zero_optimization": {"stage": 2,}}')
    assert f"{path}:1: not valid JSON" in one_line_error(capsys, "--from", str(path))
    assert "no such file" in one_line_error(capsys, "--from", str(tmp_path / "nope.yml"))
    axo = write(tmp_path, "a.yml", "base_model: 7B\ndeepspeed: missing.json\n")
    err = one_line_error(capsys, "--from", str(axo))
    assert f"{axo}:2 deepspeed: no such file: {tmp_path / 'missing.json'}" in err


def test_unknown_model_names_the_key(tmp_path, capsys):
    path = write(tmp_path, "a.yml", "base_model: nobody/no-such-model\n")
    err = one_line_error(capsys, "--from", str(path))
    assert err.startswith(f"trainmem-tui plan: error: {path}:1 base_model: unknown model")


def test_a_bad_value_names_the_key(tmp_path, capsys):
    path = write(tmp_path, "a.yml", "base_model: 7B\nmicro_batch_size: 0\n")
    err = one_line_error(capsys, "--from", str(path))
    assert err.startswith(f"trainmem-tui plan: error: {path}:2 micro_batch_size: ")


def test_non_sft_stage_is_said_clearly(tmp_path, capsys):
    path = write(
        tmp_path, "dpo.yaml", "model_name_or_path: x/y\nstage: dpo\nfinetuning_type: lora\n"
    )
    err = one_line_error(capsys, "--from", str(path))
    assert f"{path}:2: stage: dpo is not planned" in err


def test_dashboard_opens_on_the_plan_from_the_file(tmp_path, isolated_state):
    path = configs(tmp_path)
    _ns, plan_set, messages, broken = dashboard_cmd.startup(["--from", str(path)])
    assert plan_set is not None and broken == []
    plan = plan_set.plans[-1].plan
    assert (plan.stack, plan.seq_len, plan.batch, plan.zero) == ("axolotl", 1024, 4, 2)
    assert (
        "warning",
        f"not in the estimate (not modelled): {path}:8 torch_compile (compile workspace)",
    ) in messages
