"""`trainmem-tui plan` pointed at hostile files it did not write, generated here (the bombs
small but real): each ends with exit 2 and one line on stderr, never a traceback, an
OverflowError or a hang. Each runs in a child killed after a timeout, so that a regression
fails instead of hanging the suite or filling memory."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DIGITS = "1" + "0" * 400
CODE = "import sys; from trainmem.cli.main import main; sys.exit(main(sys.argv[1:]))"


def plan(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CODE, "plan", "--device", "24GB", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, **env},
    )


def refused(*args: str, **env: str) -> str:
    out = plan(*args, **env)
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr[-2000:]
    assert out.stderr.startswith("trainmem-tui plan: error: ")
    return out.stderr


def billion_laughs() -> str:
    lines = ["base_model: Qwen/Qwen2.5-0.5B", "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for p, c in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]")
    return "\n".join([*lines, "sequence_len: *i", ""])


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bomb.yml", billion_laughs(), "aliases expand to over 100,000 values"),
        ("nul.yml", "base_model: x/y\nx: a\x00b\n", "nul.yml:2: not valid YAML: control"),
        ("bel.yml", "base_model: x/y\nx: a\x07b\n", "bel.yml:2: not valid YAML: control"),
        ("inf.yml", "base_model: x/y\nsequence_len: .inf\n", "sequence_len: inf is not"),
        ("big.yml", f"base_model: x/y\nsequence_len: {DIGITS}\n", "a 1329-bit integer"),
        (
            "lf.yml",
            f"stage: sft\nmodel_name_or_path: x/y\ncutoff_len: {DIGITS}\n",
            "cutoff_len: a 1329-bit integer",
        ),
        (
            "ds.json",
            '{"zero_optimization": {"stage": 2, "reduce_bucket_size": Infinity}}',
            "reduce_bucket_size: inf is not a finite number",
        ),
        (
            "acc.yaml",
            "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
            "num_machines: 0\nnum_processes: 4\n",
            "num_machines: 0 is not a number of machines",
        ),
    ],
)
def test_hostile_configs(tmp_path: Path, name: str, text: str, message: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert message in refused("--from", str(path))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seq-len", DIGITS], "--seq-len: a 401-digit integer is out of range"),
        (["--reduce-bucket", DIGITS], "--reduce-bucket: a 401-digit integer"),
        (["--lora-alpha", "1e400"], "--lora-alpha: '1e400' is not a finite number"),
        (["--from-args", ""], "--from-args: is empty"),
        (["--from-args", "trl sft --max_length " + DIGITS], "max_length: a 401-digit integer"),
    ],
)
def test_hostile_flags(args: list[str], message: str):
    assert message in refused(*args)


def test_a_corrupt_gzip_dataset(tmp_path: Path):
    data = gzip.compress(b"".join(b'{"text": "w%d"}\n' % i for i in range(20_000)))
    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(data[:30] + b"\xff" * 8 + data[38:])
    assert "the gzip data is corrupt" in refused("--model", "0.5B", "--data", str(path))


def test_a_model_folders_looping_template_stops_the_scan(tmp_path: Path):
    pytest.importorskip("jinja2")
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.models import WordLevel

    folder = tmp_path / "model"
    folder.mkdir()
    tok = tokenizers.Tokenizer(WordLevel({"[UNK]": 0, "hi": 1}, unk_token="[UNK]"))
    (folder / "tokenizer.json").write_text(tok.to_str())
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    (folder / "chat_template.jinja").write_text(loop)  # found in the folder, as for --model DIR
    data = tmp_path / "d.jsonl"
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hi"}]
    data.write_text(json.dumps({"messages": turns}) + "\n")
    err = refused("--model", "0.5B", "--data", str(data), "--tokenizer", str(folder))
    assert "the chat template ran over 5 s" in err


def test_an_unknown_user_in_the_state_dir_writes_nothing_here(tmp_path: Path):
    out = plan("--model", "7B", cwd=tmp_path, TRAINMEM_STATE_DIR="~nouser-trainmem/state")
    assert "Traceback" not in out.stderr
    assert "TRAINMEM_STATE_DIR='~nouser-trainmem/state': no such user" in out.stderr
    assert list(tmp_path.iterdir()) == []
    if out.returncode:
        assert out.returncode == 2 and out.stderr.count("\n") == 1


def test_json_output_survives_the_same_files(tmp_path: Path):
    """--json takes the same path: the same one line, and nothing half-written on stdout."""
    path = tmp_path / "bomb.yml"
    path.write_text(billion_laughs())
    out = plan("--from", str(path), "--json")
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
