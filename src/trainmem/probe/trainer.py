"""The probe as a Hugging Face ``TrainerCallback``: TRL, axolotl and LLaMA-Factory train
through the Trainer, so the same callback serves them all.

    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[TrainmemCallback()])

The events used and where transformers 5.24 calls them (trainer.py, ``_inner_training_loop``):
``on_step_begin`` before the first micro-batch of an optimizer step (:1902), then the model's
forward (hooked: "forward"; what follows, loss backward and gradient clipping, is "backward"),
``on_pre_optimizer_step`` after clipping (:1942, "optimizer"), ``on_optimizer_step`` after
``optimizer.step()`` (:1944, "zero_grad": the scheduler step and ``model.zero_grad()``),
``on_step_end`` (:1957). Callbacks get ``model`` and ``optimizer`` as keyword arguments
(trainer_callback.py ``CallbackHandler.call_event``). This module imports transformers: it is
loaded only when ``TrainmemCallback`` is first used.
"""

from __future__ import annotations

import warnings
from typing import Any

from transformers import TrainerCallback

from trainmem.probe.recorder import RunProbe


class TrainmemCallback(TrainerCallback):
    """Logs device memory per optimizer step of a Trainer run to ``path`` (default
    $TRAINMEM_RUN_LOG, else ``<output_dir>/trainmem-run.rank<N>.jsonl``). ``plan``: trainmem
    plan fields the run cannot tell (``seq_len=4096``)."""

    def __init__(self, path: str | None = None, **plan: Any) -> None:
        self._path = path
        self._plan = plan
        self.probe: RunProbe | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        try:
            stack = "trl" if type(args).__name__ == "SFTConfig" else "trainer"
            self.probe = RunProbe(
                self._path,
                model=kw.get("model"),
                stack=stack,
                default_dir=str(getattr(args, "output_dir", "") or ""),
                **self._plan,
            )
            self.probe.run_facts.update(_facts(args))
        except Exception as exc:  # never into the training loop
            warnings.warn(
                f"trainmem probe: not started ({type(exc).__name__}: {exc})", stacklevel=2
            )
            self.probe = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        probe = self.probe
        if probe is not None:
            if probe._optimizer is None and kw.get("optimizer") is not None:
                probe._optimizer = kw["optimizer"]  # created after on_train_begin
            probe.begin_step()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.probe is not None:
            self.probe.phase("optimizer")

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.probe is not None:
            self.probe.phase("zero_grad")

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.probe is not None:
            self.probe.end_step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.probe is not None:
            self.probe.close()


def _facts(args: Any) -> dict[str, Any]:
    """What TrainingArguments say about memory, as plain values."""
    out: dict[str, Any] = {
        "gradient_accumulation_steps": getattr(args, "gradient_accumulation_steps", None),
        "optim": str(getattr(args, "optim", "") or "") or None,
        "autocast": "bf16"
        if getattr(args, "bf16", False)
        else "fp16"
        if getattr(args, "fp16", False)
        else None,
        "per_device_train_batch_size": getattr(args, "per_device_train_batch_size", None),
    }
    for key in ("max_length", "max_seq_length", "packing", "deepspeed"):
        value = getattr(args, key, None)
        if value is not None:
            out[key] = value if isinstance(value, (int, float, bool, str)) else str(value)
    return out
