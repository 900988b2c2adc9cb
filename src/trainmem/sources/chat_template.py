"""A model's chat template rendered the way transformers renders it for training.

Followed from transformers 5.24 (src/transformers/utils/chat_template_utils.py,
``_cached_compile_jinja_template`` and ``render_jinja_template``; tokenization_utils_base.py
``apply_chat_template``): an ``ImmutableSandboxedEnvironment`` with ``trim_blocks`` and
``lstrip_blocks`` and the loop-controls extension; a ``tojson`` filter that does not escape
HTML and keeps non-ASCII text; ``raise_exception`` and ``strftime_now`` as globals; the
template sees ``messages``, ``add_generation_prompt`` and the named special tokens
(``bos_token``, ``eos_token``, ... as strings). ``{% generation %}`` blocks (transformers'
assistant-mask tag) render their body. The rendered text is tokenized without adding special
tokens, since the template writes them. Templates from the Hub are untrusted code: only the
sandbox runs them, and jinja2 < 3.1.6 is refused as transformers refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainmem.sources.datasets.shapes import Message
from trainmem.sources.template_render import (
    Budget,
    TemplateBudgetError,
    TemplateError,
    require_jinja,
)

__all__ = ["Budget", "ChatML", "ChatTemplate", "TemplateBudgetError", "TemplateError"]

# tokenization_utils_base.py SPECIAL_TOKENS_ATTRIBUTES (transformers 5.24)
SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


Request = tuple[Sequence[Message], bool]  # a conversation, add_generation_prompt


class ChatTemplate:
    """A model's chat template, compiled and rendered in a worker process under a Budget.

    A template is code from outside, read from a model folder without any flag. The sandbox
    stops it reaching Python, but not looping (nested ``range(100000)`` loops) or building a
    string of gigabytes, so it runs in a child process (trainmem.sources.template_worker)
    that is killed when one conversation takes longer than its budget, whose memory is
    capped, and whose output is refused beyond ``growth`` times its input. Each ends the run
    with one TemplateBudgetError line. The caller's thread (the dashboard's worker, never
    its UI thread) waits at most ``seconds`` per conversation."""

    def __init__(
        self,
        source: str,
        special_tokens: dict[str, str] | None = None,
        budget: Budget | None = None,
    ) -> None:
        require_jinja()  # refused here, in one line, before a worker is started
        from trainmem.sources.template_worker import Worker

        self._worker = Worker(source, dict(special_tokens or {}), budget or Budget())

    def close(self) -> None:
        self._worker.close()

    def render_many(self, requests: Sequence[Request]) -> list[str | TemplateError]:
        """Each conversation as the model sees it, or why the template refused it;
        TemplateBudgetError when the template overran its budget (the run stops)."""
        return self._worker.render(
            [([(m.role, m.content) for m in msgs], prompt) for msgs, prompt in requests]
        )

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = False) -> str:
        (out,) = self.render_many([(messages, add_generation_prompt)])
        if isinstance(out, TemplateError):
            raise out
        return out


class ChatML:
    """What is assumed when the model has no template: ChatML, the layout of Qwen, SmolLM and
    many fine-tunes (said in the report whenever it is used). Plain Python, so the
    approximation needs no jinja2."""

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = False) -> str:
        turns = "".join(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages)
        return turns + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def render_many(self, requests: Sequence[Request]) -> list[str | TemplateError]:
        return [self.render(msgs, prompt) for msgs, prompt in requests]

    def close(self) -> None:
        pass


def special_tokens(config: dict[str, Any]) -> dict[str, str]:
    """The named special tokens of a tokenizer_config.json, as strings (``AddedToken``
    objects are written as ``{"content": ...}``)."""
    out = {}
    for name in SPECIAL_TOKENS:
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[name] = value
    return out


def template_from_config(config: dict[str, Any]) -> str | None:
    """tokenizer_config.json's ``chat_template``: a string, or a list of named templates of
    which ``default`` is used (tokenization_utils_base.py ``get_chat_template``)."""
    value = config.get("chat_template")
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        default = named.get("default")
        return default if isinstance(default, str) else None
    return None
