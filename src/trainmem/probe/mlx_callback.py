"""The probe for mlx-lm's trainer: a ``TrainingCallback`` (mlx_lm/tuner/callbacks.py, mlx-lm
0.32.2) writing the run log (trainmem.core.run_log) with MLX's own memory counters.

    from trainmem.probe.mlx_callback import TrainmemMlxCallback
    callback = TrainmemMlxCallback(model=model, seq_len=2048, mlx_num_layers=16)
    train(model, optimizer, train_set, val_set, args, training_callback=callback)
    callback.close()

mlx-lm calls ``on_train_loss_report`` every ``steps_per_report`` steps (tuner/trainer.py
train(), after ``mx.eval`` of the step), so there is one step record per report, numbered
by mlx-lm's iteration. Its figures: ``mx.get_active_memory()`` (allocated: live buffers),
active plus ``mx.get_cache_memory()`` (reserved: MLX's buffer cache holds freed buffers for
reuse) and ``mx.get_peak_memory()`` (the largest active figure since the process started or
the peak was last reset; mlx-lm never resets it, and neither does this callback, so each
record's peak is the run's so far, its validation passes included). MLX counts its peak
itself, so peaks are "exact". A Metal device is logged as type "mps" (the same unified
memory, read by run-report as a unified device), MLX's CPU build as "cpu".

Imports MLX only when the first report arrives; nothing raises into the training loop.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any

from trainmem.core.run_log import END, STEP
from trainmem.probe import describe
from trainmem.probe.writer import LogWriter, rank_path


class TrainmemMlxCallback:
    """Logs MLX's memory at each of mlx-lm's training reports to ``path`` (default
    $TRAINMEM_RUN_LOG, else ``trainmem-run.rank<N>.jsonl`` here). ``model``: the mlx-lm
    model (its ``args`` are the config.json fields run-report rebuilds it from); ``plan``:
    trainmem plan fields the run cannot tell (``seq_len=2048``, ``method="qlora"``)."""

    def __init__(self, path: str | None = None, *, model: Any = None, **plan: Any) -> None:
        self.quiet = False
        self.steps = 0
        self._plan = {"stack": "mlx", **plan}
        self._model = model
        self._described = False
        self._last: float | None = None
        self.ranks = describe.ranks()
        self.path = rank_path(path, self.ranks["rank"])
        self._writer = LogWriter(self.path)

    # mlx_lm.tuner.callbacks.TrainingCallback's two methods
    def on_train_loss_report(self, train_info: dict[str, Any]) -> None:
        if not self.quiet:
            try:
                self._report(train_info)
            except Exception as exc:  # never into the training loop
                self.quiet = True
                warnings.warn(
                    f"trainmem probe: {type(exc).__name__}: {exc}; it records nothing more",
                    stacklevel=2,
                )

    def on_val_loss_report(self, val_info: dict[str, Any]) -> None:
        """Validation is forward only: its memory is in the next report's peak."""

    def close(self) -> None:
        if self._described and not self.quiet:
            self._writer.write({"kind": END, "time": time.time(), "steps": self.steps})
        self._writer.close()

    def _report(self, info: dict[str, Any]) -> None:
        import mlx.core as mx

        if not self._described:
            self._describe(mx)
        self.steps += 1
        active, cache = int(mx.get_active_memory()), int(mx.get_cache_memory())
        rate = info.get("iterations_per_second")
        record: dict[str, Any] = {
            "kind": STEP,
            "step": int(info.get("iteration", self.steps)),
            "time": time.time(),
            # mlx-lm's own rate over the report's steps: the mean step
            "duration_s": round(1.0 / rate, 6)
            if isinstance(rate, (int, float)) and rate > 0
            else None,
            "allocated_bytes": active,
            "reserved_bytes": active + cache,
            "max_allocated_bytes": int(mx.get_peak_memory()),
            "max_reserved_bytes": None,
            "driver_bytes": None,
            "cache_bytes": cache,
            "phases": {},
        }
        for key in ("train_loss", "tokens_per_second", "trained_tokens"):
            value = info.get(key)
            if isinstance(value, (int, float)):
                record[key] = value
        self._writer.write(record)

    def _describe(self, mx: Any) -> None:
        self._described = True
        gpu = mx.default_device() == mx.gpu
        info = dict(mx.device_info())
        device: dict[str, Any] = {
            "type": "mps" if gpu else "cpu",
            "index": 0,
            "name": str(info.get("device_name") or ("Apple GPU" if gpu else "cpu")),
            "total_bytes": info.get("memory_size"),
            "framework": "mlx",
            # Metal's recommendedMaxWorkingSetSize, what mlx-lm wires (utils.py
            # maybe_set_recommended_wired_limit)
            "max_recommended_working_set_size": info.get("max_recommended_working_set_size"),
            "memory_limit_bytes": int(mx.get_memory_limit()),
        }
        model_info: dict[str, Any] = {}
        args = getattr(self._model, "args", None)
        if args is not None and dataclasses.is_dataclass(args) and not isinstance(args, type):
            config = {k: v for k, v in dataclasses.asdict(args).items() if _plain(v)}
            model_info = {"name": self._plan.get("model"), "config": config}
        plan = {k: v for k, v in self._plan.items() if v is not None}
        self._writer.write(
            describe.run_record(
                self.ranks,
                device=device,
                peaks="exact",
                plan=plan,
                observed=[],
                model=model_info,
                run={"framework": "mlx"},
                versions=describe.versions(("mlx", "mlx-lm", "trainmem-tui")),
            )
        )


def _plain(value: Any) -> bool:
    """A config value JSON holds as it is (numbers, text, flags, lists and maps of them)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False
