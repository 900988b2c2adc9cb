"""How many tokens each example is, and which of them are the answer the model learns.

The model's own tokenizer when its tokenizer.json is found (``--tokenizer PATH``, the model's
folder, or the local Hugging Face cache for a Hub or catalogue id), read with the
``tokenizers`` library; its chat template (chat_template.jinja, else tokenizer_config.json's
``chat_template``, the precedence of transformers 5.24 tokenization_utils_base.py) applied to
conversations. Without a tokenizer, a labelled approximation: one token per
``APPROX_BYTES_PER_TOKEN`` bytes of UTF-8, whose error is measured in bench/dataset_bench.py
and stated in :data:`APPROX_ERROR`.

Each example is measured as token spans: its total length and the ``[start, end)`` positions
of every answer, so truncation at any length can say how many answer tokens it cuts. A
conversation's answer spans come from rendering its prefixes: the turns before an assistant
turn with the generation prompt, then through that turn (what TRL does to find a completion
inside a prompt + completion). Plain text and string completions count one EOS token at the
end, as SFT trainers append one.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trainmem.sources import catalog, files, hf
from trainmem.sources.chat_template import (
    Budget,
    ChatML,
    ChatTemplate,
    TemplateBudgetError,
    TemplateError,
    special_tokens,
    template_from_config,
)
from trainmem.sources.datasets.shapes import Chat, Example, Message, Plain

APPROX_BYTES_PER_TOKEN = 4
# Measured by bench/dataset_bench.py (checked by tests/sources/dataset_files/test_tokens.py): the
# approximation against DeepSeek-V4's tokenizer on Python's pydoc topics (79 documents, 465 KB
# of English reference text with code). English prose; code, numbers and non-Latin scripts
# differ (CJK text has fewer bytes per token).
APPROX_ERROR = (
    "1 token per 4 bytes: on English reference text (Python's pydoc topics, 79 documents) "
    "+6.6% in total against a real 128k BPE tokenizer, median per-example error 9%, 95th "
    "percentile 27%"
)
TOKENIZER_LIMIT = 256 * 2**20  # the largest tokenizer.json files are tens of MB
MAX_TOKENIZED = 4 * 2**20  # characters of one text encoded: a million tokens or so
BATCH_CHARS = 16 * 2**20  # characters encoded in one call
CONFIG_LIMIT = 16 * 2**20
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


class TokensError(ValueError):
    """A tokenizer or template that was found but cannot be used: one line."""


class TokenizerFailed(TemplateError):
    """The tokenizer failed on one example (an unknown token and no unk id, a panic in the
    Rust library): that example is counted as malformed, as a template's refusal is
    (planner/lengths.py counts every TemplateError result)."""


Count = int | str  # tokens in a text, or why the tokenizer failed on it


class Counter(Protocol):
    def count(self, texts: Sequence[str], *, special: bool) -> list[Count]:
        """Tokens in each text; ``special`` adds the tokenizer's own (BOS) as it would."""
        ...


class Approximate:
    def count(self, texts: Sequence[str], *, special: bool) -> list[Count]:
        return [math.ceil(len(t.encode("utf-8")) / APPROX_BYTES_PER_TOKEN) for t in texts]


def _failure(exc: BaseException) -> str:
    """Why ``tokenizers`` failed, in one short line. Its Rust panics surface as
    ``pyo3_runtime.PanicException``, a BaseException: caught here like an Exception."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"the tokenizer failed on it: {text[:100]}"


FAILED_TO_STOP = 50  # texts a tokenizer may fail on, counting none, before the scan stops
_STDERR = threading.Lock()


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 pointed at /dev/null: a Rust panic in tokenizers prints its message
    and backtrace there itself (3 to 180 lines an example), over a dashboard's screen. The
    reason reaches the report through the exception."""
    with _STDERR:
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all: nothing to keep clean
            yield
            return
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, 2)
            finally:
                os.close(null)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _is_failure(exc: BaseException) -> bool:
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


