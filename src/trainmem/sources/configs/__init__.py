"""Plans from the training configs people already have (``--from FILE``, ``--from-args``):
axolotl and LLaMA-Factory YAML, TRL SFTConfig / Hugging Face TrainingArguments (YAML, JSON
or a command line), DeepSpeed JSON, accelerate config YAML and mlx-lm's LoRA config and
command line. See detect.read_configs.

The readers (and PyYAML) load on first use: the CLI and the dashboard import this package's
merge rule at start-up, before any config is read."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmem.sources.configs.common import ConfigPlan
    from trainmem.sources.configs.detect import read_configs

__all__ = ["ConfigPlan", "read_configs"]


def __getattr__(name: str) -> Any:
    if name == "ConfigPlan":
        from trainmem.sources.configs.common import ConfigPlan

        return ConfigPlan
    if name == "read_configs":
        from trainmem.sources.configs.detect import read_configs

        return read_configs
    raise AttributeError(name)
