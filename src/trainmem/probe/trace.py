"""`trainmem-tui plan --trace`: the plan's real training step on fake tensors, as the ordered
allocations and frees PyTorch's caching allocator would see, run through the same simulation
as the analytic device peak (trainmem.core.allocator).

The model is built from its config by the installed transformers (``AutoConfig.for_model`` +
``AutoModelForCausalLM.from_config``) under ``FakeTensorMode`` (shapes only, no memory, on the
CPU) in a process of its own (``python -m trainmem.probe.trace``, started by
trainmem/cli/plan_trace.py), for QLoRA loaded in 4 bits as shapes only (trainmem.probe.fake4bit:
transformers' quantizer and bitsandbytes' quantize_4bit on the fake weights; its matmul
allocating as on CUDA) and prepared by PEFT's prepare_model_for_kbit_training where the plan
asks, wrapped by the installed PEFT for LoRA, checkpointed as the
Trainer enables it (``gradient_checkpointing_enable()`` with the library's defaults), and two
steps run as the Trainer runs them (forward with labels, the output dropped, backward,
optimizer step, ``zero_grad(set_to_none=True)``), the first without optimizer state. A
dispatch mode sees every aten op and records each new tensor storage
(``untyped_storage().nbytes()``) and, through a weakref on it, its free. The sequence depends
on the library versions (which temporaries exist and when), so they are returned with it.
bench/measure/trace_events.py's tracker records the same sequence (tests/measure).
Mixture-of-experts models run their experts as the installed transformers dispatches them
(transformers 5: ``grouped_mm`` where it can, integrations/moe.py, whose shapes follow the
token count and top-k, not the routing, so shapes alone trace them).

Not seen, as there: scratch made and freed inside one kernel, the CUDA-only kernels (flash /
memory-efficient SDPA, fused AdamW's CUDA kernel: the CPU's are traced), and the CUDA context.
Every layer is traced (none repeated from another: Llama-3.2-1B's two steps took 12-52 s on
a busy 2-core CPU, bench/results/trace-cpu.json). torch, transformers (PEFT for LoRA,
bitsandbytes for QLoRA) are imported only when a trace is asked for; a plan the trace cannot
run is a PlanError (one line).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import json
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from trainmem.core.alloc_conf import DEFAULT, AllocatorConfig
from trainmem.core.allocator import Alloc, Event, Free, simulate
from trainmem.core.architecture import ModelSpec, modelled
from trainmem.core.device_peak import with_workspaces, workspace_bytes
from trainmem.core.errors import PlanError
from trainmem.core.plan import Plan, parse_saved_modules
from trainmem.core.text import visible
from trainmem.probe import fake4bit

OPTIMIZERS = ("adamw", "adamw-foreach", "sgd")
LIBRARIES = ("torch", "transformers", "peft")  # whose versions every trace names


@dataclass(frozen=True)
class Trace:
    """A traced step: its events, where the loaded model ends in them, the versions used."""

    events: tuple[Event, ...]
    loaded: int  # events[:loaded] are the loaded model and its input
    versions: dict[str, str]
    seconds: float


def _module(name: str) -> Any:
    try:  # through importlib: the probe runs where torch may be absent, and is typed without it
        return importlib.import_module(name)
    except ImportError:
        raise PlanError("trace", f"needs {name} installed where you train") from None


def check(plan: Plan, spec: ModelSpec) -> None:
    """Refuse, one line each, what a fake-tensor trace of the Trainer's step cannot run."""
    if spec.assumed:
        raise PlanError("trace", "needs the model's config (a catalogue id, config.json or id)")
    if not modelled(spec.model_type):  # the trace would build transformers' own model
        raise PlanError(
            "trace",
            f"model_type {visible(spec.model_type)[:60]!r} is estimated as Llama-like: a trace "
            "of its own architecture would not be the model the estimate describes",
        )
    if plan.method not in ("full", "lora", "qlora"):
        raise PlanError("trace", f"method {plan.method} is not traced (full, lora and qlora are)")
    if plan.method == "qlora":
        fake4bit.check_quant(plan.quant)
    if plan.optimizer not in OPTIMIZERS:
        raise PlanError("trace", f"optimizer {plan.optimizer} is not traced")
    if plan.world > 1 or plan.strategy != "ddp":
        raise PlanError("trace", "traces one GPU's step; sharded and multi-GPU plans are not")
    if plan.stack not in ("trainer", "loop") or plan.loss_kind != "standard":
        raise PlanError("trace", "traces the Trainer's and a plain loop's standard loss only")
    if plan.ckpt_offload:
        raise PlanError("trace", "checkpoint offload is not traced")
    if plan.precision not in ("fp32", "bf16", "bf16-mixed"):
        raise PlanError("trace", f"precision {plan.precision} is not traced")