class Tokenizer:
    """A tokenizer.json, through the ``tokenizers`` library."""

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError:
            raise TokensError(
                f"{files.show(path)} needs the tokenizers library: "
                "pip install 'trainmem-tui[tokens]'"
            ) from None
        try:
            text = files.read_text(path, limit=TOKENIZER_LIMIT, what="tokenizer")
        except files.FileReadError as exc:
            raise TokensError(str(exc)) from None
        try:
            self._tok = HFTokenizer.from_str(text)
        except BaseException as exc:  # tokenizers raises plain Exception (or panics)
            if not _is_failure(exc):
                raise
            why = " ".join(str(exc).split())[:200]
            raise TokensError(f"{files.show(path)} is not a tokenizer.json: {why}") from None
        # Full lengths are counted: transformers turns a tokenizer.json's truncation and
        # padding off unless a call asks for them (tokenization_utils_fast.py
        # set_truncation_and_padding, transformers 5.24), and a stride >= max_length in it
        # makes tokenizers 0.23 panic at encode time.
        self._tok.no_truncation()
        self._tok.no_padding()
        # encode_batch_fast (tokenizers 0.21) skips the offsets; encode_batch before it.
        self._encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        self._counted, self._failed = False, 0

    def count(self, texts: Sequence[str], *, special: bool) -> list[Count]:
        """Each text's tokens, encoded BATCH_CHARS at a time; a text over MAX_TOKENIZED
        characters is not encoded (tokenizers takes about 80 times a text's size to: two
        60 MB records of a 1.8 MB gzip took 10 GB, or aborted the process)."""
        out: list[Count] = []
        batch: list[str] = []
        size = 0
        for text in [*texts, None]:  # None: the end, to encode the last batch
            if text is not None and len(text) > MAX_TOKENIZED:
                out += self._batch(batch, special)
                batch, size = [], 0
                out.append(f"over {MAX_TOKENIZED:,} characters: not tokenized")
                continue
            if batch and (text is None or size + len(text) > BATCH_CHARS):
                out += self._batch(batch, special)
                batch, size = [], 0
            if text is not None:
                batch.append(text)
                size += len(text)
        return out

    def _batch(self, texts: Sequence[str], special: bool) -> list[Count]:
        """Each text's tokens; when the batch fails, each text again on its own, so one bad
        example costs only itself. A tokenizer that has failed on the first FAILED_TO_STOP
        texts it was given and counted none is broken for this data: TokensError."""
        if not texts:
            return []
        try:
            with _quiet_stderr():
                counts = self._encode(list(texts), add_special_tokens=special)
            self._counted = self._counted or any(texts)  # an empty text proves nothing
            return [len(e.ids) for e in counts]
        except BaseException as exc:
            if not _is_failure(exc):
                raise
        out: list[Count] = []
        for text in texts:
            try:
                with _quiet_stderr():  # no offsets: 4x faster
                    (one,) = self._encode([text], add_special_tokens=special)
                out.append(len(one.ids))
                self._counted = self._counted or bool(text)
            except BaseException as exc:
                if not _is_failure(exc):
                    raise
                out.append(_failure(exc))
                self._failed += 1
                if not self._counted and self._failed >= FAILED_TO_STOP:
                    raise TokensError(
                        f"the tokenizer failed on each of the first {self._failed} texts and "
                        f"counted none; {out[-1]}"
                    ) from None
        return out


class Renderer(Protocol):
    def render_many(
        self, requests: Sequence[tuple[Sequence[Message], bool]]
    ) -> list[str | TemplateError]:
        """Each (conversation, add_generation_prompt) as text, or why the template refused
        it; TemplateBudgetError when the template overran its budget (the run stops)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Lengths:
    """One example in tokens: its length and its answers' ``[start, end)`` positions."""

    total: int
    answers: tuple[tuple[int, int], ...]

    @property
    def answer_tokens(self) -> int:
        return sum(b - a for a, b in self.answers)


