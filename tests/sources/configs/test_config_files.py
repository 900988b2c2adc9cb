"""Broken and odd files: one line with the file and the line, never a traceback."""

import os

import pytest
from config_helpers import write

from trainmem.core.errors import PlanError
from trainmem.sources.configs import read_configs


def error(path):
    with pytest.raises(PlanError) as err:
        read_configs([path])
    message = str(err.value)
    assert "\n" not in message
    return message


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = write(tmp_path, "bad.yml", "base_model: x/y\nmicro_batch_size: 2\nadapter: [lora\n")
    assert error(path).startswith(f"--from: {path}:4: not valid YAML:")
    path = write(tmp_path, "bad2.yml", "base_model: x/y\n  sequence_len: 4\n")
    # libyaml says "in this context" where PyYAML's own parser says "here"
    assert error(path).startswith(f"--from: {path}:2: not valid YAML: mapping values are not")


def test_malformed_json_names_file_and_line(tmp_path):
    path = write(tmp_path, "ds.json", '{\n  "zero_optimization": {"stage": 2},\n}\n')
    assert error(path) == (
        f"--from: {path}:3: not valid JSON: Expecting property name enclosed in double quotes "
        "(column 1)"
    )


def test_format_is_recognised_by_content_not_extension(tmp_path):
    path = write(tmp_path, "config.txt", '{"zero_optimization": {"stage": 1}}')
    assert read_configs([path]).values["zero"] == 1
    path = write(tmp_path, "axolotl.json", "base_model: x/y\nsequence_len: 64\n")
    assert "not valid JSON" in error(path)  # a .json name must hold JSON
    path = write(tmp_path, "run", "base_model: x/y\nsequence_len: 64\n")
    assert read_configs([path]).values["seq_len"] == 64


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("- a\n- b\n", "holds a list, not a mapping of keys"),
        ("name: my-app\nversion: 3\n", "not a training config trainmem reads"),
        ("a: &x [1]\nb: *y\n", "not valid YAML: found undefined alias"),
    ],
)
def test_not_a_config(tmp_path, text, message):
    assert message in error(write(tmp_path, "c.yaml", text))


def test_missing_unreadable_and_special_files(tmp_path):
    assert (
        error(tmp_path / "none.yml") == f"--from: no such file: config file {tmp_path / 'none.yml'}"
    )
    assert "is a directory" in error(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "FIFO" in error(fifo)  # refused before opening: never blocks


def test_too_large(tmp_path):
    path = tmp_path / "big.yml"
    path.write_text("base_model: x/y\n" + "# pad\n" * 800_000)
    assert "is larger than 4,194,304 bytes" in error(path)


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    # The "billion laughs": 10**9 values once expanded, refused from the node graph, so
    # neither loading nor the message ever walks them (the message used to repr them).
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = write(tmp_path, "lol.yml", "\n".join([*lines, "base_model: x/y", ""]))
    assert "aliases expand to over 100,000 values" in error(path)


def test_ordinary_aliases_and_merge_keys_still_read(tmp_path):
    path = write(
        tmp_path,
        "merge.yml",
        """
        defaults: &defaults {micro_batch_size: 2, sequence_len: 1024}
        base_model: x/y
        <<: *defaults
        lora_target_modules: &targets [q_proj, v_proj]
        """,
    )
    plan = read_configs([path])
    assert plan.values["model"] == "x/y"
    assert (plan.values["batch"], plan.values["seq_len"]) == (2, 1024)
