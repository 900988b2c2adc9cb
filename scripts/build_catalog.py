"""Regenerate src/trainmem/data/models.json from the reference configs and scripts/catalog_table.py.

    python scripts/build_catalog.py ../shared/reference/models.json [--check]

The catalogue keeps each model's config.json fields (the estimator derives everything from
them, exactly as for a user's own config), the parameter count transformers builds from that
config, the published figure and why the two differ, its sources, and its other Hub ids
(instruct checkpoints, renamed repos, re-uploads; see catalog_table.py for the evidence).

Checks, each failing the build: transformers (on the meta device, no memory) builds exactly
the count the estimator computes; a checkpoint's safetensors total (an MXFP4 one's read as
mxfp4_params does; an index's total_size in bytes as bytes per element x count) or an exact
published count, where a source gives one, equals that count; an alias backed by a config.json
copy gives the very same ModelSpec as its target. --check compares with the committed file
instead of writing it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import catalog_table as table

from trainmem.core.architecture import ModelSpec, spec_from_config

OUT = Path(__file__).resolve().parents[1] / "src" / "trainmem" / "data" / "models.json"
CONFIG_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "max_position_embeddings",
    "torch_dtype",
)


class BuildError(ValueError):
    pass


def convert(ref: dict[str, Any]) -> dict[str, Any]:
    model_type = ref["architecture"].split(" ")[0]
    if "text_config: gemma3_text" in ref["architecture"]:
        model_type = "gemma3_text"  # the text decoder of the multimodal checkpoint
    config = {"model_type": model_type}
    config.update({k: ref[k] for k in CONFIG_KEYS if ref.get(k) is not None})
    config["head_dim"] = ref["head_dim_effective"]
    config.update(ref.get("config_extra", {}))
    published = ref.get("published_params") or {}
    return {
        "name": ref["name"],
        "hf_id": ref["hf_id"],
        "config": config,
        "transformers_params": ref["transformers_meta_count"],
        "published": {"text": published.get("text"), "value": published.get("value")},
        "notes": ref.get("mismatch_notes", []),
        "sources": [
            ":".join(str(s.get(k, "")) for k in ("repo", "path", "url") if s.get(k))
            for s in ref.get("sources", [])
        ],
    }


def transformers_count(config: dict[str, Any]) -> int:
    """Parameters of the model transformers builds from ``config``, on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    # a null field is one no source gave (the reference's Qwen2.5-72B): transformers' default
    fields = {k: v for k, v in config.items() if k != "torch_dtype" and v is not None}
    hf_config = AutoConfig.for_model(**fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


def mxfp4_params(bf16: int, u8: int) -> int:
    """Parameters of an MXFP4 checkpoint from the Hub's per-dtype safetensors counts. The Hub
    counts each packed FP4 byte of a ``*_blocks`` tensor as two elements and each E8M0 byte of
    its ``*_scales`` tensor (one per 32 values) as one, so the U8 elements are 33/32 of the
    quantized weights (transformers integrations/mxfp4.py: blocks [..., n/32, 16], scales
    [..., n/32])."""
    if u8 * 32 % 33:
        raise BuildError(f"U8 count {u8:,} is not 33/32 of a weight count")
    return bf16 + u8 * 32 // 33


def added(entry: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if "from" in entry:  # another entry's config.json with a few fields changed
        config = {**by_id[entry["from"]]["config"], **entry["set"]}
    else:
        config = entry["config"]
    count = transformers_count(config)
    notes = [f"added: {entry['why']}", *entry.get("notes", [])]
    if "from" in entry:
        notes.append(f"config.json fields as {entry['from']} but {sorted(entry['set'])}")
    if "safetensors_total" in entry:
        total, source = entry["safetensors_total"]
        if total != count:
            raise BuildError(f"{entry['hf_id']}: safetensors total {total:,} != {count:,}")
        notes.append(f"matches the checkpoint's safetensors total {total:,} ({source})")
    if "safetensors_bytes" in entry:  # an index's metadata.total_size, in bytes
        size, width, source = entry["safetensors_bytes"]
        if size != count * width:
            raise BuildError(f"{entry['hf_id']}: {size:,} bytes != {width} x {count:,}")
        notes.append(
            f"matches the checkpoint's safetensors index: total_size {size:,} bytes = "
            f"{width} bytes x {count:,} ({source})"
        )
    if "mxfp4_safetensors" in entry:
        bf16, u8, source = entry["mxfp4_safetensors"]
        total = mxfp4_params(bf16, u8)
        if total != count:
            raise BuildError(f"{entry['hf_id']}: MXFP4 safetensors {total:,} != {count:,}")
        notes.append(
            f"matches the checkpoint's safetensors ({source}): BF16 {bf16:,} + U8 {u8:,} "
            f"(MXFP4 blocks and scales of {u8 * 32 // 33:,} expert weights)"
        )
    if "exact" in entry:
        exact, source = entry["exact"]
        if exact != count:
            raise BuildError(f"{entry['hf_id']}: exact count {exact:,} != {count:,}")
        notes.append(f"matches the exact count {exact:,} ({source})")
    return {
        "name": entry["name"],
        "hf_id": entry["hf_id"],
        "config": config,
        "transformers_params": count,
        "published": {"text": entry.get("published"), "value": None},
        "notes": notes,
        "sources": entry["sources"],
    }


def _bare(spec: ModelSpec) -> ModelSpec:
    return replace(spec, name="", hf_id=None, source="", notes=())


def aliases() -> list[dict[str, Any]]:
    """Every alias as {hf_id, of, evidence, quantized, note, sources, ...}, in table order."""
    rows: list[dict[str, Any]] = []
    for hf_id, of, evidence, sources, extra in table.INSTRUCT:
        rows.append({"hf_id": hf_id, "of": of, "evidence": evidence, "sources": sources, **extra})
    for four_bit, others in table.UNSLOTH_ROWS:
        original = next(o for o in others if not o.startswith("unsloth/"))
        for hf_id in (four_bit, *others):
            if hf_id == original:
                continue
            rows.append(
                {
                    "hf_id": hf_id,
                    "of": original,
                    "evidence": "re-upload",
                    "sources": [f"{table.UNSLOTH} (row {four_bit!r})"],
                    "quantized": "bnb-4bit" if hf_id.endswith("bnb-4bit") else None,
                    "note": "unsloth's dynamic 4-bit keeps a few layers in 16 bits; planned as "
                    "NF4 throughout"
                    if hf_id.endswith("unsloth-bnb-4bit")
                    else "",
                }
            )
    for hf_id, of, quantized, sources in table.REFUSED:
        rows.append(
            {
                "hf_id": hf_id,
                "of": of,
                "evidence": "re-upload",
                "quantized": quantized,
                "sources": sources,
            }
        )
    seen: set[str] = set()
    unique = []
    for row in rows:  # the mapper lists some repos twice (as key and as value)
        if row["hf_id"].lower() not in seen:
            seen.add(row["hf_id"].lower())
            unique.append(row)
    return unique


def attach(entries: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    """Put each alias on the entry it ends at, after checking what its source shows."""
    by_id = {e["hf_id"]: e for e in entries}
    targets = {r["hf_id"]: r["of"] for r in rows}
    for row in rows:
        of = row["of"]
        for _ in range(len(rows)):
            if of in by_id:
                break
            if of not in targets:
                raise BuildError(f"{row['hf_id']}: {of} is neither in the catalogue nor an alias")
            of = targets[of]
        entry = by_id[of]
        if row["hf_id"] in by_id:
            raise BuildError(f"{row['hf_id']} is both an entry and an alias")
        if row["evidence"] == "config":
            mine = spec_from_config(row["config"], row["hf_id"])
            theirs = spec_from_config(entry["config"], entry["hf_id"])
            if _bare(mine) != _bare(theirs):
                raise BuildError(f"{row['hf_id']}: its config.json differs from {of}'s")
        if "safetensors_total" in row:
            total, source = row["safetensors_total"]
            if total != entry["transformers_params"]:
                raise BuildError(f"{row['hf_id']}: safetensors total {total:,} differs")
            row["sources"] = [*row["sources"], f"{source} (safetensors total {total:,})"]
            row["note"] = (row.get("note", "") + f"; safetensors total {total:,}").lstrip("; ")
        entry.setdefault("aliases", []).append(
            {
                "hf_id": row["hf_id"],
                "of": row["of"],
                "evidence": row["evidence"],
                "quantized": row.get("quantized"),
                "note": row.get("note", ""),
                "sources": row["sources"],
            }
        )


def build(reference: Path) -> list[dict[str, Any]]:
    entries = [convert(r) for r in json.loads(reference.read_text())]
    by_id = {e["hf_id"]: e for e in entries}
    for new in (*table.ENTRIES, *table.DERIVED):  # in order: a derived one may build on another
        by_id[new["hf_id"]] = added(new, by_id)
        entries.append(by_id[new["hf_id"]])
    for entry in entries:
        computed = spec_from_config(entry["config"], entry["name"]).params
        if computed != entry["transformers_params"]:
            raise BuildError(f"{entry['hf_id']}: estimator {computed:,} != transformers")
    attach(entries, aliases())
    return entries


def render(entries: list[dict[str, Any]]) -> str:
    return json.dumps(entries, indent=1) + "\n"


def main() -> None:
    text = render(build(Path(sys.argv[1])))
    if "--check" in sys.argv[2:]:
        same = OUT.read_text() == text
        print("models.json is up to date" if same else "models.json differs: rebuild it")
        sys.exit(0 if same else 1)
    OUT.write_text(text)
    print(f"wrote {text.count(chr(10) + ' {')} models to {OUT}")


if __name__ == "__main__":
    main()
