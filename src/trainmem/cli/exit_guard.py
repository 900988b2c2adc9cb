"""The dashboard ends within two seconds of SIGHUP or SIGTERM, at any moment of its life.

A lost terminal (an SSH drop, ``tmux kill-session``) sends SIGHUP. Handling it inside the
event loop is not enough: during start-up there is no loop yet, and once the terminal is gone
Textual's writer thread can block on it while the loop waits for that thread, so a handler
in the loop never runs and the process lives on. So both signals are blocked in every thread
(threads inherit the mask: it is set before any is started) and one thread waits for them
with ``sigwait``. On a signal it asks the app to exit normally (the session is saved on the
way out); if the app has not finished within ``grace_s``, the thread saves the session
itself and ends the process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

SIGNALS = {signal.SIGHUP, signal.SIGTERM}


class ExitGuard:
    def __init__(self, grace_s: float = 1.5) -> None:
        self.grace_s = grace_s
        self.request_exit: Callable[[], None] | None = None  # set once the app exists
        self.save: Callable[[], None] | None = None  # keeps the session
        self._finished = threading.Event()
        self._saving = threading.Lock()
        self._saved = False

    def start(self) -> None:
        """Call in the main thread before any other thread starts."""
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        threading.Thread(target=self._wait, name="trainmem-exit-guard", daemon=True).start()

    def save_once(self) -> None:
        """Keep the session, once, whichever thread gets here first."""
        with self._saving:
            if self._saved or self.save is None:
                return
            self._saved = True
            self.save()

    def finished(self) -> None:
        """The app returned and the session is saved: the guard has nothing left to do, and
        the signals get their default action back (a caller's later children inherit it)."""
        self._finished.set()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)

    def _wait(self) -> None:
        signum = signal.sigwait(SIGNALS)
        request = self.request_exit
        if request is not None:
            # From its own thread: if the UI is stuck, asking must not block the guard.
            threading.Thread(target=_quietly, args=(request,), daemon=True).start()
        if self._finished.wait(self.grace_s):
            return
        _quietly(self.save_once)
        os._exit(128 + signum)


def _quietly(call: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):  # the process is ending: nothing is left to tell
        call()
