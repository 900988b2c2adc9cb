"""What the frameworks' end-to-end runs share (frameworks_axolotl.py, frameworks_llama_factory.py):
a tiny random Llama saved as a model folder with a word-level tokenizer and an alpaca-style
dataset (nothing downloaded), the tracker attached to the framework's own Trainer, and the
same config file planned with ``trainmem-tui plan --from`` from the same working directory.

The tracker (tracker.py, through real_stacks.StepProbe) is active over step 2 of the Trainer
the framework builds: ``transformers.Trainer.train`` is wrapped, in this process only, so the
probe attaches to whatever Trainer subclass the framework's entry point constructs.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from real_stacks import StepProbe

ROOT = Path(__file__).resolve().parents[2]
TRAINMEM = ROOT / ".venv" / "bin" / "trainmem-tui"
WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "be",
    "this",
    "from",
    "or",
    "an",
    "are",
    "not",
    "model",
    "memory",
    "train",
    "step",
    "layer",
    "token",
    "batch",
    "length",
    "answer",
    "question",
    "write",
    "give",
    "list",
    "name",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
]
# A small Llama (4 layers, GQA): real weights on the CPU, seconds per step.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 688,
    "vocab_size": 512,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_model(folder: Path) -> Path:
    """The tiny Llama (random weights) and a word-level tokenizer, as a Hub model folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    config = AutoConfig.for_model(**{k: v for k, v in TINY_LLAMA.items() if k != "architectures"})
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=TINY_LLAMA["max_position_embeddings"],
    ).save_pretrained(folder)
    return folder


def write_alpaca(path: Path, rows: int = 16, words: int = 40) -> Path:
    """Alpaca rows (instruction, input, output) of about ``words`` words each."""
    path.parent.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    with path.open("w", encoding="utf-8") as f:
        for _ in range(rows):
            pick = torch.randint(0, len(WORDS), (words,), generator=g).tolist()
            text = [WORDS[i] for i in pick]
            row = {
                "instruction": " ".join(text[:10]),
                "input": "",
                "output": " ".join(text[10:]),
            }
            f.write(json.dumps(row) + "\n")
    return path


class Probed:
    """While active, every ``transformers.Trainer.train`` gets a StepProbe (step 2)."""

    def __init__(self) -> None:
        self.probes: list[StepProbe] = []
        self.trainers: list[Any] = []

    def __enter__(self) -> Probed:
        from transformers import Trainer

        self._orig = Trainer.train
        outer = self

        @functools.wraps(self._orig)
        def train(trainer: Any, *a: Any, **k: Any) -> Any:
            probe = StepProbe(trainer, detail=True)
            outer.probes.append(probe)
            outer.trainers.append(trainer)
            return outer._orig(trainer, *a, **k)

        Trainer.train = train  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        from transformers import Trainer

        Trainer.train = self._orig  # type: ignore[method-assign]
        for probe in self.probes:
            probe.abort()


def measured(probe: StepProbe, trainer: Any) -> dict[str, Any]:
    if probe.tr is None or probe.active:
        raise RuntimeError("the measured step (step 2) did not complete")
    s = probe.tr.summary()
    model = trainer.model
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {
        "peak_allocated_bytes": s["peak_bytes"],
        "peak_phase": s["peak_phase"],
        "peak_op": s["peak_op"],
        "by_category_at_peak": s["by_category_at_peak"],
        "phase_peaks": s["phase_peaks"],
        "trainable_params": trainable,
        "total_params": sum(p.numel() for p in model.parameters()),
        "optimizer_class": probe.obs.get("optimizer_class"),
        "optimizer_state_bytes": probe.obs.get("optimizer_state_bytes"),
        "gradient_checkpointing": probe.obs.get("gradient_checkpointing"),
        "gradient_checkpointing_kwargs": probe.obs.get("gradient_checkpointing_kwargs"),
        "hidden_states_dtype": probe.obs.get("hidden_states_dtype"),
        "logits_dtype": probe.obs.get("logits_dtype"),
        "autocast_in_forward": probe.obs.get("autocast_in_forward"),
        "loss": probe.loss,
        "execution": "real",
        "top_at_peak": probe.tr.top_at_peak(12),
    }


def plan_from(config: Path, cwd: Path) -> dict[str, Any]:
    """``trainmem-tui plan --from CONFIG --json`` run from ``cwd``, as a user would."""
    done = subprocess.run(
        [str(TRAINMEM), "plan", "--from", str(config), "--device", "64GB", "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip()[-1500:]}
    out = json.loads(done.stdout)
    return {
        "allocated_bytes": out["peak"]["allocated_bytes"],
        "phase": out["peak"]["phase"],
        "plan": out["plan"],
        "origins": out["origins"],
        "unmodelled": out["unmodelled"],
        "notes": out["notes"],
        "params": out["model"]["params"],
        "trainable_params": out["model"]["trainable_params"],
    }


def record(
    framework: str, version: str, config: Path, cwd: Path, run: dict[str, Any]
) -> dict[str, Any]:
    """One result: the file as run, what the framework's step measured, what plan --from says."""
    rec: dict[str, Any] = {
        "id": f"{framework}:{config.name}",
        "framework": framework,
        "framework_version": version,
        "config_file": config.name,
        "config_text": config.read_text(encoding="utf-8"),
        "model_config": TINY_LLAMA,
        **run,
        "plan_from": plan_from(config, cwd),
    }
    m, p = rec.get("measured"), rec["plan_from"]
    if m and "allocated_bytes" in p:
        rec["error_pct"] = round(
            100 * (p["allocated_bytes"] - m["peak_allocated_bytes"]) / m["peak_allocated_bytes"], 2
        )
    return rec


def versions_now() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for mod in ("torch", "transformers", "peft", "accelerate", "trl", "datasets", "tokenizers"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:  # an honest record of what was not there
            out[mod] = f"unavailable ({type(e).__name__})"
    return out


def machine() -> dict[str, Any]:
    return {"device": "cpu", "cpu": platform.machine(), "threads": os.cpu_count()}


def save(path: Path, framework: str, records: list[dict[str, Any]]) -> None:
    """Write the results file, keeping the other frameworks' records already in it."""
    old = json.loads(path.read_text()) if path.is_file() else {}
    kept = [r for r in old.get("records", []) if r.get("framework") != framework]
    versions = {
        **old.get("versions", {}),
        framework: {**versions_now(), framework: records[0]["framework_version"]},
    }
    result = {
        "kind": "frameworks",
        "machine": machine(),
        "versions": versions,
        "command": "bench/measure/frameworks_axolotl.py, frameworks_llama_factory.py (their "
        "docstrings: the venvs)",
        "records": kept + records,
    }
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
