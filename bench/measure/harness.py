"""Measure the memory of one training step of real causal-LM architectures.

    python bench/measure/harness.py --subset quick --out bench/results/measure-cpu.json
    python bench/measure/harness.py --subset full  --out bench/results/measure-cpu.json
    python bench/measure/harness.py --device cuda --subset gpu --out bench/results/measure-cuda.json

Models are built from the config dicts in /work/shared/reference/models.json
(random weights, nothing is downloaded).  One warm-up step, then one measured
step exactly as the Hugging Face Trainer runs it:

    model.train()
    loss = model(input_ids=ids, labels=ids).loss     # output object dropped
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

Memory is the peak of live tensor storages (bench/measure/tracker.py), with a
category per storage and the phase at the peak.  Small models run for real; the
rest run under FakeTensorMode (shapes only), after the harness has shown on
small models that fake and real execution give the same tracked peak (the
``checks.fake_vs_real`` block of the output).  See README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # bench/: machine.py
from machine import cpu_name
from tracker import StorageTracker

from trainmem.core.plan import Plan as TrainmemPlan

REPO = Path(__file__).resolve().parents[2]
MODELS_JSON = Path(os.environ.get("TRAINMEM_MODELS_JSON", "/work/shared/reference/models.json"))
if not MODELS_JSON.exists():
    MODELS_JSON = REPO / "shared" / "reference" / "models.json"

warnings.filterwarnings("ignore")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

LORA_ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
LOW_PRECISION = {"bf16": torch.bfloat16, "fp32": torch.float32, "bf16-mixed": torch.float32}


def measured_plan(
    method: str = "full",
    precision: str = "bf16",
    optimizer: str = "adamw",
    seq_len: int = 512,
    batch: int = 1,
    grad_ckpt: bool = False,
    **fields: Any,
) -> TrainmemPlan:
    """A measured configuration, as the project's own plan (trainmem.core.plan declares every
    field once; the harness only picks its own defaults: full fine-tuning, 512 x 1)."""
    return TrainmemPlan(
        method=method,
        precision=precision,
        optimizer=optimizer,
        seq_len=seq_len,
        batch=batch,
        grad_ckpt=grad_ckpt,
        **fields,
    ).validated()


def case_key(plan: TrainmemPlan) -> str:
    """The part of a record's id that names the plan (stable across releases)."""
    parts = [
        plan.method,
        plan.precision,
        plan.optimizer,
        f"s{plan.seq_len}",
        f"b{plan.batch}",
        "gc" if plan.grad_ckpt else "nogc",
        plan.attn,
    ]
    if plan.trains_adapter:
        parts += [
            f"r{plan.lora_rank}",
            f"a{plan.lora_alpha:g}",
            plan.lora_targets,
            f"d{plan.lora_dropout}",
        ]
    if plan.training.kbit_prep:
        parts.append("kbit" if plan.kbit_prep else "nokbit")
    if plan.stack != "trainer":  # ids of earlier records (all Trainer-style) stay as they were
        parts.append(plan.stack)
    if plan.training.quantized_base and not plan.double_quant:
        parts.append("nodq")
    # fields of issue 14, named only when not their default (ids of earlier records unchanged)
    if plan.training.quantized_base and getattr(plan, "quant", "nf4") != "nf4":
        parts.append(plan.quant)
    if getattr(plan, "loss", "auto") != "auto":
        parts.append(f"loss-{plan.loss}")
    if getattr(plan, "base_dtype", "auto") != "auto":
        parts.append(f"base-{plan.base_dtype}")
    if getattr(plan, "modules_to_save", ""):
        parts.append("mts-" + plan.modules_to_save.replace(",", "+"))
    if getattr(plan, "ckpt_offload", False):
        parts.append("offload")
    if getattr(plan, "packing", False):
        parts.append("packing")
    return "/".join(parts)


def lora(
    precision: str = "bf16",
    rank: int = 16,
    targets: str = "all-linear",
    dropout: float = 0.0,
    **kw: Any,
) -> TrainmemPlan:
    return measured_plan(
        method="lora",
        precision=precision,
        lora_rank=rank,
        lora_alpha=2 * rank,
        lora_targets=targets,
        lora_dropout=dropout,
        **kw,
    )


def qlora(kbit_prep: bool, rank: int = 16, targets: str = "all-linear", **kw: Any) -> TrainmemPlan:
    return measured_plan(
        method="qlora",
        precision="bf16",
        lora_rank=rank,
        lora_alpha=2 * rank,
        lora_targets=targets,
        lora_dropout=0.0,
        kbit_prep=kbit_prep,
        **kw,
    )


# --------------------------------------------------------------------------- models
def load_models() -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in json.loads(MODELS_JSON.read_text())}


