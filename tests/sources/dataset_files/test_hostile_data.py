"""Hostile and broken datasets, templates and tokenizers, generated here: a corrupt or cut
.gz body, a datasets cache that cannot be listed, chat templates that loop, build huge
strings or render nothing, tokenizers that fail or panic on one example, one very long
example. Each is one line, or costs only its own example; never a traceback or a hang."""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from dataset_helpers import chat, tiny_tokenizer_json, tokenizer_folder, words, write_jsonl

from trainmem.core.plan import Plan
from trainmem.planner.lengths import length_report, scan
from trainmem.planner.report import build_report
from trainmem.sources.chat_template import Budget, ChatTemplate, TemplateBudgetError, TemplateError
from trainmem.sources.datasets import Chat, DatasetError, Message, Plain, open_dataset
from trainmem.sources.tokens import (
    ChatML,
    Lengths,
    Tokenizer,
    TokenizerFailed,
    Tokens,
    TokensError,
    load_tokens,
)

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

SMALL = Budget(seconds=1.0, memory=768 * 2**20, growth=4, slack=4096, start_seconds=30.0)
CONVERSATION = (Message("user", "hi"), Message("assistant", "yo"))


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and len(text) < 300, text
    return text


def read_all(path: Path) -> None:
    _, examples = open_dataset(str(path)).examples()
    for _ in examples:
        pass


def gz_records(n: int = 20_000) -> bytes:
    return gzip.compress("".join(json.dumps({"text": f"w{i}"}) + "\n" for i in range(n)).encode())


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:30] + b"\xff" * 8 + b[38:], "the gzip data is corrupt (Error -3"),  # zlib
        (lambda b: b[:-8] + b"\0\0\0\0" + b[-4:], "the gzip data is corrupt (CRC check failed"),
        (lambda b: b[: len(b) // 2], "the gzip data ends early"),
        (lambda b: b"\x1f\x8b" + b"x" * 40, "the gzip data is corrupt"),
    ],
    ids=["body", "crc", "truncated", "header"],
)
def test_a_broken_gzip_body_is_one_line(tmp_path: Path, damage, message):
    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(damage(gz_records()))
    with pytest.raises(DatasetError) as err:
        read_all(path)
    assert message in one_line(err.value) and str(path) in str(err.value)


def test_an_unlistable_datasets_cache_is_one_line(tmp_path: Path, monkeypatch):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(not_a_folder))
    with pytest.raises(DatasetError) as err:
        open_dataset("org/name")
    assert "cannot list" in one_line(err.value) and "not a directory" in str(err.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root lists any folder")
def test_a_cache_folder_without_permission_is_one_line(tmp_path: Path, monkeypatch):
    root = tmp_path / "cache"
    config = root / "org___name" / "default"
    config.mkdir(parents=True)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(root))
    config.chmod(0)
    try:
        with pytest.raises(DatasetError) as err:
            open_dataset("org/name")
    finally:
        config.chmod(0o755)
    assert "permission denied" in one_line(err.value)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (  # nested loops of the sandbox's largest range: 10**10 iterations
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "ran over 1 s on one conversation and was stopped",
        ),
        (  # doubles a string 40 times: a terabyte
            "{% set ns = namespace(s='ab') %}{% for i in range(40) %}"
            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
            "needed over 805,306,368 bytes",
        ),
        ("{{ messages[0].content * 10000 }}", "wrote 20,000 characters for 4 of messages"),
    ],
    ids=["loop", "doubling", "growth"],
)
def test_a_template_past_its_budget_stops_the_run_in_one_line(source, message):
    # The doubling case must meet the memory bound first: copying strings of hundreds of MB
    # can pass one second on a loaded 2-core machine, so it keeps the product's 5 s.
    budget = replace(SMALL, seconds=5.0) if "bytes" in message else SMALL
    template = ChatTemplate(source, budget=budget)
    with pytest.raises(TemplateBudgetError) as err:
        template.render(CONVERSATION)
    assert message in one_line(err.value)
    tokens = Tokens(CharCounter(), ChatTemplate(source, budget=budget), True, "test")
    with pytest.raises(TokensError, match="chat template"):
        tokens.measure([Chat(CONVERSATION)])


class CharCounter:
    """One token per character: the budget is the template's, whatever counts the text."""

    def count(self, texts, *, special):
        return [len(t) for t in texts]


def test_a_template_error_costs_only_its_conversation():
    template = ChatTemplate(
        "{% if messages[0].content == 'x' %}{{ 1 / 0 }}{% endif %}{{ messages | length }}",
        budget=SMALL,
    )
    out = template.render_many([((Message("user", "x"),), False), (CONVERSATION, True)])
    assert isinstance(out[0], TemplateError) and "ZeroDivisionError" in str(out[0])
    assert out[1] == "2"


