"""The process a chat template from outside runs in, and the handle that drives it.

``Worker`` (the parent's side) starts ``python -m trainmem.sources.template_worker``, sends it
the template, then batches of conversations, and reads the batch's answers within a
deadline; past it the child is killed (SIGKILL cannot be blocked or ignored). The child
(``main``) stops a render that runs past the budget's seconds with a timer (SIGALRM), caps
its CPU time per conversation (RLIMIT_CPU: it dies even stuck in C code, or with its parent
gone) and its memory (RLIMIT_AS), and refuses a rendered text larger than the budget's
``growth`` times its input plus ``slack`` characters (chat_template.Budget).

Frames both ways: 8 bytes of big-endian length, then UTF-8 JSON. A batch's answers, one per
conversation: ``{"text": ...}``, ``{"refused": why}`` (that conversation only), or
``{"budget": why}`` (the run stops; nothing after it is rendered).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from trainmem.sources.children import module_command
from trainmem.sources.template_render import (
    Budget,
    TemplateBudgetError,
    TemplateError,
    compile_template,
    render_compiled,
)

CHUNK = 2**20  # characters of conversations sent per frame (at least one conversation)
_LENGTH = struct.Struct(">Q")

Conversation = list[tuple[str, str]]  # (role, content)


def _frame(value: Any) -> bytes:
    data = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return _LENGTH.pack(len(data)) + data


class Worker:
    """The parent's handle on one template's child process."""

    def __init__(self, source: str, special: dict[str, str], budget: Budget) -> None:
        self._budget = budget
        package_root = str(Path(__file__).resolve().parents[2])  # where `trainmem` is
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        try:
            self._proc = subprocess.Popen(
                module_command("trainmem.sources.template_worker"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # a crash is told in one line, not its traceback
                env=env,
            )
        except OSError as exc:
            raise TemplateError(f"cannot start the chat template's worker: {exc}") from None
        self._closed = weakref.finalize(self, _stop, self._proc)
        limits = {
            "seconds": budget.seconds,
            "memory": budget.memory,
            "growth": budget.growth,
            "slack": budget.slack,
            "grace_seconds": budget.grace_seconds,
            "mean_seconds": budget.mean_seconds,
        }
        init = {"source": source, "special": special, "budget": limits}
        answer = self._exchange(init, budget.start_seconds)
        if "error" in answer:
            self.close()
            raise TemplateError(str(answer["error"]))

    def close(self) -> None:
        self._closed()

    def render(
        self, conversations: Sequence[tuple[Conversation, bool]]
    ) -> list[str | TemplateError]:
        """Each conversation rendered, or why the template refused it. TemplateBudgetError
        (and the child stopped) when one takes over the budget's seconds or grows past it."""
        out: list[str | TemplateError] = []
        i = 0
        while i < len(conversations):
            chunk: list[Any] = []
            size = 0
            while i < len(conversations) and (not chunk or size < CHUNK):
                messages, prompt = conversations[i]
                chunk.append([[[r, c] for r, c in messages], prompt])
                size += sum(len(c) for _, c in messages)
                i += 1
            self._send({"render": chunk})
            # The child stops a slow render itself (a timer, and RLIMIT_CPU as a backstop);
            # this deadline is for a child that cannot even do that.
            wait = self._budget.start_seconds + self._budget.seconds * len(chunk)
            answers = self._receive(wait, "a batch of conversations")["answers"]
            for answer in answers:
                if "budget" in answer:
                    self.close()
                    raise TemplateBudgetError(str(answer["budget"]))
                if "refused" in answer:
                    out.append(TemplateError(str(answer["refused"])))
                else:
                    out.append(str(answer["text"]))
        return out

    def _exchange(self, value: Any, seconds: float) -> dict[str, Any]:
        self._send(value)
        return self._receive(seconds, "starting")

    def _send(self, value: Any) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            stdin.write(_frame(value))
            stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._ended() from None

    def _receive(self, seconds: float, what: str) -> dict[str, Any]:
        stdout = self._proc.stdout
        assert stdout is not None
        deadline = time.monotonic() + seconds
        header = _read_exactly(stdout, _LENGTH.size, deadline)
        if header is None:
            raise self._timed_out(what, seconds)
        if not header:
            raise self._ended()
        data = _read_exactly(stdout, _LENGTH.unpack(header)[0], deadline)
        if data is None:
            raise self._timed_out(what, seconds)
        answer = json.loads(data.decode("utf-8", "surrogatepass"))
        assert isinstance(answer, dict)
        return answer

    def _timed_out(self, what: str, seconds: float) -> TemplateBudgetError:
        self.close()
        if what == "starting":
            return TemplateBudgetError(f"the chat template did not compile within {seconds:g} s")
        return TemplateBudgetError(
            f"the chat template's worker did not answer {what} within {seconds:g} s and was stopped"
        )

    def _ended(self) -> TemplateBudgetError:
        code = self._proc.poll()
        self.close()
        why = "out of memory or CPU time" if code is not None and code < 0 else f"exit {code}"
        return TemplateBudgetError(f"the chat template's worker process ended ({why})")


