"""Turn the user's ``--model`` text into a ModelSpec.

Accepted, in this order: a parameter count (``7B``, ``494M``, ``70e9``); a catalogue id;
a path to a config.json or a folder holding one (safetensors headers, when present, give the
exact count); a Hugging Face id, optionally ``org/model@revision``, found in the local hub
cache at that revision (``refs/main`` when none) or fetched earlier with ``--download``.
Nothing is downloaded here, and huggingface_hub is only imported for Hub ids.

Every file is read through trainmem.sources.files, and every failure is a one-line
PlanError("model", ...): a bad safetensors header only adds a note, since config.json still
gives the count.
"""

from __future__ import annotations

import difflib
from dataclasses import replace
from pathlib import Path

from trainmem.core.architecture import ModelSpec, spec_from_config, spec_from_count
from trainmem.core.errors import PlanError
from trainmem.core.units import parse_count
from trainmem.sources import catalog, files, hf, safetensors
from trainmem.sources.paths import downloaded_model_dir

_SAFETENSORS_DTYPES = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}
CONFIG_LIMIT = 16 * 2**20  # a real config.json is kilobytes; refuse to read a huge one


def cached_model_ids() -> list[str]:
    """Hugging Face ids with a config.json in the local cache (for the dashboard's list)."""
    return hf.cached_model_ids()


def spec_from_folder(folder: Path, name: str, source: str) -> ModelSpec:
    config_path = folder / "config.json"
    try:
        cfg = files.read_json(config_path, limit=CONFIG_LIMIT)
    except files.MissingFileError:
        raise PlanError("model", f"{files.show(folder)} holds no config.json") from None
    except files.FileReadError as exc:
        raise PlanError("model", str(exc)) from None
    spec = spec_from_config(cfg, name, source=source)
    try:
        counted = safetensors.count(folder)
    except (OSError, ValueError) as exc:  # files.FileReadError is a ValueError
        return _noted(spec, f"safetensors headers unreadable: {exc}")
    if counted is None:
        return spec
    total, dtype = counted
    if dtype not in _SAFETENSORS_DTYPES:  # pre-quantized packing: counts are not parameters
        return _noted(
            spec, f"safetensors hold {dtype} tensors; parameter count taken from the config"
        )
    decoder = spec.layers * spec.layer_params
    if total < decoder:  # missing shards, or headers of another model: not this model's count
        return _noted(
            spec,
            f"safetensors headers count {total:,} parameters, fewer than the "
            f"{decoder:,} of the config's decoder layers alone (shards missing?); "
            "the config's count is used",
        )
    notes = [f"exact count {total:,} from safetensors headers"]
    return replace(
        spec,
        exact_params=total,
        dtype=_SAFETENSORS_DTYPES[dtype],
        source="safetensors" if source == "config" else source,
        notes=(*spec.notes, *notes),
    )


def _noted(spec: ModelSpec, note: str) -> ModelSpec:
    return replace(spec, notes=(*spec.notes, note))


def _local_kind(text: str) -> tuple[Path, str | None]:
    """The expanded path of ``text`` and what is there (see files.kind)."""
    try:
        path = files.expand(text)
        return path, files.kind(path)
    except files.FileReadError as exc:  # ~nouser, a dangling link, a name too long, EACCES
        raise PlanError("model", str(exc)) from None


def _downloaded(path: Path) -> bool:
    try:
        return files.kind(path) == "file"
    except files.FileReadError:  # e.g. a revision too long for a file name: not downloaded
        return False


def resolve_model(text: str) -> ModelSpec:
    text = text.strip()
    if not text:
        raise PlanError("model", "is empty; give a catalogue id, a count like 7B or a path")
    count = parse_count(text)
    if count is not None:
        return spec_from_count(count, text)
    entry = catalog.find(text)
    if entry is not None:
        return entry.spec()
    path, found = _local_kind(text)
    if found == "dir":
        return spec_from_folder(path, path.name or text, "config")
    if found is not None:  # a file, or a FIFO or device, which files.py then refuses
        if path.name == "config.json":
            return spec_from_folder(path.parent, text, "config")
        if path.suffix == ".json":
            return _spec_from_json_file(path, text)
        raise PlanError(
            "model",
            f"{files.show(text)} is not a .json file; give a config.json or its folder",
        )
    hf_id, revision = hf.split_revision(text)
    if hf_id.count("/") == 1 and not hf_id.startswith((".", "/", "~")):
        cached = hf.cached_file(hf_id, "config.json", revision)
        if cached is not None:
            return spec_from_folder(cached.parent, text, "hf-cache")
        downloaded = downloaded_model_dir(hf_id, revision)
        if _downloaded(downloaded / "config.json"):
            return spec_from_folder(downloaded, text, "downloaded")
    if path.suffix == ".json" or text.startswith((".", "/", "~")) or hf_id.count("/") > 1:
        raise PlanError("model", f"no such file: {files.show(text)}")
    if revision is not None and catalog.find(hf_id) is not None:
        raise PlanError(
            "model",
            f"{files.show(hf_id)} at revision {files.show(revision)!r} is neither in the "
            "Hugging Face cache nor downloaded; the catalogue holds one revision's config "
            "(drop the revision to use it, or add --download)",
        )
    close = difflib.get_close_matches(text, catalog.names(), n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise PlanError(
        "model",
        f"unknown model {files.show(text)!r}{hint}; give a count like 7B, a catalogue id, "
        "a config.json path or a cached Hugging Face id (or add --download)",
    )


def _spec_from_json_file(path: Path, name: str) -> ModelSpec:
    try:
        cfg = files.read_json(path, limit=CONFIG_LIMIT, what="config file")
    except files.FileReadError as exc:
        raise PlanError("model", str(exc)) from None
    return spec_from_config(cfg, name, source="config")