def test_a_model_folders_own_looping_template_is_stopped(tmp_path: Path):
    """No flag names chat_template.jinja: it is read from the model's folder."""
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    folder = tokenizer_folder(tmp_path / "m", template=loop, as_file=True)
    data = write_jsonl(tmp_path / "d.jsonl", [chat(("user", 2), ("assistant", 3))])
    with pytest.raises(TokensError) as err:
        scan(open_dataset(str(data)), load_tokens(str(folder), budget=SMALL))
    assert "ran over 1 s" in one_line(err.value)


def test_a_template_that_renders_nothing_is_not_a_length_of_zero(tmp_path: Path):
    folder = tokenizer_folder(tmp_path / "m", template="", as_file=True)
    data = write_jsonl(tmp_path / "d.jsonl", [chat(("user", 2), ("assistant", 3))] * 3)
    with pytest.raises(DatasetError) as err:
        scan(open_dataset(str(data)), load_tokens(str(folder)))
    assert "the chat template wrote no tokens for it" in one_line(err.value)
    assert "seq_len" not in str(err.value)


def _tokenizer_without_unk(folder: Path, **extra) -> Path:
    """The test tokenizer with an unk token that is not in its vocabulary: encoding an
    unknown word fails in the Rust library ("Missing [UNK] token from the vocabulary")."""
    doc = json.loads(tiny_tokenizer_json())
    doc["model"]["vocab"].pop("[UNK]")
    doc["added_tokens"] = [t for t in doc["added_tokens"] if t["content"] != "[UNK]"]
    doc.update(extra)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(doc))
    return folder / "tokenizer.json"


def test_a_tokenizer_error_costs_only_its_example(tmp_path: Path):
    tokens = Tokens(Tokenizer(_tokenizer_without_unk(tmp_path / "t")), ChatML(), True, "test")
    good, bad = Plain("", words(3)), Plain("", "w1 nosuchword")
    out = tokens.measure([good, bad, good])
    assert out[0] == out[2] == Lengths(4, ((0, 4),))
    assert isinstance(out[1], TokenizerFailed) and "Missing [UNK]" in one_line(out[1])


# A stride not below max_length: tokenizers 0.23 panics at encode time (encoding.rs), as a
# pyo3_runtime.PanicException, which is no Exception.
STRIDE = {"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 5}


def test_a_rust_panic_costs_only_its_example(tmp_path: Path):
    from tokenizers import Tokenizer as HFTokenizer

    path = _tokenizer_without_unk(tmp_path / "t", truncation=STRIDE)
    counter = Tokenizer(path)
    counter._tok = HFTokenizer.from_file(str(path))  # the file's truncation kept: it panics
    counter._encode = counter._tok.encode_batch_fast
    got = counter.count([words(3), words(2)], special=False)
    assert all(isinstance(g, str) and "stride" in g for g in got)


def test_a_tokenizer_json_that_truncates_is_counted_whole(tmp_path: Path):
    # transformers turns the file's truncation off unless asked (and its stride would panic).
    counter = Tokenizer(_tokenizer_without_unk(tmp_path / "t", truncation=STRIDE))
    assert counter.count([words(7)], special=False) == [7]


def test_one_very_long_legal_example_is_measured(tmp_path: Path):
    text = "w1 " * 14_000_000  # 42 MB, within the 64 MiB a record may hold
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": text}, {"text": "w1 w2"}])
    scanned = scan(open_dataset(str(data)), load_tokens("7B"))
    assert scanned.malformed == 0
    assert scanned.lengths.longest == -(-len(text) // 4) + 1  # bytes / 4, and the EOS


def test_a_report_on_one_very_long_example_is_not_a_seq_len_error(tmp_path: Path):
    data = write_jsonl(tmp_path / "d.jsonl", [{"text": "w1 " * 14_000_000}])
    scanned = scan(open_dataset(str(data)), load_tokens("7B"))
    report = length_report(build_report(Plan(model="7B", device="24GB"), solve=False), scanned)
    assert any("longer than any plan (10,000,000 tokens)" in w for w in report.warnings)
    assert report.keep.fits is False


def test_a_template_slow_on_every_conversation_is_stopped_in_all():
    """Each render under the per-conversation limit, but a scan of thousands would take hours:
    past the grace seconds, a mean over the budget's stops the run."""
    slow = "{% for i in range(20000) %}{% endfor %}{{ messages[0].content }}"
    budget = replace(SMALL, grace_seconds=0.2, mean_seconds=0.0001)
    tokens = Tokens(CharCounter(), ChatTemplate(slow, budget=budget), True, "test")
    with pytest.raises(TokensError) as err:
        tokens.measure([Chat(CONVERSATION)] * 5000)
    assert "ms each; real templates take about a millisecond" in one_line(err.value)
    fast = Tokens(CharCounter(), ChatTemplate(slow, budget=SMALL), True, "test")
    assert len(fast.measure([Chat(CONVERSATION)] * 20)) == 20  # the default budget lets it run


# -- helper-29's review: what one record or one file could make a scan do --------------------


def test_a_text_too_long_to_tokenize_is_that_example_only(tmp_path: Path, monkeypatch):
    """tokenizers takes about 80 times a text's size to encode it: two 60 MB records (a 1.8
    MB gzip) took 10 GB or aborted the process. A text over MAX_TOKENIZED is not encoded,
    and the rest go BATCH_CHARS at a time."""
    import trainmem.sources.tokens as tokens_mod

    monkeypatch.setattr(tokens_mod, "MAX_TOKENIZED", 1000)
    monkeypatch.setattr(tokens_mod, "BATCH_CHARS", 50)
    tok = Tokenizer(tokenizer_folder(tmp_path / "m") / "tokenizer.json")
    calls = []
    real = tok._encode
    monkeypatch.setattr(tok, "_encode", lambda t, **kw: (calls.append(len(t)), real(t, **kw))[1])
    texts = ["hello world"] * 10 + ["hello " * 200] + ["world"]
    counts = tok.count(texts, special=False)
    assert counts[:10] == [2] * 10 and counts[11] == 1
    assert counts[10] == "over 1,000 characters: not tokenized"
    assert max(calls) <= 5  # 11 characters a text, 50 a call


def test_records_that_cannot_be_measured_are_malformed(tmp_path: Path):
    def say(content: object) -> dict:
        return {"messages": [{"role": "user", "content": content}]}

    turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}] * 600
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [
            say("fine"),
            say("a\udc80b"),  # JSON's escape of a lone surrogate: it stopped the whole scan
            say([1, 2, 3]),  # content parts that are not objects: it read as empty text
            {"messages": turns},  # each answer's prefixes rendered: quadratic in turns
        ],
    )
    _, examples = open_dataset(str(path)).examples()
    got = [getattr(ex, "why", None) for _, ex in examples]
    assert got == [
        None,
        "messages turn 1 content is not valid Unicode (a lone surrogate)",
        "messages turn 1 content is a list, not text",
        "messages has 1,200 turns; at most 1,000 are measured",
    ]


