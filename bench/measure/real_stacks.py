"""Measure the real training stacks' step on CPU: transformers' Trainer, TRL's SFTTrainer,
LLaMA-Factory's model preparation (issue 14, "Measured").

    .measure-venv/bin/python bench/measure/real_stacks.py \
        --out bench/results/measure-cpu-real-stacks.json [--only SUBSTR] [--threads 1]

harness.py *emulates* the Trainer's step in its own code.  Here the stack's own code runs:
``trainer.train()`` with ``max_steps=2``; step 1 is the warm-up (it creates the optimizer and
its states through ``Trainer.create_optimizer``), and the tracker (tracker.py) is active over
exactly step 2 of ``Trainer._inner_training_loop`` (transformers 5.24, trainer.py:1896-1955):
from the ``on_step_begin`` callback to ``on_step_end``, i.e.

    tr_loss_step = self.training_step(model, inputs, num_items_in_batch)   # forward + backward
    self._clip_grad_norm(model)          # max_grad_norm = 1.0 (the default)
    self.optimizer.step()                # the optimizer Trainer.create_optimizer made
    self.lr_scheduler.step()
    model.zero_grad()

with the model as ``accelerator.prepare`` left it (under ``bf16=True`` its forward is wrapped
in ``torch.autocast(bf16)`` + ``convert_to_fp32``).  Phases are named by wrapping, without
changing them, ``trainer.compute_loss`` (forward, loss included), ``accelerator.backward``
(backward), ``trainer._clip_grad_norm`` (clip_grad) and the optimizer callbacks (optimizer; then
zero_grad for the scheduler step and ``model.zero_grad``).

Batches are fixed-length random token rows (batch x seq_len), every token labelled, no
padding.  Models are built from /work/shared/reference/models.json with random weights
(nothing downloaded).  For TRL's default (a model given by path) the random bf16 model is
``save_pretrained`` to a temp dir and SFTTrainer loads it itself (its dtype default: float32).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from harness import (
    _from_config,
    _qlora_base,
    build_config,
    config_dict,
    count_params,
    load_models,
    lora_config,
    machine,
    measured_plan,
)
from tracker import StorageTracker

from trainmem.core.plan import Plan as TrainmemPlan

REPO = Path(__file__).resolve().parents[2]
PLAN_FIELDS = {f.name for f in dataclasses.fields(TrainmemPlan)}


# --------------------------------------------------------------------------- cases
@dataclass
class RealCase:
    """One real-stack step: the model, what the user hands the stack, and the plan it means."""

    model: str
    stack: str  # "trainer" | "trl" | "llama-factory"
    plan: dict[str, Any]  # the project's plan field names and values (what the run really did)
    source: str = "object"  # trl: "path" = SFTTrainer loads the saved model itself
    trl_dtype: str | None = None  # SFTConfig.model_init_kwargs["dtype"] (None: TRL's float32)
    note: str = ""
    extra_args: dict[str, Any] = field(default_factory=dict)  # TrainingArguments / SFTConfig
    # "real": the stack's own code; "emulated-fake": harness.py's emulated Trainer step under
    # FakeTensorMode (for steps too slow for this CPU; checks.emulated_vs_real shows how the
    # emulation compares with the real Trainer where both ran)
    execution: str = "real"


def _plan(**kw: Any) -> dict[str, Any]:
    base = {
        "method": "full",
        "precision": "bf16",
        "optimizer": "adamw",
        "seq_len": 256,
        "batch": 1,
        "grad_ckpt": False,
        "attn": "sdpa",
        "stack": "trainer",
        "loss": "standard",
    }
    base.update(kw)
    if base["method"] in ("lora", "qlora"):
        base.setdefault("lora_rank", 16)
        base.setdefault("lora_alpha", 2.0 * base["lora_rank"])
        base.setdefault("lora_targets", "all-linear")
        base.setdefault("lora_dropout", 0.0)
    if base["method"] == "qlora":
        base.setdefault("kbit_prep", False)
        base.setdefault("quant", "nf4")
        base.setdefault("double_quant", True)
    return base


S = "SmolLM2-135M"


def cases() -> list[RealCase]:
    out: list[RealCase] = []
    tr = functools.partial(_plan, stack="trainer", loss="standard")
    # 1. the real transformers Trainer
    out += [
        RealCase(
            S, "trainer", tr(precision="bf16", seq_len=256, batch=2), note="bf16 model, bf16=False"
        ),
        RealCase(
            S,
            "trainer",
            tr(precision="bf16-mixed", seq_len=256, batch=1),
            note="fp32 model, bf16=True",
        ),
        RealCase(
            S,
            "trainer",
            tr(method="lora", precision="bf16", base_dtype="16-bit", seq_len=256, batch=2),
        ),
        RealCase(
            S,
            "trainer",
            tr(method="lora", precision="bf16-mixed", base_dtype="16-bit", seq_len=256, batch=2),
        ),
        RealCase(
            S,
            "trainer",
            tr(method="qlora", precision="bf16", kbit_prep=True, seq_len=256, batch=1),
            note="prepare_model_for_kbit_training(use_gradient_checkpointing=False), bf16=False",
        ),
        RealCase(
            S,
            "trainer",
            tr(
                method="lora",
                precision="bf16",
                base_dtype="16-bit",
                modules_to_save="lm_head",
                seq_len=256,
            ),
        ),
        RealCase(
            S,
            "trainer",
            tr(
                method="lora",
                precision="bf16",
                base_dtype="16-bit",
                modules_to_save="embed_tokens,lm_head",
                seq_len=256,
            ),
        ),
        RealCase(
            S,
            "trainer",
            tr(precision="bf16", optimizer="adamw-8bit", seq_len=256, batch=1),
            note="optim=adamw_bnb_8bit",
        ),
        RealCase(
            S,
            "trainer",
            tr(
                method="lora",
                precision="bf16-mixed",
                base_dtype="16-bit",
                grad_ckpt=True,
                seq_len=512,
            ),
            note="activation_checkpointing=True (Trainer default kwargs)",
        ),
    ]
    # 2. TRL's SFTTrainer with its defaults: model by path (fp32 load), bf16=True, fused/chunked
    # head (loss_type "nll"), gradient_checkpointing=True
    trl = functools.partial(
        _plan, stack="trl", loss="chunked", precision="bf16-mixed", grad_ckpt=True
    )
    out += [
        RealCase(S, "trl", trl(seq_len=256, batch=1), source="path"),
        RealCase(
            S, "trl", trl(method="lora", base_dtype="fp32", seq_len=256, batch=2), source="path"
        ),
        RealCase(
            S,
            "trl",
            trl(method="lora", base_dtype="fp32", grad_ckpt=False, seq_len=256, batch=2),
            source="path",
        ),
        RealCase(
            S,
            "trl",
            trl(method="qlora", seq_len=256, batch=2),
            note="model object loaded with BitsAndBytesConfig(nf4, double quant, bf16 compute), "
            "dtype bf16",
        ),
        RealCase(
            S,
            "trl",
            trl(method="lora", base_dtype="16-bit", seq_len=256, batch=2),
            source="path",
            trl_dtype="bfloat16",
        ),
        RealCase(
            S,
            "trl",
            trl(method="lora", base_dtype="fp32", modules_to_save="lm_head", seq_len=256, batch=2),
            source="path",
        ),
    ]
    # 3. LLaMA-Factory's preparation (emulated from source) + the real Trainer (its
    # CustomSeq2SeqTrainer keeps Trainer.compute_loss): bf16: true, checkpointing on
    lf = functools.partial(
        _plan, stack="llama-factory", loss="standard", precision="bf16-mixed", grad_ckpt=True
    )
    out += [
        RealCase(S, "llama-factory", lf(seq_len=256, batch=1), note="full, bf16: true"),
        RealCase(
            S,
            "llama-factory",
            lf(method="lora", base_dtype="16-bit", lora_rank=8, seq_len=256, batch=2),
            note="lora (LLaMA-Factory defaults rank 8, alpha 16, all linear), bf16: true",
        ),
    ]
    # 4. eager attention + checkpointing at long sequences, the real Trainer
    # (a real 2048-token eager step takes ~9 min on 2 shared cores; 4096 would take ~30: those
    # run as harness.py's emulated Trainer step under FakeTensorMode, checked against the real
    # Trainer at 2048 in checks.emulated_vs_real)
    for seq in (2048, 4096):
        for prec in ("bf16", "bf16-mixed"):
            out.append(
                RealCase(
                    S,
                    "trainer",
                    tr(
                        method="lora",
                        precision=prec,
                        base_dtype="16-bit",
                        attn="eager",
                        grad_ckpt=True,
                        seq_len=seq,
                        batch=1,
                    ),
                    execution="real" if seq <= 2048 else "emulated-fake",
                )
            )
    # 5. other quantized bases (LoRA on int8 / fp4), the real Trainer
    out += [
        RealCase(
            S,
            "trainer",
            tr(method="qlora", quant="int8", seq_len=256, batch=1),
            note="load_in_8bit",
        ),
        RealCase(S, "trainer", tr(method="qlora", quant="fp4", seq_len=256, batch=1)),
    ]
    # 6. LLM.int8 under non-reentrant checkpointing (bitsandbytes keeps each 8-bit linear's
    # input as a ctx attribute, out of the checkpoint's hooks), and with kbit prep
    out += [
        RealCase(
            S,
            "trainer",
            tr(method="qlora", quant="int8", grad_ckpt=True, seq_len=256, batch=1),
            note="load_in_8bit, activation_checkpointing=True",
        ),
        RealCase(
            S,
            "trainer",
            tr(method="qlora", quant="int8", kbit_prep=True, grad_ckpt=True, seq_len=256, batch=1),
            note="load_in_8bit, kbit prep, activation_checkpointing=True",
        ),
    ]
    # 7. bitsandbytes' other optimizer layouts through the Trainer's optim names
    out += [
        RealCase(S, "trainer", tr(precision="bf16", optimizer=name, seq_len=256, batch=1))
        # (torchao's AdamW4bit cannot run under the tracker: its torch.compile'd step refuses
        # a dispatch mode, so its layout stays derived from source)
        for name in ("lion", "lion-8bit", "paged-adamw-32bit")
    ]
    # 8. eager attention where a layer's backward outweighs the loss (9 heads, 8192 tokens:
    # h x S x 10 bytes per token beside 12 x V), as the harness's emulated step under fakes
    out.append(
        RealCase(
            S,
            "trainer",
            tr(
                method="lora",
                precision="bf16",
                base_dtype="16-bit",
                attn="eager",
                grad_ckpt=True,
                seq_len=8192,
                batch=1,
            ),
            execution="emulated-fake",
        )
    )
    return out


# --------------------------------------------------------------------------- plan / id
def project_plan(values: dict[str, Any]) -> tuple[TrainmemPlan | None, dict[str, Any], list[str]]:
    """(validated project Plan or None, the record's plan dict, fields the installed Plan lacks).
    The record keeps every value under the project's field names either way."""
    known = {k: v for k, v in values.items() if k in PLAN_FIELDS}
    missing = sorted(k for k in values if k not in PLAN_FIELDS)
    try:
        plan: TrainmemPlan | None = measured_plan(**known)
    except Exception:  # a value the installed Plan does not accept yet (e.g. stack "trl")
        plan = None
    if plan is not None:
        d = plan.to_dict()
    else:
        safe = {k: v for k, v in known.items() if k not in ("stack", "loss", "quant", "base_dtype")}
        d = measured_plan(**safe).to_dict()
    d.update(values)
    return plan, d, missing


def record_id(name: str, values: dict[str, Any]) -> str:
    plan, _, _ = project_plan(values)
    if plan is not None:
        key = harness.case_key(plan)
    else:  # same parts as harness.case_key, from the dict
        p = values
        parts = [
            p["method"],
            p["precision"],
            p["optimizer"],
            f"s{p['seq_len']}",
            f"b{p['batch']}",
            "gc" if p["grad_ckpt"] else "nogc",
            p["attn"],
        ]
        if p["method"] in ("lora", "qlora"):
            parts += [
                f"r{p['lora_rank']}",
                f"a{p['lora_alpha']:g}",
                p["lora_targets"],
                f"d{p['lora_dropout']}",
            ]
        if p["method"] == "qlora":
            parts.append("kbit" if p.get("kbit_prep") else "nokbit")
        if p.get("stack", "trainer") != "trainer":
            parts.append(p["stack"])
        if p["method"] == "qlora" and not p.get("double_quant", True):
            parts.append("nodq")
        if p["method"] == "qlora" and p.get("quant", "nf4") != "nf4":
            parts.append(p["quant"])
        if p.get("loss", "auto") != "auto":
            parts.append(f"loss-{p['loss']}")
        if p.get("base_dtype", "auto") != "auto":
            parts.append(f"base-{p['base_dtype']}")
        if p.get("modules_to_save"):
            parts.append("mts-" + p["modules_to_save"].replace(",", "+"))
        key = "/".join(parts)
    return f"{name}/{key}/real-stack"


# --------------------------------------------------------------------------- data
def tiny_tokenizer() -> Any:
    """A 3-token WordLevel tokenizer (pad, eos, unk): the data is pre-tokenized, the stacks only
    need a processing_class for its special tokens (nothing is downloaded)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"<pad>": 0, "<eos>": 1, "<unk>": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def token_rows(vocab: int, seq: int, n: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n, seq), generator=g).tolist()


class _Rows(torch.utils.data.Dataset):
    """input_ids + labels rows of one length: the Trainer's default_data_collator stacks them."""

    def __init__(self, rows: list[list[int]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.tensor(self.rows[i])
        return {"input_ids": ids, "labels": ids.clone()}


# --------------------------------------------------------------------------- models
def _dtype_bytes(model: torch.nn.Module) -> dict[str, dict[str, int]]:
    out: dict[str, Counter[str]] = {"trainable": Counter(), "frozen": Counter()}
    for p in model.parameters():
        k = "trainable" if p.requires_grad else "frozen"
        out[k][str(p.dtype).replace("torch.", "")] += p.numel() * p.element_size()
    return {k: dict(v) for k, v in out.items()}


def lf_gradient_checkpointing(model: torch.nn.Module) -> dict[str, Any]:
    """LLaMA-Factory ff6d4d1 src/llamafactory/model/model_utils/checkpointing.py, as it runs for
    a default config (not unsloth, not KT): `_gradient_checkpointing_enable` with
    `{"use_reentrant": model_args.use_reentrant_gc}` (True by default, model_args.py:149-151),
    `partial(torch.utils.checkpoint.checkpoint, **kwargs)` wrapped by
    `get_custom_gradient_checkpointing_func` (checkpoint only layers with trainable params; set
    requires_grad on the first floating tensor argument, the hidden states), installed with
    `_set_gradient_checkpointing(enable=True, gradient_checkpointing_func=...)` (no
    enable_input_require_grads on the new GC format), and `config.use_cache = False`."""
    from torch.utils.checkpoint import checkpoint

    kwargs = {"use_reentrant": True}
    inner = functools.partial(checkpoint, **kwargs)

    @functools.wraps(inner, assigned=(*functools.WRAPPER_ASSIGNMENTS, "__self__"))
    def custom_gradient_checkpointing_func(func: Any, *args: Any, **kw: Any) -> Any:
        # LLaMA-Factory reads `func.func.__self__` (transformers <= 5.8, its pin, passes
        # partial(super().__call__, **kwargs)); transformers 5.24's GradientCheckpointingLayer
        # passes partial(forward, self, **kwargs), where that raises AttributeError, so the
        # module is taken from the partial's first argument there (same semantics)
        inner_f = func.func if isinstance(func, functools.partial) else func
        module = getattr(inner_f, "__self__", None)
        if module is None and isinstance(func, functools.partial) and func.args:
            module = func.args[0]
        has_grad = any(p.requires_grad for p in module.parameters())
        if has_grad:
            for arg in args:
                if torch.is_tensor(arg) and torch.is_floating_point(arg):
                    arg.requires_grad_(True)
                    break
            return inner(func, *args, **kw)
        return func(*args, **kw)

    model._set_gradient_checkpointing(  # type: ignore[operator]
        enable=True, gradient_checkpointing_func=custom_gradient_checkpointing_func
    )
    model.config.use_cache = False
    return kwargs


def lf_upcast_trainable(model: torch.nn.Module) -> None:
    """LLaMA-Factory ff6d4d1 src/llamafactory/model/adapter.py: cast_trainable_params_to_fp32 is
    True unless pure_bf16 / BAdam / (ZeRO-3 without quantization) (:337-349); full tuning casts
    every trainable param (`_setup_full_tuning`, :51-52), LoRA casts the trainable params after
    get_peft_model (:310-312)."""
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.to(torch.float32)


def build_object_model(
    entry: dict[str, Any], case: RealCase, info: dict[str, Any]
) -> torch.nn.Module:
    """The model a user hands the Trainer (or SFTTrainer as an object)."""
    p = case.plan
    config = build_config(config_dict(entry))
    method = p["method"]
    if method == "qlora":
        model = _qlora_base(
            config, p["attn"], "cpu", p.get("double_quant", True), p.get("quant", "nf4")
        )
        if p.get("kbit_prep"):
            from peft import prepare_model_for_kbit_training

            model = prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=p["grad_ckpt"]
            )
            info["kbit_prep"] = (
                f"prepare_model_for_kbit_training(use_gradient_checkpointing={p['grad_ckpt']})"
            )
    else:
        if case.stack == "llama-factory":
            dtype = torch.bfloat16  # torch_dtype="auto" (loader.py:154): the checkpoint's bf16
        elif method == "full":
            dtype = torch.bfloat16 if p["precision"] == "bf16" else torch.float32
        else:
            dtype = torch.float32 if p.get("base_dtype") == "fp32" else torch.bfloat16
        model = _from_config(config, dtype, p["attn"])
        for q in model.parameters():
            q.requires_grad_(method == "full")
    info["loaded_dtype_bytes"] = _dtype_bytes(model)
    if case.stack == "llama-factory" and p["grad_ckpt"]:
        # patch_model -> prepare_model_for_training runs before init_adapter (loader.py:178-181)
        info["gc_kwargs_set_by_stack"] = lf_gradient_checkpointing(model)
    if method in ("lora", "qlora") and case.stack != "trl":
        from peft import get_peft_model

        mts = [m for m in (p.get("modules_to_save") or "").split(",") if m]
        model = get_peft_model(model, lora_config(measured_plan(**_lora_fields(p)), mts))
    if case.stack == "llama-factory":
        lf_upcast_trainable(model)
    return model


def _lora_fields(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "method": "lora",
        "lora_rank": p["lora_rank"],
        "lora_alpha": p["lora_alpha"],
        "lora_targets": p["lora_targets"],
        "lora_dropout": p["lora_dropout"],
    }


def _optim_name(plan: dict[str, Any]) -> str:
    return {
        "adamw": "adamw_torch_fused",
        "adamw-8bit": "adamw_bnb_8bit",
        "sgd": "sgd",
        "lion": "lion_32bit",
        "lion-8bit": "lion_8bit",
        "paged-adamw-32bit": "paged_adamw_32bit",
        "adamw-4bit": "adamw_torch_4bit",  # torchao's AdamW4bit (block 256)
    }[plan["optimizer"]]


# --------------------------------------------------------------------------- the measured step
class StepProbe:
    """Trainer callback + wrappers: the tracker is active over step 2 of the real loop."""

    def __init__(self, trainer: Any, detail: bool, measure_step: int = 2) -> None:
        from transformers import TrainerCallback

        self.trainer = trainer
        self.detail = detail
        self.measure_step = measure_step
        self.step = 0
        self.tr: StorageTracker | None = None
        self.active = False
        self.loss: float | None = None
        self.obs: dict[str, Any] = {}
        self._hooks: list[Any] = []
        probe = self

        class _CB(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
                probe.step += 1
                if probe.step == probe.measure_step:
                    probe.begin(kw["model"], kw["optimizer"])

            def on_pre_optimizer_step(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
                probe.switch("optimizer")

            def on_optimizer_step(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
                probe.switch("zero_grad")  # lr_scheduler.step() + model.zero_grad()

            def on_step_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
                probe.end()

        trainer.add_callback(_CB())
        self._wrap("compute_loss", "forward", trainer)
        self._wrap("_clip_grad_norm", "clip_grad", trainer)
        self._wrap("backward", "backward", trainer.accelerator)
        orig_ts = trainer.training_step

        @functools.wraps(orig_ts)
        def training_step(*a: Any, **k: Any) -> Any:
            out = orig_ts(*a, **k)
            if probe.active:
                probe.loss = float(out.detach().float())
            return out

        trainer.training_step = training_step

    def _wrap(self, name: str, phase: str, obj: Any) -> None:
        orig = getattr(obj, name)
        probe = self

        @functools.wraps(orig)
        def wrapped(*a: Any, **k: Any) -> Any:
            if probe.active and probe.tr is not None:
                with probe.tr.phase(phase):
                    return orig(*a, **k)
            return orig(*a, **k)

        setattr(obj, name, wrapped)

    def switch(self, name: str) -> None:
        tr = self.tr
        if not self.active or tr is None:
            return
        tr.phase_end_bytes[tr.current_phase] = tr.live_bytes
        tr.current_phase = name
        tr.phase_peaks[name] = max(tr.phase_peaks[name], tr.live_bytes)

    def begin(self, model: torch.nn.Module, optimizer: Any) -> None:
        gc.collect()
        opt = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
        self.obs["optimizer_class"] = f"{type(opt).__module__}.{type(opt).__name__}"
        self.obs["optimizer_state_bytes"] = sum(
            v.numel() * v.element_size()
            for s in opt.state.values()
            for v in s.values()
            if isinstance(v, torch.Tensor)
        )
        self.obs["param_dtype_bytes"] = _dtype_bytes(model)
        self._observe_model(model)
        tr = StorageTracker(detail=self.detail)
        extra = [getattr(p, "SCB", None) for p in model.parameters()]  # LLM.int8 row scales
        tr.register([t for t in extra if isinstance(t, torch.Tensor)], "parameters")
        tr.register_model_and_optimizer(model, opt)
        tr.current_phase = "step"
        self.tr = tr
        self.active = True
        tr.__enter__()

    def end(self) -> None:
        if not self.active or self.tr is None:
            return
        self.switch("end")
        self.tr.__exit__(None, None, None)
        self.active = False
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    def abort(self) -> None:
        if self.active and self.tr is not None:
            self.tr.__exit__(None, None, None)
            self.active = False

    def _observe_model(self, model: torch.nn.Module) -> None:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        layers = getattr(getattr(base, "model", base), "layers", None)
        layer0 = layers[0] if layers is not None else None
        obs = self.obs
        if layer0 is not None:
            obs["gradient_checkpointing"] = bool(getattr(layer0, "gradient_checkpointing", False))
            f = getattr(layer0, "_gradient_checkpointing_func", None)
            kw = None
            while f is not None and kw is None:
                kw = getattr(f, "keywords", None)
                f = getattr(f, "__wrapped__", None)
            if obs["gradient_checkpointing"]:
                obs["gradient_checkpointing_kwargs"] = dict(kw) if kw is not None else None

            def pre(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                hs = args[0] if args else kwargs.get("hidden_states")
                obs["autocast_in_forward"] = torch.is_autocast_enabled("cpu")
                if isinstance(hs, torch.Tensor):
                    obs["hidden_states_dtype"] = str(hs.dtype).replace("torch.", "")

            self._hooks.append(layer0.register_forward_pre_hook(pre, with_kwargs=True))
        head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
        obs["lm_head_module_called"] = False
        if head is not None:
            obs["lm_head_class"] = type(head).__name__

            def post(_m: Any, _a: Any, out: Any) -> None:
                obs["lm_head_module_called"] = True
                if isinstance(out, torch.Tensor):
                    obs["logits_dtype"] = str(out.dtype).replace("torch.", "")

            self._hooks.append(head.register_forward_hook(post))
        obs["tied_embeddings_shared"] = bool(
            head is not None
            and hasattr(base, "get_input_embeddings")
            and getattr(head, "weight", None) is not None
            and head.weight is base.get_input_embeddings().weight
        )


def _common_args(case: RealCase, out_dir: str) -> dict[str, Any]:
    p = case.plan
    return {
        "output_dir": out_dir,
        "per_device_train_batch_size": p["batch"],
        "max_steps": 2,
        "report_to": "none",
        "save_strategy": "no",
        "eval_strategy": "no",
        "logging_strategy": "no",
        "disable_tqdm": True,
        "use_cpu": True,
        "dataloader_num_workers": 0,
        "seed": 0,
        "optim": _optim_name(p),
        **case.extra_args,
    }


def make_trainer(entry: dict[str, Any], case: RealCase, tmp: str, info: dict[str, Any]) -> Any:
    p = case.plan
    vocab = int(entry["vocab_size"])
    rows = token_rows(vocab, p["seq_len"], 2 * p["batch"])
    if case.stack == "trl":
        return make_sft_trainer(entry, case, tmp, rows, info)
    from transformers import Trainer, TrainingArguments

    model = build_object_model(entry, case, info)
    kw = _common_args(case, os.path.join(tmp, "out"))
    # LLaMA-Factory enables checkpointing itself (prepare_model_for_training); its
    # TrainingArguments keep gradient_checkpointing False
    kw["activation_checkpointing"] = bool(p["grad_ckpt"]) and case.stack == "trainer"
    kw["bf16"] = p["precision"] == "bf16-mixed"
    args = TrainingArguments(**kw)
    info["training_args"] = {
        "bf16": args.bf16,
        "activation_checkpointing": args.activation_checkpointing,
        "activation_checkpointing_kwargs": args.activation_checkpointing_kwargs,
        "optim": str(args.optim),
        "max_grad_norm": args.max_grad_norm,
        "learning_rate": args.learning_rate,
        "weight_decay": args.weight_decay,
    }
    return Trainer(model=model, args=args, train_dataset=_Rows(rows))


def make_sft_trainer(
    entry: dict[str, Any], case: RealCase, tmp: str, rows: list[list[int]], info: dict[str, Any]
) -> Any:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    p = case.plan
    config = build_config(config_dict(entry))
    model: Any
    mik: dict[str, Any] = {"attn_implementation": p["attn"]}
    if case.trl_dtype is not None:
        mik["dtype"] = case.trl_dtype
    if case.source == "path":
        d = os.path.join(tmp, "model")
        _from_config(config, torch.bfloat16, p["attn"]).save_pretrained(d)
        model = d
    else:
        model = build_object_model(entry, dataclasses.replace(case, stack="trl"), info)
        mik = {}
    kw = _common_args(case, os.path.join(tmp, "out"))
    kw["gradient_checkpointing"] = bool(p["grad_ckpt"])  # TRL's default True; its own spelling
    if mik:
        kw["model_init_kwargs"] = mik
    args = SFTConfig(**kw)
    peft_config = None
    if p["method"] in ("lora", "qlora"):
        mts = [m for m in (p.get("modules_to_save") or "").split(",") if m]
        peft_config = lora_config(measured_plan(**_lora_fields(p)), mts)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict({"input_ids": rows}),
        processing_class=tiny_tokenizer(),
        peft_config=peft_config,
    )
    info["training_args"] = {
        "bf16": args.bf16,
        "gradient_checkpointing": args.gradient_checkpointing,
        "gradient_checkpointing_kwargs": args.gradient_checkpointing_kwargs,
        "activation_checkpointing_kwargs": getattr(args, "activation_checkpointing_kwargs", None),
        "loss_type": args.loss_type,
        "max_length": args.max_length,
        "packing": args.packing,
        "padding_free": args.padding_free,
        "use_liger_kernel": args.use_liger_kernel,
        "activation_offloading": args.activation_offloading,
        "model_init_kwargs": args.model_init_kwargs,
        "optim": str(args.optim),
        "max_grad_norm": args.max_grad_norm,
        "learning_rate": args.learning_rate,
    }
    info["loaded_dtype_bytes"] = info.get("loaded_dtype_bytes") or _dtype_bytes(trainer.model)
    return trainer


def run_case(entry: dict[str, Any], case: RealCase, top: int = 15) -> dict[str, Any]:
    _, plan_dict, missing = project_plan(case.plan)
    plan_dict["model"] = entry["name"]
    rec: dict[str, Any] = {
        "id": record_id(entry["name"], case.plan),
        "model": harness.model_record(entry),
        "plan": plan_dict,
        "stack_run": {
            "stack": case.stack,
            "source": case.source,
            "trl_dtype": case.trl_dtype,
            "note": case.note,
        },
    }
    if missing:
        rec["plan_fields_not_in_installed_plan"] = missing
    t0 = time.perf_counter()
    torch.manual_seed(0)
    tmp = tempfile.mkdtemp(prefix="real-stack-")
    probe: StepProbe | None = None
    info: dict[str, Any] = {}
    try:
        trainer = make_trainer(entry, case, tmp, info)
        probe = StepProbe(trainer, detail=top > 0)
        trainer.train()
        if probe.tr is None or probe.active:
            raise RuntimeError("the measured step did not complete")
        tr = probe.tr
        s = tr.summary()
        model = trainer.model
        pbytes, trainable, total = count_params(model)
        adapter = [
            str(q.dtype).replace("torch.", "") for n, q in model.named_parameters() if "lora_" in n
        ]
        acc = trainer.accelerator
        stack_obs = {
            **probe.obs,
            "accelerate_mixed_precision": str(acc.mixed_precision),
            "native_amp": bool(getattr(acc, "native_amp", False)),
            "forward_wrapped_by_accelerate": hasattr(
                acc.unwrap_model(trainer.model_wrapped), "_original_forward"
            ),
            **info,
        }
        if case.stack == "trl":
            stack_obs["loss_path"] = (
                "full logits (lm_head module called)"
                if probe.obs.get("lm_head_module_called")
                else "TRL fused lm head (trl/trainer/utils.py _fused_forward, "
                "ChunkedLogProbFunction; "
                "lm_head module never called)"
            )
        else:
            stack_obs["loss_path"] = "model(labels=...) ForCausalLMLoss on full logits"
        rec["measured"] = {
            "peak_allocated_bytes": s["peak_bytes"],
            "peak_phase": s["peak_phase"],
            "by_category_at_peak": s["by_category_at_peak"],
            "params_bytes": pbytes,
            "trainable_params": trainable,
            "total_params": total,
            "adapter_dtype": adapter[0] if adapter else None,
            "execution": "real",
            "peak_op": s["peak_op"],
            "start_bytes": s["start_bytes"],
            "end_bytes": s["end_bytes"],
            "phase_peaks": s["phase_peaks"],
            "phase_end_bytes": s["phase_end_bytes"],
            "unregistered_input_bytes": s["unregistered_input_bytes"],
            "ops": s["ops"],
            "loss": probe.loss,
            "stack": stack_obs,
        }
        if top:
            rec["measured"]["top_at_peak"] = tr.top_at_peak(top)
        del trainer, model, tr
    except Exception as e:  # record honestly and move on
        if probe is not None:
            probe.abort()
        rec["error"] = f"{type(e).__name__}: {e}"[:2000]
        rec["traceback_tail"] = traceback.format_exc()[-2500:]
        if info:
            rec["stack_info_before_error"] = json.loads(json.dumps(info, default=str))
    shutil.rmtree(tmp, ignore_errors=True)
    gc.collect()
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return json.loads(json.dumps(rec, default=str))


# --------------------------------------------------------------------------- emulation check
def emulable(case: RealCase) -> bool:
    """Whether harness.py's emulated step can run this plan (Trainer stack, no modules_to_save,
    AdamW, nf4 quant)."""
    p = case.plan
    return (
        case.stack == "trainer"
        and p["method"] != "qlora"  # the harness runs QLoRA only for real (from_pretrained)
        and not p.get("modules_to_save")
        and p["optimizer"] in ("adamw", "adamw-foreach", "sgd")
        and p.get("quant", "nf4") == "nf4"
    )


def emulated_record(
    entry: dict[str, Any], case: RealCase, execution: str, top: int = 0
) -> dict[str, Any]:
    """harness.run_case for the same plan (the harness's own step, not the stack's code)."""
    plan, _, _ = project_plan(case.plan)
    if plan is None:
        raise ValueError("the installed Plan cannot express this case")
    return harness.run_case(entry, plan, execution, top=top)


def emulated_case_record(entry: dict[str, Any], case: RealCase, top: int) -> dict[str, Any]:
    """A record for a case run through harness.py's emulated Trainer step under FakeTensorMode."""
    t0 = time.perf_counter()
    em = emulated_record(entry, case, "fake", top=top)
    _, plan_dict, _ = project_plan(case.plan)
    plan_dict["model"] = entry["name"]
    rec = {
        "id": record_id(entry["name"], case.plan).rsplit("/", 1)[0] + "/emulated-fake",
        "model": em["model"],
        "plan": plan_dict,
        "stack_run": {
            "stack": case.stack,
            "source": case.source,
            "note": "harness.py's emulated Trainer step (train_step) under FakeTensorMode: a real "
            "step of this size is too slow on this CPU; " + case.note,
        },
    }
    for k in ("measured", "error", "traceback_tail"):
        if k in em:
            rec[k] = em[k]
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def emulated_check(entry: dict[str, Any], case: RealCase, real: dict[str, Any]) -> dict[str, Any]:
    """The harness's emulated step (fake) beside the real stack's step, same plan."""
    em = emulated_record(entry, case, "fake")
    row: dict[str, Any] = {"id": real["id"]}
    if "measured" not in em or "measured" not in real:
        row["error"] = em.get("error") or real.get("error")
        return row
    a, b = real["measured"], em["measured"]
    row.update(
        real_peak=a["peak_allocated_bytes"],
        emulated_fake_peak=b["peak_allocated_bytes"],
        diff_bytes=b["peak_allocated_bytes"] - a["peak_allocated_bytes"],
        rel_diff=(b["peak_allocated_bytes"] - a["peak_allocated_bytes"])
        / a["peak_allocated_bytes"],
        phase_real=a["peak_phase"],
        phase_emulated=b["peak_phase"],
        op_real=a["peak_op"],
        op_emulated=b["peak_op"],
        categories_real=a["by_category_at_peak"],
        categories_emulated=b["by_category_at_peak"],
        emulated_seconds=em["seconds"],
    )
    return row


# --------------------------------------------------------------------------- output
def versions() -> dict[str, Any]:
    out = harness.versions()
    for mod in ("trl", "datasets", "tokenizers"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:
            out[mod] = f"unavailable ({type(e).__name__})"
    return out


NOTES = {
    "step": (
        "trainer.train(max_steps=2); the tracker is active over step 2 of the real "
        "Trainer._inner_training_loop (training_step, _clip_grad_norm with max_grad_norm 1.0, "
        "optimizer.step, lr_scheduler.step, model.zero_grad); step 1 created the optimizer "
        "(Trainer.create_optimizer) and its states"
    ),
    "phases": (
        "step = training_step outside compute_loss / backward; forward = trainer.compute_loss "
        "(model forward + loss, and TRL's metrics); backward = accelerator.backward; clip_grad; "
        "optimizer = optimizer.step; zero_grad = lr_scheduler.step + model.zero_grad"
    ),
    "data": "random token rows batch x seq_len, all tokens labelled, no padding (TRL's "
    "collator adds an all-ones attention_mask)",
    "plan": (
        "the project's plan field names; loss = the loss the run really used (chunked = TRL's "
        "fused lm head, standard = transformers' ForCausalLMLoss); base_dtype = LoRA's frozen "
        "base as loaded; precision bf16-mixed = autocast on"
    ),
    "llama-factory": (
        "LLaMA-Factory is not installed: its model preparation is reproduced from source "
        "(ff6d4d1 model/model_utils/checkpointing.py _gradient_checkpointing_enable + "
        "get_custom_gradient_checkpointing_func with use_reentrant=True; model/adapter.py fp32 "
        "upcast of trainable params), then the real transformers Trainer (bf16=True) runs"
    ),
    "measured.stack": "what the stack really did, observed on the measured step (dtypes, "
    "autocast, GC kwargs, loss path)",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--out", default=str(REPO / "bench" / "results" / "measure-cpu-real-stacks.json")
    )
    ap.add_argument("--only", default=None, help="run only cases whose id contains this substring")
    ap.add_argument("--skip", default=None, help="leave out cases whose id contains this substring")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument(
        "--top", type=int, default=15, help="largest live groups kept at the peak (0: none)"
    )
    ap.add_argument(
        "--append", action="store_true", help="keep the records already in --out (other ids)"
    )
    ap.add_argument(
        "--checks-only",
        action="store_true",
        help="keep --out's records; only (re)run the emulated-vs-real checks for them",
    )
    ap.add_argument(
        "--no-emulated",
        action="store_true",
        help="skip the check that runs harness.py's emulated step (fake) beside each Trainer case",
    )
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except Exception:
        pass
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    models = load_models()
    todo = [
        c
        for c in cases()
        if (not args.only or args.only in record_id(c.model, c.plan))
        and (not args.skip or args.skip not in record_id(c.model, c.plan))
    ]
    records: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    if args.append and out.exists():
        old_doc = json.loads(out.read_text())
        ids = {record_id(c.model, c.plan) for c in todo}
        keep = lambda r: r["id"] not in ids and r["id"].rsplit("/", 1)[0] + "/real-stack" not in ids  # noqa: E731
        records = [r for r in old_doc["records"] if keep(r)]
        checks = [r for r in old_doc.get("checks", {}).get("emulated_vs_real", []) if keep(r)]
    cmd = ".measure-venv/bin/python bench/measure/real_stacks.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    t_all = time.perf_counter()

    def write(complete: bool) -> None:
        doc = {
            "machine": machine("cpu"),
            "versions": versions(),
            "command": cmd,
            "complete": complete,
            "models_json": str(harness.MODELS_JSON),
            "notes": NOTES,
            "total_seconds": round(time.perf_counter() - t_all, 1),
            "checks": {"emulated_vs_real": checks},
            "records": records,
        }
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(out)

    if args.checks_only:
        doc0 = json.loads(out.read_text())
        records = doc0["records"]
        checks = doc0.get("checks", {}).get("emulated_vs_real", [])
        cmd = doc0.get("command", cmd)
        by_id = {r["id"]: r for r in records}
        for case in todo:
            rec = by_id.get(record_id(case.model, case.plan))
            if rec is None or "measured" not in rec or not emulable(case):
                continue
            row = emulated_check(models[case.model], case, rec)
            checks = [c for c in checks if c["id"] != row["id"]] + [row]
            print(
                f"emulated (harness, fake) vs real: {row.get('diff_bytes')} B  {rec['id']}",
                flush=True,
            )
            write(False)
        write(True)
        return 0
    for case in todo:
        entry = models[case.model]
        if case.execution == "emulated-fake":
            rec = emulated_case_record(entry, case, top=args.top)
        else:
            rec = run_case(entry, case, top=args.top)
        records = [r for r in records if r["id"] != rec["id"]] + [rec]
        if (
            case.execution == "real"
            and not args.no_emulated
            and emulable(case)
            and "measured" in rec
        ):
            row = emulated_check(entry, case, rec)
            checks = [c for c in checks if c["id"] != row["id"]] + [row]
            print(
                f"          emulated (harness, fake) vs real: {row.get('diff_bytes')} B", flush=True
            )
        m = rec.get("measured")
        msg = (
            f"{m['peak_allocated_bytes'] / 1e6:9.1f} MB  {m['peak_phase']:9s} "
            f"{m['peak_op'][:40]:40s}"
            if m
            else f"ERROR {rec['error'][:100]}"
        )
        print(
            f"[{time.perf_counter() - t_all:7.1f}s] {rec['seconds']:7.1f}s  {msg}  {rec['id']}",
            flush=True,
        )
        write(False)
    write(True)
    print(f"wrote {out}: {len(records)} records, {sum('error' in r for r in records)} errors")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