def model_record(entry: dict[str, Any]) -> dict[str, Any]:
    """A record's "model": the reference entry's name and id, and the config it was built from."""
    return {"name": entry["name"], "hf_id": entry.get("hf_id"), "config": config_dict(entry)}


def config_dict(entry: dict[str, Any]) -> dict[str, Any]:
    """The exact kwargs handed to AutoConfig.for_model (model_type first)."""
    arch = entry["architecture"]
    if "text_config:" in arch:  # "gemma3 (text_config: gemma3_text)": build the text model
        arch = arch.split("text_config:")[1].strip(" )")
    cfg: dict[str, Any] = {"model_type": arch}
    for k in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "vocab_size",
        "tie_word_embeddings",
        "max_position_embeddings",
        "head_dim",
    ):
        if entry.get(k) is not None:
            cfg[k] = entry[k]
    for k, v in (entry.get("config_extra") or {}).items():
        if v is not None:
            cfg[k] = v
    return cfg


def build_config(cfg: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    kw = dict(cfg)
    return AutoConfig.for_model(kw.pop("model_type"), **kw)


def _from_config(config: Any, dtype: torch.dtype, attn: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(config, attn_implementation=attn, dtype=dtype)


def bnb_config(quant: str = "nf4", double_quant: bool = True) -> Any:
    """BitsAndBytesConfig for a quantized frozen base: nf4 / fp4 (4-bit, bf16 compute) or
    int8 (LLM.int8, load_in_8bit)."""
    from transformers import BitsAndBytesConfig

    if quant == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=quant,
        bnb_4bit_use_double_quant=double_quant,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )


def _qlora_base(
    config: Any, attn: str, device: str, double_quant: bool = True, quant: str = "nf4"
) -> torch.nn.Module:
    """QLoRA needs from_pretrained (quantisation happens at load): save random bf16
    weights to a temp dir and load them back through BitsAndBytesConfig."""
    from transformers import AutoModelForCausalLM

    d = tempfile.mkdtemp(prefix="measure-qlora-")
    try:
        _from_config(config, torch.bfloat16, attn).save_pretrained(d)
        bnb = bnb_config(quant, double_quant)
        return AutoModelForCausalLM.from_pretrained(
            d,
            quantization_config=bnb,
            dtype=torch.bfloat16,
            attn_implementation=attn,
            device_map=device,
        )
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _enable_gc(model: torch.nn.Module) -> None:
    """What Trainer does for activation_checkpointing=True with default kwargs: it calls
    model.activation_checkpointing_enable(activation_checkpointing_kwargs=None, ...)
    (older transformers: gradient_checkpointing_enable(gradient_checkpointing_kwargs=None)),
    whose default is {"use_reentrant": False}.  It also calls enable_input_require_grads()."""
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable()
    else:
        model.gradient_checkpointing_enable()


def lora_config(plan: TrainmemPlan, modules_to_save: list[str] | None = None) -> Any:
    """The PEFT LoraConfig of a plan (all-linear, or q/k/v/o_proj for "attention")."""
    from peft import LoraConfig

    targets: Any = "all-linear" if plan.lora_targets == "all-linear" else LORA_ATTENTION
    return LoraConfig(
        r=plan.lora_rank,
        lora_alpha=plan.lora_alpha,
        lora_dropout=plan.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
        modules_to_save=modules_to_save or None,
    )


def build(
    entry: dict[str, Any], plan: TrainmemPlan, device: str, fake: bool = False
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Model ready for training per the plan (``fake``: under the caller's FakeTensorMode);
    returns (model, info)."""
    config = build_config(config_dict(entry))
    info: dict[str, Any] = {}
    if plan.method == "qlora":
        from peft import prepare_model_for_kbit_training

        if fake:  # from_pretrained's 4-bit load on shapes only (trainmem.probe.fake4bit)
            import transformers

            from trainmem.probe import fake4bit

            model = _from_config(config, torch.bfloat16, plan.attn)
            fake4bit.load_4bit(torch, transformers, model, plan.quant, plan.double_quant)
        else:
            model = _qlora_base(config, plan.attn, device, plan.double_quant)
        if plan.kbit_prep:
            # casts every non-4bit parameter (embeddings, norms, lm_head) to fp32 and,
            # with use_gradient_checkpointing, enables GC (use_reentrant=True unless told otherwise)
            model = prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=plan.grad_ckpt
            )
    else:
        dtype = (
            torch.bfloat16 if (plan.method == "lora" or plan.precision == "bf16") else torch.float32
        )
        model = _from_config(config, dtype, plan.attn)
        if torch.device(device).type != "cpu":
            model = model.to(device)
        if plan.method == "full":
            for p in model.parameters():
                p.requires_grad_(True)
        else:
            for p in model.parameters():
                p.requires_grad_(False)
    if plan.method in ("lora", "qlora"):
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(plan))
        info["adapter_dtype"] = next(
            str(p.dtype).replace("torch.", "") for n, p in model.named_parameters() if "lora_" in n
        )
        # distinct suffixes of what PEFT wrapped: modules (q_proj, ..., down_proj) and, for MoE
        # models with fused 3-D expert weights, parameters (peft 0.21+ turns "all-linear" on
        # mixtral / qwen*_moe into target_parameters: "experts.gate_up_proj",
        # "experts.down_proj", "gate.weight")
        info["lora_targeted"] = sorted(
            {n.rsplit(".", 1)[-1] for n in getattr(model, "targeted_module_names", [])}
            | {".".join(n.split(".")[-2:]) for n in getattr(model, "targeted_parameter_names", [])}
        )
        pc = model.peft_config.get("default") if hasattr(model, "peft_config") else None
        if pc is not None and getattr(pc, "rank_pattern", None):
            info["lora_rank_pattern"] = dict(pc.rank_pattern)  # e.g. fused gate_up_proj gets 2r
    experts = [type(m).__name__ for m in model.modules() if type(m).__name__.endswith("Experts")]
    # MoE: which experts forward transformers dispatches to (eager loop / grouped_mm / ...)
    if experts:
        info["experts_implementation"] = getattr(config, "_experts_implementation", None)
        info["experts_class"] = experts[0]
    # Trainer order: PEFT wrapping happens before Trainer, which then enables checkpointing
    if plan.grad_ckpt and not (plan.method == "qlora" and plan.kbit_prep):
        _enable_gc(model)
    if plan.grad_ckpt and plan.method == "qlora" and plan.kbit_prep:
        info["gc_via"] = "prepare_model_for_kbit_training"
    return model, info


@contextlib.contextmanager
def fake_mode(plan: TrainmemPlan) -> Any:
    """FakeTensorMode for a fake run; for QLoRA with bitsandbytes' nested-quantization code as
    a fake tensor and its 4-bit matmul allocating as on the CPU (trainmem.probe.fake4bit)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with contextlib.ExitStack() as stack:
        stack.enter_context(FakeTensorMode())
        if plan.method == "qlora":
            from trainmem.probe import fake4bit

            stack.enter_context(fake4bit.fake_dynamic_map(torch))
            stack.enter_context(fake4bit.matmul(torch, "cpu"))
        yield


@contextlib.contextmanager
def _fake_safe_module_apply() -> Any:
    """Under FakeTensorMode, nn.Module._apply (``.to(...)``) insists on swap_tensors for fake
    parameters, which fails ("has weakref associated with it") - PEFT moves/casts each new
    adapter that way.  While building a fake model, replace the Parameter object instead
    (identity of these brand-new adapter weights does not matter; the optimizer is made later)."""
    orig = torch.nn.Module._apply

    def _apply(self: torch.nn.Module, fn: Any, recurse: bool = True) -> torch.nn.Module:
        if recurse:
            for m in self.children():
                m._apply(fn)
        for k, p in list(self._parameters.items()):
            if p is None:
                continue
            with torch.no_grad():
                new = fn(p)
            if new is not p:
                self._parameters[k] = torch.nn.Parameter(new, requires_grad=p.requires_grad)
        for k, b in list(self._buffers.items()):
            if b is not None:
                self._buffers[k] = fn(b)
        return self

    torch.nn.Module._apply = _apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module._apply = orig  # type: ignore[method-assign]


def make_optimizer(model: torch.nn.Module, plan: TrainmemPlan) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if plan.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0, fused=True)
    if plan.optimizer == "adamw-foreach":
        return torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0, fused=False, foreach=True)
    if plan.optimizer == "sgd":  # Trainer optim="sgd": torch.optim.SGD(lr) - no momentum, no state
        return torch.optim.SGD(params, lr=1e-5)
    raise ValueError(plan.optimizer)


def forward_loss(
    model: torch.nn.Module, ids: torch.Tensor, plan: TrainmemPlan, device_type: str
) -> torch.Tensor:
    """Trainer.compute_loss: outputs = model(**inputs); return outputs["loss"] - the output
    object (logits) dies here.  bf16-mixed emulates accelerate's prepare_model: forward wrapped
    in torch.autocast(bf16), then convert_outputs_to_fp32 (an fp32 copy of the bf16 logits)."""
    if plan.precision == "bf16-mixed":
        with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        try:
            from accelerate.utils import convert_to_fp32
        except ImportError:  # pragma: no cover

            def convert_to_fp32(o: Any) -> Any:
                for k, v in o.items():
                    if isinstance(v, torch.Tensor) and v.dtype in (torch.float16, torch.bfloat16):
                        o[k] = v.float()
                return o

        out = convert_to_fp32(out)
    else:
        out = model(input_ids=ids, labels=ids)
    return out["loss"]


def train_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    ids: torch.Tensor,
    plan: TrainmemPlan,
    device_type: str,
    tr: StorageTracker | None = None,
) -> torch.Tensor:
    ph = tr.phase if tr is not None else (lambda _n: contextlib.nullcontext())
    model.train()
    out = None
    with ph("forward"):
        if plan.stack == "loop":
            # A hand-written loop: out = model(**batch); out.loss.backward(); opt.step().
            # `out` (logits, and the KV cache without checkpointing) lives until the next
            # forward replaces it; under bf16-mixed the user wraps the forward in autocast.
            mixed = plan.precision == "bf16-mixed"
            with torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=mixed):
                out = model(input_ids=ids, labels=ids)
            loss = out.loss
        else:
            loss = forward_loss(model, ids, plan, device_type)
    with ph("backward"):
        loss.backward()
    with ph("optimizer"):
        opt.step()
    with ph("zero_grad"):
        opt.zero_grad(set_to_none=True)
    del out
    return loss.detach()


