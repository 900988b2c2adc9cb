"""Datasets the ``datasets`` library already holds on this machine, as Arrow files.

Two layouts, both written by datasets 5.2 (read in its source, not imported: it is heavy and
optional):

- the cache of ``load_dataset``: ``<cache>/<namespace>___<name>/<config_id>/<version>/<hash>/
  <name>-<split>[-NNNNN-of-NNNNN].arrow`` (builder.py ``_relative_data_dir`` and the ``fname``
  of ``_prepare_split``; the name snake-cased by naming.py ``camelcase_to_snakecase``);
- a ``save_to_disk`` folder: ``state.json`` lists its ``_data_files``, and a DatasetDict is a
  folder of split folders named in ``dataset_dict.json`` (arrow_dataset.py, dataset_dict.py).

Both are Arrow IPC streams. The cache folder is read from the environment at call time:
HF_DATASETS_CACHE, else ``$HF_HOME/datasets``, else ``$XDG_CACHE_HOME/huggingface/datasets``,
else ``~/.cache/huggingface/datasets`` (datasets 5.2 config.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from trainmem.core.units import shown
from trainmem.sources import files
from trainmem.sources.datasets.records import DatasetError

_SHARD = r"(-\d{5}-of-\d{5})?\.arrow"
STATE_LIMIT = 16 * 2**20


def datasets_cache_dir() -> Path:
    override = os.environ.get("HF_DATASETS_CACHE")
    if override:
        return Path(os.path.expanduser(override))
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface"
    )
    return Path(os.path.expanduser(home)) / "datasets"


def _snake(name: str) -> str:
    """naming.py camelcase_to_snakecase (datasets 5.2): ``SQuAD`` -> ``s_qu_ad``."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z\d])([A-Z])", r"\1_\2", name).lower()


def split_reference(text: str) -> tuple[str, str | None, str]:
    """``org/name[/config][:split]`` -> (``org/name``, config or None, split, ``train`` when
    none is given)."""
    ref, _, split = text.partition(":")
    parts = ref.strip("/").split("/")
    config = parts[2] if len(parts) == 3 else None
    return "/".join(parts[:2]), config, split or "train"


def _dirs(folder: Path) -> list[Path]:
    """The folders in ``folder`` (none when it does not exist); a folder that cannot be
    listed (no permission, not a folder, a symlink loop) is one DatasetError line, not a
    silent "not cached"."""
    return [p for p in _listing(folder) if p.is_dir()]


def _listing(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DatasetError(
            f"cannot list {files.show(folder)} in the datasets cache: {files.reason(exc)}"
        ) from None


def cached_arrow_files(text: str) -> tuple[list[Path], str] | None:
    """The Arrow files of ``org/name[/config][:split]`` in the datasets cache and a line
    saying which copy they are; None when that dataset is not cached at all."""
    repo, config, split = split_reference(text)
    org, _, name = repo.rpartition("/")
    root = datasets_cache_dir()
    names = {f"{org}___{n}" if org else n for n in (_snake(name), name)}
    found = [d for d in _dirs(root) if d.name in names]
    if not found:
        return None
    configs = {c.name: c for d in found for c in _dirs(d)}
    if config is None:
        config = "default" if "default" in configs or len(configs) != 1 else next(iter(configs))
    if config not in configs:
        listed = ", ".join(sorted(configs)) or "none"
        raise DatasetError(
            f"{repo} is in the datasets cache without config {shown(config)} (cached: {listed}); "
            f"give {repo}/CONFIG"
        )
    pattern = re.compile(rf".+-{re.escape(split)}{_SHARD}")
    copies = [h for v in _dirs(configs[config]) for h in _dirs(v)]
    with_split = [(h, [p for p in _listing(h) if pattern.fullmatch(p.name)]) for h in copies]
    with_split = [(h, arrows) for h, arrows in with_split if arrows]
    if not with_split:
        raise DatasetError(
            f"{repo} ({config}) is in the datasets cache without a {shown(split)} split"
        )
    folder, arrows = max(with_split, key=lambda c: _mtime(c[0]))  # the newest copy
    return arrows, f"datasets cache {files.show(folder)}"


def _mtime(folder: Path) -> float:
    try:
        return folder.stat().st_mtime
    except OSError:  # removed since it was listed: the oldest
        return 0.0


def saved_arrow_files(folder: Path, split: str = "train") -> list[Path] | None:
    """The Arrow files of a ``save_to_disk`` folder (a Dataset, or ``split`` of a
    DatasetDict); None when the folder is neither."""
    if files.kind(folder / "dataset_dict.json") == "file":
        if files.kind(folder / split) != "dir":
            raise DatasetError(f"{files.show(folder)} holds no {shown(split)} split")
        folder = folder / split
    if files.kind(folder / "state.json") != "file":
        return None
    try:
        state = files.read_json(folder / "state.json", limit=STATE_LIMIT)
        names = [entry["filename"] for entry in state["_data_files"]]
    except files.FileReadError as exc:
        raise DatasetError(str(exc)) from None
    except (KeyError, TypeError):
        raise DatasetError(f"{files.show(folder / 'state.json')} lists no _data_files") from None
    if not all(isinstance(n, str) and "/" not in n and n not in ("", ".", "..") for n in names):
        raise DatasetError(f"{files.show(folder / 'state.json')} names files outside its folder")
    return [folder / n for n in names]