def hf_config(spec: ModelSpec, plan: Plan) -> dict[str, Any]:
    """The Hugging Face config kwargs of the spec's dimensions (the rest: the architecture's
    defaults in the installed transformers)."""
    context = max(spec.context, plan.seq_len)
    return {**spec.hf_dimensions(), **spec.hf_moe_dimensions(), "max_position_embeddings": context}


class _Recorder:
    """A dispatch mode's callback half: each new storage an op returns or reads is an Alloc,
    its weakref's death a Free."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.on = True
        self._live: dict[int, tuple[int, int, Any]] = {}  # id(storage) -> (event id, nbytes, ref)
        self._next = 0

    def see(self, tensor: Any) -> None:
        try:
            storage = tensor.untyped_storage()
        except Exception:  # sparse, nested, opaque subclasses: nothing to count
            return
        key, nbytes = id(storage), int(storage.nbytes())
        known = self._live.get(key)
        if known is not None and known[1] == nbytes:
            return
        if known is not None:  # resized in place: freed and allocated again
            self._free(key)
        if nbytes == 0 or not self.on:
            return
        ref = weakref.ref(storage, functools.partial(self._dead, key))
        self._live[key] = (self._next, nbytes, ref)
        self.events.append(Alloc(self._next, nbytes))
        self._next += 1

    def _dead(self, key: int, _ref: object) -> None:
        self._free(key)

    def _free(self, key: int) -> None:
        known = self._live.pop(key, None)
        if known is not None and self.on:
            self.events.append(Free(known[0]))


def _dispatch_mode(torch: Any, recorder: _Recorder) -> Any:
    python_dispatch = importlib.import_module("torch.utils._python_dispatch")
    pytree = importlib.import_module("torch.utils._pytree")

    base: Any = python_dispatch.TorchDispatchMode

    class Mode(base):  # type: ignore[misc]
        def __torch_dispatch__(
            self, func: Callable[..., Any], types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            for value in pytree.tree_flatten((args, kwargs))[0]:
                if isinstance(value, torch.Tensor):
                    recorder.see(value)
            out = func(*args, **kwargs)
            for value in pytree.tree_flatten(out)[0]:
                if isinstance(value, torch.Tensor):
                    recorder.see(value)
            return out

    return Mode()


@contextlib.contextmanager
def _replace_parameters_on_apply(torch: Any) -> Iterator[None]:
    """Under FakeTensorMode, ``nn.Module._apply`` (``.to()``) swaps fake parameters in place,
    which fails ("has weakref associated with it"); PEFT casts each new adapter that way. While
    the model is built, put a new Parameter in place instead (bench/measure/harness.py does
    the same for its fake runs)."""
    original = torch.nn.Module._apply

    def _apply(self: Any, fn: Callable[[Any], Any], recurse: bool = True) -> Any:
        if recurse:
            for child in self.children():
                child._apply(fn)
        for name, param in list(self._parameters.items()):
            if param is not None:
                with torch.no_grad():
                    new = fn(param)
                if new is not param:
                    self._parameters[name] = torch.nn.Parameter(new, param.requires_grad)
        for name, buffer in list(self._buffers.items()):
            if buffer is not None:
                self._buffers[name] = fn(buffer)
        return self

    torch.nn.Module._apply = _apply
    try:
        yield
    finally:
        torch.nn.Module._apply = original


def _build(torch: Any, plan: Plan, spec: ModelSpec) -> Any:
    transformers = _module("transformers")
    try:
        config = transformers.AutoConfig.for_model(spec.model_type, **hf_config(spec, plan))
    except (ValueError, KeyError) as exc:
        raise PlanError("trace", f"transformers cannot build {spec.model_type!r}: {exc}") from None
    lora = plan.method in ("lora", "qlora")
    dtype = torch.bfloat16 if lora or plan.precision == "bf16" else torch.float32
    model = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=plan.attn, dtype=dtype
    )
    for param in model.parameters():
        param.requires_grad_(not lora)
    prepared = plan.method == "qlora" and plan.kbit_prep
    if plan.method == "qlora":  # loaded in 4 bits, as from_pretrained with a quantization_config
        fake4bit.load_4bit(torch, transformers, model, plan.quant, plan.double_quant)
        if prepared:  # casts the rest to fp32, and enables checkpointing itself
            model = _module("peft").prepare_model_for_kbit_training(
                model, use_gradient_checkpointing=plan.grad_ckpt
            )
    if lora:
        peft = _module("peft")
        preset = plan.lora_targets.strip().lower()
        targets: str | list[str] = [f"{m}_proj" for m in plan.target_modules]
        if preset == "all-linear":  # PEFT's: bar the lm_head
            targets = preset
        elif preset == "linear":  # axolotl's lora_target_linear: every nn.Linear by name
            targets = sorted(
                {
                    n.rsplit(".", 1)[-1]
                    for n, m in model.named_modules()
                    if isinstance(m, torch.nn.Linear)
                }
                - {"lm_head"}
            )
        saved = list(parse_saved_modules(plan.modules_to_save)) or None
        config = peft.LoraConfig(
            r=plan.lora_rank,
            lora_alpha=plan.lora_alpha,
            lora_dropout=plan.lora_dropout,
            target_modules=targets,
            modules_to_save=saved,
            task_type="CAUSAL_LM",
        )
        model = peft.get_peft_model(model, config)
    if plan.grad_ckpt and not prepared:  # as Trainer does, after PEFT, the library's defaults
        enable = getattr(model, "activation_checkpointing_enable", None)
        (enable or model.gradient_checkpointing_enable)()
    return model


def _optimizer(torch: Any, model: Any, plan: Plan) -> Any:
    params = [p for p in model.parameters() if p.requires_grad]
    if plan.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-5)
    fused = plan.optimizer == "adamw"
    return torch.optim.AdamW(params, lr=1e-5, weight_decay=0.0, fused=fused, foreach=not fused)


def _to_fp32(torch: Any, out: Any) -> None:
    """Trainer(bf16=True): accelerate's prepare_model wraps forward in ConvertOutputsToFp32,
    an fp32 copy of every 16-bit output (accelerate/utils/operations.py convert_to_fp32). In a
    function of its own, so no loop variable outlives it holding a tensor."""
    for key, value in list(out.items()):
        if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16):
            out[key] = value.float()


def _step(torch: Any, model: Any, optimizer: Any, ids: Any, plan: Plan) -> None:
    """The Trainer's step (a plain loop keeps ``out`` until the next forward; here it dies
    after the step, as its next forward replaces it)."""
    model.train()
    mixed = plan.precision == "bf16-mixed"
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=mixed):
        out = model(input_ids=ids, labels=ids)
    if mixed and plan.stack != "loop":
        _to_fp32(torch, out)
    loss = out["loss"]
    if plan.stack != "loop":
        del out  # Trainer.compute_loss returns the loss alone
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    logging = _module("transformers").utils.logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def trace_plan(plan: Plan, spec: ModelSpec, steps: int = 2) -> Trace:
    """Trace ``steps`` training steps of the validated ``plan`` on ``spec``'s architecture; a
    step the libraries refuse (an unknown architecture, an attention they do not offer) is a
    PlanError naming their message's first line."""
    plan = plan.validated()
    check(plan, spec)
    try:
        return _trace(plan, spec, steps)
    except PlanError:
        raise
    except Exception as exc:  # the libraries' own refusal, not a bug of the plan's reading
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise PlanError("trace", f"the step failed: {type(exc).__name__}: {first}") from None