def count_params(model: torch.nn.Module) -> tuple[int, int, int]:
    """(params_bytes, trainable_params, total_params); 4-bit weights count by logical size."""
    nbytes = trainable = total = 0
    for p in model.parameters():
        nbytes += p.numel() * p.element_size()
        qs = getattr(p, "quant_state", None)
        n = (
            int(torch.Size(qs.shape).numel())
            if qs is not None and getattr(qs, "shape", None) is not None
            else p.numel()
        )
        total += n
        if p.requires_grad:
            trainable += n
    return nbytes, trainable, total


# --------------------------------------------------------------------------- one case
def run_case(
    entry: dict[str, Any],
    plan: TrainmemPlan,
    execution: str = "real",
    device: str = "cpu",
    detail: bool = False,
    top: int = 0,
    snapshots: Path | None = None,
) -> dict[str, Any]:
    """One case; on CUDA with ``snapshots`` a memory snapshot of it (from before the model is
    built to after the measured step) is written there for `trainmem-tui replay`."""
    rec: dict[str, Any] = {
        "id": f"{entry['name']}/{case_key(plan)}/{execution}",
        "model": model_record(entry),
        "plan": dataclasses.replace(plan, model=entry["name"]).to_dict(),
    }
    t0 = time.perf_counter()
    torch.manual_seed(0)
    fake_ctx: Any = contextlib.nullcontext()
    if execution == "fake":
        fake_ctx = fake_mode(plan)
    history = snapshots is not None and torch.device(device).type == "cuda"
    if history:  # every allocation and free, with the segments, as memory_viz reads them
        torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    try:
        with fake_ctx:
            with _fake_safe_module_apply() if execution == "fake" else contextlib.nullcontext():
                model, info = build(entry, plan, device, fake=execution == "fake")
            opt = make_optimizer(model, plan)
            vocab = int(entry["vocab_size"])
            ids = torch.randint(0, vocab, (plan.batch, plan.seq_len), device=device)
            device_type = torch.device(device).type
            train_step(
                model, opt, ids, plan, device_type
            )  # warm-up: optimizer states exist afterwards
            gc.collect()
            cuda_stats = None
            if device_type == "cuda":
                from cuda_stats import CudaPeak

                cuda_stats = CudaPeak()
            tr = StorageTracker(detail=detail or top > 0)
            tr.register_model_and_optimizer(model, opt, extra=[ids])
            with contextlib.ExitStack() as stack:
                if cuda_stats is not None:
                    stack.enter_context(cuda_stats)
                with tr:
                    loss = train_step(model, opt, ids, plan, device_type, tr)
            s = tr.summary()
            pbytes, trainable, total = count_params(model)
            meas: dict[str, Any] = {
                "peak_allocated_bytes": s["peak_bytes"],
                "peak_phase": s["peak_phase"],
                "by_category_at_peak": s["by_category_at_peak"],
                "params_bytes": pbytes,
                "trainable_params": trainable,
                "total_params": total,
                "adapter_dtype": info.get("adapter_dtype"),
                "execution": execution,
                "peak_op": s["peak_op"],
                "start_bytes": s["start_bytes"],
                "phase_peaks": s["phase_peaks"],
                "phase_end_bytes": s["phase_end_bytes"],
                "unregistered_input_bytes": s["unregistered_input_bytes"],
                "ops": s["ops"],
            }
            if execution == "real":
                meas["loss"] = float(loss)
            if info.get("gc_via"):
                meas["gc_via"] = info["gc_via"]
            for k in (
                "lora_targeted",
                "lora_rank_pattern",
                "experts_implementation",
                "experts_class",
            ):
                if k in info:
                    meas[k] = info[k]
            if top:
                meas["top_at_peak"] = tr.top_at_peak(top)
            if cuda_stats is not None:
                meas["cuda"] = cuda_stats.result()
            if history:
                assert snapshots is not None
                snapshots.mkdir(parents=True, exist_ok=True)
                path = snapshots / (rec["id"].replace("/", "_") + ".pickle")
                torch.cuda.memory._dump_snapshot(str(path))
                rec["snapshot"] = str(path)
            rec["measured"] = meas
            del model, opt, ids, loss, tr
    except Exception as e:  # record honestly and move on
        rec["error"] = f"{type(e).__name__}: {e}"[:2000]
        rec["traceback_tail"] = traceback.format_exc()[-1500:]
    finally:
        if history:
            torch.cuda.memory._record_memory_history(enabled=None)
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