@dataclass(frozen=True)
class Tokens:
    """How examples are counted, and the line the report shows for it."""

    counter: Counter
    template: Renderer
    exact: bool  # the model's own tokenizer (False: the byte approximation)
    label: str
    notes: tuple[str, ...] = ()

    def close(self) -> None:
        """Stop the chat template's worker process (also done when this is collected)."""
        self.template.close()

    def measure(self, examples: Sequence[Example]) -> list[Lengths | TemplateError]:
        """Each example's Lengths, or why the chat template or the tokenizer refused it; the
        conversations of a batch are rendered in one exchange with the template's worker
        and the texts counted in one call (the tokenizer encodes them in parallel).
        TokensError when the template overran its budget: the run stops, in one line."""
        try:
            prepared = self._texts(examples)
        except TemplateBudgetError as exc:
            raise TokensError(str(exc)) from None
        texts: list[str] = []
        special: list[bool] = []
        plans: list[tuple[list[int], Example] | TemplateError] = []
        for ex, mine in zip(examples, prepared, strict=True):
            if isinstance(mine, TemplateError):
                plans.append(mine)
                continue
            plans.append((list(range(len(texts), len(texts) + len(mine))), ex))
            texts += mine
            special += [isinstance(ex, Plain)] * len(mine)
        counts = self._count(texts, special)
        out: list[Lengths | TemplateError] = []
        for plan in plans:
            if isinstance(plan, TemplateError):
                out.append(plan)
                continue
            at, ex = plan
            got = [counts[i] for i in at]
            failed = next((c for c in got if isinstance(c, str)), None)
            if failed is not None:
                out.append(TokenizerFailed(failed))
                continue
            n = [c for c in got if isinstance(c, int)]
            if isinstance(ex, Plain):  # prompt + answer, prompt; then the EOS
                total = n[0] + 1
                out.append(Lengths(total, ((min(n[1], total), total),)))
            elif n[0] == 0:  # not a length of 0 in the report: no example trains on nothing
                out.append(TemplateError("the chat template wrote no tokens for it (empty?)"))
            else:  # the whole chat, then (prefix, through the answer) per assistant turn
                total = n[0]
                spans = zip(n[1::2], n[2::2], strict=True)
                out.append(
                    Lengths(total, tuple((min(a, total), min(max(a, b), total)) for a, b in spans))
                )
        return out

    def _texts(self, examples: Sequence[Example]) -> list[list[str] | TemplateError]:
        """The texts to count for each example: a Plain's prompt + answer and prompt; a
        chat whole, then for each assistant turn the prefix before it (with the generation
        prompt) and the prefix through it. All of a batch's renders go in one request."""
        requests: list[tuple[Sequence[Message], bool]] = []
        layout: list[list[int] | None] = []  # per chat: indexes into requests
        for ex in examples:
            if isinstance(ex, Plain):
                layout.append(None)
                continue
            assert isinstance(ex, Chat)
            msgs, mine = ex.messages, [len(requests)]
            requests.append((msgs, False))
            for i, m in enumerate(msgs):
                if m.trained:
                    mine.append(len(requests))
                    requests.append((msgs[:i], True))
                    if i == len(msgs) - 1:
                        mine.append(mine[0])  # through the last turn: the whole chat
                    else:
                        mine.append(len(requests))
                        requests.append((msgs[: i + 1], False))
            layout.append(mine)
        rendered = self.template.render_many(requests) if requests else []
        out: list[list[str] | TemplateError] = []
        for ex, at in zip(examples, layout, strict=True):
            if at is None:
                assert isinstance(ex, Plain)
                out.append([ex.prompt + ex.answer, ex.prompt])
                continue
            texts = [rendered[i] for i in at]
            refused = next((t for t in texts if isinstance(t, TemplateError)), None)
            out.append(refused if refused is not None else [t for t in texts if isinstance(t, str)])
        return out

    def _count(self, texts: list[str], special: list[bool]) -> list[Count]:
        """Counts in ``texts`` order; the same text is counted once."""
        unique: dict[tuple[str, bool], int] = {}
        for key in zip(texts, special, strict=True):
            unique.setdefault(key, len(unique))
        keys = list(unique)
        counts: list[Count] = [0] * len(keys)
        for flag in (False, True):
            idx = [i for i, k in enumerate(keys) if k[1] is flag]
            for i, c in zip(
                idx, self.counter.count([keys[i][0] for i in idx], special=flag), strict=True
            ):
                counts[i] = c
        return [counts[unique[k]] for k in zip(texts, special, strict=True)]


