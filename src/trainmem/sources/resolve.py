"""Turn the user's ``--model`` text into a ModelSpec.

Accepted, in this order: a parameter count (``7B``, ``494M``, ``70e9``); a catalogue id;
a path to a config.json or a folder holding one (safetensors headers, when present, give the
exact count); a Hugging Face id, optionally ``org/model@revision``, found in the local hub
cache at that revision (``refs/main`` when none) or fetched earlier with ``--download``.
Nothing is downloaded here, and huggingface_hub is only imported for Hub ids.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import replace
from pathlib import Path

from trainmem.core.architecture import ModelSpec, spec_from_config, spec_from_count
from trainmem.core.errors import PlanError
from trainmem.core.units import parse_count
from trainmem.sources import catalog, hf, safetensors
from trainmem.sources.paths import downloaded_model_dir

_SAFETENSORS_DTYPES = {"BF16": "bf16", "F16": "fp16", "F32": "fp32"}


def cached_model_ids() -> list[str]:
    """Hugging Face ids with a config.json in the local cache (for the dashboard's list)."""
    return hf.cached_model_ids()


def spec_from_folder(folder: Path, name: str, source: str) -> ModelSpec:
    config_path = folder / "config.json"
    try:
        cfg = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanError("model", f"{folder} holds no config.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanError("model", f"cannot read {config_path}: {exc}") from None
    spec = spec_from_config(cfg, name, source=source)
    try:
        counted = safetensors.count(folder)
    except (OSError, ValueError) as exc:
        return replace(spec, notes=(*spec.notes, f"safetensors headers unreadable: {exc}"))
    if counted is None:
        return spec
    total, dtype = counted
    if dtype not in _SAFETENSORS_DTYPES:  # pre-quantized packing: counts are not parameters
        note = f"safetensors hold {dtype} tensors; parameter count taken from the config"
        return replace(spec, notes=(*spec.notes, note))
    return replace(
        spec,
        exact_params=total,
        dtype=_SAFETENSORS_DTYPES[dtype],
        source="safetensors" if source == "config" else source,
        notes=(*spec.notes, f"exact count {total:,} from safetensors headers"),
    )


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
    path = Path(text).expanduser()
    if path.is_file() and path.name.endswith(".json"):
        return (
            spec_from_folder(path.parent, text, "config")
            if path.name == "config.json"
            else (_spec_from_json_file(path, text))
        )
    if path.is_dir():
        return spec_from_folder(path, path.name or text, "config")
    hf_id, revision = hf.split_revision(text)
    if hf_id.count("/") == 1 and not hf_id.startswith((".", "/", "~")):
        cached = hf.cached_file(hf_id, "config.json", revision)
        if cached is not None:
            return spec_from_folder(cached.parent, text, "hf-cache")
        downloaded = downloaded_model_dir(hf_id, revision)
        if (downloaded / "config.json").is_file():
            return spec_from_folder(downloaded, text, "downloaded")
    if path.suffix == ".json" or text.startswith((".", "/", "~")) or hf_id.count("/") > 1:
        raise PlanError("model", f"no such file: {text}")
    close = difflib.get_close_matches(text, catalog.names(), n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise PlanError(
        "model",
        f"unknown model {text!r}{hint}; give a count like 7B, a catalogue id, "
        "a config.json path or a cached Hugging Face id (or add --download)",
    )


def _spec_from_json_file(path: Path, name: str) -> ModelSpec:
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanError("model", f"cannot read {path}: {exc}") from None
    return spec_from_config(cfg, name, source="config")