# --------------------------------------------------------------------------- subsets
# (model name, plan, execution, detail-top-N)
Case = tuple[str, TrainmemPlan, str, int]


def _full_recipes(
    seq: int, batch: int, gcs: tuple[bool, ...] = (False, True)
) -> list[TrainmemPlan]:
    out = []
    for g in gcs:
        for prec in ("fp32", "bf16", "bf16-mixed"):
            out.append(measured_plan("full", prec, "adamw", seq, batch, g))
        out.append(lora("bf16", 16, "all-linear", seq_len=seq, batch=batch, grad_ckpt=g))
    return out


def fake_vs_real_cases(quick: bool) -> list[Case]:
    """Small enough to run for real on 2 CPU cores; each runs twice (real and fake)."""
    s = "SmolLM2-135M"
    if quick:
        plans = [
            measured_plan("full", "fp32", "adamw", 64, 1),
            measured_plan("full", "bf16-mixed", "adamw", 64, 1, grad_ckpt=True),
            lora("bf16", 16, "all-linear", seq_len=64, batch=2),
        ]
        return [(s, p, "real", 0) for p in plans]
    plans = [
        measured_plan("full", "fp32", "adamw", 128, 1),
        measured_plan("full", "bf16", "adamw", 128, 2),
        measured_plan("full", "bf16-mixed", "adamw", 128, 1),
        measured_plan("full", "bf16", "adamw", 256, 1, grad_ckpt=True),
        measured_plan("full", "fp32", "adamw-foreach", 64, 1),
        measured_plan("full", "bf16", "sgd", 64, 1),
        measured_plan("full", "bf16", "adamw", 128, 1, attn="eager"),
        lora("bf16", 16, "all-linear", seq_len=128, batch=2),
        lora("bf16", 16, "all-linear", seq_len=256, batch=1, grad_ckpt=True),
        lora("bf16-mixed", 8, "attention", seq_len=128, batch=1),
        lora("bf16", 64, "all-linear", 0.05, seq_len=128, batch=1),
    ]
    return [(s, p, "real", 0) for p in plans] + [
        ("Qwen2.5-0.5B", measured_plan("full", "bf16", "adamw", 64, 1), "real", 0),
        (
            "Qwen3-0.6B",
            lora("bf16-mixed", 16, "all-linear", seq_len=64, batch=1, grad_ckpt=True),
            "real",
            0,
        ),
    ]


