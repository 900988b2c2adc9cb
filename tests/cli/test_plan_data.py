"""`plan --data FILE`: the dataset's length report beside the estimate, and its bad input."""

import json

from trainmem.cli.main import main


def _write(tmp_path, lengths):
    path = tmp_path / "train.jsonl"
    rows = [json.dumps({"text": "abcd" * n}) for n in lengths]  # 4 bytes ~ 1 token
    path.write_text("\n".join([*rows, "{not json"]) + "\n")
    return path


def test_data_report_in_the_json(tmp_path, capsys):
    path = _write(tmp_path, [100] * 90 + [1000] * 10)
    args = ["plan", "--model", "0.5B", "--seq-len", "512", "--device", "24GB"]
    assert main([*args, "--data", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["examples"] == 100
    assert data["malformed"]["count"] == 1
    assert data["lengths"]["max"] >= 1000 > data["lengths"]["p50"]
    assert data["longer_than_seq_len"]["examples"] == 10


def test_a_missing_dataset_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["plan", "--model", "0.5B", "--data", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none.jsonl" in err