def _trace(plan: Plan, spec: ModelSpec, steps: int) -> Trace:
    torch = _module("torch")
    fake_tensor = importlib.import_module("torch._subclasses.fake_tensor")
    started = time.perf_counter()
    recorder = _Recorder()
    quantized = plan.method == "qlora"
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")  # the libraries' advice is no part of the answer
        stack.enter_context(_quiet_transformers())
        stack.enter_context(fake_tensor.FakeTensorMode())
        if quantized:
            stack.enter_context(fake4bit.fake_dynamic_map(torch))
        with _replace_parameters_on_apply(torch):
            model = _build(torch, plan, spec)
        optimizer = _optimizer(torch, model, plan)
        ids = torch.randint(0, spec.vocab, (plan.batch, plan.seq_len))
        params = list(model.parameters())
        for tensor in [*params, *model.buffers(), *fake4bit.quant_state_tensors(params), ids]:
            recorder.see(tensor)
        loaded = len(recorder.events)
        with (
            _dispatch_mode(torch, recorder),
            fake4bit.matmul(torch, "cuda") if quantized else contextlib.nullcontext(),
        ):
            for _ in range(steps):
                _step(torch, model, optimizer, ids, plan)
                gc.collect()
        recorder.on = False
        del model, optimizer, ids
    gc.collect()
    names = LIBRARIES + (("bitsandbytes",) if quantized else ())
    return Trace(tuple(recorder.events), loaded, versions(names), time.perf_counter() - started)


