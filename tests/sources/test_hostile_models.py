"""--model as a careless or hostile user gives it: odd paths, config.json files with wrong
types, absurd values and deep nesting. Each answer is one line and exit status 2 (or, for a
bad safetensors header, a note), never a traceback, a hang, a MemoryError or a nonsense
estimate. The hang-prone cases run in a subprocess with a timeout, so that a regression
fails instead of hanging the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_model import CONFIG as TINY_CONFIG

from trainmem.cli.main import main
from trainmem.core.errors import PlanError
from trainmem.core.estimator import estimate
from trainmem.core.plan import METHODS, Plan
from trainmem.sources import files
from trainmem.sources.resolve import resolve_model

CONFIG = TINY_CONFIG
MOE = {**CONFIG, "model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2}
FAST = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def run_plan(model: str) -> subprocess.CompletedProcess[str]:
    """`trainmem-tui plan --model MODEL --device 24GB` in a child, killed after 20 s."""
    code = "import sys; from trainmem.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "plan", "--model", model, "--device", "24GB"],
        capture_output=True,
        text=True,
        timeout=20,
    )


def one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


def assert_refused(model: str, *words: str) -> None:
    out = run_plan(model)
    assert out.returncode == 2, out.stderr
    err = one_line(out.stderr)
    assert err.startswith("trainmem-tui plan: error: model: ")
    for word in words:
        assert word in err


# -- paths -----------------------------------------------------------------------------------


def test_a_part_too_long_for_a_file_name(tmp_path, capsys):
    model = str(tmp_path / ("x" * 300) / "config.json")
    assert main(["plan", "--model", model, "--device", "24GB"]) == 2
    err = one_line(capsys.readouterr().err)
    assert "file name too long" in err and len(err) < 300


def test_unknown_user_in_a_tilde_path(capsys):
    assert main(["plan", "--model", "~no-such-user-xyz/model", "--device", "24GB"]) == 2
    assert "no such user 'no-such-user-xyz'" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("name", ["config.json", "model.json"])
def test_a_fifo_is_refused_without_opening_it(tmp_path, name):
    os.mkfifo(tmp_path / name)
    assert_refused(str(tmp_path / name), "FIFO")
    if name == "config.json":
        assert_refused(str(tmp_path), "FIFO")  # the folder's config.json


def test_a_safetensors_fifo_is_a_note_not_a_hang(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    os.mkfifo(tmp_path / "model.safetensors")
    code = textwrap.dedent(f"""
        from trainmem.sources.resolve import resolve_model
        print(resolve_model({str(tmp_path)!r}).notes[-1])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0 and "FIFO" in out.stdout and "unreadable" in out.stdout


def test_config_linked_to_dev_zero(tmp_path):
    (tmp_path / "config.json").symlink_to("/dev/zero")
    assert_refused(str(tmp_path), "character device")
    assert_refused("/dev/zero", "not a .json file")


def test_dangling_links(tmp_path, capsys):
    (tmp_path / "config.json").symlink_to(tmp_path / "gone.json")
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    for model in (str(tmp_path), str(tmp_path / "config.json"), str(tmp_path / "link")):
        assert main(["plan", "--model", model, "--device", "24GB"]) == 2
        assert "dangling symbolic link" in one_line(capsys.readouterr().err)


def test_a_symlink_loop(tmp_path, capsys):
    (tmp_path / "config.json").symlink_to(tmp_path / "other.json")
    (tmp_path / "other.json").symlink_to(tmp_path / "config.json")
    assert main(["plan", "--model", str(tmp_path), "--device", "24GB"]) == 2
    assert "too many levels of symbolic links" in one_line(capsys.readouterr().err)


