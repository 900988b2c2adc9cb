"""Regenerate src/trainmem/data/models.json from the reference configs.

    python scripts/build_catalog.py ../shared/reference/models.json

The catalogue keeps each model's config.json fields (the estimator derives everything from
them, exactly as for a user's own config), the parameter count transformers builds from that
config (checked by the tests), the published figure and why the two differ.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

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


def convert(ref: dict) -> dict:
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


def main() -> None:
    refs = json.loads(Path(sys.argv[1]).read_text())
    OUT.write_text(json.dumps([convert(r) for r in refs], indent=1) + "\n")
    print(f"wrote {len(refs)} models to {OUT}")


if __name__ == "__main__":
    main()