@dataclass(frozen=True)
class TokenizerFiles:
    where: str  # shown in the report
    tokenizer: Path | None
    config: Path | None
    template: Path | None


def _in_folder(folder: Path, where: str) -> TokenizerFiles:
    def found(name: str) -> Path | None:
        try:
            return folder / name if files.kind(folder / name) == "file" else None
        except files.FileReadError:
            return None

    return TokenizerFiles(where, *(found(n) for n in TOKENIZER_FILES))


def _explicit(text: str) -> TokenizerFiles:
    try:
        path = files.expand(text)
        kind = files.kind(path)
    except files.FileReadError as exc:
        raise TokensError(str(exc)) from None
    if kind == "dir":
        found = _in_folder(path, files.show(text))
        if found.tokenizer is None:
            raise TokensError(f"--tokenizer {files.show(text)} holds no tokenizer.json")
        return found
    if kind is None:
        raise TokensError(f"--tokenizer: no such file or folder: {files.show(text)}")
    folder = _in_folder(path.parent, files.show(text))
    return TokenizerFiles(folder.where, path, folder.config, folder.template)


def find_tokenizer(model: str, explicit: str | None = None) -> TokenizerFiles | None:
    """The tokenizer files for ``model`` (the plan's model text), or those ``explicit`` names
    (a folder or a tokenizer.json); None when there is no tokenizer.json to be had."""
    if explicit:
        return _explicit(explicit)
    text = model.strip()
    try:
        path = files.expand(text)
        kind = files.kind(path)
    except files.FileReadError:
        kind = None
    if kind in ("dir", "file"):
        folder = path if kind == "dir" else path.parent
        found = _in_folder(folder, files.show(folder))
        return found if found.tokenizer else None
    entry = catalog.find(text)
    hf_id, revision = (entry.hf_id, None) if entry else hf.split_revision(text)
    if hf_id.count("/") != 1:
        return None
    paths = [hf.cached_file(hf_id, name, revision) for name in TOKENIZER_FILES]
    if paths[0] is None:
        return None
    return TokenizerFiles(f"{hf_id} in the Hugging Face cache", *paths)


def _config(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        value = files.read_json(path, limit=CONFIG_LIMIT, what="tokenizer config")
    except files.FileReadError as exc:
        raise TokensError(str(exc)) from None
    return value if isinstance(value, dict) else {}


def load_tokens(model: str, explicit: str | None = None, *, budget: Budget | None = None) -> Tokens:
    """How to count ``model``'s examples: its tokenizer and chat template when found,
    otherwise the approximation (with ChatML assumed for conversations). The template runs
    under ``budget`` (chat_template.Budget's defaults when None)."""
    found = find_tokenizer(model, explicit)
    if found is None:
        return Tokens(
            Approximate(),
            ChatML(),
            exact=False,
            label=f"approximate ({APPROX_ERROR}); no tokenizer.json found for the model "
            "(--tokenizer PATH gives one)",
            notes=("conversations laid out as ChatML (no chat template)",),
        )
    assert found.tokenizer is not None
    counter = Tokenizer(found.tokenizer)
    config = _config(found.config)
    source, origin = None, ""
    if found.template is not None:
        try:
            source = files.read_text(found.template, limit=CONFIG_LIMIT, what="chat template")
        except files.FileReadError as exc:
            raise TokensError(str(exc)) from None
        origin = "chat_template.jinja"
    elif (source := template_from_config(config)) is not None:
        origin = "tokenizer_config.json"
    notes: tuple[str, ...] = ()
    template: Renderer = ChatML()
    if source is None:
        notes, origin = ("the tokenizer has no chat template: ChatML assumed",), "ChatML assumed"
    else:
        template = ChatTemplate(source, special_tokens(config), budget)
    return Tokens(counter, template, True, f"tokenizer.json of {found.where} ({origin})", notes)