def test_a_byte_order_mark_is_no_part_of_any_json_dataset(tmp_path: Path):
    lines = tmp_path / "bom.jsonl"
    lines.write_bytes(b'\xef\xbb\xbf{"text": "hello"}\n{"text": "world"}\n')
    obj = tmp_path / "bom.json"
    obj.write_bytes(b'\xef\xbb\xbf{"data": [{"text": "hello"}, {"text": "world"}]}')
    for path in (lines, obj):
        _, examples = open_dataset(str(path)).examples()
        assert [ex.answer for _, ex in examples] == ["hello", "world"]  # type: ignore[union-attr]


def test_a_zip_is_named_and_an_empty_data_flag_refused(tmp_path: Path, capsys):
    import zipfile

    from trainmem.cli.main import main

    path = tmp_path / "d.jsonl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("d.jsonl", '{"text": "a"}\n')
    with pytest.raises(DatasetError, match="is a zip archive: unzip it"):
        open_dataset(str(path))
    assert main(["plan", "--model", "1B", "--data", ""]) == 2  # it was ignored, exit 0
    assert "--data is empty" in capsys.readouterr().err


def test_a_tokenizer_that_panics_on_everything_stops_the_scan_quietly(
    tmp_path: Path, capfd, monkeypatch
):
    """A Split pre-tokenizer whose regex backtracks past oniguruma's retry limit panics on
    each text: 1,000 examples took 127 s, each retried alone, and the panics' messages went
    to the terminal (fd 2) over the dashboard."""
    from tokenizers import Regex, pre_tokenizers

    import trainmem.sources.tokens as tokens_mod

    monkeypatch.setattr(tokens_mod, "FAILED_TO_STOP", 3)
    folder = tokenizer_folder(tmp_path / "m")
    tok = Tokenizer(folder / "tokenizer.json")
    tok._tok.pre_tokenizer = pre_tokenizers.Split(Regex("(a|a)+$"), behavior="isolated")
    texts = ["a" * (30 + i) + "b" for i in range(10)]
    with pytest.raises(TokensError, match="failed on each of the first 3 texts and counted none"):
        tok.count(texts, special=False)
    assert "panicked" not in capfd.readouterr().err


def test_a_bad_byte_in_a_csv_row_costs_that_row(tmp_path: Path):
    # strict decoding read 8 KB with the header and blamed the header: no row was read
    path = tmp_path / "d.csv"
    path.write_bytes(b"text\nhello\n\xff bad\nworld\n")
    _, examples = open_dataset(str(path)).examples()
    got = [(where, getattr(ex, "why", None) or ex.answer) for where, ex in examples]
    assert got == [(2, "hello"), (3, "not UTF-8"), (4, "world")]
    header = tmp_path / "h.csv"
    header.write_bytes(b"te\xffxt\nhello\n")
    with pytest.raises(DatasetError, match="the CSV header is not UTF-8"):
        read_all(header)