@dataclass(frozen=True)
class TracedPeak:
    """A trace through the allocator's simulation, with cuBLAS's workspaces at the first step
    as trainmem.core.device_peak places them in the synthetic sequence."""

    reserved: int  # the peak reserved (torch.cuda.max_memory_reserved)
    allocated: int  # allocated blocks at that moment
    allocated_peak: int  # the most ever allocated (torch.cuda.max_memory_allocated)
    workspaces: int

    @property
    def fragmentation(self) -> int:
        return self.reserved - self.allocated


def traced_peak(
    trace: Trace, config: AllocatorConfig = DEFAULT, family: str | None = None
) -> TracedPeak:
    events = with_workspaces(trace.events, trace.loaded, family)
    sim = simulate(events, config=config, peak_segments=False)
    at = sim.peak_event
    allocated = sim.allocated[at] if at >= 0 else 0
    return TracedPeak(sim.peak_reserved, allocated, sim.peak_allocated, workspace_bytes(family))


def versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str]:
    """The versions of the libraries the trace ran, as installed."""
    out = {}
    for name in names:
        try:
            out[name] = str(importlib.import_module(name).__version__)
        except ImportError:
            out[name] = "not installed"
    return out


def main() -> int:
    """``python -m trainmem.probe.trace``: the command line's trace in a process of its own
    (the probe is a leaf no layer imports; torch's memory and time stay out of the CLI's).
    Reads {"plan": Plan fields, "spec": ModelSpec fields, "family": str | null} on stdin and
    writes one JSON line last on stdout: the traced peak, or {"error": one line}."""
    try:
        request = json.loads(sys.stdin.read())
        spec_fields = dict(request["spec"])
        spec_fields["notes"] = tuple(spec_fields.get("notes") or ())
        spec = ModelSpec(**spec_fields)
        plan = Plan(**request["plan"])
        trace = trace_plan(plan, spec)
        peak = traced_peak(trace, plan.validated().allocator, request.get("family"))
    except PlanError as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    except (ValueError, KeyError, TypeError) as exc:
        print(json.dumps({"error": f"trace: bad request: {type(exc).__name__}: {exc}"[:300]}))
        return 2
    result = {
        "reserved_bytes": peak.reserved,
        "allocated_bytes": peak.allocated,
        "allocated_peak_bytes": peak.allocated_peak,
        "workspace_bytes": peak.workspaces,
        "events": len(trace.events),
        "seconds": round(trace.seconds, 2),
        "versions": trace.versions,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
