"""The only module that talks to huggingface_hub (written against 2.4.0), always imported
inside functions so that counts and catalogue ids never load it.

huggingface_hub reads HF_HUB_CACHE, HF_ENDPOINT and HF_HUB_OFFLINE into module constants at
import time (huggingface_hub/constants.py, 2.4.0). A long-lived process (the dashboard, a test
run) may change them later, so the cache folder, the endpoint and offline mode are read from
the environment at call time here, with the same precedence, and passed explicitly.
Tokens are never read here: huggingface_hub finds HF_TOKEN or the `hf auth login` file itself.
"""

from __future__ import annotations

import os
from pathlib import Path

_TRUE = {"1", "ON", "YES", "TRUE"}  # constants.ENV_VARS_TRUE_VALUES in 2.4.0


def split_revision(text: str) -> tuple[str, str | None]:
    """``"org/m@rev"`` -> ``("org/m", "rev")``; no ``@`` (or nothing after it) -> no revision.

    Split at the first ``@``: Hub ids cannot hold one, revisions may hold ``/`` (refs/pr/1)."""
    name, _, revision = text.partition("@")
    return name, revision or None


def _expand(value: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(value)))


def hub_cache_dir() -> Path:
    """huggingface_hub's cache folder, by the precedence of its constants.py (2.4.0):
    HF_HUB_CACHE, the legacy HUGGINGFACE_HUB_CACHE, HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
    ~/.cache/huggingface/hub; ``~`` and ``$VARS`` expanded as it does."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(name):
            return _expand(os.environ[name])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface"
    )
    return _expand(home) / "hub"


def endpoint() -> str | None:
    """HF_ENDPOINT now (a mirror or a test stand-in), or None for huggingface_hub's default."""
    return os.environ.get("HF_ENDPOINT", "").rstrip("/") or None


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as constants.py reads it, checked now."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in _TRUE or constants.is_offline_mode()


def cached_file(hf_id: str, filename: str, revision: str | None = None) -> Path | None:
    """A file of ``hf_id`` in the local cache at ``revision`` (``refs/main`` when None), or None.

    try_to_load_from_cache (file_download.py, 2.4.0) follows refs/<revision> to its snapshot
    and never falls back to another snapshot; it raises on ids that are not valid repo ids."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(
            hf_id, filename, cache_dir=hub_cache_dir(), revision=revision
        )
    except (ValueError, OSError):
        return None
    return Path(found) if isinstance(found, str) else None  # or the _CACHED_NO_EXIST marker


def cached_model_ids() -> list[str]:
    """Model ids whose config.json the resolver finds in the cache (scan_cache_dir)."""
    root = hub_cache_dir()
    if not root.is_dir():
        return []
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(root)  # corrupted repos go to info.warnings, not raised
    except (CacheNotFound, ValueError, OSError):
        return []
    ids = {r.repo_id for r in info.repos if r.repo_type == "model"}
    return sorted(i for i in ids if cached_file(i, "config.json") is not None)
