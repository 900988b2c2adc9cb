"""accelerate's own FSDP2 layout on the CPU (bench/measure/sharded.py --accelerate-layout):
the units the installed accelerate's fsdp2_prepare_model makes for an untied and a tied
model, and one rank's step under the fake process group with them.

Needs torch, transformers and accelerate (the torch-tests extra); skipped cleanly without.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "measure"))
import accelerate
import sharded
from tiny_llama import TINY as TINY_LLAMA

pytestmark = pytest.mark.torch

TINY = {**TINY_LLAMA, "tie_word_embeddings": False}
EMBED = 4096 * 128


def _units(tied: bool) -> dict[tuple[str, ...], tuple[int, bool | None]]:
    plan = sharded.sharded_plan(TINY["name"], "full", 2, "full-shard", 2, True, seq_len=32)
    m = sharded._fake_run({**TINY, "tie_word_embeddings": tied}, plan, layout="accelerate")
    assert m["peak_allocated_bytes"] > m["start_bytes"]
    return {tuple(u["modules"]): (u["params"], u["reshard_after_forward"]) for u in m["fsdp_units"]}


@pytest.mark.skipif(
    tuple(int(x) for x in accelerate.__version__.split(".")[:2]) < (1, 14),
    reason="accelerate < 1.14 makes no embedding or tail unit",
)
def test_accelerate_carves_the_embedding_and_the_tail():
    untied = _units(False)
    assert untied[("<root>",)] == (0, None)  # the root keeps no parameter
    assert untied[("model.embed_tokens",)] == (EMBED, True)
    assert untied[("model.norm", "lm_head")] == (EMBED + 128, False)  # never resharded
    tied = _units(True)
    assert tied[("model.embed_tokens", "model.norm", "lm_head")] == (EMBED + 128, False)
    assert ("model.embed_tokens",) not in tied