def qlora_cases(quick: bool) -> list[Case]:
    s = "SmolLM2-135M"
    if quick:
        return [(s, qlora(True, seq_len=64, batch=1, grad_ckpt=True), "real", 0)]
    return [
        (s, qlora(False, seq_len=128, batch=1, grad_ckpt=False), "real", 0),
        (s, qlora(True, seq_len=128, batch=1, grad_ckpt=True), "real", 0),
        (s, qlora(True, seq_len=128, batch=2, grad_ckpt=False), "real", 0),
        (s, qlora(False, 64, "attention", seq_len=128, batch=1, grad_ckpt=True), "real", 0),
        ("Qwen2.5-0.5B", qlora(True, seq_len=128, batch=1, grad_ckpt=True), "real", 0),
    ]


def analysis_cases() -> list[Case]:
    """The reference breakdown: Qwen2.5-0.5B, seq 512, batch 2, sdpa, no checkpointing."""
    m = "Qwen2.5-0.5B"
    return [
        (m, measured_plan("full", p, "adamw", 512, 2), "fake", 25)
        for p in ("bf16", "fp32", "bf16-mixed")
    ] + [
        (m, lora("bf16", 16, "all-linear", seq_len=512, batch=2), "fake", 25),
        (m, lora("bf16-mixed", 16, "all-linear", seq_len=512, batch=2), "fake", 25),
        (m, measured_plan("full", "bf16", "adamw", 512, 2, grad_ckpt=True), "fake", 25),
        (m, measured_plan("full", "bf16", "adamw", 512, 2, attn="eager"), "fake", 25),
    ]


