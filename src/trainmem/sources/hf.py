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
import stat
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


MAX_REF = 1024  # bytes of a refs file: a commit hash is 40


def _refs_ok(hf_id: str, revision: str | None) -> bool:
    """Whether the cache's refs file for the revision, if any, is one huggingface_hub can read
    safely: it reads the file whole (a 64 GiB sparse one raised MemoryError, a 2 GiB one took
    6 GB) and would block on a FIFO. A revision that is a commit hash needs none."""
    ref = hub_cache_dir() / f"models--{hf_id.replace('/', '--')}" / "refs" / (revision or "main")
    try:
        st = ref.lstat()
    except (OSError, ValueError):  # no such ref (a commit hash, or not cached): nothing to read
        return True
    return stat.S_ISREG(st.st_mode) and st.st_size <= MAX_REF


def cached_file(hf_id: str, filename: str, revision: str | None = None) -> Path | None:
    """A file of ``hf_id`` in the local cache at ``revision`` (``refs/main`` when None), or None.

    try_to_load_from_cache (file_download.py, 2.4.0) follows refs/<revision> to its snapshot
    and never falls back to another snapshot; it raises on ids that are not valid repo ids."""
    from huggingface_hub import try_to_load_from_cache

    if not _refs_ok(hf_id, revision):
        return None
    try:
        found = try_to_load_from_cache(
            hf_id, filename, cache_dir=hub_cache_dir(), revision=revision
        )
    except (ValueError, OSError):
        return None
    return Path(found) if isinstance(found, str) else None  # or the _CACHED_NO_EXIST marker


MAX_CACHED_REPOS = 10_000  # folders of the cache looked at for model ids


def cached_model_ids() -> list[str]:
    """Model ids whose config.json the resolver finds in the cache: the cache's
    ``models--org--name`` folders (huggingface_hub's layout, file_download.py
    repo_folder_name), each looked up as cached_file does. Not scan_cache_dir, which reads
    every refs file whole."""
    root = hub_cache_dir()
    try:
        with os.scandir(root) as entries:
            names = [e.name for _, e in zip(range(MAX_CACHED_REPOS), entries, strict=False)]
    except (OSError, ValueError):
        return []
    ids = {n.removeprefix("models--").replace("--", "/") for n in names if n.startswith("models--")}
    return sorted(i for i in ids if cached_file(i, "config.json") is not None)
