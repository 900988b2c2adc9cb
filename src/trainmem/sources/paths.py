"""Every location trainmem reads or writes outside the user's own files, in one place.

- state (the dashboard's session and default plans file): ``TRAINMEM_STATE_DIR``, else
  ``$XDG_STATE_HOME/trainmem``, else ``~/.local/state/trainmem``;
- configs and safetensors headers fetched by ``--download`` (never weights):
  ``TRAINMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainmem/models``, else
  ``~/.cache/trainmem/models``.

``~``, ``~user`` and ``$VAR`` are expanded; a value that leaves an unknown user, an unset
variable or a relative path is refused with one line (PathsError), never used as a folder
under the working directory. A relative XDG variable is ignored, as the XDG spec says.

The Hugging Face cache is huggingface_hub's own (``trainmem.sources.hf``), so HF_HOME and
HF_HUB_CACHE mean exactly what they mean to every other tool.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from trainmem.core.units import shown


class PathsError(ValueError):
    """A location variable that cannot be used (one line naming it): never guessed at, so
    state is never written where the user did not ask (``~nouser/state`` would otherwise be
    a folder ``~nouser`` in the working directory)."""


_UNSET = re.compile(r"\$(\w+|\{[^}]*\})")  # what os.path.expandvars leaves of an unset variable


def _expand(value: str, name: str) -> Path:
    """``~``, ``~user`` and ``$VAR`` expanded as a shell would; PathsError when that leaves
    an unknown user, an unset variable or a relative path (the XDG Base Directory spec asks
    for absolute paths; a relative one would follow the working directory)."""
    expanded = os.path.expandvars(os.path.expanduser(value))
    if expanded.startswith("~"):
        user = expanded[1:].split("/", 1)[0]
        raise PathsError(f"{name}={shown(value, 80)}: no such user {shown(user)}")
    unset = _UNSET.search(expanded)
    if unset:
        raise PathsError(f"{name}={shown(value, 80)}: {unset.group(0)} is not set")
    if not os.path.isabs(expanded):
        raise PathsError(f"{name}={shown(value, 80)} is not an absolute path")
    return Path(expanded)


def _base(name: str, under_home: str) -> Path:
    """``$name``, or ``~/under_home`` when it is unset, empty or relative: the XDG Base
    Directory spec says a relative value is invalid and to be ignored."""
    value = os.environ.get(name, "")
    if value and os.path.isabs(os.path.expandvars(os.path.expanduser(value))):
        return _expand(value, name)
    home = os.path.expanduser("~")
    if not os.path.isabs(home):
        raise PathsError(
            f"HOME={shown(os.environ.get('HOME', ''), 80)} is not an absolute path "
            f"(and {name} is not set)"
        )
    return Path(home) / under_home


def state_dir() -> Path:
    """Where the dashboard keeps its session and default plans file (XDG state home);
    PathsError (one line) for a TRAINMEM_STATE_DIR that cannot be used."""
    override = os.environ.get("TRAINMEM_STATE_DIR")
    if override:
        return _expand(override, "TRAINMEM_STATE_DIR")
    return _base("XDG_STATE_HOME", ".local/state") / "trainmem"


def session_path() -> Path:
    """The plans open at the last exit, restored on start."""
    return state_dir() / "session.toml"


def default_plans_path() -> Path:
    """Where Save writes when no ``--compare`` file was given."""
    return state_dir() / "plans.toml"


def downloads_dir() -> Path:
    """Where ``--download`` keeps configs and safetensors headers (never weights)."""
    override = os.environ.get("TRAINMEM_CACHE_DIR")
    if override:
        return _expand(override, "TRAINMEM_CACHE_DIR")
    return _base("XDG_CACHE_HOME", ".cache") / "trainmem" / "models"


def downloaded_model_dir(hf_id: str, revision: str | None = None) -> Path:
    """The folder of one downloaded model (one per revision; ``main`` when none is given)."""
    folder = hf_id.replace("/", "--")
    if revision:
        folder += "@" + revision.replace("/", "--")
    return downloads_dir() / folder
