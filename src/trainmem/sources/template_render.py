"""Compiling and rendering a chat template, as transformers does (see
trainmem.sources.chat_template for the rules followed), and the budget a render runs under.

Apart from chat_template so that the worker process (trainmem.sources.template_worker), the
only place a template from outside is compiled and rendered, needs none of the rest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


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
    require_jinja()
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

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


def require_jinja() -> Any:
    """jinja2, when installed and of a version without known sandbox escapes; TemplateError
    (one line saying what to install) otherwise."""
    try:
        import jinja2
    except ImportError:
        raise TemplateError(
            "a chat template needs jinja2: pip install 'trainmem-tui[tokens]'"
        ) from None
    check_jinja_version(jinja2.__version__)
    return jinja2


def check_jinja_version(version: str) -> None:
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


@dataclass(frozen=True)
class Budget:
    """What one conversation's render may cost before the run is stopped. Real templates
    take milliseconds and write their messages plus a few hundred characters of markers."""

    seconds: float = 5.0  # wall time (and CPU time) per conversation
    memory: int = 4 * 2**30  # bytes of address space for the worker process
    growth: int = 4  # a render may be this many times its messages' text...
    slack: int = 2**20  # ...plus this many characters (system prompts, tool lists, dates)
    start_seconds: float = 10.0  # start the worker and compile (a slow, loaded machine)
    # In all: a template under the per-conversation limit can still be slow enough to make a
    # scan of thousands take hours. Past ``grace_seconds``, a mean over ``mean_seconds`` a
    # conversation stops the run (no total: a whole dataset is scanned, as tokenizing it is).
    grace_seconds: float = 10.0
    mean_seconds: float = 0.02