def _read_exactly(f: IO[bytes], n: int, deadline: float) -> bytes | None:
    """``n`` bytes from the pipe by ``deadline``: None when time ran out, ``b""`` at EOF."""
    fd = f.fileno()
    parts: list[bytes] = []
    got = 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        part = os.read(fd, min(n - got, 2**20))
        if not part:
            return b""
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


# -- the child ------------------------------------------------------------------------------


def _limit_memory(limit: int) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):  # not on this platform: the deadline remains
        pass


def _cpu_budget(seconds: float) -> None:
    """Die by SIGXCPU once this process has used ``seconds`` more CPU time (the soft limit
    is moved for each conversation; the hard one is left, so it can be moved again)."""
    try:
        import resource

        used = resource.getrusage(resource.RUSAGE_SELF)
        now = int(used.ru_utime + used.ru_stime) + 1
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = now + int(seconds) + 1
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ImportError, ValueError, OSError):
        pass


def _read_frame(f: IO[bytes]) -> Any:
    header = f.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        return None
    return json.loads(f.read(_LENGTH.unpack(header)[0]).decode("utf-8", "surrogatepass"))


def _write(f: IO[bytes], value: Any) -> None:
    f.write(_frame(value))
    f.flush()


def main() -> None:
    # The dashboard blocks SIGHUP and SIGTERM in every thread (cli/exit_guard.py) and a
    # child inherits the mask: unblock them, so the child ends as any process does.
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    signal.signal(signal.SIGALRM, _on_timer)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    init = _read_frame(stdin)
    if init is None:
        return
    budget = Budget(**init["budget"])
    _limit_memory(budget.memory)
    _cpu_budget(budget.start_seconds)
    try:
        template = compile_template(init["source"])
    except TemplateError as exc:
        _write(stdout, {"error": str(exc)})
        return
    special = {str(k): str(v) for k, v in init["special"].items()}
    _write(stdout, {"ok": True})
    spent, rendered = 0.0, 0  # in all, for the budget's mean
    while (request := _read_frame(stdin)) is not None:
        answers = []
        for messages, prompt in request["render"]:
            began = time.monotonic()
            answers.append(_render_one(template, special, messages, bool(prompt), budget))
            spent, rendered = spent + time.monotonic() - began, rendered + 1
            if "budget" not in answers[-1]:
                answers[-1] = _over_in_all(spent, rendered, budget) or answers[-1]
            if "budget" in answers[-1]:
                break  # the run stops: the rest is not rendered
        _write(stdout, {"answers": answers})


def _over_in_all(spent: float, rendered: int, budget: Budget) -> dict[str, str] | None:
    """Budget.grace_seconds and mean_seconds, over the whole run."""
    mean = spent / rendered
    if spent > budget.grace_seconds and mean > budget.mean_seconds:
        return {
            "budget": f"the chat template took {spent:.0f} s for {rendered:,} conversations "
            f"({1000 * mean:.0f} ms each; real templates take about a millisecond) and was "
            "stopped"
        }
    return None


class _Overrun(BaseException):
    """Raised by the timer in the middle of a render; a BaseException, so that no
    ``except Exception`` in jinja2 or the template's filters can swallow it."""


def _on_timer(signum: int, frame: Any) -> None:
    raise _Overrun


def _render_one(
    template: Any, special: dict[str, str], messages: Any, prompt: bool, budget: Budget
) -> Any:
    """One conversation (``[role, content]`` lists, as the parent sent them) as an answer."""
    _cpu_budget(budget.seconds)
    signal.setitimer(signal.ITIMER_REAL, budget.seconds)
    try:
        text = render_compiled(template, special, messages, prompt)
    except _Overrun:
        return {
            "budget": f"the chat template ran over {budget.seconds:g} s on one conversation "
            "and was stopped (a loop that does not end?)"
        }
    except TemplateError as exc:
        return {"refused": str(exc)}
    except MemoryError:
        return {"budget": f"the chat template needed over {budget.memory:,} bytes and was stopped"}
    except Exception as exc:  # ZeroDivisionError, OverflowError...: that conversation only
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:100]
        return {"refused": f"the chat template refused it: {why}"}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    given = sum(len(c) for _, c in messages)
    if len(text) > budget.growth * given + budget.slack:
        return {
            "budget": f"the chat template wrote {len(text):,} characters for {given:,} of "
            f"messages (over {budget.growth}x plus {budget.slack:,}) and was stopped"
        }
    return {"text": text}


if __name__ == "__main__":
    main()