def test_a_directory_where_config_json_belongs(tmp_path, capsys):
    (tmp_path / "config.json").mkdir()
    assert main(["plan", "--model", str(tmp_path), "--device", "24GB"]) == 2
    assert "is a directory" in one_line(capsys.readouterr().err)
    assert main(["plan", "--model", str(tmp_path / "empty"), "--device", "24GB"]) == 2
    assert "no such file" in one_line(capsys.readouterr().err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_config(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "config.json").chmod(0)
    assert main(["plan", "--model", str(tmp_path), "--device", "24GB"]) == 2
    assert "permission denied" in one_line(capsys.readouterr().err)


# -- files.py --------------------------------------------------------------------------------


def test_reads_are_capped(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 101)
    assert files.read_bytes(path, limit=101) == b" " * 101
    with pytest.raises(files.FileReadError, match="larger than 100 bytes"):
        files.read_bytes(path, limit=100)


def test_text_must_be_utf8(tmp_path):
    (tmp_path / "config.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(PlanError, match="not UTF-8"):
        resolve_model(str(tmp_path))


@pytest.mark.parametrize(("depth", "ok"), [(64, True), (65, False), (200_000, False)])
def test_json_nesting_is_bounded(depth, ok):
    text = "[" * depth + "]" * depth
    if ok:
        assert files.parse_json(text, what="x") is not None
    else:
        with pytest.raises(files.FileReadError, match="nested too deeply"):
            files.parse_json(text, what="x")


def test_a_huge_config_json_is_refused_unread(tmp_path):
    with open(tmp_path / "config.json", "wb") as f:  # sparse: 17 MiB of nothing on disk
        f.truncate(17 * 2**20)
    with pytest.raises(PlanError, match="larger than"):
        resolve_model(str(tmp_path))


# -- config.json values (hypothesis) ---------------------------------------------------------

KEYS = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "final_logit_softcapping",
    "model_type",
    "torch_dtype",
    "text_config",
]
huge = st.integers(min_value=-(10**40), max_value=10**40)
values = st.one_of(
    st.integers(-3, 300),
    huge,
    st.sampled_from([0, 1, 2, 4, 8, 64, 2**20, 2**24, 10**7, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([4.0, 64.0, 1e30, 1.5, -0.0]),
    st.booleans(),
    st.none(),
    st.text(max_size=8),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
# JSON text for one value: any of the above, or nesting far deeper than Python recurses.
value_text = st.one_of(
    values.map(json.dumps),
    st.integers(1, 300_000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 50).map(lambda n: "9" * (n * 100)),  # up to 5,000 digits
)
overrides = st.dictionaries(st.sampled_from(KEYS), value_text, max_size=4)


def check_sane(spec):
    """What any accepted model must satisfy, under every method."""
    assert spec.params > 0
    assert 0 < spec.active_params <= spec.params
    for method in METHODS:
        est = estimate(Plan(model="x", method=method).validated(), spec)
        assert all(c.bytes >= 0 for c in est.components), (method, est.components)
        assert all(total >= 0 for total in est.phases.values()), (method, est.phases)
        assert 0 < est.allocated_bytes <= est.device_bytes


def resolve_or_refuse(path):
    try:
        return resolve_model(str(path))
    except PlanError as exc:
        assert exc.field == "model" and "\n" not in str(exc) and len(str(exc)) < 400
        return None


@FAST
@given(base=st.sampled_from([CONFIG, MOE]), changed=overrides)
def test_any_config_json_is_refused_in_one_line_or_sane(tmp_path, base, changed):
    fields = {k: json.dumps(v) for k, v in base.items() if k not in changed} | changed
    text = "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in fields.items()) + "}"
    (tmp_path / "config.json").write_text(text)
    spec = resolve_or_refuse(tmp_path)
    if spec is not None:
        check_sane(spec)


in_range = st.dictionaries(
    st.sampled_from(KEYS[:12]),
    st.one_of(st.integers(0, 2**24), st.sampled_from([1, 2**20, 2**24, 65_536])),
    max_size=3,
)


@FAST
@given(base=st.sampled_from([CONFIG, MOE]), changed=in_range)
def test_large_but_accepted_configs_give_sane_estimates(tmp_path, base, changed):
    (tmp_path / "config.json").write_text(json.dumps({**base, **changed}))
    spec = resolve_or_refuse(tmp_path)
    if spec is not None:
        check_sane(spec)


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"vocab_size": 1e30}, "'vocab_size' must be a positive integer up to 16,777,216"),
        ({"num_hidden_layers": 10**7}, "'num_hidden_layers' must be a positive integer"),
        ({"head_dim": -128}, "'head_dim' must be a positive integer"),
        ({"hidden_size": [4096]}, "(got [4096])"),
        ({"hidden_size": True}, "(got True)"),
        ({"num_experts": 8, "num_experts_per_tok": 9}, "exceeds the number of experts"),
        ({"hidden_size": 2**20, "vocab_size": 2**24, "num_hidden_layers": 10_000}, "over the"),
    ],
)
def test_named_absurd_configs(tmp_path, changed, message):
    (tmp_path / "config.json").write_text(json.dumps({**CONFIG, **changed}))
    with pytest.raises(PlanError) as err:
        resolve_model(str(tmp_path))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_integers_too_large_for_a_float(tmp_path):
    huge = json.dumps(CONFIG)[:-1] + ', "vocab_size": 1' + "0" * 400 + "}"  # 10**400
    (tmp_path / "config.json").write_text(huge)
    with pytest.raises(PlanError, match=r"'vocab_size' must be .* \(got a 1329-bit integer\)"):
        resolve_model(str(tmp_path))