SMALL = [
    "SmolLM2-135M",
    "Qwen2.5-0.5B",
    "Qwen3-0.6B",
    "Llama-3.2-1B",
    "gemma-2-2b",
    "Phi-3-mini-4k",
]
BIG = ["Llama-2-7b", "Mistral-7B-v0.3", "Qwen2.5-7B"]


def fake_grid(quick: bool) -> list[Case]:
    cases: list[Case] = []
    if quick:
        for m in ("Qwen2.5-0.5B", "Llama-2-7b"):
            cases += [(m, p, "fake", 0) for p in _full_recipes(512, 2, gcs=(False,))]
        return cases
    for m in SMALL + BIG:
        attn = "eager" if m.startswith("gemma-2") else "sdpa"  # gemma-2 softcapping: sdpa refuses
        plans = [
            *_full_recipes(512, 2),
            measured_plan("full", "bf16", "adamw", 2048, 1),
            measured_plan("full", "bf16", "adamw", 2048, 1, grad_ckpt=True),
            measured_plan("full", "bf16-mixed", "adamw", 2048, 1, grad_ckpt=True),
            lora("bf16", 16, "all-linear", seq_len=2048, batch=1),
            lora("bf16", 16, "all-linear", seq_len=2048, batch=1, grad_ckpt=True),
            lora("bf16", 8, "attention", seq_len=1024, batch=2),
            lora("bf16", 64, "all-linear", seq_len=1024, batch=2, grad_ckpt=True),
            lora("bf16", 16, "all-linear", 0.05, seq_len=1024, batch=2),
            lora("bf16-mixed", 16, "all-linear", seq_len=1024, batch=2),
            measured_plan("full", "bf16", "adamw-foreach", 1024, 2),
            measured_plan("full", "bf16", "sgd", 1024, 2),
            measured_plan("full", "bf16", "adamw", 256, 8),
            lora("bf16", 16, "all-linear", seq_len=4096, batch=1, grad_ckpt=True),
        ]
        for p in plans:
            cases.append((m, dataclasses.replace(p, attn=attn), "fake", 0))
        if m in ("Qwen2.5-0.5B", "Llama-3.2-1B", "Llama-2-7b"):
            cases.append(
                (m, measured_plan("full", "bf16", "adamw", 1024, 2, attn="eager"), "fake", 0)
            )
            cases.append(
                (m, lora("bf16", 16, "all-linear", seq_len=1024, batch=2, attn="eager"), "fake", 0)
            )
        if m == "Llama-2-7b":
            cases.append((m, measured_plan("full", "fp32", "adamw-foreach", 1024, 2), "fake", 0))
            cases.append(
                (m, measured_plan("full", "bf16", "adamw", 4096, 1, grad_ckpt=True), "fake", 0)
            )
        if m == "gemma-2-2b":  # sdpa + softcapping: expected to be refused by transformers
            cases.append(
                (m, measured_plan("full", "bf16", "adamw", 512, 2, attn="sdpa"), "fake", 0)
            )
    return cases


MOE = ["Qwen3-30B-A3B", "Mixtral-8x7B", "gpt-oss-20b"]


def moe_cases() -> list[Case]:
    """Mixture-of-experts models, fake execution.  Full nogc and LoRA all-linear nogc keep the
    40 largest live groups at the peak (top_at_peak): full peaks at the end of backward (grads),
    LoRA at its start (saved activations: the per-layer MoE breakdown).
    gpt-oss declares _supports_sdpa = False (attention sinks): eager attention."""
    cases: list[Case] = []
    for m in MOE:
        attn = "eager" if m.startswith("gpt-oss") else "sdpa"
        plans = [
            (measured_plan("full", "bf16", "adamw", 512, 2, attn=attn), 40),
            (measured_plan("full", "bf16", "adamw", 512, 2, grad_ckpt=True, attn=attn), 0),
            (lora("bf16", 16, "all-linear", seq_len=1024, batch=1, attn=attn), 40),
            (lora("bf16", 16, "all-linear", seq_len=1024, batch=1, grad_ckpt=True, attn=attn), 0),
            (lora("bf16", 16, "attention", seq_len=2048, batch=1, attn=attn), 0),
        ]
        cases += [(m, p, "fake", top) for p, top in plans]
    return cases


