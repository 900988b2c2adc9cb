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

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainmem.sources.datasets.shapes import Message

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


class TemplateError(ValueError):
    """The template cannot be compiled (for the whole run) or refused one conversation."""


class TemplateBudgetError(ValueError):
    """The template ran past its time or size budget: the whole run stops, with one line
    (a template that loops or builds a huge string does so for every conversation)."""


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 100 else text[:97] + "..."


def compile_template(source: str) -> Any:
    """The template compiled as transformers compiles it (see the module doc); TemplateError
    when it does not compile. Run by the worker (trainmem.sources.template_worker), the only
    place a template from outside is compiled and rendered."""
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise TemplateError(
            "a chat template needs jinja2: pip install 'trainmem-tui[tokens]'"
        ) from None
    _check_jinja_version(jinja2.__version__)

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: the body, untracked."""

        tags = {"generation"}  # noqa: RUF012  (jinja2 declares it so)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> Any:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except (jinja2.exceptions.TemplateError, RecursionError, MemoryError) as exc:
        raise TemplateError(f"the chat template does not compile: {_short(exc)}") from None


def _check_jinja_version(version: str) -> None:
    parts = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    if parts < (3, 1, 6):
        raise TemplateError(
            f"jinja2 {version} has known sandbox escapes; chat templates need jinja2 >= 3.1.6"
        )


def render_compiled(
    template: Any, special: dict[str, str], messages: Sequence[Any], add_generation_prompt: bool
) -> str:
    """One conversation (``(role, content)`` pairs) through a compiled template; TemplateError
    when the template refuses it (a ``raise_exception``, roles out of order)."""
    import jinja2

    try:
        return str(
            template.render(
                messages=[{"role": role, "content": content} for role, content in messages],
                tools=None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **special,
            )
        )
    except (jinja2.exceptions.TemplateError, TypeError, ValueError, RecursionError) as exc:
        raise TemplateError(f"the chat template refused it: {_short(exc)}") from None


Request = tuple[Sequence[Message], bool]  # a conversation, add_generation_prompt


@dataclass(frozen=True)
class Budget:
    """What one conversation's render may cost before the run is stopped. Real templates
    take milliseconds and write their messages plus a few hundred characters of markers."""

    seconds: float = 5.0  # wall time (and CPU time) per conversation
    memory: int = 4 * 2**30  # bytes of address space for the worker process
    growth: int = 4  # a render may be this many times its messages' text...
    slack: int = 2**20  # ...plus this many characters (system prompts, tool lists, dates)
    start_seconds: float = 10.0  # start the worker and compile (a slow, loaded machine)


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
        try:
            import jinja2
        except ImportError:
            raise TemplateError(
                "a chat template needs jinja2: pip install 'trainmem-tui[tokens]'"
            ) from None
        _check_jinja_version(jinja2.__version__)
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
