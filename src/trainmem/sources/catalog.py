"""The built-in catalogue of popular open models (data shipped in trainmem/data/models.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from trainmem.core.architecture import ModelSpec, spec_from_config


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    hf_id: str
    config: dict[str, Any]
    transformers_params: int
    published_text: str | None
    notes: tuple[str, ...]

    def spec(self) -> ModelSpec:
        return spec_from_config(self.config, self.name, source="catalogue", hf_id=self.hf_id)


@cache
def catalog() -> tuple[CatalogEntry, ...]:
    # Package data beside the sources (setuptools package-data): a plain path read, since
    # importlib.resources costs the dashboard's start-up ~7 ms of imports for one file.
    text = (Path(__file__).parent.parent / "data" / "models.json").read_text(encoding="utf-8")
    return tuple(
        CatalogEntry(
            name=e["name"],
            hf_id=e["hf_id"],
            config=e["config"],
            transformers_params=e["transformers_params"],
            published_text=e["published"]["text"],
            notes=tuple(e["notes"]),
        )
        for e in json.loads(text)
    )


def _key(text: str) -> str:
    return text.strip().lower().replace("_", "-")


@cache
def _index() -> dict[str, CatalogEntry]:
    index: dict[str, CatalogEntry] = {}
    for entry in catalog():
        index[_key(entry.name)] = entry
        index[_key(entry.hf_id)] = entry
        index[_key(entry.hf_id.split("/")[-1])] = entry
    return index


def find(name: str) -> CatalogEntry | None:
    """Look up by Hugging Face id, its last part, or the catalogue name (case-insensitive)."""
    return _index().get(_key(name))


def names() -> list[str]:
    return [e.hf_id for e in catalog()]


@cache
def specs() -> tuple[ModelSpec, ...]:
    """Every catalogue model as a spec: the candidates of the what-if and advice answers."""
    return tuple(e.spec() for e in catalog())