def stack_cases() -> list[Case]:
    """A hand-written loop that keeps `out` (logits, KV cache) through backward and the step,
    with the same plans as Trainer-style cases beside it for comparison."""
    cases: list[Case] = []
    real = "SmolLM2-135M"
    for stack in ("trainer", "loop"):
        for plan in (
            measured_plan("full", "bf16", "adamw", 128, 2),
            measured_plan("full", "bf16", "adamw", 128, 2, grad_ckpt=True),
            measured_plan("full", "fp32", "adamw", 128, 1),
            measured_plan("full", "bf16-mixed", "adamw", 128, 1),
            lora("bf16", 16, "all-linear", seq_len=128, batch=2),
            lora("bf16", 16, "all-linear", seq_len=128, batch=2, attn="eager"),
            qlora(True, seq_len=128, batch=1, grad_ckpt=True),
        ):
            cases.append((real, dataclasses.replace(plan, stack=stack), "real", 0))
    for name in ("Qwen2.5-0.5B", "Llama-3.2-1B"):
        for plan in (
            measured_plan("full", "bf16", "adamw", 1024, 2),
            lora("bf16", 16, "all-linear", seq_len=2048, batch=1),
            lora("bf16", 16, "all-linear", seq_len=2048, batch=1, grad_ckpt=True),
            lora("bf16-mixed", 16, "all-linear", seq_len=1024, batch=2),
            lora("bf16", 16, "all-linear", seq_len=1024, batch=1, attn="eager"),
        ):
            for stack in ("trainer", "loop"):
                cases.append((name, dataclasses.replace(plan, stack=stack), "fake", 0))
    return cases


def quant_cases() -> list[Case]:
    """NF4 without double quantization (an fp32 absmax per block of 64), real QLoRA loads."""
    real = "SmolLM2-135M"
    cases: list[Case] = []
    for kbit in (True, False):  # NF4 without double quantization (fp32 absmax per block)
        plan = dataclasses.replace(qlora(kbit, seq_len=128, batch=1), double_quant=False)
        cases.append((real, plan, "real", 0))
    cases.append(
        (
            "Qwen2.5-0.5B",
            dataclasses.replace(qlora(True, seq_len=128, batch=1), double_quant=False),
            "real",
            0,
        )
    )
    return cases


def cases_for(subset: str) -> list[Case]:
    if subset == "quick":
        return fake_vs_real_cases(True) + qlora_cases(True) + analysis_cases()[:1] + fake_grid(True)
    if subset == "full":
        return fake_vs_real_cases(False) + qlora_cases(False) + analysis_cases() + fake_grid(False)
    if subset == "stacks":
        return stack_cases()
    if subset == "quant":
        return quant_cases()
    if subset == "moe":
        return moe_cases()
    if subset == "gpu":
        from cuda_stats import gpu_cases

        return gpu_cases(measured_plan, lora, qlora)
    raise ValueError(subset)


