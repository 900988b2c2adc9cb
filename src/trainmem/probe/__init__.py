"""The run probe: device memory per optimizer step of a real training run, as JSON Lines
(the format: trainmem.core.run_log), for `trainmem-tui run-report` and `calibrate`.

    from trainmem.probe import TrainmemCallback      # Hugging Face Trainer, TRL, axolotl...
    trainer = Trainer(..., callbacks=[TrainmemCallback()])

    from trainmem.probe import RunProbe              # a plain PyTorch loop
    probe = RunProbe(model=model, optimizer=opt)
    with probe.step(): ...

    from trainmem.probe.mlx_callback import TrainmemMlxCallback   # mlx-lm's trainer
    train(model, optimizer, ..., training_callback=TrainmemMlxCallback(model=model))

Importing this package imports neither torch nor transformers (nor the dashboard's
dependencies): ``TrainmemCallback`` loads transformers when it is first named, ``RunProbe``
loads torch at the first step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainmem.probe.recorder import RunProbe
from trainmem.probe.writer import ENV, rank_path

if TYPE_CHECKING:
    from trainmem.probe.trainer import TrainmemCallback

__all__ = ["ENV", "RunProbe", "TrainmemCallback", "rank_path"]


def __getattr__(name: str) -> Any:
    if name == "TrainmemCallback":  # subclassing TrainerCallback needs transformers
        from trainmem.probe.trainer import TrainmemCallback

        return TrainmemCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
