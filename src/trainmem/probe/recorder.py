"""The probe for a plain PyTorch loop (and the engine under the Trainer callback).

    probe = RunProbe(model=model, optimizer=opt, seq_len=2048)   # log: $TRAINMEM_RUN_LOG
    for batch in loader:
        with probe.step():
            model(**batch).loss.backward()      # forward / backward marked by model hooks
            probe.phase("optimizer"); opt.step(); opt.zero_grad()
    probe.close()

Phases: what runs from one mark to the next belongs to the phase named at the first mark
("step" until the first). With a model, a forward pre-hook marks "forward" and a forward hook
marks "backward" (so loss.backward() and gradient clipping count as backward); the loop marks
the rest with ``phase(name)``. On CUDA each phase's peaks are exact (the allocator's peak
counters, reset at every mark); elsewhere the figures are read at each mark.

Nothing here raises into the loop: the first error inside the probe is warned once and the
probe goes quiet for the rest of the run (the loop's own exceptions pass through untouched).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from trainmem.core.run_log import END, STEP
from trainmem.probe import describe
from trainmem.probe.memory import CpuMemory, CudaMemory, MpsMemory, memory_for
from trainmem.probe.writer import LogWriter, rank_path

Memory = CpuMemory | MpsMemory | CudaMemory
PEAK_KEYS = ("max_allocated_bytes", "max_reserved_bytes", "driver_bytes")
# Free memory and NVML's process list cost tens of microseconds to milliseconds: read at most
# once a second (steps in between have them null), as the dashboard samples.
FULL_READ_S = 1.0


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


class RunProbe:
    """Records one process's device memory per optimizer step into a JSON Lines log.

    ``path``: the log (``{rank}`` or ``.rank<N>`` is added, see writer.rank_path); default
    $TRAINMEM_RUN_LOG, else ``trainmem-run.rank<N>.jsonl`` in ``default_dir`` or the current
    folder. ``plan``: trainmem plan fields the objects cannot tell (``seq_len=4096``, a
    ``method``); they win over what is read from the model.
    """

    def __init__(
        self,
        path: str | None = None,
        *,
        model: Any = None,
        optimizer: Any = None,
        device: Any = None,
        stack: str = "loop",
        default_dir: str = "",
        **plan: Any,
    ) -> None:
        self.quiet = False
        self._plan = dict(plan)
        self._stack = stack
        self._device = device
        self._optimizer = optimizer
        self._model: Any = None
        self._hooks: list[Any] = []
        self._memory: Memory | None = None
        self._described = False
        self._in_step = False
        self._closed = False
        self.steps = 0
        self.run_facts: dict[str, Any] = {}  # filled by the Trainer callback
        self._phases: dict[str, dict[str, int | None]] = {}
        self._current = "step"
        self._tokens = 0
        self._shape: tuple[int, int] | None = None
        self._t0 = 0.0
        self._last_full = float("-inf")  # when the device-wide figures were last read
        self.ranks = describe.ranks()
        self.path = rank_path(path, self.ranks["rank"], default_dir)
        self._writer = LogWriter(self.path)
        if model is not None:
            self.watch(model)

    # -- the loop's calls: each is guarded -------------------------------------------------
    def watch(self, model: Any) -> None:
        """Hook ``model``'s forward so its phases mark themselves (once per model)."""
        self._guard(self._watch, model)

    def phase(self, name: str) -> None:
        """What runs from here to the next mark (or the step's end) is phase ``name``."""
        if self._in_step and not self.quiet:
            self._guard(self._switch, name)

    def begin_step(self) -> None:
        self._guard(self._begin)

    def end_step(self, error: BaseException | None = None) -> None:
        if self._in_step:
            self._guard(self._end, error)

    @contextmanager
    def step(self) -> Iterator[RunProbe]:
        """One optimizer step; an exception from the loop is recorded, then passes on."""
        self.begin_step()
        try:
            yield self
        except BaseException as exc:
            self.end_step(exc)
            raise
        self.end_step()

    def close(self) -> None:
        """Write the end record, remove the hooks, close the file (safe to call twice)."""
        if self._closed:
            return
        self._closed = True
        if self._described and not self.quiet:
            self._writer.write({"kind": END, "time": time.time(), "steps": self.steps})
        for h in self._hooks:
            with contextlib.suppress(Exception):
                h.remove()
        self._hooks.clear()
        self._writer.close()

    # -- inside ----------------------------------------------------------------------------
    def _guard(self, call: Callable[..., None], *args: Any) -> None:
        if self.quiet:
            return
        try:
            call(*args)
        except Exception as exc:
            self.quiet = True
            self._in_step = False
            warnings.warn(
                f"trainmem probe: {type(exc).__name__}: {exc}; it records nothing more",
                stacklevel=3,
            )

    def _watch(self, model: Any) -> None:
        if self._model is model:
            return
        self._model = model
        self._hooks.append(model.register_forward_pre_hook(self._pre_forward, with_kwargs=True))
        self._hooks.append(model.register_forward_hook(self._post_forward))

    def _pre_forward(self, _module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self._in_step or self.quiet:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        shape = getattr(ids, "shape", None)
        if shape is not None and len(shape) == 2:
            b, s = int(shape[0]), int(shape[1])
            if b * s > self._tokens:
                self._tokens, self._shape = b * s, (b, s)
        self.phase("forward")

    def _post_forward(self, _module: Any, _args: Any, _out: Any) -> None:
        self.phase("backward")

    def _reset_step(self) -> None:
        self._phases = {}
        self._current = "step"
        self._tokens = 0
        self._shape = None
        self._t0 = 0.0

    def _memory_reader(self) -> Memory:
        if self._memory is None:
            device = self._device
            if device is None and self._model is not None:
                param = next(iter(self._model.parameters()), None)
                device = getattr(param, "device", None)
            self._memory = memory_for(device)
        return self._memory

    def _begin(self) -> None:
        memory = self._memory_reader()
        if not self._described:
            self._describe(memory)
        self._reset_step()
        memory.reset()
        self._t0 = time.perf_counter()
        self._in_step = True

    def _switch(self, name: str) -> None:
        if name == self._current:
            return
        self._record_phase()
        self._current = name

    def _record_phase(self) -> None:
        figures = self._memory_reader().peak()
        into = self._phases.setdefault(self._current, {})
        for key in PEAK_KEYS:
            if key in figures:
                into[key] = _max(into.get(key), figures[key])

    def _end(self, error: BaseException | None) -> None:
        self._record_phase()
        self._in_step = False
        self.steps += 1
        memory = self._memory_reader()
        now = time.perf_counter()
        full = now - self._last_full >= FULL_READ_S or error is not None
        if full:
            self._last_full = now
        record: dict[str, Any] = {
            "kind": STEP,
            "step": self.steps,
            "time": time.time(),
            "duration_s": round(now - self._t0, 6),
            **memory.now(full),
        }
        for key in ("max_allocated_bytes", "max_reserved_bytes"):
            record[key] = _largest(p.get(key) for p in self._phases.values())
        if memory.peaks == "sampled":
            samples = [p.get("driver_bytes") for p in self._phases.values()]
            record["max_driver_bytes"] = _largest([*samples, record.get("driver_bytes")])
        # Per phase only what the device gives (no nulls); the driver's figure only where it
        # was read at every mark (sampled devices: NVML is read once per step on CUDA).
        record["phases"] = {
            name: {
                k: v
                for k, v in p.items()
                if v is not None and (memory.peaks == "sampled" or k != "driver_bytes")
            }
            for name, p in self._phases.items()
        }
        if self._shape is not None:
            record["batch"], record["seq_len"] = self._shape
        if error is not None:
            record["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        self._writer.write(record)

    def _describe(self, memory: Memory) -> None:
        self._described = True
        plan: dict[str, Any] = {"stack": self._stack}
        model_info: dict[str, Any] = {}
        run: dict[str, Any] = dict(self.run_facts)
        if self._model is not None:
            read_plan, model_info, facts = describe.describe_model(self._model)
            plan.update(read_plan)
            run.update(facts)
        if self._optimizer is not None:
            name, cls = describe.optimizer_name(self._optimizer)
            run["optimizer_class"] = cls
            if name:
                plan["optimizer"] = name
        mixed = run.get("autocast")
        plan["precision"] = describe.precision(run.get("dtype"), mixed == "bf16", mixed == "fp16")
        if self.ranks["world_size"] > 1:
            plan["gpus"] = self.ranks["world_size"]
        observed = [k for k in ("batch", "seq_len") if k not in self._plan]
        plan.update(self._plan)
        plan = {k: v for k, v in plan.items() if v is not None}
        device = memory.device()
        try:
            import torch

            device["cuda"] = getattr(torch.version, "cuda", None)
        except Exception:
            pass
        self._writer.write(
            describe.run_record(
                self.ranks,
                device=device,
                peaks=memory.peaks,
                plan=plan,
                observed=observed,
                model=model_info,
                run=run,
                versions=describe.versions(),
            )
        )


def _largest(values: Any) -> int | None:
    found = [v for v in values if v is not None]
    return max(found) if found else None
