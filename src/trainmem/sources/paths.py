"""Every location trainmem reads or writes outside the user's own files, in one place.

- state (the dashboard's session and default plans file): ``TRAINMEM_STATE_DIR``, else
  ``$XDG_STATE_HOME/trainmem``, else ``~/.local/state/trainmem``;
- configs and safetensors headers fetched by ``--download`` (never weights):
  ``TRAINMEM_CACHE_DIR``, else ``$XDG_CACHE_HOME/trainmem/models``.

The Hugging Face cache is huggingface_hub's own (``trainmem.sources.hf``), so HF_HOME and
HF_HUB_CACHE mean exactly what they mean to every other tool.
"""

from __future__ import annotations

import os
from pathlib import Path


def _expand(value: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(value)))


def state_dir() -> Path:
    """Where the dashboard keeps its session and default plans file (XDG state home)."""
    override = os.environ.get("TRAINMEM_STATE_DIR")
    if override:
        return _expand(override)
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return _expand(base) / "trainmem"


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
        return _expand(override)
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return _expand(base) / "trainmem" / "models"


def downloaded_model_dir(hf_id: str, revision: str | None = None) -> Path:
    """The folder of one downloaded model (one per revision; ``main`` when none is given)."""
    folder = hf_id.replace("/", "--")
    if revision:
        folder += "@" + revision.replace("/", "--")
    return downloads_dir() / folder