# --------------------------------------------------------------------------- output
def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"torch": torch.__version__}
    for mod in ("transformers", "peft", "bitsandbytes", "accelerate"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:
            out[mod] = f"unavailable ({type(e).__name__})"
    return out


def machine(device: str) -> dict[str, Any]:
    m: dict[str, Any] = {
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "device": device,
    }
    if device.startswith("cuda"):
        from cuda_stats import device_info

        m.update(device_info())
    return m


def fake_vs_real(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id: dict[str, dict[str, Any]] = {}
    for r in records:
        if "measured" in r:
            by_id[r["id"]] = r
    rows = []
    for rid, r in by_id.items():
        if not rid.endswith("/real"):
            continue
        f = by_id.get(rid[: -len("/real")] + "/fake")
        if f is None:
            continue
        a, b = r["measured"], f["measured"]
        rows.append(
            {
                "case": rid[: -len("/real")],
                "real_peak": a["peak_allocated_bytes"],
                "fake_peak": b["peak_allocated_bytes"],
                "equal": a["peak_allocated_bytes"] == b["peak_allocated_bytes"],
                "rel_diff": (b["peak_allocated_bytes"] - a["peak_allocated_bytes"])
                / a["peak_allocated_bytes"],
                "phase_real": a["peak_phase"],
                "phase_fake": b["peak_phase"],
                "categories_equal": a["by_category_at_peak"] == b["by_category_at_peak"],
                "phase_peaks_equal": a["phase_peaks"] == b["phase_peaks"],
                "real_seconds": r["seconds"],
                "fake_seconds": f["seconds"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--subset", choices=["quick", "full", "gpu", "moe", "stacks", "quant"], default="quick"
    )
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (CPU)")
    ap.add_argument("--only", default=None, help="run only cases whose id contains this substring")
    ap.add_argument(
        "--snapshots",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --device cuda: a memory snapshot of each case there (trainmem-tui replay)",
    )
    args = ap.parse_args(argv)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except Exception:
        pass
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(
        args.out
        or (
            REPO / "bench" / "results" / f"measure-{'cuda' if args.device != 'cpu' else 'cpu'}.json"
        )
    )
    models = load_models()
    cases = cases_for(args.subset)
    records: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    context_bytes = None
    if args.device.startswith("cuda"):
        from cuda_stats import cuda_context_bytes

        context_bytes = cuda_context_bytes()
    cmd = "python bench/measure/harness.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:])
    )
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(complete: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "machine": machine(args.device),
            "versions": versions(),
            "command": cmd,
            "complete": complete,  # false while running: the file is rewritten after each case
            "models_json": str(MODELS_JSON),
            "notes": NOTES,
            "total_seconds": round(time.perf_counter() - t_all, 1),
            "checks": {"fake_vs_real": fake_vs_real(records)},
            "records": records,
        }
        if context_bytes is not None:
            doc["cuda_context"] = context_bytes
        tmp = out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(out)
        return doc

    for name, plan, execution, top in cases:
        todo = [execution]
        if args.device == "cpu" and execution == "real" and plan.method != "qlora":
            todo.append("fake")  # every real case is repeated with fake tensors: agreement check
        for ex in todo:
            rid = f"{name}/{case_key(plan)}/{ex}"
            if args.only and args.only not in rid:
                continue
            rec = run_case(
                models[name],
                dataclasses.replace(plan),
                ex,
                args.device,
                top=top,
                snapshots=args.snapshots,
            )
            records.append(rec)
            m = rec.get("measured")
            msg = (
                f"{m['peak_allocated_bytes'] / 2**30:8.3f} GiB  {m['peak_phase']:9s}"
                if m
                else f"ERROR {rec['error'][:90]}"
            )
            print(
                f"[{time.perf_counter() - t_all:7.1f}s] {rec['seconds']:7.2f}s  {msg}  {rid}",
                flush=True,
            )
            write(False)
    doc = write(True)
    fv = doc["checks"]["fake_vs_real"]
    print(
        f"wrote {out}: {len(records)} records, {sum('error' in r for r in records)} errors, "
        f"fake==real {sum(r['equal'] for r in fv)}/{len(fv)}, {doc['total_seconds']} s"
    )
    return 0


NOTES = {
    "peak_allocated_bytes": (
        "peak of live tensor storages during the measured step (tracker.py); excludes allocator "
        "caching/fragmentation, kernel-internal scratch and the CUDA context"
    ),
    "by_category_at_peak": (
        "parameters = weights + buffers (+ bnb quant state); gradients = storages that are .grad "
        "at that moment (a grad just computed but not yet accumulated counts as other); "
        "optimizer = optimizer.state tensors; other = activations and temporaries"
    ),
    "precision": (
        "fp32: fp32 weights; bf16: weights (for LoRA the frozen base) in bf16, no autocast; "
        "bf16-mixed: torch.autocast(bf16) around forward+loss, then accelerate's convert_to_fp32 "
        "on the outputs, as Trainer(bf16=True) does (full: fp32 weights; lora: bf16 base)"
    ),
    "optimizer": (
        "adamw = torch.optim.AdamW(fused=True); adamw-foreach = AdamW(fused=False, foreach=True); "
        "sgd = torch.optim.SGD(lr) (no momentum, no state); all over trainable params only"
    ),
    "grad_ckpt": (
        "model.activation_checkpointing_enable() with the installed transformers' defaults "
        "(use_reentrant=False), after PEFT wrapping, as Trainer does; qlora+kbit_prep: "
        "prepare_model_for_kbit_training(use_gradient_checkpointing=grad_ckpt) enables it"
    ),
    "qlora": (
        "random bf16 weights saved and reloaded with BitsAndBytesConfig(nf4, double quant, "
        "bf16 compute); real execution only"
    ),
    "fake": "FakeTensorMode: same python/aten code path, shapes only; see checks.fake_vs_real",
    "moe": (
        "subset moe: fake execution only; measured.experts_implementation / experts_class = how "
        "transformers runs the experts (grouped_mm is its default); measured.lora_targeted = "
        "distinct suffixes of peft_model.targeted_module_names and targeted_parameter_names "
        "(peft 0.21+ maps all-linear on mixtral/qwen3_moe, 0.22 on qwen2_moe too, to the "
        "fused expert parameters + router weight, with rank and alpha doubled on "
        "gate_up_proj: lora_rank_pattern)"
    ),
}


if __name__ == "__main__":
    raise SystemExit(main())
