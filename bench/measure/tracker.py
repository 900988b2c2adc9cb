"""Live-storage memory tracker for one training step (CPU, CUDA or fake tensors).

``StorageTracker`` is a ``TorchDispatchMode``: every aten op that runs while it
is active passes through ``__torch_dispatch__``.  For each tensor an op returns
(and each tensor it reads that we have never seen) the tracker looks at the
tensor's *untyped storage*: storages are the unit of allocation, so views,
in-place results and aliases are counted once.  Each new storage gets a
``weakref`` whose callback fires when the storage is freed, which subtracts its
bytes.  The running sum of live bytes, and its maximum, are therefore the
tensor-level memory of the step, at op granularity:

* an op's outputs are counted while its inputs are still alive, so the
  "inputs + outputs" transient of every op is seen;
* allocations made *inside* one C++ kernel and freed before it returns
  (scratch buffers of a fused kernel, a matmul workspace) are invisible, and so
  is anything outside torch (allocator caching/fragmentation, CUDA context).
  On CUDA the harness also reads ``torch.cuda.max_memory_allocated`` for that.

Tensors that exist before the region (parameters, gradients, optimizer states,
inputs) never pass through an op output inside it, so they are registered
up front with a category (``register_model_and_optimizer``).  Gradients that
appear during backward are re-categorised by a post-accumulate-grad hook.
Everything else is ``other`` (saved activations and temporaries).

Works unchanged under ``FakeTensorMode`` (fake tensors have meta storages with
the right ``nbytes``), which is what makes 7B-class shape-only runs possible.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from trainmem.probe.fake4bit import quant_state_tensors

CATEGORIES = ("parameters", "gradients", "optimizer", "other")


@dataclass
class _Entry:
    nbytes: int
    category: str
    op: str
    shape: tuple[int, ...]
    dtype: str
    phase: str
    ref: Any = None  # the weakref.ref keeping the callback alive


@dataclass
class PeakInfo:
    bytes: int = 0
    phase: str = "start"
    op: str = ""
    op_index: int = -1
    by_category: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    snapshot: list[tuple[int, str, str, tuple[int, ...], str, str]] | None = None


def _storage(t: torch.Tensor) -> Any | None:
    try:
        st = t.untyped_storage()
    except Exception:  # sparse, nested, opaque subclasses: nothing sensible to count
        return None
    return st


class StorageTracker(TorchDispatchMode):
    """Track unique live tensor storages and their peak over a region.

    Use ``with tracker:`` around the region and ``with tracker.phase("x"):``
    around its parts.  ``detail=True`` keeps a full list of the live storages at
    the (running) peak, with the op that created each one, for analysis.
    """

    def __init__(self, detail: bool = False) -> None:
        super().__init__()
        self.detail = detail
        self._live: dict[int, _Entry] = {}
        self.live_bytes = 0
        self.by_category: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.current_phase = "start"
        self.op_index = 0
        self.peak = PeakInfo()
        self.phase_peaks: dict[str, int] = defaultdict(int)
        self.phase_end_bytes: dict[str, int] = {}
        self.unregistered_input_bytes = 0  # pre-existing storages first seen as op inputs
        self.start_bytes = 0
        self._hooks: list[Any] = []

    # ------------------------------------------------------------------ storages
    def _free(self, key: int, _ref: Any = None) -> None:
        e = self._live.pop(key, None)
        if e is not None:
            self.live_bytes -= e.nbytes
            self.by_category[e.category] -= e.nbytes

    def _add(self, t: torch.Tensor, category: str, op: str) -> _Entry | None:
        st = _storage(t)
        if st is None:
            return None
        key = id(st)
        e = self._live.get(key)
        nbytes = int(st.nbytes())
        if e is not None:
            if e.nbytes != nbytes:  # resize_ / out= resized the storage in place
                delta = nbytes - e.nbytes
                e.nbytes = nbytes
                self.live_bytes += delta
                self.by_category[e.category] += delta
            return e
        if nbytes == 0:
            return None
        e = _Entry(
            nbytes,
            category,
            op,
            tuple(t.shape),
            str(t.dtype).replace("torch.", ""),
            self.current_phase,
        )
        e.ref = weakref.ref(st, lambda r, k=key: self._free(k, r))
        self._live[key] = e
        self.live_bytes += nbytes
        self.by_category[category] += nbytes
        return e

    def set_category(self, t: torch.Tensor, category: str) -> None:
        e = self._add(t, category, "registered")
        if e is not None and e.category != category:
            self.by_category[e.category] -= e.nbytes
            self.by_category[category] += e.nbytes
            e.category = category

    def register(self, tensors: Iterable[torch.Tensor], category: str) -> None:
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self.set_category(t, category)
        self.start_bytes = self.live_bytes

    def register_model_and_optimizer(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        extra: Iterable[torch.Tensor] = (),
    ) -> None:
        """Register what is alive before the step: weights (+ buffers and bitsandbytes
        quantisation state, counted as parameters), existing grads, optimizer states."""
        params = list(model.parameters())
        static: list[torch.Tensor] = [*params, *model.buffers(), *quant_state_tensors(params)]
        self.register(static, "parameters")
        self.register([p.grad for p in params if p.grad is not None], "gradients")
        if optimizer is not None:
            st: list[torch.Tensor] = []
            for s in optimizer.state.values():
                st.extend(v for v in s.values() if isinstance(v, torch.Tensor))
            self.register(st, "optimizer")
        self.register(list(extra), "other")
        for p in params:
            if p.requires_grad:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._grad_hook))

    def _grad_hook(self, p: torch.Tensor) -> None:
        if p.grad is not None:
            self.set_category(p.grad, "gradients")
            self._check_peak("AccumulateGrad")

    def remove_hooks(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()

    # ------------------------------------------------------------------ phases
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        prev = self.current_phase
        self.current_phase = name
        self.phase_peaks[name] = max(self.phase_peaks[name], self.live_bytes)
        try:
            yield
        finally:
            self.phase_end_bytes[name] = self.live_bytes
            self.current_phase = prev

    def _check_peak(self, op: str) -> None:
        lb = self.live_bytes
        if lb > self.phase_peaks[self.current_phase]:
            self.phase_peaks[self.current_phase] = lb
        if lb > self.peak.bytes:
            pk = self.peak
            pk.bytes = lb
            pk.phase = self.current_phase
            pk.op = op
            pk.op_index = self.op_index
            pk.by_category = dict(self.by_category)
            if self.detail:
                pk.snapshot = [
                    (e.nbytes, e.category, e.op, e.shape, e.dtype, e.phase)
                    for e in self._live.values()
                ]

    # ------------------------------------------------------------------ dispatch
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        name = str(func)
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor):
                st = _storage(t)
                if st is not None and id(st) not in self._live:
                    e = self._add(t, "other", "<pre-existing input>")
                    if e is not None:
                        self.unregistered_input_bytes += e.nbytes
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._add(t, "other", name)
        self.op_index += 1
        self._check_peak(name)
        return out

    def __exit__(self, *exc: Any) -> Any:
        r = super().__exit__(*exc)
        self.remove_hooks()
        return r

    # ------------------------------------------------------------------ reports
    def summary(self) -> dict[str, Any]:
        return {
            "start_bytes": self.start_bytes,
            "peak_bytes": self.peak.bytes,
            "peak_phase": self.peak.phase,
            "peak_op": self.peak.op,
            "peak_op_index": self.peak.op_index,
            "by_category_at_peak": dict(self.peak.by_category),
            "phase_peaks": dict(self.phase_peaks),
            "phase_end_bytes": dict(self.phase_end_bytes),
            "end_bytes": self.live_bytes,
            "unregistered_input_bytes": self.unregistered_input_bytes,
            "ops": self.op_index,
        }

    def top_at_peak(self, n: int = 15, group: bool = True) -> list[dict[str, Any]]:
        """Largest live storages at the peak (needs ``detail=True``), grouped by
        (category, creating op, shape, dtype) when ``group``."""
        snap = self.peak.snapshot or []
        if not group:
            rows = sorted(snap, key=lambda r: -r[0])[:n]
            return [
                dict(bytes=b, category=c, op=o, shape=list(s), dtype=d, phase=p)
                for b, c, o, s, d, p in rows
            ]
        agg: dict[tuple, list[int]] = {}
        for b, c, o, s, d, p in snap:
            k = (c, o, s, d, p)
            a = agg.setdefault(k, [0, 0])
            a[0] += b
            a[1] += 1
        rows2 = sorted(agg.items(), key=lambda kv: -kv[1][0])[:n]
        return [
            dict(
                bytes=v[0],
                count=v[1],
                category=k[0],
                op=k[1],
                shape=list(k[2]),
                dtype=k[3],
                created_in=k[4],
            )
            for k, v in rows2
        ]
