"""Starting one of trainmem's own modules in a child process (the traced step, the chat
template's sandbox) without running code from the folder the user is in.

``python -m module`` puts the current folder first on the child's ``sys.path``, so a
``peft.py``, a ``json.py`` or a ``transformers/`` folder there (a cloned training repository
has them) would be imported in place of the real one. Python 3.11's ``-P`` leaves it out;
on 3.10 the child drops it itself before importing anything (the interpreter's own start-up
imports, ``site`` and ``encodings``, run before the folder is added).
"""

from __future__ import annotations

import sys

_RUN = "import sys; sys.path.pop(0); import runpy; runpy.run_module({!r}, run_name='__main__')"


def module_command(module: str) -> list[str]:
    """The command line that runs ``module`` as ``__main__`` with this interpreter."""
    if sys.version_info >= (3, 11):
        return [sys.executable, "-P", "-m", module]
    return [sys.executable, "-c", _RUN.format(module)]
