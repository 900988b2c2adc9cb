"""What one record holds, whatever its file format: a conversation or a prompt and its answer.

The shapes supervised fine-tuning datasets come in, tried in this order:

- ``messages`` / ``conversations``: a list of turns, ``{"role", "content"}`` (OpenAI, TRL) or
  ``{"from", "value"}`` (ShareGPT: human, gpt, system, function_call, observation);
- ``prompt`` / ``completion``: strings, or lists of turns (TRL's conversational form);
- ``instruction`` / ``input`` / ``output`` (Alpaca): one user turn, the instruction and the
  input joined by a blank line as Alpaca's own prompt does, and one assistant turn;
- ``text``: plain text, every token of it trained (language modelling).

What is trained is the answer: assistant turns, the completion, the output, or all of a text.
A column that holds a conversation as a JSON string (CSV) is parsed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from trainmem.core.text import lone_surrogate
from trainmem.sources.datasets.records import Malformed, Record

ROLES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "function_call": "assistant",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
    "ipython": "tool",
}


@dataclass(frozen=True)
class Message:
    role: str  # system, user, assistant or tool (ShareGPT's names mapped)
    content: str

    @property
    def trained(self) -> bool:
        return self.role == "assistant"


@dataclass(frozen=True)
class Chat:
    messages: tuple[Message, ...]

    @property
    def chars(self) -> int:
        return sum(len(m.content) for m in self.messages)


@dataclass(frozen=True)
class Plain:
    prompt: str  # not trained ("" for plain text)
    answer: str  # trained

    @property
    def chars(self) -> int:
        return len(self.prompt) + len(self.answer)


Example = Chat | Plain


@dataclass(frozen=True)
class Shape:
    name: str
    fields: tuple[str, ...]  # the record's keys it reads (Parquet reads only these columns)
    convert: Callable[[Record], Example | Malformed]


class _Bad(Exception):
    """One record that does not hold what its shape needs (becomes a Malformed)."""


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return _unicode(value, what)
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        parts = [p.get("text") for p in value]  # [{"type": "text", "text": ...}, images...]
        if all(isinstance(p, str) or p is None for p in parts):
            return _unicode("".join(p for p in parts if p), what)
    raise _Bad(f"{what} is a {type(value).__name__}, not text")


def _unicode(text: str, what: str) -> str:
    """``text`` if it is valid Unicode: JSON's ``\\udc80`` escapes a lone surrogate, which no
    tokenizer takes and UTF-8 cannot hold (it stopped the whole scan)."""
    if lone_surrogate(text):
        raise _Bad(f"{what} is not valid Unicode (a lone surrogate)")
    return text


MAX_TURNS = 1000  # turns of one conversation: each answer's prefixes are rendered and counted


def _turns(value: Any, what: str) -> tuple[Message, ...]:
    if isinstance(value, str) and value.lstrip().startswith("["):  # a JSON column (CSV)
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            raise _Bad(f"{what} is text that is not a JSON list") from None
    if not isinstance(value, list) or not value:
        raise _Bad(f"{what} is not a list of turns")
    if len(value) > MAX_TURNS:  # rendering its prefixes grows with the square of its turns
        raise _Bad(f"{what} has {len(value):,} turns; at most {MAX_TURNS:,} are measured")
    out = []
    for i, turn in enumerate(value, 1):
        if not isinstance(turn, dict):
            raise _Bad(f"{what} turn {i} is not an object")
        role = turn.get("role", turn.get("from"))
        if not isinstance(role, str) or role.lower() not in ROLES:
            raise _Bad(f"{what} turn {i} has no known role (role or from)")
        content = turn.get("content", turn.get("value"))
        out.append(Message(ROLES[role.lower()], _text(content, f"{what} turn {i} content")))
    return tuple(out)


def _chat(key: str) -> Callable[[Record], Example]:
    return lambda r: Chat(_turns(r.get(key), key))


def _prompt_completion(r: Record) -> Example:
    prompt, completion = r.get("prompt"), r.get("completion")
    if isinstance(prompt, list) or isinstance(completion, list):
        return Chat(_turns(prompt, "prompt") + _turns(completion, "completion"))
    return Plain(_text(prompt, "prompt"), _text(completion, "completion"))


def _alpaca(r: Record) -> Example:
    instruction = _text(r.get("instruction"), "instruction")
    extra = _text(r.get("input"), "input")
    system = _text(r.get("system"), "system")
    user = f"{instruction}\n\n{extra}" if extra else instruction
    turns = (Message("system", system),) if system else ()
    return Chat((*turns, Message("user", user), Message("assistant", _text(r["output"], "output"))))


def _plain_text(r: Record) -> Example:
    return Plain("", _text(r.get("text"), "text"))


SHAPES = (
    Shape("messages", ("messages",), _chat("messages")),
    Shape("conversations", ("conversations",), _chat("conversations")),
    Shape("prompt/completion", ("prompt", "completion"), _prompt_completion),
    Shape("instruction/input/output", ("instruction", "input", "output", "system"), _alpaca),
    Shape("text", ("text",), _plain_text),
)
_REQUIRED = {
    "prompt/completion": ("prompt", "completion"),
    "instruction/input/output": ("instruction", "output"),
}


def required(shape: Shape) -> tuple[str, ...]:
    return _REQUIRED.get(shape.name, shape.fields)


def detect(keys: Collection[str]) -> Shape | None:
    """The first shape whose required fields ``keys`` holds."""
    return next((s for s in SHAPES if all(k in keys for k in required(s))), None)


def convert(shape: Shape, record: Record) -> Example | Malformed:
    """``record`` as an example of ``shape``, or why it is not one."""
    missing = [k for k in required(shape) if k not in record]
    if missing:
        return Malformed(f"no {', '.join(missing)} field (the dataset's shape is {shape.name})")
    try:
        return shape.convert(record)
    except _Bad as exc:
        return Malformed(str(exc))
